//! The responder's side of PART ([`super::super::fault`] has the protocol): a fault starts a
//! page-in wave, packets wait in the reorder window until the wave's front passes them, the
//! sender is stopped only when the window cannot take a packet (a stall, named by a fault NAK
//! that advertises the wave's pace), and the ERR goes out once the page-in holding the stalled
//! packet is complete.
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use remora_mem::Region;
use remora_wire::{NakCode, Psn, Repr};

use super::super::fault::{self, Stall};
use super::super::{EngineConfig, Payload};
use super::{Out, Packet, Refuse, Responder, Rx};

/// Page-in time per 4 KiB page assumed before the worker has reported any piece (what
/// `MADV_POPULATE_WRITE` took per page on both hosts measured, 1.1 µs; the first report
/// replaces it).
const FIRST_GUESS_NS_PER_PAGE: u64 = 1_100;
const PAGE: usize = 4096;
/// Largest pace a fault NAK can carry (the AETH MSN field is 24 bits of microseconds).
const MAX_PACE_US: u64 = 0xFF_FFFF;
/// Payload buffers kept for the next wave; the rest are freed when the window empties.
const SPARE: usize = 16;

/// A packet waiting behind the wave: its headers and a copy of its payload.
struct Held {
    repr: Repr,
    data: Vec<u8>,
}

/// The reorder window: packets from the expected PSN on, in sequence, that wait for pages.
pub(super) struct Window {
    held: VecDeque<Held>,
    /// Payload buffers of packets already placed, kept for the next ones.
    spare: Vec<Vec<u8>>,
    /// Where the first held packet goes, once known (for the pace of a stall behind it).
    anchor: Option<(Arc<Region>, usize)>,
    /// Page-in time per page, smoothed over the worker's reports.
    ns_per_page: u64,
    /// Stalls in a row at the same PSN: the pace was too short (the worker had not reported
    /// yet, or another queue pair's page-in went first), so each repeat doubles it.
    repeats: u32,
    last_stall: Option<Psn>,
}

impl Window {
    pub(super) fn new() -> Window {
        Window {
            held: VecDeque::new(),
            spare: Vec::new(),
            anchor: None,
            ns_per_page: FIRST_GUESS_NS_PER_PAGE,
            repeats: 0,
            last_stall: None,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.held.len()
    }

    /// Copies the packet in at the back; false when the window is full or the payload cannot
    /// be copied out (a stream's).
    fn push(&mut self, cap: u32, repr: &Repr, payload: &dyn Payload) -> bool {
        if self.held.len() >= cap as usize {
            return false;
        }
        let mut data = self.spare.pop().unwrap_or_default();
        data.clear();
        if !payload.copy_out(&mut data) {
            self.recycle(data);
            return false;
        }
        self.held.push_back(Held { repr: *repr, data });
        true
    }

    /// Drops every held packet (the sender resends them); returns how many.
    fn clear(&mut self) -> usize {
        let held = std::mem::take(&mut self.held);
        let n = held.len();
        for h in held {
            self.recycle(h.data);
        }
        self.anchor = None;
        n
    }

    fn recycle(&mut self, data: Vec<u8>) {
        if self.spare.len() < SPARE {
            self.spare.push(data);
        }
    }

    /// Folds a report of `bytes` brought in over `took` into the rate.
    fn measured(&mut self, bytes: usize, took: Duration) {
        let pages = bytes.div_ceil(PAGE).max(1) as u64;
        let sample = (took.as_nanos() as u64 / pages).max(1);
        // Weight 1/4: one report per piece, so a handful of pieces settles it.
        self.ns_per_page = (3 * self.ns_per_page + sample) / 4;
    }

    /// Microseconds for `bytes` to come in at the measured rate (at least 1: 0 means "no
    /// estimate" on the wire), doubled for each stall in a row at `psn`.
    fn pace_us(&mut self, psn: Psn, bytes: usize) -> u32 {
        if self.last_stall == Some(psn) {
            self.repeats = (self.repeats + 1).min(16);
        } else {
            self.repeats = 0;
            self.last_stall = Some(psn);
        }
        let ns = (bytes.div_ceil(PAGE) as u64 * self.ns_per_page) << self.repeats;
        ns.div_ceil(1000).clamp(1, MAX_PACE_US) as u32
    }
}

impl Responder {
    /// Whether `[offset, offset+len)` of `region` is (now) on a wave: a page-in in flight
    /// covers it, or the one the policy asks for here reaches past the packet (PIA, PI4; not
    /// PIO, whose page-in is the packet's own pages).
    fn wave_for(
        &mut self,
        rx: &mut Rx,
        psn: Psn,
        (region, offset, len, rest): (&Arc<Region>, usize, usize, usize),
    ) -> bool {
        if self.faults.covered(region, offset, len) {
            return true;
        }
        let (o, n) = fault::policy_range(&rx.cfg.part, region, offset, len, rest);
        self.faults.request(rx.now, psn, region, o, n);
        rx.stats.page_ins += 1;
        o + n > offset + len
    }

