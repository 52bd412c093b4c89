//! The requester half of a queue pair: send queue, PSN assignment, segmentation at the path MTU,
//! acknowledgement processing, READ responses, go-back-N retransmission and the retry limits.
//!
//! PART: a fault NAK (RNR NAK with [`FAULT_RNR_TIMER`]) makes the requester hold at the faulting
//! PSN until the responder's ERR, or, when it has a fault timeout (TO), until the pace the NAK
//! advertises (the responder's page-in wave reaching that packet) or the timeout itself; local
//! sources that are not resident are populated with the page-in policy before they are read. A
//! READ response for a local destination that is not resident is dropped like a responder's
//! faulting WRITE: a page-in request goes to the driver, and when it is done the READ is asked
//! again from the first byte missing, so the receive thread never blocks on our own memory.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use remora_wire::{AethRepr, BthRepr, NakCode, Op, Psn, Repr, RethRepr, Service, Syndrome};

use super::fault::{self, FaultBook, FAULT_RNR_TIMER};
use super::{packets_for, EngineConfig, Payload, Source, Stats, Tx};
use crate::error::{Error, Result};
use crate::wr::{Completion, SendWr, Status, WrOp};

/// Bounds of the adaptive retransmission timeout.
const MIN_RTO: Duration = Duration::from_micros(500);
const MAX_RTO: Duration = Duration::from_secs(1);
/// Without a fault timeout (NTO) a hold still ends after this long, in case the ERR was lost;
/// if the page-in is still going on, the responder simply NAKs again.
const NTO_HOLD_LIMIT: Duration = Duration::from_millis(200);
/// Packets in flight after a hold that our fault timeout ended (not an ERR): the pages may still
/// be coming in, so the resend probes with this window and doubles it with each acknowledgement,
/// instead of sending a whole window that the responder drops behind the next fault.
const PROBE_WINDOW: u32 = 16;

struct Pending {
    wr: SendWr,
    first_psn: Psn,
    npkts: u32,
    /// WRITE/SEND: acknowledged through the last packet (RC) or fully sent (UC).
    acked: bool,
    /// READ: response packets received in order.
    read_next: u32,
}

impl Pending {
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }
    fn contains(&self, psn: Psn) -> bool {
        let d = psn.diff(self.first_psn);
        d >= 0 && (d as u32) < self.npkts
    }
    fn is_read(&self) -> bool {
        self.wr.op == WrOp::Read
    }
    fn done(&self) -> bool {
        if self.is_read() {
            self.read_next == self.npkts
        } else {
            self.acked
        }
    }
}

pub(super) struct Requester {
    wrs: VecDeque<Pending>,
    /// First PSN of the next posted request.
    next_psn: Psn,
    /// Next PSN to transmit.
    tx_psn: Psn,
    /// Index in `wrs` of the request holding `tx_psn` (a hint; rescanned after go-back).
    tx_idx: usize,
    /// One past the highest PSN ever transmitted.
    high: Psn,
    /// Oldest PSN not yet acknowledged (RC).
    una: Psn,
    deadline: Option<Instant>,
    retries: u32,
    rnr_retries: u32,
    rnr_until: Option<Instant>,
    since_ack_req: u32,
    /// The READ response PSN we last asked again for (one re-read per gap).
    reread_at: Option<Psn>,
    /// The packet being timed for the round-trip estimate (never a retransmitted one).
    rtt_probe: Option<(Psn, Instant)>,
    /// Smoothed round trip and its variation (RFC 6298), once measured.
    srtt: Option<Duration>,
    rttvar: Duration,
    /// Current retransmission timeout.
    rto: Duration,
    /// PART: holding after a fault NAK, until this instant (the fault timeout or the NTO limit)
    /// or an ERR.
    hold_until: Option<Instant>,
    /// PART: the window while probing after a fault timeout; `None`: the configured window.
    probe_window: Option<u32>,
    /// PART: the hold ends at the pace the responder advertised, not at a guess.
    paced: bool,
    /// PART: where the last ERR had us resume, and the window an ERR gives when the responder
    /// brings in only a few pages per fault (PIO, PI4): twice what went in between that resume
    /// and the next fault. Without it each ERR would resend the whole window, to be dropped
    /// behind the next page, and a message of n pages would cost n²/2 packets.
    resumed_at: Option<Psn>,
    err_window: Option<u32>,
    /// PART: the page-in (id) a READ response waits for; responses are dropped meanwhile.
    read_fault: Option<u64>,
    /// Page-ins of READ destinations (ids tagged with [`REQUESTER_IDS`]).
    pub(super) faults: FaultBook,
    pub(super) error: bool,
    /// Whether the retransmission timer runs (not on a [`EngineConfig::lossless`] link).
    retransmit: bool,
}

