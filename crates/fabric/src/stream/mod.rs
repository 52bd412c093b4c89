//! The `tcp` and `shm` transports: thin drivers of the queue pair's sans-IO [`QpProtocol`] over
//! one byte stream, as `udp` drives it over datagrams.
//!
//! Every engine packet (the RoCEv2 headers, exactly as on udp, and its payload) travels as one
//! DATA frame ([`frame`]); access checks, NAK codes, ACK coalescing, READ responses and RC
//! semantics are the engine's. The engine runs with [`EngineConfig::stream`]: a 1 MiB MTU, and
//! no retransmission timer, since the stream neither loses nor reorders. `tcp` is a TCP socket;
//! `shm` a unix socket ([`sock`]) on which a payload moves by reference when its region is a
//! memfd its owner handed over (a MAP frame carrying a read-only memfd, `SCM_RIGHTS`), and
//! WRITE and READ go one-sided into regions the peer granted ([`direct`]).
//!
//! Progress ([`io`]): with [`Progress::Thread`] a thread per queue pair sleeps on the socket
//! and runs a round whenever something arrives or a timer is due; with [`Progress::Poll`] on
//! tcp the thread that polls or waits does it, sleeping in `ppoll` on the socket and the
//! completion queue's eventfd. On shm, `Poll` is about the one-sided completion ring, which
//! the caller drains; its unix socket keeps the thread. Posting threads send their packets
//! themselves.
use std::collections::{HashMap, HashSet};
use std::net::Shutdown;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use remora_mem::{Pd, Region};

use crate::cq::Cq;
use crate::engine::{EngineConfig, QpProtocol, Stats};
use crate::error::{io_err, Error, Result};
use crate::options::Progress;
use crate::wr::{Completion, RecvWr, SendWr, WrOp};

mod direct;
mod driver;
mod frame;
mod grant;
mod io;
mod ring;
pub(crate) mod sock;

pub(crate) use driver::StreamDriver;
use io::Conn;
pub(crate) use sock::Sock;

/// Memfd regions of the peer mapped by one side, at most (each is one mapping).
const MAX_PEER_MAPS: usize = 256;
/// Longest sleep of the progress thread, so it notices shutdown.
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// How payload bytes travel.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DataPath {
    /// In the stream after the frame (tcp).
    Inline,
    /// By reference through memfds their owner handed over, inline otherwise (shm).
    Shm,
}

