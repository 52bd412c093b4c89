//! The page server over `remora-fabric`: the client READs pages one-sidedly from the server's
//! registered region (RC READ over `udp`, or `shm`/`tcp` through the fabric's stream
//! transports), so no server thread touches the urgent path. The region table (address, length,
//! rkey) and the [`Hello`] (segments, zero map) travel as private data at connect.
//!
//! A file or memfd source is mapped shared, read-only, and that mapping is registered: clients
//! READ the file's current pages (the page cache), so bytes written after the server started
//! are served, with no copy at start. Other sources (the server's own bytes, a live process,
//! whose memory cannot be registered) are copied into a registered region at start: clients READ
//! that snapshot. The tcp page server, by contrast, reads every source at each request.
//!
//! Over `shm` the server also hands its bytes over ([`shmmap`](crate::shmmap)): a read-only
//! descriptor of the file or memfd behind the region (a snapshot is then taken into a memfd),
//! which the client maps and installs units straight from; or, for a live process, a pidfd, and
//! the client reads the process with `process_vm_readv` under its own credentials, so it sees the
//! process's current memory. The queue pair stays as the fallback and for push.
//!
//! The length served is the file's length at start. If the file shrinks while served, a READ of
//! a page past its new end is either refused (the on-demand region cannot page it in) or, if the
//! page was in, raises SIGBUS in the server; the crate's SIGBUS handler then replaces the page
//! with a zero page, so the READ returns zeros and the page stays zero for the server's life.
//!
//! Progress (who drives a queue pair's receive side and timers, [`Progress`]): the server's
//! queue pairs keep the fabric's receive thread, since nothing in the server ever polls them and
//! its responders must answer READs at any time. A client's udp queue pairs default to
//! [`Progress::Poll`] ([`FabricFetcher::default_progress`]): the thread that posts a READ is the
//! one that waits for its completion, so it receives the response itself instead of being woken
//! by a second thread. That is safe because of how the client uses its queue pairs:
//! - each is used by one thread at a time: a fetch (from a handler thread, a SIGBUS handler, the
//!   working-set thread; prefetched units travel in the same READ) takes a queue pair out of the
//!   pool for the whole READ, and the push thread has a queue pair of its own; every queue pair
//!   has its own udp device (one per `connect`), so no two threads compete to drive one;
//! - the client only requests and the server only responds: the requester's timers
//!   (retransmission, RNR wait) run only while a READ is outstanding, which is exactly while a
//!   thread waits on it, and a responder expects no answer to its READ responses. A queue pair
//!   back in the pool, with nothing outstanding, needs no driving; what arrives for it meanwhile
//!   (a late duplicate) is read and dropped by the next fetch;
//! - a READ that fails or times out drops its queue pair rather than pooling it, so no queue pair
//!   with an outstanding request is left undriven.
//!
//! shm and tcp client queue pairs keep the receive thread by default; a `Poll` asked for there
//! through [`FabricFetcher::connect_with`] is the fabric's to accept (shm) or refuse (tcp).
use crate::error::{Error, Result};
use crate::fetch::{FetchError, Fetched, PageFetcher, PushChunk, PushNext, PushStream};
use crate::protocol::{hello_len, Hello, PageHelloPacket};
use crate::source::{is_zero, PageSource, ProcessSource, PushCursor, PUSH_MAX_CHUNK};
use remora_fabric::{Completion, Listener, Progress, Qp, QpOptions, RegionInfo, Status, Transport};
use remora_mem::{grant, Access, Buffer, Mode, Pd, Region};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest private data the fabric carries at connect.
const MAX_PRIVATE: usize = remora_wire::ctrl::setup::MAX_PRIVATE;

/// Queue-pair options: RC, with a retransmission timeout long enough for a busy 2-core host (the
/// page fault deadline, not the RC retry limit, decides when a server counts as dead), and the
/// progress mode asked for (the server: always [`Progress::Thread`]).
fn qp_options(transport: Transport, peer: Option<SocketAddr>, progress: Progress) -> QpOptions {
    // RoCE path MTU: 4096 on loopback; 1024 fits a 1500-byte Ethernet MTU (veth, most links).
    let mtu = match peer {
        Some(a) if !a.ip().is_loopback() => 1024,
        _ => 4096,
    };
    QpOptions {
        transport,
        mtu,
        retry_timeout: Duration::from_millis(20),
        retry_count: 7,
        progress,
        ..QpOptions::default()
    }
}

fn fab(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Protocol(format!("{what}: {e}"))
}

