//! The responder half of a queue pair: expected PSN, READ responses, coalesced ACKs and NAKs
//! (RC), and the drop-until-next-first rule after a gap (UC). Carrying out a request packet (the
//! access check, placing WRITE and SEND payloads) is in [`place`].
//!
//! PART (RC): a packet whose target pages are not resident is not placed; it waits behind the
//! page-in wave it starts, or the sender is stopped at it ([`wave`], [`super::fault`]).
//!
//! WRITE-with-immediate does not consume a posted receive buffer here (unlike verbs, where it
//! does): its completion carries `wr_id` 0, so a receiver needs no receive ring for events.
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use remora_mem::{Access, Pd, Region};
use remora_wire::{AethRepr, NakCode, Op, Psn, Repr, Service, Syndrome};

use super::access;
use super::fault::{self, FaultBook, FAULT_RNR_TIMER};
use super::{packets_for, EngineConfig, Payload, Source, Stats, Tx};
use crate::wr::{Completion, RecvWr};

/// Credits field meaning "no end-to-end flow control" (invalid credit count).
const NO_CREDITS: u8 = 0x1F;
/// RNR NAK timer code sent when no receive buffer is posted (0.01 ms in the IBA table).
const RNR_TIMER: u8 = 1;

mod place;
mod wave;

enum MsgKind {
    Write,
    Send(RecvWr),
}

/// A multi-packet message being received.
struct InMsg {
    kind: MsgKind,
    region: Arc<Region>,
    /// Where the next payload byte goes.
    offset: usize,
    /// Bytes still expected (WRITE: from the RETH length; SEND: room left in the buffer).
    remaining: usize,
    /// Bytes received so far.
    received: usize,
}

enum Out {
    Nak {
        psn: Psn,
        code: NakCode,
    },
    Rnr {
        psn: Psn,
        timer: u8,
    },
    /// PART's hold: resend from `psn`, about `pace_us` from now (0: when the ERR comes).
    Fault {
        psn: Psn,
        pace_us: u32,
    },
    Read(ReadResponse),
}

struct ReadResponse {
    region: Arc<Region>,
    offset: usize,
    len: usize,
    psn: Psn,
    next: u32,
    npkts: u32,
}

/// Why a request was not carried out.
pub(super) enum Refuse {
    Nak(NakCode),
    Rnr,
    /// PART: `[offset, offset+len)` of `region` is not resident; `rest` bytes of the message
    /// start at `offset`.
    Fault {
        region: Arc<Region>,
        offset: usize,
        len: usize,
        rest: usize,
    },
}

/// What the responder works with for one call (a received packet, a page-in report): the time,
/// the queue pair's settings and the regions it serves, and where completions and counters go.
/// Lent by [`super::QpProtocol`], so that the steps of handling a packet need not pass the same
/// five arguments to one another.
pub(super) struct Rx<'a> {
    pub(super) now: Instant,
    pub(super) cfg: &'a EngineConfig,
    pub(super) pd: &'a Pd,
    pub(super) completions: &'a mut VecDeque<Completion>,
    pub(super) stats: &'a mut Stats,
}

/// A received request packet: its parsed headers and its payload (a slice, a copy held in the
/// reorder window, or the bytes still in a stream).
pub(super) struct Packet<'p> {
    pub(super) repr: &'p Repr,
    pub(super) payload: &'p mut dyn Payload,
}

pub(super) struct Responder {
    epsn: Psn,
    msn: u32,
    cur: Option<InMsg>,
    nak_sent: bool,
    ack_pending: bool,
    /// Everything before this PSN is acknowledged to the sender (an ACK, or a NAK, which
    /// acknowledges what precedes it; a fault NAK does not).
    acked_to: Psn,
    out: VecDeque<Out>,
    pub(super) recv_queue: VecDeque<RecvWr>,
    uc_wait_first: bool,
    /// Packets accepted in sequence since the last gap (UC) or `u32::MAX` (RC, or a lossless
    /// stream: nothing can be missing).
    run: u32,
    pub(super) faults: FaultBook,
    /// PART: packets waiting for a page-in wave.
    window: wave::Window,
}