struct Shared {
    sock: Sock,
    /// The regions peers may access (the engine holds it too; grants look keys up here).
    pd: Arc<Pd>,
    conn: Mutex<Conn>,
    /// Held by the thread that sleeps on the socket to drive the queue pair.
    driver: Mutex<()>,
    cq: Arc<Cq>,
    path: DataPath,
    mode: Progress,
    /// [`QpOptions::lazy_ack`](crate::QpOptions::lazy_ack).
    lazy_ack: bool,
    reliable: bool,
    /// The queue pair accepts no more work (a one-sided access was refused, or the stream
    /// broke); the engine's own error state covers NAKs.
    error: AtomicBool,
    stop: AtomicBool,
    closed: Mutex<bool>,
    closed_cv: Condvar,
    /// Counters of what happens outside the engine (one-sided shm, frames).
    extra: Mutex<Stats>,
    /// shm: by lkey, whether a local memfd region was handed to the peer (true) or found
    /// unfit (false), so each region is looked at once.
    announced: Mutex<HashMap<u32, bool>>,
    /// shm: the peer's memfd regions mapped here, read-only (base address in the peer, mapping).
    peer_maps: Mutex<Vec<(u64, remora_mem::Buffer)>>,
    /// shm: who the peer is (kernel-checked at connect).
    peer: Option<crate::shm::Credentials>,
    /// shm: descriptors the listener handed to us at setup, until the application takes them.
    handover: Mutex<Vec<OwnedFd>>,
    /// shm, one-sided: the peer's regions it granted us, mapped here.
    grants: RwLock<Vec<grant::Grant>>,
    /// shm, one-sided: the peer's completion ring, which our WRITE-with-immediate and small
    /// SENDs fill. Lock order: conn, then producer or consumer (never both).
    producer: Mutex<Option<ring::Producer>>,
    /// shm, one-sided: our completion ring, which the peer fills.
    consumer: Option<Mutex<ring::Consumer>>,
    /// shm: a thread drives our side ([`Progress::Thread`]): the ring flags stay up for good.
    ring_thread: bool,
    /// UC: a data request went through the stream, so the direct path (which could overtake
    /// it) is closed for good.
    uc_streamed: AtomicBool,
    /// shm, one-sided: remote keys we asked the peer to grant (each once).
    asked: Mutex<HashSet<u32>>,
    /// A write found that the peer reads no more (EPIPE, ECONNRESET); what it sent before was
    /// handled then ([`Shared::write_all`]).
    peer_gone: AtomicBool,
    /// shm, one-sided: grant requests the peer made and we answered (bounded).
    grants_given: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn count(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut lock(&self.extra));
    }

    /// Delivers completions after the ring's older ones (under the consumer's lock, so a
    /// polling thread cannot slip newer ring entries in between).
    fn push_in_order(&self, c: &mut Conn, items: Vec<Completion>) {
        match &self.consumer {
            None => self.cq.push_all(items),
            Some(k) => {
                let mut k = lock(k);
                let wake = self.drain_locked(&mut k, Some(&mut c.engine)).wake;
                self.cq.push_all(items);
                drop(k);
                if wake {
                    c.ctl.push_back((
                        frame::Frame {
                            kind: frame::DOORBELL,
                            ..frame::Frame::default()
                        },
                        None,
                    ));
                }
            }
        }
    }

    fn is_closed(&self) -> bool {
        *lock(&self.closed)
    }

    /// A round under the lock; a broken stream ends the queue pair: what is outstanding
    /// completes as flushed and the queue pair is closed.
    fn run_round(&self, c: &mut Conn, defer_ack: bool) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Disconnected);
        }
        match self.round(c, defer_ack) {
            Ok(()) => Ok(()),
            Err(why) => {
                self.close(c, &why);
                Err(Error::Disconnected)
            }
        }
    }

    fn close(&self, c: &mut Conn, why: &str) {
        if !self.stop.load(Ordering::Acquire) {
            tracing::debug!(reason = %why, "stream queue pair closed");
        }
        self.error.store(true, Ordering::Release);
        c.engine.close();
        self.deliver(c);
        self.flush_ring_sends();
        *lock(&self.closed) = true;
        self.closed_cv.notify_all();
    }

    /// Sleeps up to `wait` (shortened to the engine's next timer) on the socket and `also`
    /// (a completion queue's eventfd), then runs a round if anything may be due. `Ok(false)`
    /// when another thread is driving the queue pair.
    fn progress(&self, wait: Duration, also: Option<BorrowedFd<'_>>) -> Result<bool> {
        let Ok(_driver) = self.driver.try_lock() else {
            return Ok(false);
        };
        if self.is_closed() {
            return Err(Error::Disconnected);
        }
        let now = Instant::now();
        let timer = lock(&self.conn).engine.poll_timeout();
        let wait = timer.map_or(wait, |t| t.saturating_duration_since(now).min(wait));
        let due = if wait.is_zero() {
            true
        } else {
            // About to sleep: nothing may stay held back.
            let mut c = lock(&self.conn);
            if let Err(why) = self.flush_owed(&mut c) {
                self.close(&mut c, &why);
                return Err(Error::Disconnected);
            }
            drop(c);
            let (readable, _) = crate::poll::wait_io(self.sock.fd(), false, also, Some(wait))
                .map_err(io_err("poll on the stream"))?;
            readable || timer.is_some_and(|t| t <= Instant::now())
        };
        if due {
            // Only a caller that polls again at once may hold ACKs back (busy polling).
            let defer = self.lazy_ack && wait.is_zero();
            self.run_round(&mut lock(&self.conn), defer)?;
        }
        // shm: statuses of our ring SENDs (the peer rang back, or a poller looks).
        self.harvest();
        Ok(true)
    }

    /// The progress thread ([`Progress::Thread`]).
    fn run(self: Arc<Self>) {
        while !self.stop.load(Ordering::Acquire) && !self.is_closed() {
            match self.progress(IDLE_WAIT, None) {
                Ok(_) => {}
                Err(Error::Disconnected) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "stream progress failed");
                    self.close(&mut lock(&self.conn), &e.to_string());
                    break;
                }
            }
        }
    }
}

