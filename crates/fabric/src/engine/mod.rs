//! The queue-pair protocol as a deterministic, sans-IO state machine.
//!
//! An [`QpProtocol`] is one queue pair: a requester (send queue, PSNs, retransmission) and a
//! responder (expected PSN, access checks, ACK/NAK, READ responses). It owns no socket and no
//! clock: every call takes `now`, datagrams go in through [`QpProtocol::handle`] and come out of
//! [`QpProtocol::poll_transmit`], timers through [`QpProtocol::poll_timeout`] / [`QpProtocol::handle_timeout`],
//! and completions through [`QpProtocol::poll_completion`]. Transports (`udp`) are thin drivers
//! around it, and the loss, reordering and timeout tests run it on virtual time.
//!
//! Pages that are not resident in `on-demand` regions are handled without blocking the receive
//! path (PART, [`fault`]): the engine asks its driver for page-ins through
//! [`QpProtocol::poll_page_in`]; packets behind the fault wait for the page-in wave's front
//! ([`QpProtocol::page_in_progress`]), and a sender stopped at a fault resumes at the pace the
//! responder advertises or at its explicit retransmission request once the driver reports the
//! page-in done ([`QpProtocol::page_in_done`]).
//!
//! Packets are RoCEv2 UDP payloads (BTH .. ICRC). The engine leaves the 4 ICRC bytes zero; the
//! transport seals them because the ICRC covers the IP and UDP headers the engine never sees.
//! Stream transports (tcp, shm) drive the same engine with packets split in two: the headers,
//! and the payload as a region range ([`QpProtocol::poll_transmit_parts`]) or a reader
//! ([`QpProtocol::handle_parts`], [`Payload`]), so a payload is copied once, straight between the
//! stream and the region; they use [`EngineConfig::stream`] (a large MTU, no retransmission).
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_mem::{Pd, Region};
use remora_wire::{BthRepr, NakCode, Op, Opcode, Psn, Repr, Service};

use crate::error::Result;
use crate::wr::{Completion, RecvWr, SendWr};

pub mod access;
pub mod fault;
mod requester;
mod responder;
mod stats;
#[cfg(test)]
mod tests;

pub use fault::{
    FaultMode, PageInPolicy, PageInRequest, PartConfig, DEFAULT_REORDER, FAULT_RNR_TIMER,
};
use requester::Requester;
use responder::Responder;
pub use stats::Stats;

/// Static parameters of one queue pair.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// RC or UC.
    pub service: Service,
    /// Our queue pair number (peers address packets to it).
    pub local_qpn: u32,
    /// The peer's queue pair number (our packets carry it).
    pub remote_qpn: u32,
    /// Payload bytes per packet: the path MTU, 256..=4096, on datagrams; up to
    /// [`MAX_STREAM_MTU`] on a stream.
    pub mtu: usize,
    /// PSN of our first packet.
    pub send_psn: Psn,
    /// PSN we expect first from the peer.
    pub recv_psn: Psn,
    /// Local ACK timeout (RC): time without progress before go-back-N; doubled after each
    /// expiry without progress.
    pub retry_timeout: Duration,
    /// Retransmissions of the same packet before the request fails (RC).
    pub retry_count: u32,
    /// RNR NAK retries before the request fails (RC), and the wait between them.
    pub rnr_retry: u32,
    /// Wait after an RNR NAK before resending.
    pub rnr_delay: Duration,
    /// Packets in flight (sent, not acknowledged) at most (RC).
    pub window: u32,
    /// Ask for an ACK at least every this many packets, besides each message's last (RC).
    pub ack_req_every: u32,
    /// Outstanding send work requests at most.
    pub max_send_wr: usize,
    /// Partition key sent in every BTH and required of received packets ([`pkey_matches`]).
    pub pkey: u16,
    /// Page faults: PART or inline, the page-in policy, the requester's fault timeout.
    pub part: PartConfig,
    /// The link neither loses nor reorders (a reliable byte stream, [`EngineConfig::stream`]):
    /// no retransmission timer runs, and UC counts every packet as in sequence (completions'
    /// `in_sequence` is `u32::MAX`, as on RC), since no gap can happen.
    pub lossless: bool,
}

/// Payload bytes per packet of the stream transports: a 1 MiB message is one packet, so the
/// per-packet cost (headers, a lock, a system call) vanishes beside the copy.
pub const STREAM_MTU: usize = 1 << 20;
/// Largest MTU the engine accepts (stream transports).
pub const MAX_STREAM_MTU: usize = 16 << 20;