    /// PART: the packet at `psn`, the next expected with nothing held, was not placed because
    /// `[offset, offset+len)` of `region` is not resident. Start (or join) the wave and hold
    /// the packet, or stop the sender at it.
    pub(super) fn on_fault(
        &mut self,
        rx: &mut Rx,
        pkt: &Packet,
        (region, offset, len, rest): (Arc<Region>, usize, usize, usize),
    ) {
        let psn = pkt.repr.bth.psn;
        let again = self.faults.stall.as_ref().is_some_and(|s| {
            s.psn == psn
                && s.target
                    .as_ref()
                    .is_some_and(|(r, o, _)| Arc::ptr_eq(r, &region) && *o == offset)
        });
        if !again {
            rx.stats.faults += 1;
        }
        // A wave: a page-in that reaches past this packet (PIA, PI4), so the packets behind it
        // can wait for their pages instead of being sent again.
        let wave = self.wave_for(rx, psn, (&region, offset, len, rest));
        if wave
            && self
                .window
                .push(rx.cfg.part.reorder, pkt.repr, &*pkt.payload)
        {
            rx.stats.wave_holds += 1;
            self.window.anchor = Some((region, offset));
            self.faults.stall = None;
            return;
        }
        self.stall_at(rx, psn, Some((region, offset, len)));
    }

    /// The next packet in sequence behind a non-empty window: held, or the sender stopped at
    /// it when the window is full.
    pub(super) fn behind_window(&mut self, rx: &mut Rx, pkt: &Packet) -> bool {
        let psn = pkt.repr.bth.psn;
        if self
            .window
            .push(rx.cfg.part.reorder, pkt.repr, &*pkt.payload)
        {
            rx.stats.wave_holds += 1;
            if self.faults.stall.as_ref().is_some_and(|s| s.psn == psn) {
                // The resend we stopped the sender for: it is in, nothing to wait for.
                self.faults.stall = None;
            }
            return true;
        }
        rx.stats.held_drops += 1;
        let first = self.faults.stall.is_none();
        let resend = self.faults.stall.as_ref().is_some_and(|s| s.psn == psn);
        if first || resend {
            // Stop it here; a resend that still finds no room hears the pace again.
            self.stall_at(rx, psn, None);
        }
        false
    }

    /// The sender resends the window's first packet: its timer ran out while the packets wait.
    /// Tell it to hold (a fault NAK at that PSN, with the pace), so that a long page-in does not
    /// use up its retries; what waits stays.
    pub(super) fn hold_sender(&mut self, rx: &mut Rx) {
        let psn = self.epsn;
        let target = self.window.anchor.clone().map(|(r, o)| (r, o, rx.cfg.mtu));
        let pace_us = self.pace_for(rx.cfg, psn, target.as_ref());
        rx.stats.fault_naks += 1;
        self.out.push_back(Out::Fault { psn, pace_us });
    }