/// One queue pair on the tcp or shm transport.
pub(crate) struct StreamQp {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Spins since the last look at the socket (shm looks at it every few spins only: its
    /// one-sided traffic needs none).
    spins: AtomicUsize,
}

impl StreamQp {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        sock: Sock,
        pd: Arc<Pd>,
        path: DataPath,
        cfg: EngineConfig,
        progress: Progress,
        lazy_ack: bool,
        cq: Arc<Cq>,
        peer: Option<crate::shm::Credentials>,
        handover: Vec<OwnedFd>,
    ) -> Result<Arc<StreamQp>> {
        // shm: our completion ring, with the doorbell up for good when a thread drives us.
        let ring = match path {
            DataPath::Shm => Some(
                ring::Ring::create(progress == Progress::Thread)
                    .map_err(|e| Error::Setup(format!("shm completion ring: {e}")))?,
            ),
            DataPath::Inline => None,
        };
        let reliable = cfg.service == remora_wire::Service::Rc;
        // shm: what the caller polls is the one-sided completion ring; the unix socket keeps
        // its progress thread (the copy path, grants and doorbells), so a peer whose
        // application only spins on its ring still answers. tcp: the caller drives it all.
        let stream_mode = match path {
            DataPath::Shm => Progress::Thread,
            DataPath::Inline => progress,
        };
        let shared = Arc::new(Shared {
            sock,
            conn: Mutex::new(Conn::new(QpProtocol::new(cfg, pd.clone()))),
            pd,
            driver: Mutex::new(()),
            cq,
            path,
            mode: stream_mode,
            lazy_ack: lazy_ack && stream_mode == Progress::Poll,
            reliable,
            error: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            closed: Mutex::new(false),
            closed_cv: Condvar::new(),
            extra: Mutex::new(Stats::default()),
            announced: Mutex::new(HashMap::new()),
            peer_maps: Mutex::new(Vec::new()),
            peer,
            handover: Mutex::new(handover),
            grants: RwLock::new(Vec::new()),
            producer: Mutex::new(None),
            consumer: ring
                .map(|r| Mutex::new(ring::Consumer::new(r, progress == Progress::Thread))),
            ring_thread: progress == Progress::Thread,
            uc_streamed: AtomicBool::new(false),
            asked: Mutex::new(HashSet::new()),
            grants_given: AtomicUsize::new(0),
            peer_gone: AtomicBool::new(false),
        });
        if matches!(path, DataPath::Shm) {
            // Our completion ring goes to the peer first (see [`direct`]).
            let mut c = lock(&shared.conn);
            shared.queue_ring(&mut c);
            if let Err(e) = shared.flush(&mut c) {
                // A peer that connected, sent and left before our ring could reach it (an
                // unpaced source's short run) is not a failed setup: the queue pair comes up,
                // its progress thread hands over what the peer sent, then sees the end.
                if !shared.peer_gone.load(Ordering::Acquire) {
                    return Err(Error::Setup(format!(
                        "handing the shm completion ring over: {e}"
                    )));
                }
                tracing::debug!(error = %e, "shm peer gone before our ring reached it");
            }
        }
        let thread = match stream_mode {
            Progress::Poll => None,
            Progress::Thread => {
                let s = shared.clone();
                Some(
                    std::thread::Builder::new()
                        .name("remora-stream".into())
                        .spawn(move || s.run())
                        .map_err(io_err("spawning the progress thread"))?,
                )
            }
        };
        Ok(Arc::new(StreamQp {
            shared,
            thread: Mutex::new(thread),
            spins: AtomicUsize::new(0),
        }))
    }

    /// Whether the caller drives this queue pair's stream ([`Progress::Poll`] on tcp).
    pub(crate) fn polled(&self) -> bool {
        self.shared.mode == Progress::Poll
    }

    /// One round of progress when polled ([`Progress::Poll`]), sleeping up to `wait` on the
    /// socket and `also`; `Ok(false)` when another thread is driving it.
    pub(crate) fn progress(&self, wait: Duration, also: Option<BorrowedFd<'_>>) -> Result<bool> {
        self.drain_ring();
        if !self.polled() {
            return Ok(false);
        }
        self.shared.progress(wait, also)
    }

    /// A turn of busy polling: the shm ring each time, the socket on tcp each time and on shm
    /// every 16th (a system call, and one-sided traffic needs none).
    pub(crate) fn spin_once(&self) -> Result<()> {
        let ring = self.drain_ring();
        let n = self.spins.fetch_add(1, Ordering::Relaxed);
        let look = matches!(self.shared.path, DataPath::Inline) || (!ring && n % 16 == 0);
        if self.polled() && look && !self.is_closed() {
            self.shared.progress(Duration::ZERO, None)?;
        }
        Ok(())
    }

    /// shm: moves what the peer published in our completion ring into the completion queue;
    /// true if there was anything.
    pub(crate) fn drain_ring(&self) -> bool {
        let any = self.shared.drain_ring(false);
        self.shared.harvest();
        any
    }

    /// shm: raises or lowers the doorbell around a sleep of a waiting thread.
    pub(crate) fn want_doorbell(&self, on: bool) {
        self.shared.want_doorbell(on);
    }

