//! The `tcp` and `shm` transports: requests and responses as 32-byte frames over one stream.
//!
//! `tcp` carries payloads inline after their frame and the receiver reads them straight into
//! the target region. `shm` runs over a unix socket ([`sock`]) and moves a payload by reference
//! when the requester's region is a memfd it handed over: the requester announces the region
//! once with a MAP frame carrying the memfd (`SCM_RIGHTS`), the responder maps it, and later
//! requests from that region (frames marked `BYREF`) are served with one `memcpy` between the
//! mapping and the responder's own region, after the responder checked the access against its
//! own keys. Anything else travels inline, as over tcp. The responder never reaches memory the
//! requester did not hand over: there is no path that names a process.
//!
//! The stream is reliable and ordered, so there are no PSNs or retransmissions: on RC the
//! responder answers requests in order with coalesced `ACK n`, a `NAK code` for a refused one,
//! or a READ response; on UC it answers nothing and drops what it refuses. Posting threads write
//! their requests themselves; the receive thread ([`rx`]) hands its responses to a writer
//! thread, so a thread that receives never blocks on a send (two peers writing large messages at
//! each other cannot deadlock). Frames: [`frame`].
use std::collections::VecDeque;
use std::io::{self, BufWriter, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use remora_mem::{Pd, Region};

use crate::cq::Cq;
use crate::engine::Stats;
use crate::error::{io_err, Error, Result};
use crate::options::{Progress, QpType};
use crate::wr::{Completion, RecvWr, SendWr, Status, WrOp};

mod direct;
mod frame;
mod rx;
pub(crate) mod sock;

use frame::*;
pub(crate) use sock::Sock;

/// Memfd regions of the peer mapped by one responder, at most (each is one mapping).
const MAX_PEER_MAPS: usize = 256;

const STREAM_BUFFER: usize = 256 << 10;

/// Longest a WRITE-with-immediate waits for room in the peer's completion ring.
const RING_FULL_LIMIT: Duration = Duration::from_secs(10);

/// How payload bytes travel.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DataPath {
    /// In the stream after the frame (tcp).
    Inline,
    /// By reference through memfds the requester handed over, inline otherwise (shm).
    Shm,
}

enum Out {
    Frame(Frame),
    /// A frame with a descriptor attached (`SCM_RIGHTS`): a GRANT.
    WithFd(Frame, OwnedFd),
    /// A frame followed by `len` bytes of a region.
    Payload(Frame, Arc<Region>, usize),
    /// Flush and end the writer thread.
    Stop,
}

struct Pending {
    wr_id: u64,
    op: WrOp,
    len: usize,
    local: Arc<Region>,
    offset: usize,
    /// The response moves no bytes in the stream (a READ whose destination the peer mapped).
    byref: bool,
}

struct Shared {
    pd: Arc<Pd>,
    cq: Arc<Cq>,
    path: DataPath,
    reliable: bool,
    pending: Mutex<VecDeque<Pending>>,
    recvs: Mutex<VecDeque<RecvWr>>,
    recv_cv: Condvar,
    error: AtomicBool,
    stop: AtomicBool,
    closed: Mutex<bool>,
    closed_cv: Condvar,
    stats: Mutex<Stats>,
    /// shm requester: by lkey, whether a local memfd region was handed to the peer (true) or
    /// found unfit (false), so each region is looked at once.
    announced: Mutex<std::collections::HashMap<u32, bool>>,
    /// shm responder: the peer's memfd regions mapped here (base address in the peer, mapping).
    peer_maps: Mutex<Vec<(u64, remora_mem::Buffer)>>,
    /// shm: who the peer is (kernel-checked at connect).
    peer: Option<crate::shm::Credentials>,
    /// shm: descriptors the listener handed to us at setup, until the application takes them.
    handover: Mutex<Vec<OwnedFd>>,
    /// shm, one-sided: the peer's regions it granted us, mapped here.
    grants: RwLock<Vec<direct::Grant>>,
    /// shm, one-sided: the peer's completion ring, which our WRITE-with-immediate fill.
    producer: Mutex<Option<direct::Producer>>,
    /// shm, one-sided: our completion ring, which the peer fills.
    consumer: Option<Mutex<direct::Consumer>>,
    /// UC: a data request went through the stream, so the direct path (which could overtake
    /// it) is closed for good.
    uc_streamed: AtomicBool,
    /// shm, one-sided: remote keys we asked the peer to grant (each once).
    asked: Mutex<std::collections::HashSet<u32>>,
    /// shm, one-sided: grant requests the peer made and we answered (bounded).
    grants_given: std::sync::atomic::AtomicUsize,
}

