//! Work requests in, packets out: a posted request gets its PSNs, and each call to
//! `poll_transmit` cuts the next packet of the send queue at the path MTU (WRITE and SEND
//! First/Middle/Last/Only, one READ request for what is still missing), decides whether it asks
//! for an ACK, and starts the retransmission timer.
use std::collections::VecDeque;
use std::time::Instant;

use remora_wire::{BthRepr, Op, Repr, RethRepr, Service};

use super::super::fault;
use super::super::{packets_for, EngineConfig, Source, Stats, Tx};
use super::{Pending, Requester};
use crate::error::{Error, Result};
use crate::wr::{Completion, SendWr, WrOp};

impl Requester {
    pub(in crate::engine) fn post(
        &mut self,
        _now: Instant,
        cfg: &EngineConfig,
        wr: SendWr,
    ) -> Result<()> {
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

    pub(in crate::engine) fn poll_transmit(
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
}