/// Page-in ids of the requester have the top bit set, the responder's not, so one
/// [`super::QpProtocol::page_in_done`] routes both.
pub(super) const REQUESTER_IDS: u64 = 1 << 63;

impl Requester {
    pub(super) fn new(cfg: &EngineConfig) -> Requester {
        Requester {
            wrs: VecDeque::new(),
            next_psn: cfg.send_psn,
            tx_psn: cfg.send_psn,
            tx_idx: 0,
            high: cfg.send_psn,
            una: cfg.send_psn,
            deadline: None,
            retries: 0,
            rnr_retries: 0,
            rnr_until: None,
            since_ack_req: 0,
            reread_at: None,
            rtt_probe: None,
            srtt: None,
            rttvar: Duration::ZERO,
            rto: cfg.retry_timeout,
            hold_until: None,
            probe_window: None,
            paced: false,
            resumed_at: None,
            err_window: None,
            read_fault: None,
            faults: FaultBook::tagged(REQUESTER_IDS),
            error: false,
            retransmit: !cfg.lossless,
        }
    }

    pub(super) fn read_fault_pending(&self) -> bool {
        self.read_fault.is_some()
    }

    pub(super) fn outstanding(&self) -> usize {
        self.wrs.len()
    }

    pub(super) fn post(&mut self, _now: Instant, cfg: &EngineConfig, wr: SendWr) -> Result<()> {
        if self.error {
            return Err(Error::QpError);
        }
        if self.wrs.len() >= cfg.max_send_wr {
            return Err(Error::QueueFull(self.wrs.len()));
        }
        wr.validate(cfg.service == Service::Rc)?;
        let npkts = packets_for(wr.len, cfg.mtu);
        let first_psn = self.next_psn;
        self.next_psn = first_psn.add(npkts);
        self.wrs.push_back(Pending {
            wr,
            first_psn,
            npkts,
            acked: false,
            read_next: 0,
        });
        Ok(())
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        [self.deadline, self.rnr_until, self.hold_until]
            .into_iter()
            .flatten()
            .min()
    }