impl Shared {
    fn count(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Delivers completions of the receive thread after the ring's older ones (under the
    /// consumer's lock, so a polling thread cannot slip newer ring entries in between).
    fn push_in_order(&self, items: impl IntoIterator<Item = Completion>) {
        match &self.consumer {
            None => self.cq.push_all(items),
            Some(c) => {
                let mut c = c.lock().unwrap_or_else(|e| e.into_inner());
                self.drain_locked(&mut c);
                self.cq.push_all(items);
            }
        }
    }

    /// Moves what the peer published in our ring into the completion queue.
    fn drain_ring(&self) -> bool {
        if let Some(c) = &self.consumer {
            let mut c = c.lock().unwrap_or_else(|e| e.into_inner());
            if !c.is_empty() {
                self.drain_locked(&mut c);
                return true;
            }
        }
        false
    }

    fn drain_locked(&self, c: &mut direct::Consumer) {
        let mut out = Vec::new();
        match c.drain(&mut out) {
            Ok(n) => self.count(|s| s.ring_completions += n as u64),
            Err(e) => {
                // A peer that corrupts the ring is treated as a broken connection.
                tracing::warn!(error = %e, "shm completion ring");
                self.count(|s| s.rx_malformed += 1);
                self.error.store(true, Ordering::Release);
            }
        }
        self.cq.push_all(out);
    }

    /// Fails every outstanding request (the connection is gone or the QP is in error).
    fn flush_pending(&self, first: Option<Status>) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(p.len());
        let mut first = first;
        for w in p.drain(..) {
            let st = first.take().unwrap_or(Status::Flushed);
            out.push(Completion::send_side(w.wr_id, w.op, st, w.len));
        }
        drop(p);
        self.cq.push_all(out);
    }
}

/// One queue pair on the tcp or shm transport.
pub(crate) struct StreamQp {
    shared: Arc<Shared>,
    /// Responses and control frames from the receive thread go through the writer thread.
    tx: Mutex<mpsc::Sender<Out>>,
    /// The stream's write side, shared by posting threads (which write their requests
    /// themselves, saving a thread hop) and the writer thread.
    out: Arc<Mutex<BufWriter<Sock>>>,
    sock: Sock,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl StreamQp {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        sock: Sock,
        pd: Arc<Pd>,
        path: DataPath,
        qp_type: QpType,
        progress: Progress,
        cq: Arc<Cq>,
        peer: Option<crate::shm::Credentials>,
        handover: Vec<OwnedFd>,
    ) -> Result<Arc<StreamQp>> {
        // shm: our completion ring, with the doorbell up for good when a thread drives us.
        let ring = match path {
            DataPath::Shm => Some(
                direct::Ring::create(progress == Progress::Thread)
                    .map_err(|e| Error::Setup(format!("shm completion ring: {e}")))?,
            ),
            DataPath::Inline => None,
        };
        let shared = Arc::new(Shared {
            pd,
            cq,
            path,
            reliable: qp_type == QpType::Rc,
            pending: Mutex::new(VecDeque::new()),
            recvs: Mutex::new(VecDeque::new()),
            recv_cv: Condvar::new(),
            error: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            closed: Mutex::new(false),
            closed_cv: Condvar::new(),
            stats: Mutex::new(Stats::default()),
            announced: Mutex::new(std::collections::HashMap::new()),
            peer_maps: Mutex::new(Vec::new()),
            peer,
            handover: Mutex::new(handover),
            grants: RwLock::new(Vec::new()),
            producer: Mutex::new(None),
            consumer: ring
                .map(|r| Mutex::new(direct::Consumer::new(r, progress == Progress::Thread))),
            uc_streamed: AtomicBool::new(false),
            asked: Mutex::new(std::collections::HashSet::new()),
            grants_given: std::sync::atomic::AtomicUsize::new(0),
        });
        let (tx, rx) = mpsc::channel();
        let wsock = sock.try_clone().map_err(io_err("cloning the stream"))?;
        let out = Arc::new(Mutex::new(BufWriter::with_capacity(STREAM_BUFFER, wsock)));
        let wout = out.clone();
        let rsock = sock.try_clone().map_err(io_err("cloning the stream"))?;
        let writer = std::thread::Builder::new()
            .name("remora-stream-tx".into())
            .spawn(move || writer(wout, rx))
            .map_err(io_err("spawning the writer thread"))?;
        let s2 = shared.clone();
        let tx2 = tx.clone();
        let reader = std::thread::Builder::new()
            .name("remora-stream-rx".into())
            .spawn(move || rx::receiver(rsock, tx2, s2))
            .map_err(io_err("spawning the receive thread"))?;
        let qp = Arc::new(StreamQp {
            shared,
            tx: Mutex::new(tx),
            out,
            sock,
            threads: Mutex::new(vec![writer, reader]),
        });
        if matches!(path, DataPath::Shm) {
            qp.grant()
                .map_err(io_err("handing the one-sided shm completion ring over"))?;
        }
        Ok(qp)
    }

