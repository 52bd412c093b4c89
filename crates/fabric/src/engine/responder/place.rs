//! Carrying out one request packet in sequence: WRITE and SEND payloads placed (PART refuses
//! pages that are not resident), receive buffers matched, READ requests checked, and the
//! completions a finished message gives.
use std::collections::VecDeque;
use std::sync::Arc;

use remora_mem::{Access, Region};
use remora_wire::{NakCode, Op, Repr, Service};

use super::super::{access, fault, EngineConfig, Payload, Stats};
use super::{InMsg, MsgKind, Out, Packet, Refuse, Responder, Rx};
use crate::wr::{Completion, RecvWr, Status, WcOpcode};

impl Responder {
    /// Carries out one in-sequence request packet; returns how many PSNs it used.
    pub(super) fn execute(&mut self, rx: &mut Rx, pkt: &mut Packet) -> Result<u32, Refuse> {
        match pkt.repr.bth.opcode.op {
            Op::WriteFirst | Op::WriteOnly | Op::WriteOnlyImm => self.write_first(rx, pkt),
            Op::WriteMiddle | Op::WriteLast | Op::WriteLastImm => self.write_rest(rx, pkt),
            Op::SendFirst | Op::SendOnly | Op::SendOnlyImm => self.send_first(rx, pkt),
            Op::SendMiddle | Op::SendLast | Op::SendLastImm => self.send_rest(rx, pkt),
            Op::ReadRequest => self.read(rx, pkt.repr),
            _ => Err(invalid(rx.stats)),
        }
    }

    /// WRITE First or Only: the RETH's range checked against the rkey, the first payload placed,
    /// and either the message finished or its rest expected.
    fn write_first(&mut self, rx: &mut Rx, pkt: &mut Packet) -> Result<u32, Refuse> {
        let (repr, mtu) = (pkt.repr, rx.cfg.mtu);
        let payload = &mut *pkt.payload;
        let Some(reth) = repr.reth else {
            return Err(invalid(rx.stats));
        };
        if self.cur.is_some() {
            return Err(invalid(rx.stats));
        }
        let total = reth.len as usize;
        let only = repr.bth.opcode.op != Op::WriteFirst;
        let len_ok = if only {
            payload.len() == total && total <= mtu
        } else {
            payload.len() == mtu && total > mtu
        };
        if !len_ok {
            return Err(invalid(rx.stats));
        }
        let (region, offset) = access::check_remote(
            rx.pd,
            reth.rkey,
            reth.va,
            total as u64,
            Access::REMOTE_WRITE,
        )
        .map_err(|e| {
            rx.stats.access_errors += 1;
            tracing::debug!(error = %e, "remote WRITE refused");
            Refuse::Nak(NakCode::RemoteAccessError)
        })?;
        check_place(rx.cfg, &region, offset, payload.len(), total)?;
        place(&region, offset, payload, rx.stats)?;
        if only {
            self.finish_write(total, repr.immdt, rx.completions);
        } else {
            self.cur = Some(InMsg {
                kind: MsgKind::Write,
                region,
                offset: offset + payload.len(),
                remaining: total - payload.len(),
                received: payload.len(),
            });
        }
        Ok(1)
    }

    /// WRITE Middle or Last: the next payload of the WRITE in progress placed after the last.
    fn write_rest(&mut self, rx: &mut Rx, pkt: &mut Packet) -> Result<u32, Refuse> {
        let (repr, mtu) = (pkt.repr, rx.cfg.mtu);
        let payload = &mut *pkt.payload;
        let last = repr.bth.opcode.op != Op::WriteMiddle;
        let ok = match &self.cur {
            Some(
                m @ InMsg {
                    kind: MsgKind::Write,
                    ..
                },
            ) => {
                if last {
                    payload.len() == m.remaining
                } else {
                    payload.len() == mtu && m.remaining > mtu
                }
            }
            _ => false,
        };
        if !ok {
            return Err(invalid(rx.stats));
        }
        let m = self.cur.as_mut().expect("checked above");
        check_place(rx.cfg, &m.region, m.offset, payload.len(), m.remaining)?;
        place(&m.region, m.offset, payload, rx.stats)?;
        m.offset += payload.len();
        m.remaining -= payload.len();
        m.received += payload.len();
        if last {
            let total = m.received;
            self.cur = None;
            self.finish_write(total, repr.immdt, rx.completions);
        }
        Ok(1)
    }