    pub(super) fn poll_transmit(
        &mut self,
        now: Instant,
        cfg: &EngineConfig,
        buf: &mut [u8],
        completions: &mut VecDeque<Completion>,
        stats: &mut Stats,
    ) -> Option<Tx> {
        if self.error || self.rnr_until.is_some_and(|t| t > now) || self.hold_until.is_some() {
            return None;
        }
        let rc = cfg.service == Service::Rc;
        let window = self.probe_window.map_or(cfg.window, |w| w.min(cfg.window));
        if rc && self.tx_psn.diff(self.una) >= window as i32 {
            return None;
        }
        if self.tx_psn == self.next_psn {
            return None;
        }
        if let Some(front) = self.wrs.front() {
            // Everything before the oldest request is complete; never resend it.
            if self.tx_psn.before(front.first_psn) {
                self.tx_psn = front.first_psn;
            }
        }
        if self.tx_idx >= self.wrs.len() || self.tx_psn.before(self.wrs[self.tx_idx].first_psn) {
            self.tx_idx = 0;
        }
        while self.tx_idx < self.wrs.len() && !self.wrs[self.tx_idx].contains(self.tx_psn) {
            self.tx_idx += 1;
        }
        let p = self.wrs.get(self.tx_idx)?;
        let psn = self.tx_psn;
        let k = psn.diff(p.first_psn) as u32;
        let last = k + 1 == p.npkts;
        let off = k as usize * cfg.mtu;
        let (op, reth, immdt, payload_len, next) = match p.wr.op {
            WrOp::Write { imm } => {
                let op = match (p.npkts, k, imm.is_some()) {
                    (1, _, false) => Op::WriteOnly,
                    (1, _, true) => Op::WriteOnlyImm,
                    (_, 0, _) => Op::WriteFirst,
                    (_, _, false) if last => Op::WriteLast,
                    (_, _, true) if last => Op::WriteLastImm,
                    _ => Op::WriteMiddle,
                };
                let reth = (k == 0).then_some(RethRepr {
                    va: p.wr.remote_va,
                    rkey: p.wr.rkey,
                    len: p.wr.len as u32,
                });
                let n = cfg.mtu.min(p.wr.len - off.min(p.wr.len));
                (op, reth, imm.filter(|_| last), n, psn.next())
            }
            WrOp::Send { imm } => {
                let op = match (p.npkts, k, imm.is_some()) {
                    (1, _, false) => Op::SendOnly,
                    (1, _, true) => Op::SendOnlyImm,
                    (_, 0, _) => Op::SendFirst,
                    (_, _, false) if last => Op::SendLast,
                    (_, _, true) if last => Op::SendLastImm,
                    _ => Op::SendMiddle,
                };
                let n = cfg.mtu.min(p.wr.len - off.min(p.wr.len));
                (op, None, imm.filter(|_| last), n, psn.next())
            }
            WrOp::Read => {
                // A READ request names the whole (remaining) range; resuming after a loss asks
                // only for what has not arrived.
                let reth = RethRepr {
                    va: p.wr.remote_va + off as u64,
                    rkey: p.wr.rkey,
                    len: (p.wr.len - off.min(p.wr.len)) as u32,
                };
                (
                    Op::ReadRequest,
                    Some(reth),
                    None,
                    0,
                    p.first_psn.add(p.npkts),
                )
            }
        };
        self.since_ack_req += 1;
        // The packet that fills the window asks for the ACK that opens it (a window smaller than
        // `ack_req_every` would otherwise wait for the retransmission timer).
        let fills_window = psn.next().diff(self.una) >= window as i32;
        let ack_req = rc
            && (p.wr.op == WrOp::Read
                || (last && !p.is_read())
                || fills_window
                || self.since_ack_req >= cfg.ack_req_every);
        if ack_req {
            self.since_ack_req = 0;
        }
        let repr = Repr {
            bth: BthRepr {
                solicited: immdt.is_some(),
                ack_req,
                ..cfg.bth(op, psn)
            },
            reth,
            immdt,
            aeth: None,
            payload_len,
        };
        let header_len = repr.header_len();
        let total = repr.emit_headers(buf);
        // The payload is copied by the caller (bounds were checked at post time).
        let src = (payload_len > 0).then(|| {
            if fault::populate_source(
                &cfg.part,
                &p.wr.local,
                p.wr.offset + off,
                payload_len,
                p.wr.len - off,
            ) > 0
            {
                stats.source_faults += 1;
            }
            Source {
                region: p.wr.local.clone(),
                offset: p.wr.offset + off,
                len: payload_len,
            }
        });
        if psn.before(self.high) {
            stats.retransmits += 1;
        } else if rc && self.rtt_probe.is_none() {
            self.rtt_probe = Some((psn, now));
        }
        self.tx_psn = next;
        if self.high.before(next) {
            self.high = next;
        }
        if rc {
            if self.deadline.is_none() && self.retransmit {
                self.deadline = Some(now + self.rto);
            }
        } else if last {
            // UC: a message is complete once its last packet is out.
            self.wrs[self.tx_idx].acked = true;
            self.complete_front(completions);
        }
        Some(Tx {
            total,
            header_len,
            src,
        })
    }

    pub(super) fn handle(
        &mut self,
        now: Instant,
        cfg: &EngineConfig,
        repr: &Repr,
        payload: &mut dyn Payload,
        completions: &mut VecDeque<Completion>,
        stats: &mut Stats,
    ) {
        if self.error || cfg.service != Service::Rc {
            return;
        }
        let psn = repr.bth.psn;
        if repr.bth.opcode.op == Op::Ack {
            let Some(aeth) = repr.aeth else { return };
            self.handle_aeth(now, cfg, psn, aeth, completions, stats);
        } else {
            self.handle_read_response(now, cfg, repr, payload, stats);
        }
        self.complete_front(completions);
    }