impl Responder {
    pub(super) fn new(cfg: &EngineConfig) -> Responder {
        Responder {
            epsn: cfg.recv_psn,
            msn: 0,
            cur: None,
            nak_sent: false,
            ack_pending: false,
            acked_to: cfg.recv_psn,
            out: VecDeque::new(),
            recv_queue: VecDeque::new(),
            uc_wait_first: false,
            run: match cfg.service {
                _ if cfg.lossless => u32::MAX,
                Service::Rc => u32::MAX,
                Service::Uc => 0,
            },
            faults: FaultBook::default(),
            window: wave::Window::new(),
        }
    }

    pub(super) fn handle(&mut self, rx: &mut Rx, mut pkt: Packet) {
        match rx.cfg.service {
            Service::Rc => self.handle_rc(rx, &mut pkt),
            Service::Uc => self.handle_uc(rx, &mut pkt),
        }
    }

    fn handle_rc(&mut self, rx: &mut Rx, pkt: &mut Packet) {
        let repr = pkt.repr;
        let psn = repr.bth.psn;
        let d = psn.diff(self.epsn);
        if d < 0 {
            rx.stats.duplicates += 1;
            if repr.bth.opcode.op == Op::ReadRequest {
                // READs are idempotent: answer again (the requester lost our responses).
                if let Ok(r) = self.read_request(rx, repr) {
                    self.out.push_back(Out::Read(r));
                }
            } else {
                self.ack_pending = true;
            }
            return;
        }
        let held = self.window.len() as i32;
        if d < held {
            // A resend of a packet already waiting in the window: the sender's retransmission
            // timer ran out while the page-in goes on (a slow page server).
            rx.stats.duplicates += 1;
            if d == 0 {
                self.hold_sender(rx);
            }
            return;
        }
        if d > held {
            if held > 0 {
                self.gap_behind_window(rx);
                return;
            }
            if self.faults.stall.is_some() {
                // Behind a stall: the sender resends from it.
                rx.stats.held_drops += 1;
                return;
            }
            rx.stats.out_of_sequence += 1;
            if !self.nak_sent {
                self.nak_sent = true;
                self.out.push_back(Out::Nak {
                    psn: self.epsn,
                    code: NakCode::PsnSequenceError,
                });
            }
            return;
        }
        if held > 0 {
            if self.behind_window(rx, pkt) {
                // Its pages may be in already, and the front's too by now.
                self.drain(rx);
            }
            return;
        }
        match self.execute(rx, pkt) {
            Ok(advance) => {
                self.epsn = psn.add(advance);
                self.nak_sent = false;
                // A resend (the sender's fault timeout) got in before our ERR: nothing to wait
                // for any more.
                self.faults.stall = None;
                if repr.bth.ack_req && repr.bth.opcode.op != Op::ReadRequest {
                    self.ack_pending = true;
                }
            }
            Err(Refuse::Nak(code)) => {
                self.cur = None;
                self.out.push_back(Out::Nak { psn, code });
            }
            Err(Refuse::Rnr) => self.out.push_back(Out::Rnr {
                psn,
                timer: RNR_TIMER,
            }),
            Err(Refuse::Fault {
                region,
                offset,
                len,
                rest,
            }) => self.on_fault(rx, pkt, (region, offset, len, rest)),
        }
    }

    fn handle_uc(&mut self, rx: &mut Rx, pkt: &mut Packet) {
        let psn = pkt.repr.bth.psn;
        if psn != self.epsn {
            rx.stats.out_of_sequence += 1;
            self.run = 0;
            if self.cur.take().is_some() {
                rx.stats.uc_messages_dropped += 1;
            }
            self.uc_wait_first = true;
        }
        if self.uc_wait_first {
            if !pkt.repr.bth.opcode.is_first() {
                rx.stats.uc_packets_dropped += 1;
                self.epsn = psn.next();
                return;
            }
            self.uc_wait_first = false;
        }
        // Counted before executing, so that the completion this packet may finish includes it.
        self.run = self.run.saturating_add(1);
        match self.execute(rx, pkt) {
            Ok(advance) => self.epsn = psn.add(advance),
            Err(_) => {
                self.run = 0;
                // UC has no NAKs: the message is dropped and counted.
                rx.stats.uc_packets_dropped += 1;
                if self.cur.take().is_some() {
                    rx.stats.uc_messages_dropped += 1;
                }
                self.uc_wait_first = true;
                self.epsn = psn.next();
            }
        }
    }