impl EngineConfig {
    /// A configuration with the defaults used by the transports.
    pub fn new(service: Service, local_qpn: u32, remote_qpn: u32, mtu: usize) -> EngineConfig {
        EngineConfig {
            service,
            local_qpn,
            remote_qpn,
            mtu,
            send_psn: Psn::new(0),
            recv_psn: Psn::new(0),
            retry_timeout: Duration::from_millis(10),
            retry_count: 7,
            rnr_retry: 7,
            rnr_delay: Duration::from_micros(200),
            window: 1024,
            ack_req_every: 64,
            max_send_wr: 4096,
            pkey: DEFAULT_PKEY,
            part: PartConfig::default(),
            lossless: false,
        }
    }

    /// The configuration of a queue pair over a reliable, ordered byte stream (tcp, shm):
    /// [`STREAM_MTU`] per packet, and no retransmission timer, since the stream neither loses
    /// nor reorders what it carries (a resend could only duplicate, and the old stream
    /// transports never resent either). NAKs still work: a refused request fails as on udp, a
    /// SEND finding no receive buffer is sent again after the RNR wait, retried without limit
    /// (a stream responder used to wait for the buffer). Pages are brought in by the copy
    /// itself ([`FaultMode::Inline`]): a stream cannot skip ahead, so PART's hold and resend
    /// would buy nothing, and the driver populates a whole payload's range in one call.
    pub fn stream(service: Service, local_qpn: u32, remote_qpn: u32) -> EngineConfig {
        EngineConfig {
            lossless: true,
            rnr_retry: u32::MAX,
            part: PartConfig {
                mode: FaultMode::Inline,
                ..PartConfig::default()
            },
            ..EngineConfig::new(service, local_qpn, remote_qpn, STREAM_MTU)
        }
    }
}

impl EngineConfig {
    /// The BTH of an outgoing packet of this queue pair (no AckReq, not solicited; the
    /// requester sets those).
    pub(crate) fn bth(&self, op: Op, psn: Psn) -> BthRepr {
        BthRepr {
            opcode: Opcode {
                service: self.service,
                op,
            },
            solicited: false,
            mig_req: true,
            pad_count: 0,
            pkey: self.pkey,
            fecn: false,
            becn: false,
            dest_qp: self.remote_qpn,
            ack_req: false,
            psn,
        }
    }
}

/// The default partition, full membership (what RoCE NICs use unless configured otherwise).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// Whether a packet's P_Key admits it to a queue pair of partition `ours` (InfiniBand 10.9.3):
/// the 15-bit partition numbers are equal, and not both keys are limited members (bit 15 clear).
pub fn pkey_matches(theirs: u16, ours: u16) -> bool {
    const MEMBER: u16 = 0x8000;
    (theirs & !MEMBER) == (ours & !MEMBER) && (theirs | ours) & MEMBER != 0
}

/// One queue pair's protocol state. See the module documentation.
pub struct QpProtocol {
    cfg: EngineConfig,
    pd: Arc<Pd>,
    req: Requester,
    resp: Responder,
    completions: VecDeque<Completion>,
    stats: Stats,
}