    fn handle_aeth(
        &mut self,
        now: Instant,
        cfg: &EngineConfig,
        psn: Psn,
        aeth: AethRepr,
        completions: &mut VecDeque<Completion>,
        stats: &mut Stats,
    ) {
        // An acknowledgement for something never sent is bogus, a NAK for something already
        // acknowledged is stale: ignore both.
        if !psn.before(self.high) {
            return;
        }
        if !matches!(aeth.syndrome, Syndrome::Ack { .. }) && psn.before(self.una) {
            return;
        }
        match aeth.syndrome {
            Syndrome::Ack { .. } => {
                self.rnr_retries = 0;
                self.ack_through(now, cfg, psn);
            }
            Syndrome::Nak(code) => {
                stats.naks_received += 1;
                self.ack_through(now, cfg, psn.add(Psn::MASK));
                match code {
                    NakCode::PsnSequenceError => {
                        if self.hold_until.take().is_some() {
                            // The ERR: the responder has the pages now.
                            self.paced = false;
                            stats.errs_received += 1;
                            self.probe_window = self.err_window;
                            self.resumed_at = Some(psn);
                            self.rearm(now, true);
                        }
                        self.go_back(psn)
                    }
                    NakCode::RemoteAccessError => {
                        self.fail(psn, Status::RemoteAccessError, completions)
                    }
                    NakCode::InvalidRequest | NakCode::InvalidRdRequest => {
                        self.fail(psn, Status::RemoteInvalidRequest, completions)
                    }
                    NakCode::RemoteOperationalError => {
                        self.fail(psn, Status::RemoteOperationalError, completions)
                    }
                }
            }
            Syndrome::RnrNak {
                timer: FAULT_RNR_TIMER,
            } => {
                // A page fault at the responder: hold at `psn` until the ERR or our timeout.
                // Not an RNR retry: faults are expected and never fail the request. Nor an
                // acknowledgement: packets before `psn` may still wait for the page-in.
                stats.naks_received += 1;
                if let Some(r) = self.resumed_at {
                    let placed = psn.diff(r).max(0) as u32;
                    self.err_window = Some(placed.saturating_mul(2).max(PROBE_WINDOW));
                }
                self.go_back(psn);
                // The MSN field carries the responder's pace: microseconds until the pages of
                // `psn` are in (0: no estimate).
                let pace = Duration::from_micros(u64::from(aeth.msn));
                let wait = match cfg.part.fault_timeout {
                    Some(_) if !pace.is_zero() => pace.min(NTO_HOLD_LIMIT),
                    Some(to) => to,
                    None => NTO_HOLD_LIMIT,
                };
                self.paced = cfg.part.fault_timeout.is_some() && !pace.is_zero();
                self.hold_until = Some(now + wait);
                self.deadline = None;
                self.rtt_probe = None;
            }
            Syndrome::RnrNak { .. } => {
                stats.naks_received += 1;
                self.ack_through(now, cfg, psn.add(Psn::MASK));
                self.rnr_retries += 1;
                if self.rnr_retries > cfg.rnr_retry {
                    self.fail(psn, Status::RnrRetryExceeded, completions);
                } else {
                    self.go_back(psn);
                    self.rnr_until = Some(now + cfg.rnr_delay);
                }
            }
        }
    }

    fn handle_read_response(
        &mut self,
        now: Instant,
        cfg: &EngineConfig,
        repr: &Repr,
        payload: &mut dyn Payload,
        stats: &mut Stats,
    ) {
        let psn = repr.bth.psn;
        let Some(i) = self.wrs.iter().position(|p| p.is_read() && !p.done()) else {
            stats.duplicates += 1;
            return;
        };
        let p = &self.wrs[i];
        let expected = p.first_psn.add(p.read_next);
        if self.read_fault.is_some() {
            // Our destination is being paged in; the READ is asked again afterwards.
            stats.held_drops += 1;
            return;
        }
        if psn != expected {
            if psn.after(expected) && p.contains(psn) {
                // A response went missing: ask again from the first byte we lack, once per gap
                // (reordering would otherwise trigger a storm of re-reads).
                stats.out_of_sequence += 1;
                if self.reread_at != Some(expected) {
                    self.reread_at = Some(expected);
                    self.go_back(expected);
                }
            } else {
                stats.duplicates += 1;
            }
            return;
        }
        let k = p.read_next;
        let last = k + 1 == p.npkts;
        let off = k as usize * cfg.mtu;
        let want = cfg.mtu.min(p.wr.len - off.min(p.wr.len));
        // A READ resumed after a loss restarts its responses with First/Only, so the opcode
        // is checked against "last or not"; the payload length is the real guard.
        let op_ok = match repr.bth.opcode.op {
            Op::ReadResponseOnly | Op::ReadResponseLast => last,
            Op::ReadResponseFirst | Op::ReadResponseMiddle => !last,
            _ => false,
        };
        if !op_ok || payload.len() != want {
            stats.invalid_requests += 1;
            return;
        }
        if fault::must_fault(&cfg.part, &p.wr.local, p.wr.offset + off, payload.len()) {
            let (o, n) = fault::policy_range(
                &cfg.part,
                &p.wr.local,
                p.wr.offset + off,
                payload.len(),
                p.wr.len - off,
            );
            let region = p.wr.local.clone();
            self.read_fault = Some(self.faults.request(now, psn, &region, o, n));
            stats.faults += 1;
            stats.page_ins += 1;
            return;
        }
        if let Err(code) = payload.place(&p.wr.local, p.wr.offset + off) {
            // The bytes could not be moved (a broken stream, a by-reference payload outside
            // what the peer handed over): as lost, the READ is asked again or times out.
            tracing::debug!(?code, "READ response not placed");
            stats.invalid_requests += 1;
            return;
        }
        self.wrs[i].read_next += 1;
        self.retries = 0;
        // A response also acknowledges every request before it.
        self.ack_through(now, cfg, psn);
        self.rearm(now, true);
    }

