//! The `tcp` and `shm` transports: requests and responses as 32-byte frames over one stream.
//!
//! `tcp` carries payloads inline after their frame and the receiver reads them straight into
//! the target region. `shm` carries only descriptors: the responder moves the bytes itself,
//! once, between the two address spaces, after checking the access against its own keys: with
//! `memcpy` when the requester's region is a memfd (announced once with a MAP frame and mapped
//! here through `/proc/PID/fd`), else with `process_vm_readv` (WRITE, SEND) and
//! `process_vm_writev` (READ).
//!
//! The stream is reliable and ordered, so there are no PSNs or retransmissions: on RC the
//! responder answers requests in order with coalesced `ACK n`, a `NAK code` for a refused one,
//! or a READ response; on UC it answers nothing and drops what it refuses. Each connection has
//! a receive thread and a writer thread fed by a channel, so a thread that receives never
//! blocks on a send (two peers writing large messages at each other cannot deadlock).
//!
//! Frame (little-endian): kind u8, code u8, 0 u16, len u32, va u64, rkey u32, imm u32, aux u64.
//! Kinds: 1 WRITE, 2 WRITE+imm, 3 SEND, 4 SEND+imm, 5 READ request, 6 READ response, 7 ACK
//! (len = requests acknowledged), 8 NAK (code = syndrome), 9 MAP (shm).
use std::collections::VecDeque;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use remora_mem::{Access, Pd, Region};
use remora_wire::NakCode;

use crate::conn::QpType;
use crate::cq::Cq;
use crate::engine::Stats;
use crate::error::{io_err, Error, Result};
use crate::wr::{Completion, RecvWr, SendWr, Status, WcOpcode, WrOp};

const HDR: usize = 32;
const WRITE: u8 = 1;
const WRITE_IMM: u8 = 2;
const SEND: u8 = 3;
const SEND_IMM: u8 = 4;
const READ_REQ: u8 = 5;
const READ_RESP: u8 = 6;
const ACK: u8 = 7;
const NAK: u8 = 8;
/// shm: announces a memfd-backed region of the requester (va = base, aux = length, rkey = the
/// requester's fd number) so the responder can map it and copy with plain memcpy.
const MAP: u8 = 9;
const STREAM_BUFFER: usize = 256 << 10;

/// How payload bytes travel.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DataPath {
    /// In the stream after the frame (tcp).
    Inline,
    /// Copied by the responder between address spaces (shm).
    Shm { peer_pid: i32 },
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Frame {
    kind: u8,
    code: u8,
    len: u32,
    va: u64,
    rkey: u32,
    imm: u32,
    aux: u64,
}

impl Frame {
    fn encode(&self) -> [u8; HDR] {
        let mut b = [0u8; HDR];
        b[0] = self.kind;
        b[1] = self.code;
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.va.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b[20..24].copy_from_slice(&self.imm.to_le_bytes());
        b[24..32].copy_from_slice(&self.aux.to_le_bytes());
        b
    }

    fn decode(b: &[u8; HDR]) -> Frame {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Frame {
            kind: b[0],
            code: b[1],
            len: u32_at(4),
            va: u64_at(8),
            rkey: u32_at(16),
            imm: u32_at(20),
            aux: u64_at(24),
        }
    }
}

enum Out {
    Frame(Frame),
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
    /// shm requester: local memfd regions already announced to the peer (by lkey).
    announced: Mutex<std::collections::HashSet<u32>>,
    /// shm responder: the peer's memfd regions mapped here (base address in the peer, mapping).
    peer_maps: Mutex<Vec<(u64, remora_mem::Buffer)>>,
}