    /// shm: hands the peer our completion ring (see [`direct`]); regions are granted later, to
    /// a peer that names them by remote key.
    fn grant(&self) -> io::Result<()> {
        let sh = &self.shared;
        let mut w = self.out.lock().unwrap_or_else(|e| e.into_inner());
        w.flush()?;
        if let Some(fd) = sh
            .consumer
            .as_ref()
            .map(|c| c.lock().unwrap_or_else(|e| e.into_inner()))
            .and_then(|c| c.ring().fd().map(|f| f.try_clone_to_owned()))
        {
            let f = Frame {
                kind: RING,
                aux: direct::RING_BYTES as u64,
                ..Frame::default()
            };
            w.get_ref().send_with_fd(&f.encode(), fd?.as_fd())?;
        }
        Ok(())
    }

    /// shm: moves what the peer published in our completion ring into the completion queue;
    /// true if there was anything.
    pub(crate) fn drain_ring(&self) -> bool {
        self.shared.drain_ring()
    }

    /// shm: raises or lowers the doorbell around a sleep of a polling thread.
    pub(crate) fn want_doorbell(&self, on: bool) {
        if let Some(c) = &self.shared.consumer {
            let c = c.lock().unwrap_or_else(|e| e.into_inner());
            c.want_doorbell(on);
            if on && !c.is_empty() {
                drop(c);
                self.shared.drain_ring();
            }
        }
    }

    /// shm, one-sided: carries out a WRITE or READ on a region the peer granted, when the
    /// order allows it; false when the request must take the stream.
    fn try_direct(&self, wr: &SendWr) -> Result<bool> {
        let sh = &self.shared;
        if !matches!(sh.path, DataPath::Shm) {
            return Ok(false);
        }
        let need = match wr.op {
            WrOp::Write { .. } => remora_mem::Access::REMOTE_WRITE,
            WrOp::Read => remora_mem::Access::REMOTE_READ,
            WrOp::Send { .. } => return Ok(false),
        };
        let behind_stream = if sh.reliable {
            !sh.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
        } else {
            sh.uc_streamed.load(Ordering::Acquire)
        };
        if behind_stream {
            return Ok(false);
        }
        let grants = sh.grants.read().unwrap_or_else(|e| e.into_inner());
        let Some(g) = grants.iter().find(|g| g.rkey() == wr.rkey) else {
            drop(grants);
            self.ask_grant(wr.rkey);
            return Ok(false);
        };
        if matches!(wr.op, WrOp::Write { imm: Some(_) })
            && sh
                .producer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_none()
        {
            // The ring is not here yet (setup still in flight): the stream carries this one.
            return Ok(false);
        }
        let Some(remote) = g.check(wr.remote_va, wr.len, need) else {
            drop(grants);
            sh.count(|s| {
                s.access_errors += 1;
                s.naks_received += 1;
            });
            if sh.reliable {
                sh.error.store(true, Ordering::Release);
            }
            sh.cq.push_all([Completion::send_side(
                wr.wr_id,
                wr.op,
                Status::RemoteAccessError,
                wr.len,
            )]);
            return Ok(true);
        };
        // SAFETY: validate() checked offset+len against the local region; the remote range is
        // inside the granted mapping (checked above), which lives while `grants` is held.
        unsafe {
            let local = resident_slice(&wr.local, wr.offset, wr.len).as_mut_ptr();
            match wr.op {
                WrOp::Read => std::ptr::copy_nonoverlapping(remote, local, wr.len),
                _ => std::ptr::copy_nonoverlapping(local, remote, wr.len),
            }
        }
        drop(grants);
        if let WrOp::Write { imm: Some(imm) } = wr.op {
            self.notify(imm, wr.len as u32)?;
        }
        sh.count(|s| s.one_sided += 1);
        sh.cq.push_all([Completion::send_side(
            wr.wr_id,
            wr.op,
            Status::Success,
            wr.len,
        )]);
        Ok(true)
    }

