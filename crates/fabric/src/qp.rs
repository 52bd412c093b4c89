//! The queue pair handle applications use, the same for every transport.
use std::io::Read;
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_mem::Region;

use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::options::{QpType, Transport};
use crate::stream::StreamQp;
use crate::udp::{DeviceHandle, UdpQp};
use crate::wr::{Completion, RecvWr, SendWr, WrOp};

pub(crate) enum Inner {
    Udp {
        qp: Arc<UdpQp>,
        dev: Arc<DeviceHandle>,
        /// The setup connection, kept open so either side notices the other leaving.
        control: TcpStream,
    },
    Stream(Arc<StreamQp>),
}

/// Counters of a queue pair (those that apply to its transport; others stay 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpStats {
    /// Protocol counters (udp: the RC/UC engine; tcp/shm: requests and refusals).
    pub engine: crate::engine::Stats,
    /// Datagrams dropped by the receive device for a bad ICRC (udp; shared by the device's
    /// queue pairs).
    pub icrc_errors: u64,
    /// Datagrams for unknown queue pairs at the receive device (udp).
    pub unknown_qp: u64,
}

impl QpStats {
    /// Adds another queue pair's counters: protocol counters add up; the device counters are
    /// shared by a device's queue pairs, so the largest reading is kept.
    pub fn merge(&mut self, o: &QpStats) {
        self.engine += o.engine;
        self.icrc_errors = self.icrc_errors.max(o.icrc_errors);
        self.unknown_qp = self.unknown_qp.max(o.unknown_qp);
    }
}

/// A connected queue pair. `Send + Sync`: post from any thread.
///
/// Requests are carried out in order; each send-side request ends in exactly one
/// [`Completion`] on this queue pair's completion queue, as do SENDs into posted receive
/// buffers and arriving WRITE-with-immediate messages.
pub struct Qp {
    inner: Inner,
    cq: Arc<Cq>,
    transport: Transport,
    qp_type: QpType,
    mtu: usize,
    local_qpn: u32,
    remote_qpn: u32,
}

impl Qp {
    pub(crate) fn new(
        inner: Inner,
        cq: Arc<Cq>,
        transport: Transport,
        qp_type: QpType,
        mtu: usize,
        local_qpn: u32,
        remote_qpn: u32,
    ) -> Qp {
        Qp {
            inner,
            cq,
            transport,
            qp_type,
            mtu,
            local_qpn,
            remote_qpn,
        }
    }

    fn post(&self, wr: SendWr) -> Result<()> {
        match &self.inner {
            Inner::Udp { qp, .. } => qp.post_send(wr),
            Inner::Stream(s) => s.post_send(wr),
        }
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
        match &self.inner {
            Inner::Udp { qp, .. } => qp.post_recv(wr),
            Inner::Stream(s) => s.post_recv(wr),
        }
    }

    /// The udp device this queue pair must drive itself ([`crate::Progress::Poll`]), if any.
    fn polled_device(&self) -> Option<&crate::udp::Device> {
        match &self.inner {
            Inner::Udp { dev, .. } if dev.dev.polled() => Some(&dev.dev),
            _ => None,
        }
    }

    /// One round of progress without waiting: the device or stream when the caller drives it,
    /// the shm completion ring always (one atomic load when it is empty).
    fn progress_now(&self) -> Result<()> {
        match &self.inner {
            Inner::Stream(s) => {
                s.spin_once()?;
            }
            _ => {
                if let Some(dev) = self.polled_device() {
                    dev.progress(Duration::ZERO, None)?;
                }
            }
        }
        Ok(())
    }