    /// SEND First or Only: the payload placed in the next posted receive, and either the
    /// receive completed or the rest of the message expected there.
    fn send_first(&mut self, rx: &mut Rx, pkt: &mut Packet) -> Result<u32, Refuse> {
        let (repr, mtu) = (pkt.repr, rx.cfg.mtu);
        let payload = &mut *pkt.payload;
        if self.cur.is_some() {
            return Err(invalid(rx.stats));
        }
        let only = repr.bth.opcode.op != Op::SendFirst;
        if (only && payload.len() > mtu) || (!only && payload.len() != mtu) {
            return Err(invalid(rx.stats));
        }
        let recv = self.take_recv(rx.cfg, payload, rx.completions, rx.stats)?;
        if only {
            self.finish_send(recv, payload.len(), repr.immdt, rx.completions);
        } else {
            self.cur = Some(InMsg {
                region: recv.local.clone(),
                offset: recv.offset + payload.len(),
                remaining: recv.len - payload.len(),
                received: payload.len(),
                kind: MsgKind::Send(recv),
            });
        }
        Ok(1)
    }

    /// SEND Middle or Last: the next payload of the SEND in progress placed in its receive; one
    /// that overflows the receive completes it with a length error.
    fn send_rest(&mut self, rx: &mut Rx, pkt: &mut Packet) -> Result<u32, Refuse> {
        let (repr, mtu) = (pkt.repr, rx.cfg.mtu);
        let payload = &mut *pkt.payload;
        let last = repr.bth.opcode.op != Op::SendMiddle;
        let Some(m) = self.cur.as_mut() else {
            return Err(invalid(rx.stats));
        };
        if !matches!(m.kind, MsgKind::Send(_)) || (!last && payload.len() != mtu) {
            return Err(invalid(rx.stats));
        }
        if payload.len() > m.remaining {
            let Some(InMsg {
                kind: MsgKind::Send(recv),
                received,
                ..
            }) = self.cur.take()
            else {
                unreachable!("checked above");
            };
            rx.completions.push_back(Completion {
                wr_id: recv.wr_id,
                status: Status::LocalLengthError,
                opcode: WcOpcode::Recv,
                byte_len: received as u32,
                imm: None,
                in_sequence: self.run,
            });
            rx.stats.invalid_requests += 1;
            return Err(Refuse::Nak(NakCode::InvalidRequest));
        }
        check_place(rx.cfg, &m.region, m.offset, payload.len(), m.remaining)?;
        place(&m.region, m.offset, payload, rx.stats)?;
        m.offset += payload.len();
        m.remaining -= payload.len();
        m.received += payload.len();
        if last {
            let Some(InMsg {
                kind: MsgKind::Send(recv),
                received,
                ..
            }) = self.cur.take()
            else {
                unreachable!("checked above");
            };
            self.finish_send(recv, received, repr.immdt, rx.completions);
        }
        Ok(1)
    }

    /// READ Request: checked, and its responses queued; it uses a PSN per response packet.
    fn read(&mut self, rx: &mut Rx, repr: &Repr) -> Result<u32, Refuse> {
        if self.cur.is_some() {
            return Err(invalid(rx.stats));
        }
        let r = self.read_request(rx, repr)?;
        let n = r.npkts;
        self.out.push_back(Out::Read(r));
        self.msn = (self.msn + 1) & 0xFF_FFFF;
        Ok(n)
    }