    /// A packet beyond the next expected one while packets wait: the one between was lost.
    /// Stop the sender at the first missing PSN with a fault NAK, which (unlike a PSN sequence
    /// error NAK) does not acknowledge the packets still waiting.
    pub(super) fn gap_behind_window(&mut self, rx: &mut Rx) {
        if self.faults.stall.is_some() {
            rx.stats.held_drops += 1;
            return;
        }
        rx.stats.out_of_sequence += 1;
        let next = self.epsn.add(self.window.len() as u32);
        self.stall_at(rx, next, None);
    }

    /// Drops what follows `psn` until it comes again, and tells the sender so, with the time
    /// its pages should take: what the waves still have to bring in before them.
    fn stall_at(&mut self, rx: &mut Rx, psn: Psn, target: Option<(Arc<Region>, usize, usize)>) {
        let pace_us = self.pace_for(rx.cfg, psn, target.as_ref());
        self.faults.stall = Some(Stall { psn, target });
        rx.stats.fault_naks += 1;
        self.out.push_back(Out::Fault { psn, pace_us });
        // The NAK acknowledges nothing, so say what is placed if the sender has not heard it:
        // its window moves on (and a probe after its timeout doubles).
        if self.acked_to != self.epsn {
            self.ack_pending = true;
        }
    }

    /// The pace a stall advertises: 0 (no estimate) when no page-in holds its pages, or when
    /// there is no window to hold what a sender resuming then would send ahead of the wave.
    fn pace_for(
        &mut self,
        cfg: &EngineConfig,
        psn: Psn,
        target: Option<&(Arc<Region>, usize, usize)>,
    ) -> u32 {
        if cfg.part.reorder == 0 {
            return 0;
        }
        let bytes = match target {
            Some((r, o, n)) => self.faults.bytes_before(r, o + n),
            None => {
                // Dropped unopened: it goes `held` packets after the window's first, at most
                // an MTU each (exact within a message, which is where windows fill).
                let Some((r, o)) = &self.window.anchor else {
                    return 0;
                };
                let ahead = (self.window.len() + 1) * cfg.mtu;
                self.faults.bytes_before(r, (o + ahead).min(r.len()))
            }
        };
        bytes.map_or(0, |b| self.window.pace_us(psn, b))
    }

    /// Places held packets from the front while their pages are in; a front packet that needs
    /// pages no page-in brings starts one (a wave) or stops the sender (PIO).
    pub(super) fn drain(&mut self, rx: &mut Rx) {
        let mut acked = false;
        while let Some(h) = self.window.held.pop_front() {
            let mut bytes: &[u8] = &h.data;
            let mut pkt = Packet {
                repr: &h.repr,
                payload: &mut bytes,
            };
            match self.execute(rx, &mut pkt) {
                Ok(advance) => {
                    self.epsn = h.repr.bth.psn.add(advance);
                    self.nak_sent = false;
                    acked |= h.repr.bth.ack_req;
                    self.window.recycle(h.data);
                    self.window.anchor = self.cur.as_ref().map(|m| (m.region.clone(), m.offset));
                }
                Err(Refuse::Fault {
                    region,
                    offset,
                    len,
                    rest,
                }) => {
                    if !self.faults.covered(&region, offset, len) {
                        rx.stats.faults += 1;
                    }
                    let psn = h.repr.bth.psn;
                    if self.wave_for(rx, psn, (&region, offset, len, rest)) {
                        self.window.anchor = Some((region, offset));
                        self.window.held.push_front(h);
                        break;
                    }
                    // PIO: this packet's pages alone are coming; the rest is sent again.
                    self.window.recycle(h.data);
                    rx.stats.held_drops += self.window.clear() as u64;
                    self.stall_at(rx, psn, Some((region, offset, len)));
                    break;
                }
                Err(refused) => {
                    let psn = h.repr.bth.psn;
                    self.window.recycle(h.data);
                    rx.stats.held_drops += self.window.clear() as u64;
                    self.faults.stall = None;
                    match refused {
                        Refuse::Rnr => self.out.push_back(Out::Rnr {
                            psn,
                            timer: super::RNR_TIMER,
                        }),
                        Refuse::Nak(code) => {
                            self.cur = None;
                            self.out.push_back(Out::Nak { psn, code });
                        }
                        Refuse::Fault { .. } => unreachable!("matched above"),
                    }
                    break;
                }
            }
        }
        if acked {
            // One coalesced ACK for what went in, as for packets placed on arrival.
            self.ack_pending = true;
        }
        self.maybe_err(rx);
    }