    /// Moves up to `max` completions into `out` without blocking; returns how many. With
    /// [`crate::Progress::Poll`] it first receives and answers what has arrived and runs due
    /// timers (an error there is logged; [`Qp::wait`] returns it).
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        match self.progress_now() {
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
        if let Inner::Stream(s) = &self.inner {
            if s.polled() {
                return self.wait_stream(s, timeout);
            }
            // shm: what the peer published in our ring, else sleep with the doorbell up (the
            // progress thread drains the ring when the peer rings it).
            if let Some(c) = self.cq.pop() {
                return Ok(Some(c));
            }
            s.want_doorbell(true);
            let c = self.cq.wait(timeout);
            s.want_doorbell(false);
            return Ok(c);
        }
        let Some(dev) = self.polled_device() else {
            return Ok(self.cq.wait(timeout));
        };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self.cq.pop() {
                return Ok(Some(c));
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Ok(None);
            };
            let sleeping = self.cq.sleep_fd();
            if let Some(c) = self.cq.pop() {
                return Ok(Some(c));
            }
            if !dev.progress(left, sleeping.fd())? {
                // Another thread is driving the device; its work reaches our queue.
                drop(sleeping);
                if let Some(c) = self.cq.wait(left.min(Duration::from_millis(1))) {
                    return Ok(Some(c));
                }
            }
        }
    }

    /// [`Qp::wait`] on a polled stream: sleeps on its socket and the completion queue's eventfd
    /// and runs the round itself. A closed stream leaves its flushed completions to take.
    fn wait_stream(&self, s: &StreamQp, timeout: Duration) -> Result<Option<Completion>> {
        let deadline = Instant::now() + timeout;
        loop {
            s.drain_ring();
            if let Some(c) = self.cq.pop() {
                return Ok(Some(c));
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Ok(None);
            };
            let sleeping = self.cq.sleep_fd();
            if let Some(c) = self.cq.pop() {
                return Ok(Some(c));
            }
            match s.progress(left, sleeping.fd()) {
                Ok(true) => {}
                // Another thread is driving the stream, or it is closed: its completions
                // reach our queue.
                Ok(false) | Err(Error::Disconnected) => {
                    drop(sleeping);
                    if let Some(c) = self.cq.wait(left.min(Duration::from_millis(1))) {
                        return Ok(Some(c));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Busy-polls for the next completion up to `timeout` (lowest latency, burns a core);
    /// with [`crate::Progress::Poll`] each turn also receives and answers.
    pub fn spin(&self, timeout: Duration) -> Option<Completion> {
        let end = Instant::now() + timeout;
        loop {
            let gone = match self.progress_now() {
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
        if let Inner::Stream(s) = &self.inner {
            if s.polled() {
                return match s.progress(wait, None) {
                    Ok(true) => Ok(()),
                    // Another thread drives it, or it is closed: do not spin against it.
                    Ok(false) | Err(Error::Disconnected) => {
                        if !wait.is_zero() {
                            std::thread::sleep(wait.min(Duration::from_micros(200)));
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
            }
            // A thread drives the stream; what the caller can drive is the shm ring.
            if !s.drain_ring() && !wait.is_zero() {
                std::thread::sleep(wait.min(Duration::from_millis(1)));
            }
            return Ok(());
        }
        if let Some(dev) = self.polled_device() {
            if !dev.progress(wait, None)? && !wait.is_zero() {
                // Another thread drives the device: do not spin against it.
                std::thread::sleep(wait.min(Duration::from_micros(200)));
            }
        }
        Ok(())
    }

    /// Where this queue pair sends its datagrams (udp): the peer device's address, UDP 4791
    /// unless the peer found it taken.
    pub fn udp_peer(&self) -> Option<std::net::SocketAddr> {
        match &self.inner {
            Inner::Udp { qp, .. } => Some(qp.peer_addr()),
            Inner::Stream(_) => None,
        }
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
        match &self.inner {
            Inner::Udp { qp, .. } => Some(qp.local_addr()),
            Inner::Stream(_) => None,
        }
    }

    /// The udp receive address of this side (udp only).
    pub fn udp_device(&self) -> Option<std::net::SocketAddr> {
        match &self.inner {
            Inner::Udp { dev, .. } => Some(dev.dev.local_addr()),
            Inner::Stream(_) => None,
        }
    }

    /// The kernel-checked identity (`SO_PEERCRED`) of the process at the other end of an `shm`
    /// queue pair, taken when it connected; `None` on other transports, where the peer is only
    /// a network address. It names the peer; it grants nothing.
    pub fn peer_credentials(&self) -> Option<crate::Credentials> {
        match &self.inner {
            Inner::Stream(s) => s.peer_credentials(),
            Inner::Udp { .. } => None,
        }
    }

    /// The descriptors the listener handed over at setup ([`crate::Listener::hand_over`]);
    /// `shm` only, empty afterwards and elsewhere.
    pub fn take_handover(&self) -> Vec<std::os::fd::OwnedFd> {
        match &self.inner {
            Inner::Stream(s) => s.take_handover(),
            Inner::Udp { .. } => Vec::new(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> QpStats {
        match &self.inner {
            Inner::Udp { qp, dev, .. } => QpStats {
                engine: qp.stats(),
                icrc_errors: dev.dev.stats.icrc_errors.load(Ordering::Relaxed),
                unknown_qp: dev.dev.stats.unknown_qp.load(Ordering::Relaxed),
            },
            Inner::Stream(s) => QpStats {
                engine: s.stats(),
                ..QpStats::default()
            },
        }
    }

    /// True once the peer has closed the connection (does not block): servers use it to drop
    /// the queue pairs of clients that left.
    pub fn is_closed(&self) -> bool {
        match &self.inner {
            Inner::Udp { control, .. } => {
                use std::os::fd::AsRawFd;
                let mut b = [0u8; 1];
                // SAFETY: recv into a 1-byte local buffer on a socket we own; MSG_PEEK leaves
                // the byte for readers and MSG_DONTWAIT never blocks.
                let r = unsafe {
                    libc::recv(
                        control.as_raw_fd(),
                        b.as_mut_ptr().cast(),
                        1,
                        libc::MSG_PEEK | libc::MSG_DONTWAIT,
                    )
                };
                r == 0
                    || (r < 0
                        && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock)
            }
            Inner::Stream(s) => s.is_closed(),
        }
    }

    /// Blocks until the peer closes the connection (or `timeout` passes: `Err(Timeout)`).
    /// Servers use it to know when to drop a queue pair.
    pub fn wait_disconnect(&self, timeout: Option<Duration>) -> Result<()> {
        match &self.inner {
            Inner::Udp { control, .. } => {
                let mut c = control.try_clone().map_err(|_| Error::Disconnected)?;
                c.set_read_timeout(timeout).ok();
                let mut b = [0u8; 64];
                loop {
                    match c.read(&mut b) {
                        Ok(0) => return Ok(()),
                        Ok(_) => continue,
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) =>
                        {
                            return Err(Error::Timeout)
                        }
                        Err(_) => return Ok(()),
                    }
                }
            }
            Inner::Stream(s) => s.wait_closed(timeout),
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        match &self.inner {
            Inner::Udp { dev, control, .. } => {
                dev.dev.detach(self.local_qpn);
                let _ = control.shutdown(std::net::Shutdown::Both);
            }
            Inner::Stream(s) => s.stop(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::QpStats;

    #[test]
    fn merged_stats_add_protocol_counters_and_keep_the_largest_device_reading() {
        let mut a = QpStats::default();
        a.engine.rx_packets = 3;
        a.engine.bad_pkey = 1;
        a.icrc_errors = 5;
        let mut b = QpStats::default();
        b.engine.rx_packets = 4;
        b.icrc_errors = 7;
        a.merge(&b);
        assert_eq!((a.engine.rx_packets, a.engine.bad_pkey), (7, 1));
        assert_eq!(
            a.icrc_errors, 7,
            "one device's counter, read twice, is not summed"
        );
    }
}
