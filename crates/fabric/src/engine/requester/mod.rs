//! The requester half of a queue pair: send queue, PSN assignment, segmentation at the path MTU,
//! acknowledgement processing, READ responses, go-back-N retransmission and the retry limits.
//!
//! PART: a fault NAK (RNR NAK with [`super::fault::FAULT_RNR_TIMER`]) makes the requester hold
//! at the faulting PSN until the responder's ERR, or, when it has a fault timeout (TO), until the
//! pace the NAK advertises (the responder's page-in wave reaching that packet) or the timeout
//! itself; local sources that are not resident are populated with the page-in policy before they
//! are read. A READ response for a local destination that is not resident is dropped like a
//! responder's faulting WRITE: a page-in request goes to the driver, and when it is done the READ
//! is asked again from the first byte missing, so the receive thread never blocks on our own
//! memory.
//!
//! The work is split by job: [`transmit`] posts work requests and cuts them into packets,
//! [`ack`] takes acknowledgements and NAKs (PART's fault NAK hold included), [`read`] places
//! READ responses and pages in their destinations, and [`timer`] runs the retransmission
//! timer, the round-trip estimate and the end of a hold. This file holds the state they share.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use remora_wire::Psn;

use super::fault::FaultBook;
use super::EngineConfig;
use crate::wr::{Completion, SendWr, Status, WrOp};

mod ack;
mod read;
mod timer;
mod transmit;

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

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        [self.deadline, self.rnr_until, self.hold_until]
            .into_iter()
            .flatten()
            .min()
    }

    fn go_back(&mut self, psn: Psn) {
        if psn.before(self.tx_psn) {
            self.tx_psn = psn;
            self.tx_idx = 0;
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