/// A page server whose clients READ its registered region.
pub struct FabricServer {
    listener: Listener,
    _region: Arc<Region>,
    private: Vec<u8>,
}

/// A running fabric page server; dropping it (or `kill`) stops it and drops every queue pair.
pub struct FabricServerHandle {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    qps: Arc<Mutex<Vec<Qp>>>,
    thread: Option<JoinHandle<()>>,
}

impl FabricServer {
    /// Registers `src` (a file or memfd mapped live, anything else copied) and listens on
    /// `addr`.
    pub fn bind(
        addr: SocketAddr,
        src: &dyn PageSource,
        transport: Transport,
    ) -> Result<FabricServer> {
        let len =
            usize::try_from(src.len()).map_err(|_| Error::Invalid("source too large".into()))?;
        if len == 0 {
            return Err(Error::Invalid("the source is empty".into()));
        }
        let shm = matches!(transport, Transport::Shm);
        // Over shm a live process is read by the client itself; the snapshot is the fallback.
        let live_pid = src.process().filter(|_| shm);
        let buf = match src.file() {
            Some(f) => live_buffer(f, len)?,
            None => snapshot_buffer(src, len, shm && live_pid.is_none())?,
        };
        // What shm clients receive: a read-only descriptor of the served file or of the
        // snapshot's memfd, or a pidfd of the live process.
        let share = if !shm {
            None
        } else if let Some(pid) = live_pid {
            Some(crate::shmmap::pidfd(pid).map_err(|e| Error::io(format!("pidfd_open {pid}"), e))?)
        } else {
            // A served memfd may still be written by the process that handed it over; a
            // snapshot is final. Either way no client can reopen it writable.
            let ro = match src.file() {
                Some(f) => grant::read_only(f.as_fd(), grant::Writes::Continue),
                None => buf
                    .fd()
                    .ok_or_else(|| std::io::Error::other("snapshot has no fd"))
                    .and_then(|fd| grant::read_only(fd, grant::Writes::Done)),
            };
            Some(ro.map_err(|e| Error::io("reopen the served source read-only", e))?)
        };
        let pd = Arc::new(Pd::new());
        // Read rights only: a live mapping is read-only, and no client writes a snapshot.
        let region = pd
            .register(buf, Access::REMOTE_READ, Mode::OnDemand)
            .map_err(|e| fab("register the served region", e))?;
        let hello = Hello {
            len: src.len(),
            segments: src.segments(),
            zero_map: src.zero_map(),
        };
        let mut private = RegionInfo::of(&region).encode().to_vec();
        private.extend_from_slice(&hello.to_bytes());
        let mut segments_sent = true;
        if private.len() > MAX_PRIVATE {
            segments_sent = false;
            // Too many segments or too big a zero map for private data: send only the length.
            private.truncate(RegionInfo::LEN);
            private.extend_from_slice(
                &Hello {
                    len: src.len(),
                    segments: vec![crate::protocol::Segment {
                        va: 0,
                        len: src.len(),
                    }],
                    zero_map: vec![],
                }
                .to_bytes(),
            );
        }
        use crate::shmmap::{Kind, Share};
        // The client needs the process's addresses, which only a whole hello carries.
        let kind = if live_pid.is_some() {
            Kind::Process
        } else {
            Kind::Fd
        };
        if share.is_some() && (kind == Kind::Fd || segments_sent) {
            let s = Share {
                kind,
                index: 0,
                len: src.len(),
            };
            private.extend_from_slice(&s.emit());
        }
        // Thread progress: the server never polls its queue pairs, and their responders must
        // answer every client's READs whenever they come.
        let opts = qp_options(transport, None, Progress::Thread);
        let listener = Listener::bind(addr, pd, opts).map_err(|e| fab("listen", e))?;
        if let Some(fd) = share {
            listener
                .hand_over(vec![fd])
                .map_err(|e| fab("hand over the source", e))?;
        }
        Ok(FabricServer {
            listener,
            _region: region,
            private,
        })
    }
    /// The control address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }
    /// Serves on a background thread.
    pub fn spawn(self) -> Result<FabricServerHandle> {
        let addr = self.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let qps = Arc::new(Mutex::new(Vec::new()));
        let (s, q) = (stop.clone(), qps.clone());
        let thread = std::thread::Builder::new()
            .name("lazy-fabric-server".into())
            .spawn(move || self.accept_loop(s, q))
            .map_err(|e| Error::io("spawn server thread", e))?;
        Ok(FabricServerHandle {
            addr,
            stop,
            qps,
            thread: Some(thread),
        })
    }
    /// Serves in the calling thread until the process ends.
    pub fn run(self) {
        self.accept_loop(Arc::default(), Arc::default());
    }
    /// Accepts connections; each setup runs on a detached thread of its own (at most
    /// [`MAX_SETUPS`] at once, the rest refused), so a client that stays silent cannot hold up
    /// the others for the setup timeout.
    fn accept_loop(self, stop: Arc<AtomicBool>, qps: Arc<Mutex<Vec<Qp>>>) {
        let private: Arc<[u8]> = self.private.clone().into();
        let setups = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        while !stop.load(Ordering::Acquire) {
            let inc = match self.listener.incoming() {
                Ok(i) => i,
                Err(e) => {
                    tracing::warn!("fabric page server: accept: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            if stop.load(Ordering::Acquire) {
                return;
            }
            if setups.fetch_add(1, Ordering::AcqRel) >= MAX_SETUPS {
                setups.fetch_sub(1, Ordering::AcqRel);
                tracing::warn!("fabric page server: {MAX_SETUPS} setups in progress; one refused");
                continue;
            }
            let (stop, qps, private, n) =
                (stop.clone(), qps.clone(), private.clone(), setups.clone());
            let spawned = std::thread::Builder::new()
                .name("lazy-fabric-setup".into())
                .stack_size(256 << 10)
                .spawn(move || {
                    let from = inc.peer_addr();
                    let r = inc.establish(&private);
                    n.fetch_sub(1, Ordering::AcqRel);
                    match r {
                        Ok((qp, _)) if !stop.load(Ordering::Acquire) => keep(&qps, qp),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(%from, "fabric page server: setup refused: {e}"),
                    }
                });
            if let Err(e) = spawned {
                setups.fetch_sub(1, Ordering::AcqRel);
                tracing::warn!("fabric page server: no thread for a setup: {e}");
            }
        }
    }
}

/// Keeps a client's queue pair (its responder serves READs without us); those of clients that
/// left are dropped first, so connections that come and go leave nothing behind.
fn keep(qps: &Mutex<Vec<Qp>>, qp: Qp) {
    let mut live = qps.lock().unwrap_or_else(|p| p.into_inner());
    live.retain(|q| !q.is_closed());
    if live.len() >= MAX_CLIENTS {
        tracing::warn!("fabric page server: {MAX_CLIENTS} clients connected; one refused");
        return;
    }
    live.push(qp)
}

/// `len` bytes of `f` mapped shared and read-only, so clients READ its current pages.
fn live_buffer(f: &std::fs::File, len: usize) -> Result<Buffer> {
    use std::os::fd::AsRawFd;
    let map = crate::sigbus::GuardedMap::open(f.as_raw_fd(), len)
        .map_err(|e| Error::io("mmap the served file shared", e))?;
    let (ptr, mapped) = (map.ptr(), map.mapped_len());
    // SAFETY: `map` owns `[ptr, ptr+mapped)` and moves into the Buffer, so the range stays
    // mapped for the Buffer's life; it is read-only and registered without write rights, so
    // nothing writes through it.
    unsafe { Buffer::external_owned(ptr, mapped, Box::new(map)) }
        .map_err(|e| fab("wrap the served mapping", e))
}

/// A private copy of `src` taken now (sources that cannot be mapped); in a memfd when shm
/// clients are to map it.
fn snapshot_buffer(src: &dyn PageSource, len: usize, memfd: bool) -> Result<Buffer> {
    let buf = if memfd {
        Buffer::memfd("remora-lazy-snapshot", len)
    } else {
        Buffer::anonymous(len)
    }
    .map_err(|e| fab("allocate the served region", e))?;
    // SAFETY: the buffer was just mapped with `len` writable bytes and nothing else uses it yet.
    let bytes = unsafe { std::slice::from_raw_parts_mut(buf.as_ptr(), len) };
    for (i, chunk) in bytes.chunks_mut(4 << 20).enumerate() {
        src.read_at((i * (4 << 20)) as u64, chunk)?;
    }
    Ok(buf)
}

impl FabricServerHandle {
    /// The control address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// Stops accepting and drops every queue pair (clients' READs then fail). The accept thread
    /// is left to end at its next connection (accept cannot be interrupted), which it drops.
    pub fn kill(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.thread.take();
        self.qps.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

impl Drop for FabricServerHandle {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One queue pair with its staging region.
struct Conn {
    qp: Qp,
    stage: Arc<Region>,
    next: u64,
}

/// Client of a [`FabricServer`]: each fetch is one or more RC READs into a staging region.
pub struct FabricFetcher {
    addr: SocketAddr,
    transport: Transport,
    /// Progress mode of every queue pair this client opens (the pool's and push's).
    progress: Progress,
    pd: Arc<Pd>,
    remote: RegionInfo,
    hello: Hello,
    pool: Mutex<Vec<Conn>>,
    attempt: Duration,
    /// The server's source mapped here (shm only).
    peer: Option<crate::shmmap::PeerMap>,
    /// The live process the server serves, read here directly (shm only), with the pidfd that
    /// says it is still the same process.
    live: Option<(ProcessSource, std::os::fd::OwnedFd)>,
    /// Whether a failed direct read of `live` was already logged.
    live_failed: AtomicBool,
}

/// Checks a process share against the hello and opens the pidfd's process for reading, under
/// this process's own credentials.
fn attach_process(
    share: crate::shmmap::Share,
    pidfd: std::os::fd::OwnedFd,
    hello: &Hello,
) -> Result<(ProcessSource, std::os::fd::OwnedFd)> {
    let ranges: Vec<(u64, u64)> = hello.segments.iter().map(|s| (s.va, s.len)).collect();
    let pid = crate::shmmap::pid_of(&pidfd)
        .ok_or_else(|| Error::Protocol("the handed-over pidfd names no running process".into()))?;
    let p = ProcessSource::new(pid, &ranges, false)?;
    if p.len() != hello.len || share.len != hello.len {
        return Err(Error::Protocol(format!(
            "process share of {} bytes for a source of {}",
            p.len(),
            hello.len
        )));
    }
    // Probe once: a process we may not read is better found now than on the first fault.
    let mut b = [0u8; 1];
    p.read_at(0, &mut b)?;
    if !crate::shmmap::still_running(&pidfd) {
        return Err(Error::Protocol("the served process exited".into()));
    }
    Ok((p, pidfd))
}

/// Queue pairs a fabric page server keeps at once (each holds two threads on tcp and shm).
const MAX_CLIENTS: usize = 1024;
/// Connection setups a fabric page server runs at once (each waits up to 10 s for its peer).
const MAX_SETUPS: usize = 64;

const STAGE: usize = PUSH_MAX_CHUNK as usize;
/// Busy-poll the completion queue this long before sleeping on it (with [`Progress::Poll`] each
/// turn also receives from the queue pair's socket; the sleep is then on that socket).
const SPIN: Duration = Duration::from_micros(200);

impl FabricFetcher {
    /// Connects over `transport` with [`default_progress`](Self::default_progress) and reads
    /// the region table from the private data.
    pub fn connect(addr: SocketAddr, transport: Transport) -> Result<FabricFetcher> {
        Self::connect_with(addr, transport, Self::default_progress(transport))
    }
    /// The progress mode a client's queue pairs get by default: [`Progress::Poll`] on udp (the
    /// faulting thread receives its READ response itself and the client has no receive thread;
    /// over loopback on 2 vCPUs that took 0.87x the thread-progress time per 64 KB fault and
    /// 0.64x per 4 KB fault with a core busy elsewhere, but 1.14x per 4 KB fault on an
    /// otherwise idle machine, docs/bench/lazy.md); [`Progress::Thread`] on shm (poll not
    /// measured there for this client, whose faults mostly bypass the queue pair through the
    /// mapped source) and on tcp (the fabric's only mode there).
    pub fn default_progress(transport: Transport) -> Progress {
        match transport {
            Transport::Udp => Progress::Poll,
            Transport::Shm | Transport::Tcp => Progress::Thread,
        }
    }
    /// Connects over `transport`, with `progress` for every queue pair this client opens (see
    /// the module's notes on why [`Progress::Poll`] suits the fault path). The fabric decides
    /// where `Poll` is available (udp and shm; it refuses it on tcp).
    pub fn connect_with(
        addr: SocketAddr,
        transport: Transport,
        progress: Progress,
    ) -> Result<FabricFetcher> {
        let pd = Arc::new(Pd::new());
        let (conn, private) =
            Self::dial(addr, transport, progress, &pd).map_err(|e| fab("connect", e))?;
        let remote = RegionInfo::decode(&private).map_err(|e| fab("region table", e))?;
        let hello = Hello::parse(&PageHelloPacket::new_unchecked(&private[RegionInfo::LEN..]))
            .map_err(|e| Error::Protocol(format!("page server hello: {e}")))?;
        if remote.len < hello.len {
            return Err(Error::Protocol(format!(
                "server region of {} bytes is shorter than its source of {}",
                remote.len, hello.len
            )));
        }
        let tail = hello_len(&private[RegionInfo::LEN..])
            .ok()
            .and_then(|n| private.get(RegionInfo::LEN + n..))
            .unwrap_or_default();
        let (mut peer, mut live) = (None, None);
        let mut handed = conn.qp.take_handover();
        match crate::shmmap::Share::parse(tail) {
            Some(share) if matches!(transport, Transport::Shm) => {
                let fd = ((share.index as usize) < handed.len())
                    .then(|| handed.swap_remove(share.index as usize));
                match (share.kind, fd) {
                    (_, None) => {
                        tracing::info!("shm page server: no descriptor handed over, using READs")
                    }
                    (crate::shmmap::Kind::Fd, Some(fd)) => {
                        match crate::shmmap::PeerMap::open(share, &fd, hello.len) {
                            Ok(m) => peer = Some(m),
                            Err(e) => {
                                tracing::info!("shm page server: mapping refused, using READs: {e}")
                            }
                        }
                    }
                    (crate::shmmap::Kind::Process, Some(fd)) => {
                        match attach_process(share, fd, &hello) {
                            Ok(p) => live = Some(p),
                            Err(e) => tracing::info!(
                                "shm page server: the served process is unreadable here, \
                                 using READs of its snapshot: {e}"
                            ),
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(FabricFetcher {
            addr,
            transport,
            progress,
            pd,
            remote,
            hello,
            pool: Mutex::new(vec![conn]),
            attempt: Duration::from_millis(250),
            peer,
            live,
            live_failed: AtomicBool::new(false),
        })
    }
    /// Drops the shm fast path (mapping or direct process reads), so every unit travels as an
    /// RC READ (for comparisons and tests).
    pub fn without_mapping(mut self) -> FabricFetcher {
        self.peer = None;
        self.live = None;
        self
    }
    /// True if units are installed straight from a mapping of the server's source (shm).
    pub fn is_mapped(&self) -> bool {
        self.peer.is_some()
    }
    /// True if a live process's memory is read directly with `process_vm_readv` (shm).
    pub fn reads_process(&self) -> bool {
        self.live.is_some()
    }
    /// The server's hello.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }
    /// The progress mode of this client's queue pairs.
    pub fn progress(&self) -> Progress {
        self.progress
    }
    fn dial(
        addr: SocketAddr,
        transport: Transport,
        progress: Progress,
        pd: &Arc<Pd>,
    ) -> std::result::Result<(Conn, Vec<u8>), String> {
        let stage = pd
            .register(
                Buffer::anonymous(STAGE).map_err(|e| e.to_string())?,
                Access::LOCAL_WRITE,
                Mode::OnDemand,
            )
            .map_err(|e| e.to_string())?;
        let opts = qp_options(transport, Some(addr), progress);
        let (qp, private) =
            remora_fabric::connect(addr, pd.clone(), opts, &[]).map_err(|e| e.to_string())?;
        Ok((Conn { qp, stage, next: 1 }, private))
    }
    fn conn(&self) -> std::result::Result<Conn, FetchError> {
        if let Some(c) = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Ok(c);
        }
        Self::dial(self.addr, self.transport, self.progress, &self.pd)
            .map(|(c, _)| c)
            .map_err(FetchError::Transient)
    }
}

/// READs `buf.len()` bytes at `offset` of the remote region through `c`, in stage-sized pieces.
fn read_remote(
    c: &mut Conn,
    remote: &RegionInfo,
    offset: u64,
    buf: &mut [u8],
    deadline: Instant,
) -> std::result::Result<(), FetchError> {
    let mut done = 0;
    while done < buf.len() {
        let n = (buf.len() - done).min(STAGE);
        let id = c.next;
        c.next += 1;
        let va = remote
            .addr
            .checked_add(offset + done as u64)
            .ok_or_else(|| FetchError::Fatal("remote address overflows".into()))?;
        c.qp.post_read(id, &c.stage, 0, n, va, remote.rkey)
            .map_err(|e| FetchError::Transient(format!("post READ: {e}")))?;
        let comp = wait(&c.qp, deadline)?;
        if comp.wr_id != id {
            return Err(FetchError::Transient(format!(
                "completion for {} while waiting for {id}",
                comp.wr_id
            )));
        }
        match comp.status {
            Status::Success => {}
            Status::RetryExceeded | Status::Flushed => {
                return Err(FetchError::Transient(format!("READ: {:?}", comp.status)))
            }
            s => return Err(FetchError::Fatal(format!("READ refused: {s:?}"))),
        }
        c.stage
            .read_at(0, &mut buf[done..done + n])
            .map_err(|e| FetchError::Fatal(e.to_string()))?;
        done += n;
    }
    Ok(())
}

/// The completion of the READ just posted on `qp`. With [`Progress::Poll`] this thread drives
/// the queue pair meanwhile: it receives the response, and runs the retransmission timers.
fn wait(qp: &Qp, deadline: Instant) -> std::result::Result<Completion, FetchError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if let Some(c) = qp.spin(left.min(SPIN)) {
        return Ok(c);
    }
    let left = deadline.saturating_duration_since(Instant::now());
    match qp.wait(left) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(FetchError::Transient("READ timed out".into())),
        Err(e) => Err(FetchError::Transient(format!("completion queue: {e}"))),
    }
}

impl PageFetcher for FabricFetcher {
    fn len(&self) -> u64 {
        self.hello.len
    }
    fn known_zero(&self, offset: u64, len: u64) -> bool {
        self.hello.is_zero(offset, len)
    }
    fn direct(&self, offset: u64, len: usize) -> Option<&[u8]> {
        self.peer.as_ref()?.get(offset, len)
    }
    fn fetch(
        &self,
        offset: u64,
        buf: &mut [u8],
        deadline: Instant,
    ) -> std::result::Result<Fetched, FetchError> {
        let avail = self.hello.len.saturating_sub(offset).min(buf.len() as u64) as usize;
        if avail == 0 {
            return Ok(Fetched::Zero);
        }
        if let Some((p, pidfd)) = &self.live {
            let read = p.read_at(offset, &mut buf[..avail]).and_then(|()| {
                if crate::shmmap::still_running(pidfd) {
                    Ok(())
                } else {
                    Err(Error::Protocol("the served process exited".into()))
                }
            });
            match read {
                Ok(()) => {
                    buf[avail..].fill(0);
                    return Ok(if is_zero(&buf[..avail]) {
                        Fetched::Zero
                    } else {
                        Fetched::Data
                    });
                }
                // The process exited or unmapped the range: serve the server's snapshot.
                Err(e) => {
                    if !self.live_failed.swap(true, Ordering::Relaxed) {
                        tracing::warn!("reading the served process failed, using READs: {e}");
                    }
                }
            }
        }
        let mut c = self.conn()?;
        let d = deadline.min(Instant::now() + self.attempt);
        // A failed READ leaves the queue pair in an unknown state: it is dropped, not pooled.
        read_remote(&mut c, &self.remote, offset, &mut buf[..avail], d)?;
        buf[avail..].fill(0);
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).push(c);
        Ok(if is_zero(&buf[..avail]) {
            Fetched::Zero
        } else {
            Fetched::Data
        })
    }
    fn open_push(
        &self,
        from: u64,
        unit: u64,
    ) -> std::result::Result<Box<dyn PushStream>, FetchError> {
        // One-sided push: the client READs the rest in growing chunks on its own queue pair.
        let (c, _) = Self::dial(self.addr, self.transport, self.progress, &self.pd)
            .map_err(FetchError::Transient)?;
        Ok(Box::new(FabricPush {
            c,
            remote: self.remote,
            cur: PushCursor::new(self.hello.len, from, unit),
        }))
    }
    fn transport(&self) -> &'static str {
        match self.transport {
            Transport::Udp => "udp",
            Transport::Shm => "shm",
            Transport::Tcp => "fabric-tcp",
        }
    }
}

struct FabricPush {
    c: Conn,
    remote: RegionInfo,
    cur: PushCursor,
}

impl PushStream for FabricPush {
    fn restart(&mut self, from: u64) -> std::result::Result<(), FetchError> {
        self.cur.restart(from);
        Ok(())
    }
    fn next(
        &mut self,
        buf: &mut Vec<u8>,
        _t: Duration,
    ) -> std::result::Result<PushNext, FetchError> {
        let Some((offset, len)) = self.cur.next_chunk() else {
            return Ok(PushNext::End);
        };
        let len = len as usize;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        read_remote(&mut self.c, &self.remote, offset, &mut buf[..len], deadline)?;
        Ok(PushNext::Chunk(PushChunk {
            offset,
            len,
            zero: is_zero(&buf[..len]),
        }))
    }
}
