//! What comes back for our packets (RC): ACKs move the unacknowledged edge and complete
//! requests, NAKs go back or fail the request, an RNR NAK waits and retries, and PART's fault
//! NAK holds the sender until the ERR, the pace the responder advertised, or our fault timeout.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use remora_wire::{AethRepr, NakCode, Op, Psn, Repr, Service, Syndrome};

use super::super::fault::FAULT_RNR_TIMER;
use super::super::{EngineConfig, Payload, Stats};
use super::{Requester, PROBE_WINDOW};
use crate::wr::{Completion, Status};

/// Without a fault timeout (NTO) a hold still ends after this long, in case the ERR was lost;
/// if the page-in is still going on, the responder simply NAKs again.
const NTO_HOLD_LIMIT: Duration = Duration::from_millis(200);

impl Requester {
    pub(in crate::engine) fn handle(
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
                self.rnr_retries = self.rnr_retries.saturating_add(1);
                if self.rnr_retries > cfg.rnr_retry {
                    self.fail(psn, Status::RnrRetryExceeded, completions);
                } else {
                    self.go_back(psn);
                    self.rnr_until = Some(now + cfg.rnr_delay);
                }
            }
        }
    }

    /// Everything up to and including `a` is acknowledged.
    pub(super) fn ack_through(&mut self, now: Instant, cfg: &EngineConfig, a: Psn) {
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
}