impl Shared {
    fn count(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
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
    out: Arc<Mutex<BufWriter<TcpStream>>>,
    sock: TcpStream,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl StreamQp {
    pub(crate) fn start(
        sock: TcpStream,
        pd: Arc<Pd>,
        path: DataPath,
        qp_type: QpType,
        cq: Arc<Cq>,
    ) -> Result<Arc<StreamQp>> {
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
            announced: Mutex::new(std::collections::HashSet::new()),
            peer_maps: Mutex::new(Vec::new()),
        });
        let (tx, rx) = mpsc::channel();
        let wsock = sock.try_clone().map_err(io_err("cloning the stream"))?;
        let out = Arc::new(Mutex::new(BufWriter::with_capacity(STREAM_BUFFER, wsock)));
        let wout = out.clone();
        let rsock = sock.try_clone().map_err(io_err("cloning the stream"))?;
        let s1 = shared.clone();
        let writer = std::thread::Builder::new()
            .name("remora-stream-tx".into())
            .spawn(move || writer(wout, rx, s1))
            .map_err(io_err("spawning the writer thread"))?;
        let s2 = shared.clone();
        let tx2 = tx.clone();
        let reader = std::thread::Builder::new()
            .name("remora-stream-rx".into())
            .spawn(move || receiver(rsock, tx2, s2))
            .map_err(io_err("spawning the receive thread"))?;
        Ok(Arc::new(StreamQp {
            shared,
            tx: Mutex::new(tx),
            out,
            sock,
            threads: Mutex::new(vec![writer, reader]),
        }))
    }

