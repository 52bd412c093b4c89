//! The `udp` transport: RoCEv2 datagrams over kernel UDP sockets, a thin driver around the
//! sans-IO [`QpProtocol`].
//!
//! As on a RoCE NIC, each side has one receive socket (a [`Device`], UDP port 4791 by default)
//! shared by its queue pairs and demultiplexed by the BTH destination QP, and each queue pair
//! sends from its own unconnected socket (source port `0xC000 + hash(QPN)`), so one QP keeps one
//! 5-tuple and stays in order. Unconnected sockets with don't-fragment make the kernel send IPv4
//! ID 0, which lets both ends compute the ICRC over the IP header. Sends are batched with
//! `sendmmsg` and UDP GSO (runs of equal-size packets leave in one call, each segment a complete
//! RoCEv2 packet); receives use `recvmmsg` and UDP GRO.
//!
//! Threads: the application thread that posts transmits directly under the queue pair's lock.
//! Arrivals (ACKs, READ responses, packets the window held back) and the retransmission timers
//! are handled by one round of [`Device::progress`], run either by the device's receive thread
//! ([`Progress::Thread`]) or, with [`Progress::Poll`], by whichever application thread polls or
//! waits on one of the device's queue pairs: it sleeps on the receive socket itself, so a
//! message costs no wake-up of a second thread. The device's page-in worker makes the pages
//! PART asks for resident (batching what is queued per wake-up) and sends the ERR, so that a
//! page fault on one queue pair never stalls the receive path the others share. Thread names:
//! `remora-rx-PORT` and `remora-pi-PORT` (the device's port; both fit the kernel's 15 bytes, so
//! `top -H` and the benchmark's per-thread CPU can tell devices apart).
//!
//! Connection setup's udp part (the listener's devices, the port a hello advertises, the order
//! of the exchange) is in [`setup`], so that `conn.rs` asks this transport rather than knows it.
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use remora_wire::{bth, icrc, Endpoints, ROCE_PORT};

use crate::cq::Cq;
use crate::engine::{QpProtocol, Stats};
use crate::error::{io_err, Error, Result};
use crate::options::Progress;
use crate::wr::{RecvWr, SendWr};

mod driver;
mod gso;
mod page_in;
mod setup;
pub(crate) mod sys;

use gso::gso_runs;
use page_in::{page_in_worker, PageInJob, PAGE_IN_CHUNK};
pub(crate) use setup::{Agreed, Devices, UdpSetup};

/// Name prefix of a udp device's receive thread, followed by the device's port; with
/// [`PAGE_IN_THREAD`] it fits the kernel's 15 bytes of a thread name for any port, so tools and
/// benchmarks can tell the devices of one process apart.
pub const RECEIVE_THREAD: &str = "remora-rx-";
/// Name prefix of a udp device's page-in worker, followed by the device's port.
pub const PAGE_IN_THREAD: &str = "remora-pi-";

/// Packets gathered per transmit batch.
const BATCH: usize = 64;
/// Headroom per packet beyond the MTU (headers, pad, ICRC).
const SLOT_EXTRA: usize = 64;
/// Socket buffer size asked for (needs root beyond net.core.rmem_max).
const SOCKET_BUFFER: usize = 64 << 20;
/// Receive buffers per recvmmsg call, each large enough for one GRO-coalesced burst.
const RX_BUFFERS: usize = 32;
const RX_BUFFER_LEN: usize = 65_536;
/// Longest sleep of the receive thread, so it notices shutdown.
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// Device-level counters (per receive socket).
#[derive(Debug, Default)]
pub struct DeviceStats {
    /// Datagrams received.
    pub rx_datagrams: AtomicU64,
    /// Datagrams addressed to a QP this device does not have.
    pub unknown_qp: AtomicU64,
    /// Datagrams whose ICRC did not match.
    pub icrc_errors: AtomicU64,
    /// Datagrams shorter than a BTH.
    pub runts: AtomicU64,
}

/// Which side of connection setup a device serves: it decides the port it binds by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A listener: owns UDP 4791 when it is free.
    Responder,
    /// A connecting side: an ephemeral port, leaving 4791 to the responders on this host.
    Requester,
}

/// A receive socket shared by the queue pairs of one local address.
pub(crate) struct Device {
    sock: UdpSocket,
    local: SocketAddr,
    qps: RwLock<HashMap<u32, Arc<UdpQp>>>,
    stop: AtomicBool,
    pub(crate) stats: DeviceStats,
    pager: mpsc::Sender<PageInJob>,
    mode: Progress,
    /// Receive buffers, held by whichever thread is driving the device.
    rx: Mutex<Rx>,
}

/// Scratch space of one round of progress.
struct Rx {
    bufs: Vec<Vec<u8>>,
    meta: Vec<sys::Recvd>,
    touched: Vec<Arc<UdpQp>>,
}

