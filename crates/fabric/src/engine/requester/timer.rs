//! Time on the requester's side: the retransmission timer (restarted on progress, go-back-N
//! with exponential backoff and a retry limit when it expires), the RFC 6298 round-trip
//! estimate behind it, the RNR wait, and the end of a PART hold (the pace or the fault timeout).
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use remora_wire::Psn;

use super::super::{EngineConfig, Stats};
use super::{Requester, PROBE_WINDOW};
use crate::wr::{Completion, Status};

/// Bounds of the adaptive retransmission timeout.
const MIN_RTO: Duration = Duration::from_micros(500);
const MAX_RTO: Duration = Duration::from_secs(1);

impl Requester {
    /// Something sent is still unanswered: the oldest request has left and is not done.
    pub(super) fn in_flight(&self) -> bool {
        self.wrs
            .front()
            .is_some_and(|p| p.first_psn.before(self.high))
    }

    /// Restarts the retransmission timer on progress, starts it if something is in flight, and
    /// stops it when nothing is.
    pub(super) fn rearm(&mut self, now: Instant, progress: bool) {
        if !self.in_flight() || !self.retransmit {
            self.deadline = None;
        } else if progress || self.deadline.is_none() {
            self.deadline = Some(now + self.rto);
        }
    }

    /// RFC 6298 estimator: RTO = SRTT + 4 RTTVAR, never below the configured timeout (a host
    /// busy with other work, or a receiver taking page faults, must not look like loss) and
    /// at most MAX_RTO.
    pub(super) fn sample_rtt(&mut self, cfg: &EngineConfig, r: Duration) {
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

    pub(in crate::engine) fn handle_timeout(
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
}
