//! The queue pair handle applications use, the same for every transport: what differs is
//! behind its [`Driver`].
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_mem::Region;

use crate::cq::Cq;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::options::{QpType, Transport};
use crate::qp_stats::QpStats;
use crate::wr::{Completion, RecvWr, SendWr, WrOp};

/// A connected queue pair. `Send + Sync`: post from any thread.
///
/// Requests are carried out in order; each send-side request ends in exactly one
/// [`Completion`] on this queue pair's completion queue, as do SENDs into posted receive
/// buffers and arriving WRITE-with-immediate messages.
pub struct Qp {
    driver: Box<dyn Driver>,
    cq: Arc<Cq>,
    transport: Transport,
    qp_type: QpType,
    mtu: usize,
    local_qpn: u32,
    remote_qpn: u32,
}

impl Qp {
    pub(crate) fn new(
        driver: Box<dyn Driver>,
        cq: Arc<Cq>,
        transport: Transport,
        qp_type: QpType,
        mtu: usize,
        local_qpn: u32,
        remote_qpn: u32,
    ) -> Qp {
        Qp {
            driver,
            cq,
            transport,
            qp_type,
            mtu,
            local_qpn,
            remote_qpn,
        }
    }

    fn post(&self, wr: SendWr) -> Result<()> {
        self.driver.post_send(wr)
    }

    /// One-sided WRITE of `len` bytes at `offset` in `local` to `remote_va` in the peer's
    /// region `rkey`; with `imm`, the peer gets a completion carrying it.
    #[allow(clippy::too_many_arguments)]
    pub fn post_write(
        &self,
        wr_id: u64,
        local: &Arc<Region>,
        offset: usize,
        len: usize,
        remote_va: u64,
        rkey: u32,
        imm: Option<u32>,
    ) -> Result<()> {
        self.post(SendWr {
            wr_id,
            op: WrOp::Write { imm },
            local: local.clone(),
            offset,
            len,
            remote_va,
            rkey,
        })
    }

    /// One-sided READ of `len` bytes at `remote_va` in the peer's region `rkey` into `local`
    /// at `offset` (RC only).
    pub fn post_read(
        &self,
        wr_id: u64,
        local: &Arc<Region>,
        offset: usize,
        len: usize,
        remote_va: u64,
        rkey: u32,
    ) -> Result<()> {
        self.post(SendWr {
            wr_id,
            op: WrOp::Read,
            local: local.clone(),
            offset,
            len,
            remote_va,
            rkey,
        })
    }

    /// Posts several WRITEs, READs or SENDs in order as one doorbell: over udp their packets
    /// leave in one batch (one `sendmmsg`, runs of equal-size packets as one GSO send). READs
    /// on one queue pair are carried out in order and each one's loads finish before the next
    /// one's start, on every transport: a version READ, a data READ and a version READ posted
    /// together read like a seqlock reader (`remora_kv`'s one-sided GETs rely on it).
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # fn f(qp: &remora_fabric::Qp, stage: &Arc<remora_mem::Region>, va: u64, rkey: u32) -> remora_fabric::Result<()> {
    /// use remora_fabric::{SendWr, WrOp};
    /// let read = |id: u64, off: usize, len: usize, at: u64| SendWr {
    ///     wr_id: id, op: WrOp::Read, local: stage.clone(), offset: off, len, remote_va: at, rkey,
    /// };
    /// qp.post_batch(vec![read(1, 0, 4, va), read(2, 64, 256, va), read(3, 4, 4, va)])?;
    /// # Ok(()) }
    /// ```
    pub fn post_batch(&self, wrs: Vec<SendWr>) -> Result<()> {
        self.driver.post_sends(wrs)
    }

    /// SEND of `len` bytes at `offset` in `local` into the peer's next posted receive buffer.
    pub fn post_send(
        &self,
        wr_id: u64,
        local: &Arc<Region>,
        offset: usize,
        len: usize,
        imm: Option<u32>,
    ) -> Result<()> {
        self.post(SendWr {
            wr_id,
            op: WrOp::Send { imm },
            local: local.clone(),
            offset,
            len,
            remote_va: 0,
            rkey: 0,
        })
    }

    /// Posts a receive buffer for the peer's SENDs.
    pub fn post_recv(
        &self,
        wr_id: u64,
        local: &Arc<Region>,
        offset: usize,
        len: usize,
    ) -> Result<()> {
        let wr = RecvWr {
            wr_id,
            local: local.clone(),
            offset,
            len,
        };
        self.driver.post_recv(wr)
    }