    /// Everything up to and including `a` is acknowledged.
    fn ack_through(&mut self, now: Instant, cfg: &EngineConfig, a: Psn) {
        let next = a.next();
        let progress = next.after(self.una);
        if let Some((p, sent)) = self.rtt_probe {
            if !p.after(a) {
                self.rtt_probe = None;
                self.sample_rtt(cfg, now.saturating_duration_since(sent));
            }
        }
        if progress {
            self.una = next;
            self.retries = 0;
            if let Some(w) = self.probe_window {
                self.probe_window = w.checked_mul(2).filter(|&w| w < cfg.window);
            }
        }
        for p in self.wrs.iter_mut() {
            if p.last_psn().after(a) {
                break;
            }
            // READs complete only by their responses; a lost response is found by the gap it
            // leaves or by the timer.
            if !p.is_read() {
                p.acked = true;
            }
        }
        self.rearm(now, progress);
    }

    /// Something sent is still unanswered: the oldest request has left and is not done.
    fn in_flight(&self) -> bool {
        self.wrs
            .front()
            .is_some_and(|p| p.first_psn.before(self.high))
    }

    /// Restarts the retransmission timer on progress, starts it if something is in flight, and
    /// stops it when nothing is.
    fn rearm(&mut self, now: Instant, progress: bool) {
        if !self.in_flight() || !self.retransmit {
            self.deadline = None;
        } else if progress || self.deadline.is_none() {
            self.deadline = Some(now + self.rto);
        }
    }

    /// RFC 6298 estimator: RTO = SRTT + 4 RTTVAR, never below the configured timeout (a host
    /// busy with other work, or a receiver taking page faults, must not look like loss) and
    /// at most MAX_RTO.
    fn sample_rtt(&mut self, cfg: &EngineConfig, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let err = s.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
        let floor = MIN_RTO.max(cfg.retry_timeout);
        self.rto = (self.srtt.unwrap_or(r) + self.rttvar * 4).clamp(floor, MAX_RTO);
    }

    /// The first PSN whose packet (or READ response) has not been answered.
    fn resume_psn(&self) -> Psn {
        for p in &self.wrs {
            if p.done() {
                continue;
            }
            if p.is_read() {
                return p.first_psn.add(p.read_next);
            }
            return if p.contains(self.una) {
                self.una
            } else {
                p.first_psn
            };
        }
        self.una
    }

    fn go_back(&mut self, psn: Psn) {
        if psn.before(self.tx_psn) {
            self.tx_psn = psn;
            self.tx_idx = 0;
        }
    }