    pub(crate) fn post_send(&self, wr: SendWr) -> Result<()> {
        let sh = &self.shared;
        if sh.error.load(Ordering::Acquire) {
            return Err(Error::QpError);
        }
        wr.validate(sh.reliable)?;
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
        let out = match sh.path {
            DataPath::Inline if inline_payload => Out::Payload(frame, wr.local.clone(), wr.offset),
            _ => Out::Frame(frame),
        };
        // The stream's order must be the pending queue's: the write lock is taken first and
        // held across both. The pending lock is held only to push, never while writing, so the
        // receive thread (which takes only the pending lock) always keeps reading and two peers
        // writing at each other cannot deadlock.
        let mut w = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let map = match sh.path {
            DataPath::Shm { .. } => self.announce(&wr.local),
            DataPath::Inline => None,
        };
        let tracked = sh.reliable || wr.op == WrOp::Read;
        if tracked {
            sh.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(Pending {
                    wr_id: wr.wr_id,
                    op: wr.op,
                    len: wr.len,
                    local: wr.local.clone(),
                    offset: wr.offset,
                });
        }
        let written = map
            .map_or(Ok(()), |m| put(&mut w, Out::Frame(m)))
            .and_then(|_| put(&mut w, out))
            .and_then(|_| w.flush());
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

    /// shm: tells the peer about a memfd-backed local region once, so it can map it and move
    /// bytes with memcpy instead of `process_vm_*` (which pins pages on every call).
    fn announce(&self, r: &Region) -> Option<Frame> {
        use std::os::fd::AsRawFd;
        let fd = r.memfd()?;
        let mut done = self
            .shared
            .announced
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !done.insert(r.lkey()) {
            return None;
        }
        Some(Frame {
            kind: MAP,
            va: r.addr(),
            aux: r.len() as u64,
            rkey: fd.as_raw_fd() as u32,
            ..Frame::default()
        })
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

    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.recv_cv.notify_all();
        let _ = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Out::Stop);
        let _ = self.sock.shutdown(Shutdown::Both);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
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

/// Writes one frame (and its inline payload).
fn put(w: &mut BufWriter<TcpStream>, o: Out) -> io::Result<()> {
    match o {
        Out::Stop => Err(io::ErrorKind::Interrupted.into()),
        Out::Frame(f) => w.write_all(&f.encode()),
        Out::Payload(f, region, off) => {
            w.write_all(&f.encode())?;
            // SAFETY: bounds were checked when the request was posted or the access checked.
            let bytes = unsafe { region_slice(&region, off, f.len as usize) };
            w.write_all(bytes)
        }
    }
}

/// Sends what the receive thread queues (ACKs, NAKs, READ responses), batching what is
/// queued together into one flush.
fn writer(out: Arc<Mutex<BufWriter<TcpStream>>>, rx: mpsc::Receiver<Out>, sh: Arc<Shared>) {
    while let Ok(first) = rx.recv() {
        let mut w = out.lock().unwrap_or_else(|e| e.into_inner());
        let mut r = put(&mut w, first);
        while r.is_ok() {
            match rx.try_recv() {
                Ok(o) => r = put(&mut w, o),
                Err(_) => break,
            }
        }
        if r.and_then(|_| w.flush()).is_err() {
            break;
        }
        drop(w);
        if sh.stop.load(Ordering::Acquire) {
            break;
        }
    }
}

fn receiver(sock: TcpStream, tx: mpsc::Sender<Out>, sh: Arc<Shared>) {
    let mut r = BufReader::with_capacity(STREAM_BUFFER, sock);
    let why = match serve(&mut r, &tx, &sh) {
        Ok(()) => "peer closed".to_string(),
        Err(e) => e,
    };
    if !sh.stop.load(Ordering::Acquire) {
        tracing::debug!(reason = %why, "stream queue pair closed");
    }
    sh.error.store(true, Ordering::Release);
    sh.flush_pending(None);
    *sh.closed.lock().unwrap_or_else(|e| e.into_inner()) = true;
    sh.closed_cv.notify_all();
}

/// Discards `n` bytes of a refused inline payload.
fn skip(r: &mut impl Read, n: u64) -> io::Result<()> {
    let copied = io::copy(&mut r.take(n), &mut io::sink())?;
    if copied < n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// The receive loop: requests from the peer and responses to ours. Returns on EOF (`Ok`) or a
/// protocol or I/O error (`Err` with the reason).
fn serve(
    r: &mut BufReader<TcpStream>,
    tx: &mpsc::Sender<Out>,
    sh: &Shared,
) -> std::result::Result<(), String> {
    let mut acks: u32 = 0;
    let send = |o: Out| {
        sh.count(|s| s.tx_packets += 1);
        tx.send(o).map_err(|_| "writer gone".to_string())
    };
    let flush_acks = |acks: &mut u32| -> std::result::Result<(), String> {
        if *acks > 0 {
            sh.count(|s| s.acks_sent += 1);
            send(Out::Frame(Frame {
                kind: ACK,
                len: std::mem::take(acks),
                ..Frame::default()
            }))?;
        }
        Ok(())
    };
    let nak = |acks: &mut u32, code: NakCode| -> std::result::Result<(), String> {
        sh.count(|s| s.naks_sent += 1);
        if !sh.reliable {
            return Ok(());
        }
        flush_acks(acks)?;
        send(Out::Frame(Frame {
            kind: NAK,
            code: nak_byte(code),
            ..Frame::default()
        }))
    };
    loop {
        if r.buffer().is_empty() {
            flush_acks(&mut acks)?;
        }
        let mut h = [0u8; HDR];
        match r.read_exact(&mut h) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.to_string()),
        }
        let f = Frame::decode(&h);
        sh.count(|s| s.rx_packets += 1);
        let len = f.len as usize;
        let io = |e: io::Error| e.to_string();
        match f.kind {
            WRITE | WRITE_IMM => {
                match sh
                    .pd
                    .check_remote(f.rkey, f.va, len as u64, Access::REMOTE_WRITE)
                {
                    Ok(ra) => {
                        if let Err(e) = place(r, sh, &ra.region, ra.offset, len, f.aux) {
                            nak(&mut acks, NakCode::RemoteOperationalError)?;
                            tracing::debug!(error = %e, "WRITE could not be placed");
                            continue;
                        }
                        if f.kind == WRITE_IMM {
                            sh.cq.push_all([Completion {
                                wr_id: 0,
                                status: Status::Success,
                                opcode: WcOpcode::RecvRdmaWithImm,
                                byte_len: f.len,
                                imm: Some(f.imm),
                            }]);
                        }
                        acks += sh.reliable as u32;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "remote WRITE refused");
                        sh.count(|s| s.access_errors += 1);
                        if matches!(sh.path, DataPath::Inline) {
                            skip(r, len as u64).map_err(io)?;
                        }
                        nak(&mut acks, NakCode::RemoteAccessError)?;
                    }
                }
            }
            SEND | SEND_IMM => {
                flush_acks(&mut acks)?;
                let Some(recv) = wait_recv(sh) else {
                    return Ok(());
                };
                if len > recv.len {
                    if matches!(sh.path, DataPath::Inline) {
                        skip(r, len as u64).map_err(io)?;
                    }
                    sh.count(|s| s.invalid_requests += 1);
                    sh.cq.push_all([Completion {
                        wr_id: recv.wr_id,
                        status: Status::LocalLengthError,
                        opcode: WcOpcode::Recv,
                        byte_len: 0,
                        imm: None,
                    }]);
                    nak(&mut acks, NakCode::InvalidRequest)?;
                    continue;
                }
                if let Err(e) = place(r, sh, &recv.local, recv.offset, len, f.aux) {
                    tracing::debug!(error = %e, "SEND could not be placed");
                    nak(&mut acks, NakCode::RemoteOperationalError)?;
                    continue;
                }
                sh.cq.push_all([Completion {
                    wr_id: recv.wr_id,
                    status: Status::Success,
                    opcode: WcOpcode::Recv,
                    byte_len: f.len,
                    imm: (f.kind == SEND_IMM).then_some(f.imm),
                }]);
                acks += sh.reliable as u32;
            }
            READ_REQ => match sh
                .pd
                .check_remote(f.rkey, f.va, len as u64, Access::REMOTE_READ)
            {
                Ok(ra) => {
                    flush_acks(&mut acks)?;
                    let resp = Frame {
                        kind: READ_RESP,
                        len: f.len,
                        ..Frame::default()
                    };
                    match sh.path {
                        DataPath::Inline => send(Out::Payload(resp, ra.region, ra.offset))?,
                        DataPath::Shm { peer_pid } => {
                            // SAFETY: the access check bounds offset+len within the region.
                            let src = unsafe { ra.region.as_ptr().add(ra.offset) };
                            let moved = match peer_ptr(sh, f.aux, len) {
                                Some(dst) => {
                                    // SAFETY: dst..dst+len is inside a live shared mapping of
                                    // the peer's memfd; src inside our region.
                                    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
                                    Ok(())
                                }
                                // SAFETY: src..src+len is readable region memory.
                                None => unsafe { crate::shm::write_to(peer_pid, f.aux, src, len) },
                            };
                            match moved {
                                Ok(()) => send(Out::Frame(resp))?,
                                Err(e) => {
                                    tracing::debug!(error = %e, "READ could not be delivered");
                                    nak(&mut acks, NakCode::RemoteOperationalError)?;
                                }
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "remote READ refused");
                    sh.count(|s| s.access_errors += 1);
                    nak(&mut acks, NakCode::RemoteAccessError)?;
                }
            },
            READ_RESP => {
                let mut pending = sh.pending.lock().unwrap_or_else(|e| e.into_inner());
                let ok = pending
                    .front()
                    .is_some_and(|p| p.op == WrOp::Read && p.len == len);
                if !ok {
                    return Err("READ response matches no outstanding READ".into());
                }
                let p = pending.pop_front().expect("checked above");
                drop(pending);
                if matches!(sh.path, DataPath::Inline) {
                    // SAFETY: bounds checked when the READ was posted.
                    let dst = unsafe { region_slice(&p.local, p.offset, len) };
                    r.read_exact(dst).map_err(io)?;
                }
                sh.cq
                    .push_all([Completion::send_side(p.wr_id, p.op, Status::Success, p.len)]);
            }
            ACK => {
                let mut pending = sh.pending.lock().unwrap_or_else(|e| e.into_inner());
                let n = len;
                if n > pending.len() || pending.iter().take(n).any(|p| p.op == WrOp::Read) {
                    return Err(format!(
                        "ACK of {n} requests does not match what is outstanding"
                    ));
                }
                let done: Vec<_> = pending
                    .drain(..n)
                    .map(|p| Completion::send_side(p.wr_id, p.op, Status::Success, p.len))
                    .collect();
                drop(pending);
                sh.cq.push_all(done);
            }
            NAK => {
                sh.count(|s| s.naks_received += 1);
                let status = match nak_code(f.code) {
                    Some(NakCode::RemoteAccessError) => Status::RemoteAccessError,
                    Some(NakCode::InvalidRequest | NakCode::InvalidRdRequest) => {
                        Status::RemoteInvalidRequest
                    }
                    _ => Status::RemoteOperationalError,
                };
                sh.error.store(true, Ordering::Release);
                sh.flush_pending(Some(status));
            }
            MAP => {
                if let DataPath::Shm { peer_pid } = sh.path {
                    match map_peer(peer_pid, f.rkey as i32, f.aux as usize) {
                        Ok(b) => sh
                            .peer_maps
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((f.va, b)),
                        // Not fatal: the bytes still move with process_vm_readv/writev.
                        Err(e) => tracing::debug!(error = %e, "cannot map the peer's memfd"),
                    }
                }
            }
            k => {
                sh.count(|s| s.rx_malformed += 1);
                return Err(format!("unknown frame kind {k}: stream out of sync"));
            }
        }
    }
}

/// Moves an incoming payload into `region` at `off`: from the stream (tcp) or straight from
/// the peer's memory at `src` (shm).
fn place(
    r: &mut BufReader<TcpStream>,
    sh: &Shared,
    region: &Region,
    off: usize,
    len: usize,
    src: u64,
) -> io::Result<()> {
    // SAFETY: callers checked off+len against the region (access check or receive buffer).
    let dst = unsafe { region_slice(region, off, len) };
    match sh.path {
        DataPath::Inline => r.read_exact(dst),
        DataPath::Shm { peer_pid } => {
            if let Some(p) = peer_ptr(sh, src, len) {
                // SAFETY: p..p+len lies inside a live shared mapping of the peer's memfd and
                // dst inside our region; they are different mappings, so no overlap in use.
                unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), len) };
                return Ok(());
            }
            // SAFETY: dst is writable region memory of this process.
            unsafe { crate::shm::read_from(peer_pid, src, dst.as_mut_ptr(), len) }
        }
    }
}