    pub(crate) fn post_send(&self, wr: SendWr) -> Result<()> {
        let sh = &self.shared;
        if sh.error.load(Ordering::Acquire) {
            return Err(Error::QpError);
        }
        wr.validate(sh.reliable)?;
        if self.try_direct(&wr)? {
            return Ok(());
        }
        if sh.reliable {
            self.wait_ring_sends()?;
        }
        if !sh.reliable && wr.op != WrOp::Read {
            sh.uc_streamed.store(true, Ordering::Release);
        }
        let mut c = lock(&sh.conn);
        c.engine.post_send(Instant::now(), wr)?;
        // The poster sends its packets itself; completions (UC) go out after the bytes did.
        let mut r = sh.flush(&mut c);
        sh.deliver(&mut c);
        if r.is_ok() && !c.ctl.is_empty() {
            r = sh.flush(&mut c);
        }
        if let Err(why) = r {
            // The request was taken; as with verbs, its completion says how it ended (flushed
            // here, unless its bytes got out before the stream broke, which a peer that read
            // them and left at once can make happen on every last reply).
            sh.close(&mut c, &why);
        }
        Ok(())
    }

    pub(crate) fn post_recv(&self, wr: RecvWr) -> Result<()> {
        let sh = &self.shared;
        let mut c = lock(&sh.conn);
        c.engine.post_recv(wr)?;
        // shm: a SEND may be waiting in the ring for this buffer.
        sh.drain_conn(&mut c);
        if !c.ctl.is_empty() {
            if let Err(why) = sh.flush(&mut c) {
                sh.close(&mut c, &why);
            }
        }
        Ok(())
    }

    /// shm: the peer's kernel-checked identity.
    pub(crate) fn peer_credentials(&self) -> Option<crate::shm::Credentials> {
        self.shared.peer
    }

    /// shm: the descriptors the listener handed over at setup (once).
    pub(crate) fn take_handover(&self) -> Vec<OwnedFd> {
        std::mem::take(&mut *lock(&self.shared.handover))
    }

    pub(crate) fn stats(&self) -> Stats {
        let mut s = lock(&self.shared.conn).engine.stats();
        s += *lock(&self.shared.extra);
        s
    }

    /// True once the peer has closed the stream; a polled queue pair looks (without waiting).
    pub(crate) fn is_closed(&self) -> bool {
        if self.polled() && !self.shared.is_closed() {
            let _ = self.shared.progress(Duration::ZERO, None);
        }
        self.shared.is_closed()
    }

    pub(crate) fn wait_closed(&self, timeout: Option<Duration>) -> Result<()> {
        let sh = &self.shared;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut closed = lock(&sh.closed);
        while !*closed {
            let left = match deadline {
                None => IDLE_WAIT,
                Some(d) => d
                    .checked_duration_since(Instant::now())
                    .ok_or(Error::Timeout)?
                    .min(IDLE_WAIT),
            };
            if self.polled() {
                // Nobody else reads a polled stream: this thread does, until the end.
                drop(closed);
                if !matches!(sh.progress(left, None), Ok(true)) {
                    std::thread::sleep(left.min(Duration::from_millis(1)));
                }
                closed = lock(&sh.closed);
            } else {
                closed = sh
                    .closed_cv
                    .wait_timeout(closed, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        Ok(())
    }

    /// Ends the queue pair: the progress thread stops after its round (the packets it owed,
    /// ACKs included, are out by then: a round ends with its flush), then the stream is shut.
    pub(crate) fn stop(&self) {
        let sh = &self.shared;
        // First of all: the peer's one-sided accesses to our grants end here.
        if let Some(c) = &sh.consumer {
            lock(c).ring().set_gone();
        }
        sh.stop.store(true, Ordering::Release);
        let _ = sh.sock.shutdown(Shutdown::Read);
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        let _ = sh.sock.shutdown(Shutdown::Both);
        *lock(&sh.closed) = true;
        sh.closed_cv.notify_all();
    }
}

/// A region's bytes as a slice for the stream to read from or write to.
///
/// # Safety
/// `off + len` must be within the region (checked by the callers). Concurrent access by the
/// application races as it does with real RDMA; the bytes are plain memory either way.
// Region memory is shared like device memory: handing out a mutable view from a shared handle
// is the point (the NIC-side writer of real RDMA), and callers uphold the bounds.
#[allow(clippy::mut_from_ref)]
unsafe fn region_slice(r: &Region, off: usize, len: usize) -> &mut [u8] {
    std::slice::from_raw_parts_mut(r.as_ptr().add(off), len)
}

/// [`region_slice`] after making the range resident in one call when the region is on-demand
/// and some of it is not (one populate per message instead of a fault per page).
///
/// # Safety
/// As [`region_slice`].
#[allow(clippy::mut_from_ref)]
unsafe fn resident_slice(r: &Region, off: usize, len: usize) -> &mut [u8] {
    if let Err(e) = r.page_in_range(off, len) {
        tracing::debug!(error = %e, "populating a range failed; the copy takes the faults");
    }
    region_slice(r, off, len)
}