    /// Places a SEND's (first) payload in the next posted receive, which it returns: RNR
    /// without one, a length error (the receive completes with it) when it does not fit.
    fn take_recv(
        &mut self,
        cfg: &EngineConfig,
        payload: &mut dyn Payload,
        completions: &mut VecDeque<Completion>,
        stats: &mut Stats,
    ) -> Result<RecvWr, Refuse> {
        let Some(recv) = self.recv_queue.front() else {
            return Err(Refuse::Rnr);
        };
        if payload.len() > recv.len {
            return Err(self.length_error(completions, stats));
        }
        check_place(cfg, &recv.local, recv.offset, payload.len(), recv.len)?;
        let recv = self.recv_queue.pop_front().expect("checked above");
        place(&recv.local, recv.offset, payload, stats)?;
        Ok(recv)
    }

    /// A whole SEND that arrived outside the packet path (the shm ring): matched, placed and
    /// completed exactly as a SEND Only packet, without a PSN or an ACK.
    pub(in crate::engine) fn accept_send(
        &mut self,
        cfg: &EngineConfig,
        payload: &mut dyn Payload,
        imm: Option<u32>,
        completions: &mut VecDeque<Completion>,
        stats: &mut Stats,
    ) -> Result<(), Refuse> {
        if self.cur.is_some() || payload.len() > cfg.mtu {
            stats.invalid_requests += 1;
            return Err(Refuse::Nak(NakCode::InvalidRequest));
        }
        let recv = self.take_recv(cfg, payload, completions, stats)?;
        let n = payload.len();
        self.finish_send(recv, n, imm, completions);
        Ok(())
    }

    fn length_error(
        &mut self,
        completions: &mut VecDeque<Completion>,
        stats: &mut Stats,
    ) -> Refuse {
        if let Some(recv) = self.recv_queue.pop_front() {
            completions.push_back(Completion {
                wr_id: recv.wr_id,
                status: Status::LocalLengthError,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm: None,
                in_sequence: self.run,
            });
        }
        stats.invalid_requests += 1;
        Refuse::Nak(NakCode::InvalidRequest)
    }

    fn finish_write(
        &mut self,
        total: usize,
        imm: Option<u32>,
        completions: &mut VecDeque<Completion>,
    ) {
        self.msn = (self.msn + 1) & 0xFF_FFFF;
        if imm.is_some() {
            completions.push_back(Completion {
                wr_id: 0,
                status: Status::Success,
                opcode: WcOpcode::RecvRdmaWithImm,
                byte_len: total as u32,
                imm,
                in_sequence: self.run,
            });
        }
    }

    fn finish_send(
        &mut self,
        recv: RecvWr,
        total: usize,
        imm: Option<u32>,
        completions: &mut VecDeque<Completion>,
    ) {
        self.msn = (self.msn + 1) & 0xFF_FFFF;
        completions.push_back(Completion {
            wr_id: recv.wr_id,
            status: Status::Success,
            opcode: WcOpcode::Recv,
            byte_len: total as u32,
            imm,
            in_sequence: self.run,
        });
    }
}

/// A malformed or unexpected request: counted, and NAKed as an invalid request.
fn invalid(stats: &mut Stats) -> Refuse {
    stats.invalid_requests += 1;
    Refuse::Nak(NakCode::InvalidRequest)
}

/// PART (RC only; UC cannot ask for a resend and places inline): refuses to place into pages
/// that are not resident.
fn check_place(
    cfg: &EngineConfig,
    region: &Arc<Region>,
    offset: usize,
    len: usize,
    rest: usize,
) -> Result<(), Refuse> {
    if cfg.service == Service::Rc && fault::must_fault(&cfg.part, region, offset, len) {
        return Err(Refuse::Fault {
            region: region.clone(),
            offset,
            len,
            rest,
        });
    }
    Ok(())
}

/// Moves a payload into a region at an offset the access check already approved.
fn place(
    region: &Region,
    offset: usize,
    payload: &mut dyn Payload,
    stats: &mut Stats,
) -> Result<(), Refuse> {
    payload.place(region, offset).map_err(|code| {
        if code == NakCode::InvalidRequest {
            stats.invalid_requests += 1;
        }
        Refuse::Nak(code)
    })
}