    /// Asks the peer, once per remote key, to grant that region for one-sided access; this
    /// request and the ones before the answer take the stream. Knowing the key is the
    /// capability, as with RDMA: a peer gets only regions it can name.
    fn ask_grant(&self, rkey: u32) {
        let sh = &self.shared;
        {
            let mut asked = sh.asked.lock().unwrap_or_else(|e| e.into_inner());
            if asked.len() >= MAX_PEER_MAPS || !asked.insert(rkey) {
                return;
            }
        }
        let f = Frame {
            kind: GRANT_REQ,
            rkey,
            ..Frame::default()
        };
        let mut w = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if put(&mut w, Out::Frame(f)).and_then(|()| w.flush()).is_err() {
            sh.error.store(true, Ordering::Release);
        }
    }

    /// Publishes an immediate in the peer's ring, ringing the doorbell when it sleeps, and
    /// waiting for room when the ring is full (its receive thread drains it on the doorbell).
    fn notify(&self, imm: u32, len: u32) -> Result<()> {
        let sh = &self.shared;
        let start = std::time::Instant::now();
        let mut waited = start;
        let mut rang = false;
        loop {
            let pushed = {
                let mut p = sh.producer.lock().unwrap_or_else(|e| e.into_inner());
                match p.as_mut() {
                    Some(p) => p.push(imm, len),
                    None => return Err(Error::QpError),
                }
            };
            let doorbell = match pushed {
                direct::Pushed::Ring { doorbell } => doorbell,
                direct::Pushed::Full => {
                    if sh.error.load(Ordering::Acquire) {
                        return Err(Error::Disconnected);
                    }
                    if start.elapsed() > RING_FULL_LIMIT {
                        // The peer's receive thread drains on the doorbell whatever its
                        // application does; a ring full this long is a broken or hostile peer
                        // (its tail word is in memory it writes), not a slow one.
                        tracing::warn!("shm: the peer's completion ring stayed full; QP in error");
                        sh.error.store(true, Ordering::Release);
                        sh.flush_pending(None);
                        return Err(Error::QpError);
                    }
                    if !rang {
                        self.ring_doorbell()?;
                        rang = true;
                        waited = std::time::Instant::now();
                    } else if waited.elapsed() > Duration::from_millis(100) {
                        // The doorbell may have been taken before the ring filled up.
                        rang = false;
                    }
                    std::thread::yield_now();
                    continue;
                }
            };
            if doorbell {
                self.ring_doorbell()?;
            }
            return Ok(());
        }
    }