/// Where `[addr, addr+len)` of the peer's memory is mapped here, if it is.
fn peer_ptr(sh: &Shared, addr: u64, len: usize) -> Option<*mut u8> {
    let maps = sh.peer_maps.lock().unwrap_or_else(|e| e.into_inner());
    maps.iter().find_map(|(base, b)| {
        let off = addr.checked_sub(*base)? as usize;
        (off.checked_add(len)? <= b.len()).then(|| {
            // SAFETY: off + len is within the mapping.
            unsafe { b.as_ptr().add(off) }
        })
    })
}

/// Maps the peer's memfd through /proc (needs the same access as `process_vm_readv`).
fn map_peer(pid: i32, fd: i32, len: usize) -> io::Result<remora_mem::Buffer> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))?;
    remora_mem::Buffer::map_memfd(f.into(), len).map_err(io::Error::other)
}

fn wait_recv(sh: &Shared) -> Option<RecvWr> {
    let mut q = sh.recvs.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(r) = q.pop_front() {
            return Some(r);
        }
        if sh.stop.load(Ordering::Acquire) {
            return None;
        }
        q = sh
            .recv_cv
            .wait_timeout(q, Duration::from_millis(100))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

fn nak_byte(c: NakCode) -> u8 {
    match c {
        NakCode::PsnSequenceError => 0x60,
        NakCode::InvalidRequest => 0x61,
        NakCode::RemoteAccessError => 0x62,
        NakCode::RemoteOperationalError => 0x63,
        NakCode::InvalidRdRequest => 0x64,
    }
}

fn nak_code(b: u8) -> Option<NakCode> {
    Some(match b {
        0x60 => NakCode::PsnSequenceError,
        0x61 => NakCode::InvalidRequest,
        0x62 => NakCode::RemoteAccessError,
        0x63 => NakCode::RemoteOperationalError,
        0x64 => NakCode::InvalidRdRequest,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trips_and_is_little_endian() {
        let f = Frame {
            kind: WRITE_IMM,
            code: 0x62,
            len: 0x0102_0304,
            va: 0x1122_3344_5566_7788,
            rkey: 0xdead_beef,
            imm: 7,
            aux: 9,
        };
        let b = f.encode();
        assert_eq!(&b[4..8], &[4, 3, 2, 1]);
        assert_eq!(Frame::decode(&b), f);
        for c in [0x60u8, 0x61, 0x62, 0x63, 0x64] {
            assert_eq!(nak_byte(nak_code(c).unwrap()), c);
        }
        assert!(nak_code(0x65).is_none());
    }
}