/// Owner of a device and its receive thread: stops and joins the thread when dropped.
pub(crate) struct DeviceHandle {
    pub(crate) dev: Arc<Device>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for DeviceHandle {
    fn drop(&mut self) {
        self.dev.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Device {
    /// Binds the receive socket on `ip`, port `port`; with port 0 a responder takes 4791 (the
    /// RoCEv2 port, as a NIC does) and says so in the log when another process holds it and
    /// it falls back to any port, a requester takes any port. With [`Progress::Thread`] starts
    /// its receive thread.
    pub(crate) fn bind(
        ip: std::net::IpAddr,
        port: u16,
        role: Role,
        mode: Progress,
    ) -> Result<DeviceHandle> {
        let sock = match (port, role) {
            (0, Role::Responder) => UdpSocket::bind((ip, ROCE_PORT)).or_else(|e| {
                tracing::info!(
                    error = %e,
                    "UDP {ROCE_PORT} on {ip} is taken; this responder receives RoCEv2 on another port"
                );
                UdpSocket::bind((ip, 0))
            }),
            (0, Role::Requester) => UdpSocket::bind((ip, 0)),
            _ => UdpSocket::bind((ip, port)),
        }
        .map_err(io_err(format!("binding the RoCEv2 receive socket on {ip}")))?;
        let fd = sock.as_raw_fd();
        sys::set_buffers(fd, SOCKET_BUFFER);
        let gro = sys::enable_gro(fd);
        let local = sock.local_addr().map_err(io_err("local address"))?;
        tracing::debug!(%local, gro, "udp device up");
        let (pager, jobs) = mpsc::channel();
        let dev = Arc::new(Device {
            sock,
            local,
            qps: RwLock::new(HashMap::new()),
            stop: AtomicBool::new(false),
            stats: DeviceStats::default(),
            pager,
            mode,
            rx: Mutex::new(Rx {
                bufs: vec![vec![0u8; RX_BUFFER_LEN]; RX_BUFFERS],
                meta: Vec::with_capacity(RX_BUFFERS),
                touched: Vec::new(),
            }),
        });
        let weak = Arc::downgrade(&dev);
        std::thread::Builder::new()
            .name(format!("{PAGE_IN_THREAD}{}", local.port()))
            .spawn(move || page_in_worker(weak, jobs))
            .map_err(io_err("spawning the page-in worker"))?;
        let thread = match mode {
            Progress::Poll => None,
            Progress::Thread => {
                let d = dev.clone();
                Some(
                    std::thread::Builder::new()
                        .name(format!("{RECEIVE_THREAD}{}", local.port()))
                        .spawn(move || d.run())
                        .map_err(io_err("spawning the receive thread"))?,
                )
            }
        };
        Ok(DeviceHandle { dev, thread })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub(crate) fn attach(&self, qp: Arc<UdpQp>) {
        let qpn = qp.lock().engine.config().local_qpn;
        let _ = qp.pager.set(self.pager.clone());
        self.qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(qpn, qp);
    }

    /// The attached queue pair `qpn`, if any.
    fn qp(&self, qpn: u32) -> Option<Arc<UdpQp>> {
        self.qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)
            .cloned()
    }

    pub(crate) fn detach(&self, qpn: u32) {
        self.qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&qpn);
    }

    /// The background progress thread ([`Progress::Thread`]): progress until the device stops.
    fn run(self: Arc<Self>) {
        while !self.stop.load(Ordering::Acquire) {
            if let Err(e) = self.progress(IDLE_WAIT, None) {
                tracing::error!(error = %e, "udp device poll failed; stopping");
                return;
            }
        }
    }

    /// Whether the caller drives this device ([`Progress::Poll`]).
    pub(crate) fn polled(&self) -> bool {
        self.mode == Progress::Poll
    }

    /// The earliest timer of the attached queue pairs.
    fn next_timer(&self) -> Option<Instant> {
        self.qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(|q| q.lock().engine.poll_timeout())
            .min()
    }

    /// One round of progress: waits up to `wait` (shortened to the next timer) for datagrams on
    /// the receive socket, hands what came to the queue pairs' engines, sends what they answer
    /// and runs due timers. The wait also ends when `also` (a completion queue's eventfd)
    /// becomes readable. Returns `Ok(false)` without doing anything when another thread is
    /// already driving the device (its work lands in the same completion queues).
    pub(crate) fn progress(&self, wait: Duration, also: Option<BorrowedFd<'_>>) -> Result<bool> {
        let Ok(mut rx) = self.rx.try_lock() else {
            return Ok(false);
        };
        let Rx {
            bufs,
            meta,
            touched,
        } = &mut *rx;
        let fd = self.sock.as_raw_fd();
        let now = Instant::now();
        let wait = self
            .next_timer()
            .map_or(wait, |t| t.saturating_duration_since(now).min(wait));
        let readable = if wait.is_zero() {
            true
        } else {
            crate::poll::wait_io(self.sock.as_fd(), false, also, Some(wait))
                .map_err(io_err("poll on the udp device"))?
                .0
        };
        touched.clear();
        if readable {
            // Drain what is queued, in bounded bursts so timers still run.
            for _ in 0..16 {
                let n = match sys::recv_batch(fd, bufs, meta) {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!(error = %e, "recvmmsg failed");
                        0
                    }
                };
                if n == 0 {
                    break;
                }
                let now = Instant::now();
                for (buf, m) in bufs.iter().zip(meta.iter()) {
                    let seg = if m.segment == 0 { m.len } else { m.segment };
                    for dgram in buf[..m.len].chunks(seg.max(1)) {
                        self.dispatch(now, dgram, m.src, touched);
                    }
                }
                // Answer after every batch: ACKs (coalesced per batch) keep the sender's
                // window open while we drain the rest.
                for qp in touched.drain(..) {
                    let mut st = qp.lock();
                    if let Err(e) = qp.flush(&mut st, now) {
                        tracing::warn!(error = %e, "udp transmit failed");
                    }
                }
            }
        }
        let now = Instant::now();
        let qps: Vec<Arc<UdpQp>> = self
            .qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for qp in &qps {
            let mut st = qp.lock();
            if st.engine.poll_timeout().is_some_and(|t| t <= now) {
                st.engine.handle_timeout(now);
                if let Err(e) = qp.flush(&mut st, now) {
                    tracing::warn!(error = %e, "udp transmit failed");
                }
            }
        }
        Ok(true)
    }

    fn dispatch(
        &self,
        now: Instant,
        dgram: &[u8],
        src: Option<SocketAddr>,
        touched: &mut Vec<Arc<UdpQp>>,
    ) {
        self.stats.rx_datagrams.fetch_add(1, Ordering::Relaxed);
        let Ok(header) = bth::Packet::new_checked(dgram) else {
            self.stats.runts.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let qpn = header.dest_qp();
        let Some(qp) = self.qp(qpn) else {
            self.stats.unknown_qp.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if qp.icrc_check {
            let ok =
                src.is_some_and(|src| icrc::check(&Endpoints::new(src, self.local), dgram).is_ok());
            if !ok {
                self.stats.icrc_errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        qp.lock().engine.handle(now, dgram);
        if !touched.iter().any(|t| Arc::ptr_eq(t, &qp)) {
            touched.push(qp);
        }
    }
}

/// Mutable state of one UDP queue pair: the engine and its transmit batch buffer.
pub(crate) struct TxState {
    pub(crate) engine: QpProtocol,
    buf: Vec<u8>,
    lens: Vec<usize>,
}

/// One queue pair on the udp transport.
pub(crate) struct UdpQp {
    st: Mutex<TxState>,
    tx: UdpSocket,
    peer: sys::RawAddr,
    tx_ep: Endpoints,
    gso: bool,
    icrc_check: bool,
    faults: Option<Mutex<crate::fault::Injector>>,
    pub(crate) cq: Arc<Cq>,
    /// The device's page-in worker, once attached.
    pager: OnceLock<mpsc::Sender<PageInJob>>,
}

impl UdpQp {
    /// A queue pair sending from its own socket on `ip` to the peer device at `peer`.
    pub(crate) fn new(
        engine: QpProtocol,
        ip: std::net::IpAddr,
        peer: SocketAddr,
        icrc_check: bool,
        faults: Option<crate::Faults>,
        cq: Arc<Cq>,
    ) -> Result<Arc<UdpQp>> {
        let qpn = engine.config().local_qpn;
        let mtu = engine.config().mtu;
        let tx = bind_source_port(ip, qpn)?;
        let fd = tx.as_raw_fd();
        sys::set_buffers(fd, SOCKET_BUFFER);
        sys::set_dont_fragment(fd, ip.is_ipv6()).map_err(io_err("IP_MTU_DISCOVER"))?;
        let gso = sys::gso_supported(fd);
        let local = tx.local_addr().map_err(io_err("local address"))?;
        Ok(Arc::new(UdpQp {
            st: Mutex::new(TxState {
                engine,
                buf: vec![0u8; BATCH * (mtu + SLOT_EXTRA)],
                lens: Vec::with_capacity(BATCH),
            }),
            tx,
            peer: sys::RawAddr::new(&peer),
            tx_ep: Endpoints::new(local, peer),
            gso,
            icrc_check,
            faults: faults.map(|f| Mutex::new(crate::fault::Injector::new(f))),
            cq,
            pager: OnceLock::new(),
        }))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, TxState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state, unless another thread holds it now.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, TxState>> {
        match self.st.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.tx_ep.src
    }

    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.tx_ep.dst
    }

    pub(crate) fn post_send(&self, wr: SendWr) -> Result<()> {
        self.post_sends(vec![wr])
    }

    /// Queues `wrs` in order and sends what they produce in as few batches as fit. A request
    /// the engine refuses leaves those after it unposted (the error says which).
    pub(crate) fn post_sends(&self, wrs: Vec<SendWr>) -> Result<()> {
        let now = Instant::now();
        let mut st = self.lock();
        let mut refused = None;
        for wr in wrs {
            if let Err(e) = st.engine.post_send(now, wr) {
                refused = Some(e);
                break;
            }
        }
        self.deliver(&mut st);
        self.hand_over_page_ins(&mut st, now);
        // One batch at a time, letting go of the lock in between: the receive thread can act
        // on what comes back (an ACK, or a fault NAK that holds us) while a large message is
        // still leaving, instead of after the whole window has gone out.
        while self.send_batch(&mut st, now)? {
            self.deliver(&mut st);
            drop(st);
            std::thread::yield_now();
            st = self.lock();
        }
        self.deliver(&mut st);
        refused.map_or(Ok(()), Err)
    }

    pub(crate) fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.lock().engine.post_recv(wr)
    }

    pub(crate) fn stats(&self) -> Stats {
        self.lock().engine.stats()
    }

    /// Hands completions to the CQ, sends everything the engine has to send now, then hands
    /// over the completions sending produced (UC). Completions go first: the application can
    /// react while we are still in `sendmmsg`.
    fn flush(&self, st: &mut TxState, now: Instant) -> Result<()> {
        self.deliver(st);
        self.hand_over_page_ins(st, now);
        while self.send_batch(st, now)? {}
        self.deliver(st);
        Ok(())
    }

    /// Builds one batch of packets and sends it; false when the engine had nothing to send.
    fn send_batch(&self, st: &mut TxState, now: Instant) -> Result<bool> {
        let slot = st.engine.config().mtu + SLOT_EXTRA;
        let TxState { engine, buf, lens } = &mut *st;
        lens.clear();
        let mut pos = 0;
        while lens.len() < BATCH {
            let Some(n) = engine.poll_transmit(now, &mut buf[pos..pos + slot]) else {
                break;
            };
            icrc::seal(&self.tx_ep, &mut buf[pos..pos + n]);
            lens.push(n);
            pos += n;
        }
        if lens.is_empty() {
            return Ok(false);
        }
        let sends = match &self.faults {
            None => gso_runs(buf, lens, self.gso),
            Some(inj) => {
                let order = inj
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .schedule(lens.len());
                let starts: Vec<usize> = lens
                    .iter()
                    .scan(0, |p, &n| {
                        let s = *p;
                        *p += n;
                        Some(s)
                    })
                    .collect();
                order
                    .into_iter()
                    .map(|i| sys::Send {
                        data: &buf[starts[i]..starts[i] + lens[i]],
                        segment: 0,
                    })
                    .collect()
            }
        };
        if !sends.is_empty() {
            sys::send_batch(self.tx.as_raw_fd(), &self.peer, &sends).map_err(io_err("sendmmsg"))?;
        }
        Ok(true)
    }

    /// Gives the engine's page-in requests to the device's worker (or, not yet attached, runs
    /// them here).
    fn hand_over_page_ins(&self, st: &mut TxState, now: Instant) {
        while let Some(req) = st.engine.poll_page_in() {
            let qpn = st.engine.config().local_qpn;
            let req = match self.pager.get() {
                Some(p) => match p.send((qpn, req)) {
                    Ok(()) => continue,
                    Err(mpsc::SendError((_, req))) => req,
                },
                None => req,
            };
            let result = req.run(PAGE_IN_CHUNK).map_err(|e| e.to_string());
            st.engine.page_in_done(now, req.id, result);
        }
    }

    fn deliver(&self, st: &mut TxState) {
        let engine = &mut st.engine;
        if engine.completions_pending() > 0 {
            self.cq
                .push_all(std::iter::from_fn(|| engine.poll_completion()));
        }
    }
}

/// Binds the queue pair's send socket at `0xC000 + hash(qpn)`, probing upwards when taken.
fn bind_source_port(ip: std::net::IpAddr, qpn: u32) -> Result<UdpSocket> {
    let h = qpn.wrapping_mul(0x9E37_79B1) >> 18; // 14 bits
    for i in 0..64u32 {
        let port = 0xC000 + ((h + i) & 0x3FFF) as u16;
        if let Ok(s) = UdpSocket::bind((ip, port)) {
            return Ok(s);
        }
    }
    UdpSocket::bind((ip, 0)).map_err(|e| Error::Io {
        what: format!("binding a send socket on {ip}"),
        source: e,
    })
}