    pub(super) fn handle_timeout(
        &mut self,
        now: Instant,
        cfg: &EngineConfig,
        completions: &mut VecDeque<Completion>,
        stats: &mut Stats,
    ) {
        if self.rnr_until.is_some_and(|t| t <= now) {
            self.rnr_until = None;
        }
        if self.read_fault.is_some() {
            // Waiting for our own page-in, not for the peer: no retransmission meanwhile.
            self.deadline = self.retransmit.then(|| now + self.rto);
            return;
        }
        if self.hold_until.is_some_and(|t| t <= now) {
            // The fault timeout (or the NTO safety limit): resend from the faulting PSN now;
            // if the pages are not in yet the responder holds us again.
            self.hold_until = None;
            if std::mem::take(&mut self.paced) {
                // The responder said when the pages would be in, and holds what overtakes
                // them in its reorder window (both ends of a queue pair take the same PART
                // settings): send that much, doubling as it is acknowledged.
                stats.paced_resumes += 1;
                self.probe_window = Some(cfg.part.reorder.max(PROBE_WINDOW));
            } else if cfg.part.fault_timeout.is_some() {
                stats.fault_timeouts += 1;
                self.probe_window = Some(PROBE_WINDOW);
            }
            self.deadline = self.retransmit.then(|| now + self.rto);
            return;
        }
        let Some(deadline) = self.deadline else {
            return;
        };
        if deadline > now {
            return;
        }
        stats.timeouts += 1;
        if !self.in_flight() {
            self.deadline = None;
            return;
        }
        self.retries += 1;
        let resume = self.resume_psn();
        if self.retries > cfg.retry_count {
            self.fail(resume, Status::RetryExceeded, completions);
            return;
        }
        self.reread_at = None;
        self.rtt_probe = None;
        self.go_back(resume);
        // Exponential backoff: a receiver that is only slow (a busy host) gets time to catch
        // up instead of being flooded with go-back-N retransmissions.
        self.deadline = Some(now + (self.rto * (1u32 << self.retries.min(10))).min(MAX_RTO * 8));
    }

    /// Our page-in `id` for a READ destination finished: ask the READ again from the first
    /// byte that did not arrive, or fail it if the pages could not be brought in.
    pub(super) fn page_in_done(
        &mut self,
        now: Instant,
        id: u64,
        result: std::result::Result<usize, String>,
        completions: &mut VecDeque<Completion>,
        stats: &mut Stats,
    ) {
        self.faults.finish(id);
        if self.read_fault != Some(id) {
            return;
        }
        self.read_fault = None;
        let Some(p) = self.wrs.iter().find(|p| p.is_read() && !p.done()) else {
            return;
        };
        let resume = p.first_psn.add(p.read_next);
        match result {
            Ok(n) => {
                stats.pages_in += n as u64;
                self.reread_at = Some(resume);
                self.tx_psn = resume;
                self.tx_idx = 0;
                self.rearm(now, true);
            }
            Err(why) => {
                tracing::warn!(reason = %why, "page-in of a READ destination failed");
                self.fail(resume, Status::LocalPageInError, completions);
            }
        }
    }

    /// Completes everything outstanding as flushed (the connection is gone) and enters the
    /// error state.
    pub(super) fn flush_all(&mut self, completions: &mut VecDeque<Completion>) {
        if !self.error {
            self.fail(self.una, Status::Flushed, completions);
        }
    }

    /// The request holding `psn` failed with `status`: complete it so, flush what follows, and
    /// put the queue pair in the error state.
    fn fail(&mut self, psn: Psn, status: Status, completions: &mut VecDeque<Completion>) {
        self.complete_front(completions);
        let mut hit = false;
        while let Some(p) = self.wrs.pop_front() {
            let st = if p.done() {
                Status::Success
            } else if !hit && (p.contains(psn) || psn.before(p.first_psn)) {
                hit = true;
                status
            } else {
                Status::Flushed
            };
            completions.push_back(Completion::send_side(p.wr.wr_id, p.wr.op, st, p.wr.len));
        }
        self.error = true;
        self.deadline = None;
        self.rnr_until = None;
        self.hold_until = None;
        self.paced = false;
        self.read_fault = None;
        self.tx_idx = 0;
    }

    fn complete_front(&mut self, completions: &mut VecDeque<Completion>) {
        while self.wrs.front().is_some_and(Pending::done) {
            let p = self.wrs.pop_front().expect("front exists");
            // The next message starts with no guess about the responder's page-ins.
            self.resumed_at = None;
            self.err_window = None;
            self.tx_idx = self.tx_idx.saturating_sub(1);
            completions.push_back(Completion::send_side(
                p.wr.wr_id,
                p.wr.op,
                Status::Success,
                p.wr.len,
            ));
        }
    }
}