    /// The ERR: once nothing waits before the stalled packet, its pages are in and the page-in
    /// that brought them is complete, ask for the resend from it.
    fn maybe_err(&mut self, rx: &mut Rx) {
        let Some(s) = &self.faults.stall else {
            return;
        };
        if s.psn != self.epsn || self.window.len() > 0 {
            return;
        }
        match &s.target {
            Some((r, o, n)) => {
                if !r.is_resident(*o, *n) {
                    if !self.faults.covered(r, *o, *n) {
                        // Another request covered part of the packet; ask for what is out.
                        let (o, n) = fault::policy_range(&rx.cfg.part, r, *o, *n, *n);
                        let (psn, region) = (s.psn, r.clone());
                        self.faults.request(rx.now, psn, &region, o, n);
                        rx.stats.page_ins += 1;
                    }
                    return;
                }
                if self.faults.bytes_before(r, o + n).is_some() {
                    return;
                }
            }
            None if !self.faults.inflight.is_empty() => return,
            None => {}
        }
        rx.stats.errs_sent += 1;
        // The ERR is a PSN sequence error NAK at the PSN to resume from; a later
        // out-of-sequence packet must not send a second one.
        self.nak_sent = true;
        self.out.push_back(Out::Nak {
            psn: self.epsn,
            code: NakCode::PsnSequenceError,
        });
        self.faults.stall = None;
    }

    /// The driver reports the first `done` bytes of page-in `id` resident: place what waits
    /// behind the front.
    pub(in crate::engine) fn page_in_progress(&mut self, rx: &mut Rx, id: u64, done: usize) {
        if let Some((bytes, took)) = self.faults.advance(rx.now, id, done) {
            self.window.measured(bytes, took);
            self.drain(rx);
        }
    }

    /// A page-in finished: place what waits, then send the ERR if the stalled packet can go
    /// in now; a failed page-in fails the request it was for (remote operational error).
    pub(in crate::engine) fn page_in_done(
        &mut self,
        rx: &mut Rx,
        id: u64,
        result: std::result::Result<usize, String>,
    ) {
        let len = self
            .faults
            .inflight
            .iter()
            .find(|w| w.id == id)
            .map(|w| w.len);
        let Some(len) = len else {
            return;
        };
        match result {
            Ok(n) => {
                rx.stats.pages_in += n as u64;
                if let Some((bytes, took)) = self.faults.advance(rx.now, id, len) {
                    self.window.measured(bytes, took);
                }
                self.faults.finish(id);
                self.drain(rx);
            }
            Err(why) => {
                self.faults.finish(id);
                if self.window.len() == 0 && self.faults.stall.is_none() {
                    return;
                }
                // Everything before the expected PSN is placed: fail from there.
                let psn = self.epsn;
                tracing::warn!(psn = psn.value(), reason = %why, "page-in failed; the request fails");
                rx.stats.held_drops += self.window.clear() as u64;
                self.faults.stall = None;
                self.cur = None;
                self.out.push_back(Out::Nak {
                    psn,
                    code: NakCode::RemoteOperationalError,
                });
            }
        }
    }
}