    fn ring_doorbell(&self) -> Result<()> {
        let mut w = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let f = Frame {
            kind: DOORBELL,
            ..Frame::default()
        };
        put(&mut w, Out::Frame(f))
            .and_then(|()| w.flush())
            .map_err(|_| {
                self.shared.error.store(true, Ordering::Release);
                Error::Disconnected
            })
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
        if !sh.reliable && wr.op != WrOp::Read {
            sh.uc_streamed.store(true, Ordering::Release);
        }
        let local_addr = wr.local.addr() + wr.offset as u64;
        let (frame, inline_payload) = match wr.op {
            WrOp::Write { imm } => (
                Frame {
                    kind: if imm.is_some() { WRITE_IMM } else { WRITE },
                    len: wr.len as u32,
                    va: wr.remote_va,
                    rkey: wr.rkey,
                    imm: imm.unwrap_or(0),
                    aux: local_addr,
                    ..Frame::default()
                },
                true,
            ),
            WrOp::Send { imm } => (
                Frame {
                    kind: if imm.is_some() { SEND_IMM } else { SEND },
                    len: wr.len as u32,
                    imm: imm.unwrap_or(0),
                    aux: local_addr,
                    ..Frame::default()
                },
                true,
            ),
            WrOp::Read => (
                Frame {
                    kind: READ_REQ,
                    len: wr.len as u32,
                    va: wr.remote_va,
                    rkey: wr.rkey,
                    aux: local_addr,
                    ..Frame::default()
                },
                false,
            ),
        };
        // The stream's order must be the pending queue's: the write lock is taken first and
        // held across both. The pending lock is held only to push, never while writing, so the
        // receive thread (which takes only the pending lock) always keeps reading and two peers
        // writing at each other cannot deadlock.
        let tracked = sh.reliable || wr.op == WrOp::Read;
        let mut w = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let written = self.write_request(&mut w, frame, &wr, inline_payload, tracked);
        drop(w);
        if written.is_err() {
            sh.error.store(true, Ordering::Release);
            return Err(Error::Disconnected);
        }
        sh.count(|s| s.tx_packets += 1);
        if !tracked {
            // UC: complete once handed to the stream.
            sh.cq.push_all([Completion::send_side(
                wr.wr_id,
                wr.op,
                Status::Success,
                wr.len,
            )]);
        }
        Ok(())
    }

    /// Queues the request as pending (when a response will come) and writes it: by reference
    /// when its region was handed over (shm), else with its payload inline if it has one.
    fn write_request(
        &self,
        w: &mut BufWriter<Sock>,
        mut frame: Frame,
        wr: &SendWr,
        inline_payload: bool,
        tracked: bool,
    ) -> io::Result<()> {
        let byref = match self.shared.path {
            DataPath::Shm => self.announce(w, &wr.local)?,
            DataPath::Inline => false,
        };
        if byref {
            frame.code = BYREF;
        }
        if tracked {
            self.shared
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(Pending {
                    wr_id: wr.wr_id,
                    op: wr.op,
                    len: wr.len,
                    local: wr.local.clone(),
                    offset: wr.offset,
                    byref,
                });
        }
        let out = if inline_payload && !byref {
            Out::Payload(frame, wr.local.clone(), wr.offset)
        } else {
            Out::Frame(frame)
        };
        put(w, out)?;
        w.flush()
    }

    /// shm: hands the peer a memfd-backed local region once (a MAP frame with the memfd
    /// attached), so it moves that region's bytes with one memcpy; true if the region's bytes go
    /// by reference. Regions that are not sealed memfds stay inline: the peer could not map
    /// them safely, and nothing else of ours is ever exposed.
    fn announce(&self, w: &mut BufWriter<Sock>, r: &Region) -> io::Result<bool> {
        let Some(fd) = r.memfd() else {
            return Ok(false);
        };
        let mut done = self
            .shared
            .announced
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(&byref) = done.get(&r.lkey()) {
            return Ok(byref);
        }
        let sealed = rustix::fs::fcntl_get_seals(fd)
            .is_ok_and(|s| s.contains(rustix::fs::SealFlags::SHRINK));
        let handed = done.values().filter(|&&b| b).count();
        if !sealed || handed >= MAX_PEER_MAPS {
            done.insert(r.lkey(), false);
            return Ok(false);
        }
        let map = Frame {
            kind: MAP,
            va: r.addr(),
            aux: r.len() as u64,
            ..Frame::default()
        };
        w.flush()?;
        w.get_ref().send_with_fd(&map.encode(), fd)?;
        done.insert(r.lkey(), true);
        Ok(true)
    }

    /// shm: the peer's kernel-checked identity.
    pub(crate) fn peer_credentials(&self) -> Option<crate::shm::Credentials> {
        self.shared.peer
    }