    /// Moves up to `max` completions into `out` without blocking; returns how many. With
    /// [`crate::Progress::Poll`] it first receives and answers what has arrived and runs due
    /// timers (an error there is logged; [`Qp::wait`] returns it).
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        match self.driver.progress_now() {
            // A peer that left is reported by the flushed completions and `is_closed`.
            Ok(()) | Err(Error::Disconnected) => {}
            Err(e) => tracing::warn!(error = %e, "queue pair progress failed"),
        }
        self.cq.poll(out, max)
    }

    /// The next completion, waiting up to `timeout`; `Ok(None)` on timeout. With
    /// [`crate::Progress::Poll`] the waiting thread sleeps on the receive socket (and on the
    /// completion queue's eventfd) and does the receive work itself when something arrives.
    pub fn wait(&self, timeout: Duration) -> Result<Option<Completion>> {
        self.driver.wait(&self.cq, timeout)
    }

    /// Busy-polls for the next completion up to `timeout` (lowest latency, burns a core);
    /// with [`crate::Progress::Poll`] each turn also receives and answers.
    pub fn spin(&self, timeout: Duration) -> Option<Completion> {
        let end = Instant::now() + timeout;
        loop {
            let gone = match self.driver.progress_now() {
                Ok(()) => false,
                // The peer left: what it completes is flushed into the queue; nothing more
                // can come, so do not spin out the timeout (or log once per turn).
                Err(Error::Disconnected) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "queue pair progress failed");
                    false
                }
            };
            if let Some(c) = self.cq.pop() {
                return Some(c);
            }
            if gone {
                return None;
            }
            if Instant::now() >= end {
                return None;
            }
            std::hint::spin_loop();
        }
    }

    /// Drives this queue pair once when its progress is [`crate::Progress::Poll`] (receive,
    /// answer, run due timers), sleeping up to `wait` on its socket until something arrives;
    /// completions stay in the queue. Returns at once otherwise. For threads that serve a peer
    /// without consuming completions, and for applications that watch memory rather than the
    /// completion queue (a plain WRITE makes no completion at its target).
    pub fn progress(&self, wait: Duration) -> Result<()> {
        self.driver.progress(wait)
    }

    /// Where this queue pair sends its datagrams (udp): the peer device's address, UDP 4791
    /// unless the peer found it taken.
    pub fn udp_peer(&self) -> Option<std::net::SocketAddr> {
        self.driver.udp_peer()
    }

    /// The completion queue.
    pub fn cq(&self) -> &Arc<Cq> {
        &self.cq
    }

    /// Transport in use.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Service type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Negotiated path MTU.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Our queue pair number.
    pub fn local_qpn(&self) -> u32 {
        self.local_qpn
    }

    /// The peer's queue pair number.
    pub fn remote_qpn(&self) -> u32 {
        self.remote_qpn
    }

    /// The udp source address this queue pair sends from (udp only).
    pub fn udp_source(&self) -> Option<std::net::SocketAddr> {
        self.driver.udp_source()
    }

    /// The udp receive address of this side (udp only).
    pub fn udp_device(&self) -> Option<std::net::SocketAddr> {
        self.driver.udp_device()
    }

    /// The kernel-checked identity (`SO_PEERCRED`) of the process at the other end of an `shm`
    /// queue pair, taken when it connected; `None` on other transports, where the peer is only
    /// a network address. It names the peer; it grants nothing.
    pub fn peer_credentials(&self) -> Option<crate::Credentials> {
        self.driver.peer_credentials()
    }

    /// The descriptors the listener handed over at setup ([`crate::Listener::hand_over`]);
    /// `shm` only, empty afterwards and elsewhere.
    pub fn take_handover(&self) -> Vec<std::os::fd::OwnedFd> {
        self.driver.take_handover()
    }

    /// Counters.
    pub fn stats(&self) -> QpStats {
        self.driver.stats()
    }

    /// True once the peer has closed the connection (does not block): servers use it to drop
    /// the queue pairs of clients that left.
    pub fn is_closed(&self) -> bool {
        self.driver.is_closed()
    }

    /// Blocks until the peer closes the connection (or `timeout` passes: `Err(Timeout)`).
    /// Servers use it to know when to drop a queue pair.
    pub fn wait_disconnect(&self, timeout: Option<Duration>) -> Result<()> {
        self.driver.wait_disconnect(timeout)
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        self.driver.stop();
    }
}
