//! The fabric page server: registers a source (a file or memfd as a live shared mapping,
//! anything else as a snapshot taken at start), listens, and keeps one queue pair per client,
//! whose responder answers the client's READs with no thread of ours on the path.
use super::shmmap::{self, Kind};
use super::{fab, hello, qp_options};
use crate::error::{Error, Result};
use crate::protocol::Hello;
use crate::source::PageSource;
use remora_fabric::{Listener, Progress, Qp, RegionInfo, Transport};
use remora_mem::{grant, Access, Buffer, Mode, Pd, Region};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

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
            Some(shmmap::pidfd(pid).map_err(|e| Error::io(format!("pidfd_open {pid}"), e))?)
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
        // What the listener hands over (shm): the process itself, or a descriptor of its bytes.
        let kind = if live_pid.is_some() {
            Kind::Process
        } else {
            Kind::Fd
        };
        let private = hello::encode(
            RegionInfo::of(&region),
            &hello,
            share.is_some().then_some(kind),
        );
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

/// Queue pairs a fabric page server keeps at once (each holds two threads on tcp and shm).
const MAX_CLIENTS: usize = 1024;
/// Connection setups a fabric page server runs at once (each waits up to 10 s for its peer).
const MAX_SETUPS: usize = 64;