    /// shm: the descriptors the listener handed over at setup (once).
    pub(crate) fn take_handover(&self) -> Vec<OwnedFd> {
        std::mem::take(
            &mut *self
                .shared
                .handover
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }

    pub(crate) fn post_recv(&self, wr: RecvWr) -> Result<()> {
        wr.validate()?;
        let sh = &self.shared;
        sh.recvs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(wr);
        sh.recv_cv.notify_all();
        Ok(())
    }

    pub(crate) fn stats(&self) -> Stats {
        *self.shared.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.shared.closed.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn wait_closed(&self, timeout: Option<Duration>) -> Result<()> {
        let sh = &self.shared;
        let mut closed = sh.closed.lock().unwrap_or_else(|e| e.into_inner());
        while !*closed {
            match timeout {
                None => closed = sh.closed_cv.wait(closed).unwrap_or_else(|e| e.into_inner()),
                Some(t) => {
                    let (c, r) = sh
                        .closed_cv
                        .wait_timeout(closed, t)
                        .unwrap_or_else(|e| e.into_inner());
                    closed = c;
                    if r.timed_out() && !*closed {
                        return Err(Error::Timeout);
                    }
                }
            }
        }
        Ok(())
    }

    /// Ends the queue pair in order: the receive thread sees the end of the stream (our read
    /// side shut) after handling what it had buffered and queueing its last ACKs, and only then
    /// is the writer told to stop, so it sends those ACKs first. Shutting both sides at once
    /// lost the ACK of a SEND whose completion the application had already seen and reacted to
    /// by closing, and the peer saw that SEND flushed.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.recv_cv.notify_all();
        let _ = self.sock.shutdown(Shutdown::Read);
        let mut threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        // [writer, reader]
        if let Some(reader) = threads.pop() {
            let _ = reader.join();
        }
        let _ = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Out::Stop);
        for t in threads {
            let _ = t.join();
        }
        let _ = self.sock.shutdown(Shutdown::Both);
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
/// and some of it is not. A stream queue pair has its own receive thread and a byte stream that
/// cannot skip ahead, so a fault here stalls only this queue pair: PART's NAK and ERR would buy
/// nothing, and one populate per message replaces a fault per page.
///
/// # Safety
/// As [`region_slice`].
#[allow(clippy::mut_from_ref)]
unsafe fn resident_slice(r: &Region, off: usize, len: usize) -> &mut [u8] {
    // Pages the map holds are skipped, so a resident range costs a bitmap scan. On an error the
    // copy below takes the faults itself.
    if let Err(e) = r.page_in_range(off, len) {
        tracing::debug!(error = %e, "populating a range failed; the copy takes the faults");
    }
    region_slice(r, off, len)
}

/// Writes one frame (and its inline payload).
fn put(w: &mut BufWriter<Sock>, o: Out) -> io::Result<()> {
    match o {
        Out::Stop => Err(io::ErrorKind::Interrupted.into()),
        Out::Frame(f) => w.write_all(&f.encode()),
        Out::WithFd(f, fd) => {
            // The descriptor must travel with these very bytes: nothing buffered before them.
            w.flush()?;
            w.get_ref().send_with_fd(&f.encode(), fd.as_fd())
        }
        Out::Payload(f, region, off) => {
            w.write_all(&f.encode())?;
            // SAFETY: bounds were checked when the request was posted or the access checked.
            let bytes = unsafe { resident_slice(&region, off, f.len as usize) };
            w.write_all(bytes)
        }
    }
}

/// Sends what the receive thread queues (ACKs, NAKs, READ responses), batching what is
/// queued together into one flush.
fn writer(out: Arc<Mutex<BufWriter<Sock>>>, rx: mpsc::Receiver<Out>) {
    while let Ok(first) = rx.recv() {
        let mut w = out.lock().unwrap_or_else(|e| e.into_inner());
        let mut r = put(&mut w, first);
        while r.is_ok() {
            match rx.try_recv() {
                Ok(o) => r = put(&mut w, o),
                Err(_) => break,
            }
        }
        match r {
            // Stop: what was queued before it still goes out (the last ACKs).
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                let _ = w.flush();
                break;
            }
            Err(_) => break,
            Ok(()) => {
                if w.flush().is_err() {
                    break;
                }
            }
        }
    }
}
