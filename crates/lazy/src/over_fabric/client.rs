//! The client of a fabric page server: [`FabricFetcher`] connects, reads the server's private
//! data, takes the shm fast path where the server offers one (its source mapped here, or its
//! live process read here), and otherwise fetches each unit with RC READs on a pool of queue
//! pairs.
use super::read::{read_remote, Conn, FabricPush};
use super::{fab, hello, shmmap};
use crate::error::{Error, Result};
use crate::fetch::{FetchError, Fetched, PageFetcher, PushStream};
use crate::protocol::Hello;
use crate::source::{is_zero, PageSource, ProcessSource, PushCursor};
use remora_fabric::{Progress, RegionInfo, Transport};
use remora_mem::Pd;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Client of a [`FabricServer`](super::FabricServer): each fetch is one or more RC READs into a
/// staging region.
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
    peer: Option<shmmap::PeerMap>,
    /// The live process the server serves, read here directly (shm only), with the pidfd that
    /// says it is still the same process.
    live: Option<(ProcessSource, OwnedFd)>,
    /// Whether a failed direct read of `live` was already logged.
    live_failed: AtomicBool,
}

/// Checks a process share against the hello and opens the pidfd's process for reading, under
/// this process's own credentials.
fn attach_process(
    share: shmmap::Share,
    pidfd: OwnedFd,
    hello: &Hello,
) -> Result<(ProcessSource, OwnedFd)> {
    let ranges: Vec<(u64, u64)> = hello.segments.iter().map(|s| (s.va, s.len)).collect();
    let pid = shmmap::pid_of(&pidfd)
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
    if !shmmap::still_running(&pidfd) {
        return Err(Error::Protocol("the served process exited".into()));
    }
    Ok((p, pidfd))
}

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
            Conn::dial(addr, transport, progress, &pd).map_err(|e| fab("connect", e))?;
        let (remote, hello, share) = hello::decode(&private)?;
        let (mut peer, mut live) = (None, None);
        let mut handed = conn.qp.take_handover();
        match share {
            Some(share) if matches!(transport, Transport::Shm) => {
                let fd = ((share.index as usize) < handed.len())
                    .then(|| handed.swap_remove(share.index as usize));
                match (share.kind, fd) {
                    (_, None) => {
                        tracing::info!("shm page server: no descriptor handed over, using READs")
                    }
                    (shmmap::Kind::Fd, Some(fd)) => {
                        match shmmap::PeerMap::open(share, &fd, hello.len) {
                            Ok(m) => peer = Some(m),
                            Err(e) => {
                                tracing::info!("shm page server: mapping refused, using READs: {e}")
                            }
                        }
                    }
                    (shmmap::Kind::Process, Some(fd)) => match attach_process(share, fd, &hello) {
                        Ok(p) => live = Some(p),
                        Err(e) => tracing::info!(
                            "shm page server: the served process is unreadable here, \
                                 using READs of its snapshot: {e}"
                        ),
                    },
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
    fn conn(&self) -> std::result::Result<Conn, FetchError> {
        if let Some(c) = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Ok(c);
        }
        Conn::dial(self.addr, self.transport, self.progress, &self.pd)
            .map(|(c, _)| c)
            .map_err(FetchError::Transient)
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
                if shmmap::still_running(pidfd) {
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
        let (c, _) = Conn::dial(self.addr, self.transport, self.progress, &self.pd)
            .map_err(FetchError::Transient)?;
        Ok(Box::new(FabricPush::new(
            c,
            self.remote,
            PushCursor::new(self.hello.len, from, unit),
        )))
    }
    fn transport(&self) -> &'static str {
        match self.transport {
            Transport::Udp => "udp",
            Transport::Shm => "shm",
            Transport::Tcp => "fabric-tcp",
        }
    }
}