    fn read_request(&self, rx: &mut Rx, repr: &Repr) -> Result<ReadResponse, Refuse> {
        let Some(reth) = repr.reth else {
            rx.stats.invalid_requests += 1;
            return Err(Refuse::Nak(NakCode::InvalidRequest));
        };
        let len = reth.len as usize;
        let (region, offset) =
            access::check_remote(rx.pd, reth.rkey, reth.va, len as u64, Access::REMOTE_READ)
                .map_err(|e| {
                    rx.stats.access_errors += 1;
                    tracing::debug!(error = %e, "remote READ refused");
                    Refuse::Nak(NakCode::RemoteAccessError)
                })?;
        Ok(ReadResponse {
            npkts: packets_for(len, rx.cfg.mtu),
            region,
            offset,
            len,
            psn: repr.bth.psn,
            next: 0,
        })
    }

    pub(super) fn poll_transmit(
        &mut self,
        cfg: &EngineConfig,
        buf: &mut [u8],
        stats: &mut Stats,
    ) -> Option<Tx> {
        let ack = |psn: Psn, syndrome: Syndrome, msn: u32| Repr {
            bth: cfg.bth(Op::Ack, psn),
            reth: None,
            immdt: None,
            aeth: Some(AethRepr { syndrome, msn }),
            payload_len: 0,
        };
        let Some(front) = self.out.front_mut() else {
            if !self.ack_pending {
                return None;
            }
            self.ack_pending = false;
            self.acked_to = self.epsn;
            stats.acks_sent += 1;
            let repr = ack(
                self.epsn.add(Psn::MASK),
                Syndrome::Ack {
                    credits: NO_CREDITS,
                },
                self.msn,
            );
            return Some(Tx::headers(repr.emit(buf, &[]), repr.header_len()));
        };
        let tx = match front {
            Out::Nak { psn, code } => {
                stats.naks_sent += 1;
                self.acked_to = *psn;
                let r = ack(*psn, Syndrome::Nak(*code), self.msn);
                Tx::headers(r.emit(buf, &[]), r.header_len())
            }
            Out::Rnr { psn, timer } => {
                stats.naks_sent += 1;
                self.acked_to = *psn;
                let r = ack(*psn, Syndrome::RnrNak { timer: *timer }, self.msn);
                Tx::headers(r.emit(buf, &[]), r.header_len())
            }
            Out::Fault { psn, pace_us } => {
                stats.naks_sent += 1;
                let syndrome = Syndrome::RnrNak {
                    timer: FAULT_RNR_TIMER,
                };
                let r = ack(*psn, syndrome, *pace_us);
                Tx::headers(r.emit(buf, &[]), r.header_len())
            }
            Out::Read(r) => {
                let k = r.next;
                let last = k + 1 == r.npkts;
                let op = match (r.npkts, k) {
                    (1, _) => Op::ReadResponseOnly,
                    (_, 0) => Op::ReadResponseFirst,
                    _ if last => Op::ReadResponseLast,
                    _ => Op::ReadResponseMiddle,
                };
                let off = k as usize * cfg.mtu;
                let n = cfg.mtu.min(r.len - off.min(r.len));
                let repr = Repr {
                    bth: cfg.bth(op, r.psn.add(k)),
                    reth: None,
                    immdt: None,
                    aeth: (op != Op::ReadResponseMiddle).then_some(AethRepr {
                        syndrome: Syndrome::Ack {
                            credits: NO_CREDITS,
                        },
                        msn: self.msn,
                    }),
                    payload_len: n,
                };
                let hl = repr.header_len();
                let total = repr.emit_headers(buf);
                let got = fault::populate_source(
                    &cfg.part,
                    &r.region,
                    r.offset + off,
                    n,
                    r.len - off.min(r.len),
                );
                if got > 0 {
                    stats.source_faults += 1;
                }
                // The caller copies the payload (the access check bounded the range).
                let tx = Tx {
                    total,
                    header_len: hl,
                    src: (n > 0).then(|| Source {
                        region: r.region.clone(),
                        offset: r.offset + off,
                        len: n,
                    }),
                };
                r.next += 1;
                if !last {
                    return Some(tx);
                }
                tx
            }
        };
        self.out.pop_front();
        Some(tx)
    }
}