impl QpProtocol {
    /// A queue pair whose responder serves the regions of `pd`.
    pub fn new(cfg: EngineConfig, pd: Arc<Pd>) -> QpProtocol {
        assert!(
            (256..=MAX_STREAM_MTU).contains(&cfg.mtu),
            "MTU must be 256..=4096 bytes (datagrams) or at most {MAX_STREAM_MTU} (streams)"
        );
        QpProtocol {
            req: Requester::new(&cfg),
            resp: Responder::new(&cfg),
            cfg,
            pd,
            completions: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// True once a request failed; the queue pair accepts no more work.
    pub fn is_error(&self) -> bool {
        self.req.error
    }

    /// Send-side work requests not yet completed.
    pub fn outstanding(&self) -> usize {
        self.req.outstanding()
    }

    /// Queues a send-side work request.
    pub fn post_send(&mut self, now: Instant, wr: SendWr) -> Result<()> {
        self.req.post(now, &self.cfg, wr)
    }

    /// Queues a receive buffer for incoming SENDs.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<()> {
        wr.validate()?;
        self.resp.recv_queue.push_back(wr);
        Ok(())
    }

    /// A whole SEND that arrived outside the packet path (one-sided shm): matched with the next
    /// posted receive, placed and completed by the responder's own logic (length error, MSN),
    /// with no PSN and nothing to send back; the driver reports the outcome to the sender.
    pub fn accept_send(&mut self, payload: &mut dyn Payload, imm: Option<u32>) -> Accepted {
        let mut out = VecDeque::new();
        let r = self
            .resp
            .accept_send(&self.cfg, payload, imm, &mut out, &mut self.stats);
        let c = out.pop_front();
        match r {
            Ok(()) => Accepted::Placed(c.expect("a placed SEND completes its receive")),
            Err(responder::Refuse::Rnr) => Accepted::NoReceive,
            Err(responder::Refuse::Nak(code)) => Accepted::Refused(code, c),
            // Stream engines bring pages in inline; a fault here would be a driver bug.
            Err(responder::Refuse::Fault { .. }) => {
                Accepted::Refused(NakCode::RemoteOperationalError, c)
            }
        }
    }

    /// Processes one received RoCEv2 payload (BTH .. ICRC; the ICRC is the transport's business).
    pub fn handle(&mut self, now: Instant, datagram: &[u8]) {
        let (repr, mut payload) = match Repr::parse(datagram) {
            Ok(p) => p,
            Err(e) => {
                self.stats.rx_packets += 1;
                tracing::debug!(qpn = self.cfg.local_qpn, error = %e, "malformed packet dropped");
                self.stats.rx_malformed += 1;
                return;
            }
        };
        self.handle_parts(now, &repr, &mut payload);
    }

    /// Processes one received packet given as its parsed headers and its payload (stream
    /// transports: the payload is still in the stream and is read straight into its place).
    /// A payload the engine does not take (a refused or dropped packet) is left to the caller.
    pub fn handle_parts(&mut self, now: Instant, repr: &Repr, payload: &mut dyn Payload) {
        self.stats.rx_packets += 1;
        let repr = *repr;
        if repr.bth.dest_qp != self.cfg.local_qpn || repr.bth.opcode.service != self.cfg.service {
            self.stats.rx_wrong_qp += 1;
            return;
        }
        if !pkey_matches(repr.bth.pkey, self.cfg.pkey) {
            tracing::debug!(
                qpn = self.cfg.local_qpn,
                pkey = repr.bth.pkey,
                "P_Key violation"
            );
            self.stats.bad_pkey += 1;
            return;
        }
        if is_response(&repr) {
            self.req.handle(
                now,
                &self.cfg,
                &repr,
                payload,
                &mut self.completions,
                &mut self.stats,
            );
        } else {
            let (resp, mut rx) = self.responder(now);
            resp.handle(
                &mut rx,
                responder::Packet {
                    repr: &repr,
                    payload,
                },
            );
        }
    }

    /// The responder, and what it works with for one call.
    fn responder(&mut self, now: Instant) -> (&mut Responder, responder::Rx<'_>) {
        let rx = responder::Rx {
            now,
            cfg: &self.cfg,
            pd: &self.pd,
            completions: &mut self.completions,
            stats: &mut self.stats,
        };
        (&mut self.resp, rx)
    }

    /// The next page-in the responder needs, for the driver's page-in worker (PART). Run it
    /// off the receive path ([`PageInRequest::run`]) and report with [`QpProtocol::page_in_done`].
    pub fn poll_page_in(&mut self) -> Option<PageInRequest> {
        self.resp
            .faults
            .requests
            .pop_front()
            .or_else(|| self.req.faults.requests.pop_front())
    }

    /// The page-in `id` has its first `done` bytes (from [`PageInRequest::offset`]) resident
    /// and goes on: packets waiting behind the wave's front are placed now
    /// ([`PageInRequest::run_reporting`] gives these reports).
    pub fn page_in_progress(&mut self, now: Instant, id: u64, done: usize) {
        if id & requester::REQUESTER_IDS == 0 {
            let (resp, mut rx) = self.responder(now);
            resp.page_in_progress(&mut rx, id, done);
        }
    }

    /// The page-in `id` finished: `Ok(pages)` made resident, or `Err(reason)`. Packets waiting
    /// for it are placed, and when the packet the sender was stopped at can now be placed, the
    /// responder queues the explicit retransmission request; a failed page-in fails the
    /// sender's request (remote operational error).
    pub fn page_in_done(
        &mut self,
        now: Instant,
        id: u64,
        result: std::result::Result<usize, String>,
    ) {
        if id & requester::REQUESTER_IDS != 0 {
            self.req
                .page_in_done(now, id, result, &mut self.completions, &mut self.stats);
        } else {
            let (resp, mut rx) = self.responder(now);
            resp.page_in_done(&mut rx, id, result);
        }
    }

    /// Page-ins handed out and not yet reported done.
    pub fn page_ins_in_flight(&self) -> usize {
        self.resp.faults.inflight.len() + usize::from(self.req.read_fault_pending())
    }

    /// Writes the next packet to send into `buf` (at least `mtu + 64` bytes) and returns its
    /// length, or `None` when there is nothing to send now.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let tx = self.next_tx(now, buf)?;
        if let Some(s) = &tx.src {
            let dst = &mut buf[tx.header_len..tx.header_len + s.len];
            if s.region.read_at(s.offset, dst).is_err() {
                // Bounds were checked at post time or by the access check: a bug, not input.
                debug_assert!(false, "payload source out of bounds after its check");
            }
            // This packet's loads are done before the next one's: READ responses read the
            // region in PSN order, which a seqlock reader posting version, data, version
            // READs relies on (see `Qp::post_batch`).
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        Some(tx.total)
    }

    /// Like [`QpProtocol::poll_transmit`] without copying the payload: writes the headers into
    /// `buf` (at least `mtu + 64` bytes, of which only the headers are written) and returns
    /// their length and where the payload is, for a stream that sends it from the region.
    pub fn poll_transmit_parts(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let tx = self.next_tx(now, buf)?;
        Some(Transmit {
            header_len: tx.header_len,
            payload: tx.src,
        })
    }

    fn next_tx(&mut self, now: Instant, buf: &mut [u8]) -> Option<Tx> {
        let tx = match self.resp.poll_transmit(&self.cfg, buf, &mut self.stats) {
            Some(tx) => Some(tx),
            None => {
                self.req
                    .poll_transmit(now, &self.cfg, buf, &mut self.completions, &mut self.stats)
            }
        }?;
        self.stats.tx_packets += 1;
        Some(tx)
    }

    /// When [`QpProtocol::handle_timeout`] must be called next, if at all.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.req.poll_timeout()
    }

