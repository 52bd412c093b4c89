//! READ responses: placed in order into the local destination, a gap asks the READ again from
//! the first byte missing, and a destination that is not resident is paged in off the receive
//! path before the READ is asked again from there.
use std::collections::VecDeque;
use std::time::Instant;

use remora_wire::{Op, Repr};

use super::super::fault;
use super::super::{EngineConfig, Payload, Stats};
use super::Requester;
use crate::wr::{Completion, Status};

impl Requester {
    pub(super) fn handle_read_response(
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

    /// Our page-in `id` for a READ destination finished: ask the READ again from the first
    /// byte that did not arrive, or fail it if the pages could not be brought in.
    pub(in crate::engine) fn page_in_done(
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
}