    /// Runs expired timers (retransmission, RNR wait).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.req
            .handle_timeout(now, &self.cfg, &mut self.completions, &mut self.stats);
    }

    /// The connection under the queue pair is gone: every outstanding request completes as
    /// flushed and the queue pair enters the error state.
    pub fn close(&mut self) {
        self.req.flush_all(&mut self.completions);
    }

    /// The next completion, oldest first.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Completions waiting to be polled.
    pub fn completions_pending(&self) -> usize {
        self.completions.len()
    }
}

/// The payload of a received packet, which the engine places where the access check (or the
/// receive buffer) says. Datagram drivers hand it a slice; stream drivers a reader that moves
/// the bytes from the stream, or from memory the peer handed over, straight into the region.
pub trait Payload {
    /// Payload bytes.
    fn len(&self) -> usize;
    /// True for an empty payload.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies the whole payload into `region` at `offset` (already checked against the
    /// region); on failure, the NAK the request deserves.
    fn place(&mut self, region: &Region, offset: usize) -> std::result::Result<(), NakCode>;
    /// Appends the payload to `dst`, so that the packet can wait for a page-in (PART's reorder
    /// window); false when it cannot be copied out (it is still in a stream).
    fn copy_out(&self, dst: &mut Vec<u8>) -> bool {
        let _ = dst;
        false
    }
}

impl Payload for &[u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn place(&mut self, region: &Region, offset: usize) -> std::result::Result<(), NakCode> {
        region
            .write_at(offset, self)
            .map_err(|_| NakCode::RemoteOperationalError)
    }
    fn copy_out(&self, dst: &mut Vec<u8>) -> bool {
        dst.extend_from_slice(self);
        true
    }
}

/// What became of a SEND given to [`QpProtocol::accept_send`].
#[derive(Debug)]
pub enum Accepted {
    /// Placed: the receive's completion.
    Placed(Completion),
    /// Refused with the NAK the packet path would send (the sender's request fails), and the
    /// receive's completion when one was consumed (`LocalLengthError`).
    Refused(NakCode, Option<Completion>),
    /// No receive posted (RNR): try again once one is.
    NoReceive,
}

/// Where the payload of an outgoing packet is: a checked range of a region.
#[derive(Clone, Debug)]
pub struct Source {
    /// The region.
    pub region: Arc<Region>,
    /// First byte.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// An outgoing packet split for a stream ([`QpProtocol::poll_transmit_parts`]).
#[derive(Clone, Debug)]
pub struct Transmit {
    /// Header bytes written at the start of the buffer (BTH and extension headers).
    pub header_len: usize,
    /// The payload, if the packet carries one.
    pub payload: Option<Source>,
}

/// One packet built by the requester or the responder: headers (and pad and ICRC room) in the
/// buffer, the payload still in its region.
pub(crate) struct Tx {
    pub(crate) total: usize,
    pub(crate) header_len: usize,
    pub(crate) src: Option<Source>,
}

impl Tx {
    pub(crate) fn headers(total: usize, header_len: usize) -> Tx {
        Tx {
            total,
            header_len,
            src: None,
        }
    }
}

/// Packets that answer our requests (handled by the requester) rather than ask something.
fn is_response(repr: &Repr) -> bool {
    use remora_wire::Op::*;
    matches!(
        repr.bth.opcode.op,
        Ack | ReadResponseFirst | ReadResponseMiddle | ReadResponseLast | ReadResponseOnly
    )
}

/// Number of packets a message of `len` bytes takes at `mtu` (a zero-length message takes one).
pub(crate) fn packets_for(len: usize, mtu: usize) -> u32 {
    len.div_ceil(mtu).max(1) as u32
}
