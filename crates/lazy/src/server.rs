//! The page server: serves a [`PageSource`] to lazy regions over TCP (or a Unix socket) with the
//! [`protocol`](crate::protocol): an urgent read path (one connection per client handler) and a
//! bulk push path (a separate connection streaming the source in growing chunks).
use crate::error::{Error, Result};
use crate::protocol::{Hello, Op, PageHeaderPacket, Reply, Request, Status, HEADER_LEN, MAX_CHUNK};
use crate::source::{is_zero, PageSource, PushCursor};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A page server bound to a TCP address.
pub struct PageServer {
    listener: TcpListener,
    source: Arc<dyn PageSource>,
}

/// A running server; dropping it (or [`ServerHandle::kill`]) stops it and closes every connection.
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Conns,
    thread: Option<JoinHandle<()>>,
}

/// Open connections by id (a second handle on each, so `kill` can shut them down).
type Conns = Arc<Mutex<HashMap<u64, TcpStream>>>;

/// Connections served at once; more are refused (closed) until some end.
pub const MAX_CONNECTIONS: usize = 1024;

impl PageServer {
    /// Binds `addr` (port 0 picks one).
    pub fn bind(addr: SocketAddr, source: Arc<dyn PageSource>) -> Result<PageServer> {
        let listener = TcpListener::bind(addr).map_err(|e| Error::io(format!("bind {addr}"), e))?;
        Ok(PageServer { listener, source })
    }
    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| Error::io("local_addr", e))
    }
    /// Serves on a background thread until the handle is dropped or killed.
    pub fn spawn(self) -> Result<ServerHandle> {
        let addr = self.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Conns = Arc::new(Mutex::new(HashMap::new()));
        let (s, c) = (stop.clone(), conns.clone());
        let thread = std::thread::Builder::new()
            .name("lazy-server".into())
            .spawn(move || self.accept_loop(&s, &c))
            .map_err(|e| Error::io("spawn server thread", e))?;
        Ok(ServerHandle {
            addr,
            stop,
            conns,
            thread: Some(thread),
        })
    }
    /// Serves in the calling thread until the process ends.
    pub fn run(self) {
        let stop = AtomicBool::new(false);
        let conns: Conns = Arc::new(Mutex::new(HashMap::new()));
        self.accept_loop(&stop, &conns);
    }

    fn accept_loop(self, stop: &AtomicBool, conns: &Conns) {
        let mut next_id = 0u64;
        if let Err(e) = self.listener.set_nonblocking(true) {
            tracing::error!("page server: set_nonblocking: {e}");
            return;
        }
        tracing::info!(
            "page server on {:?} serving {}",
            self.listener.local_addr().ok(),
            self.source.describe()
        );
        let hello = Arc::new(
            Hello {
                len: self.source.len(),
                segments: self.source.segments(),
                zero_map: self.source.zero_map(),
            }
            .to_bytes(),
        );
        while !stop.load(Ordering::Acquire) {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_nodelay(true);
                    next_id += 1;
                    let id = next_id;
                    {
                        let mut g = conns.lock().unwrap_or_else(|p| p.into_inner());
                        if g.len() >= MAX_CONNECTIONS {
                            tracing::warn!(
                                "page server: {peer} refused: {MAX_CONNECTIONS} connections open"
                            );
                            continue;
                        }
                        // A second handle so kill() can shut the connection down.
                        match stream.try_clone() {
                            Ok(c) => {
                                g.insert(id, c);
                            }
                            Err(e) => {
                                tracing::warn!("page server: {peer} refused: {e}");
                                continue;
                            }
                        }
                    }
                    let src = self.source.clone();
                    let hello = hello.clone();
                    let mine = conns.clone();
                    let r = std::thread::Builder::new()
                        .name("lazy-conn".into())
                        .spawn(move || {
                            if let Err(e) = serve_conn(stream, &*src, &hello) {
                                tracing::debug!("page server: connection {peer} ended: {e}");
                            }
                            mine.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                        });
                    if let Err(e) = r {
                        tracing::error!("page server: cannot spawn connection thread: {e}");
                        conns.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let _ = crate::sys::poll_in(self.listener.as_raw_fd(), 50);
                }
                Err(e) => {
                    tracing::warn!("page server: accept: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
    }
}

impl ServerHandle {
    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// Stops accepting and closes every connection (what a crashed server looks like to clients).
    pub fn kill(&mut self) {
        self.stop.store(true, Ordering::Release);
        for (_, c) in self.conns.lock().unwrap_or_else(|p| p.into_inner()).drain() {
            let _ = c.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Serves one connection: the hello, then reads or a push stream.
pub fn serve_conn<S>(mut stream: S, src: &dyn PageSource, hello: &[u8]) -> Result<()>
where
    S: Read + Write + TryCloneStream + Send + 'static,
{
    stream
        .write_all(hello)
        .map_err(|e| Error::io("send hello", e))?;
    // One buffer holds the reply header followed by the data so each reply is one write.
    let mut buf = vec![0u8; HEADER_LEN + (64 << 10)];
    loop {
        let mut h = [0u8; HEADER_LEN];
        match stream.recv_request(&mut h) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(Error::io("read request", e)),
        }
        let req = Request::parse(&PageHeaderPacket::new_unchecked(&h[..]))
            .map_err(|e| Error::Protocol(e.to_string()))?;
        match req.op {
            Op::Read => serve_read(&mut stream, src, req, &mut buf)?,
            Op::PushStart => return serve_push(stream, src, req.offset, req.len as u64),
            Op::PushRestart => {
                return Err(Error::Protocol("PushRestart before PushStart".into()));
            }
        }
    }
}

fn serve_read<S: Write>(
    stream: &mut S,
    src: &dyn PageSource,
    req: Request,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let len = req.len as usize;
    if buf.len() < HEADER_LEN + len {
        buf.resize(HEADER_LEN + len, 0);
    }
    let in_range = req
        .offset
        .checked_add(req.len as u64)
        .is_some_and(|end| end <= src.len());
    let reply = if !in_range {
        Err(format!(
            "range {:#x}+{:#x} outside the source of {:#x} bytes",
            req.offset,
            req.len,
            src.len()
        ))
    } else {
        src.read_at(req.offset, &mut buf[HEADER_LEN..HEADER_LEN + len])
            .map_err(|e| e.to_string())
    };
    let out = match reply {
        Ok(()) if is_zero(&buf[HEADER_LEN..HEADER_LEN + len]) => {
            let r = Reply {
                status: Status::Zero,
                len: req.len,
                offset: req.offset,
            };
            buf[..HEADER_LEN].copy_from_slice(&r.to_bytes());
            &buf[..HEADER_LEN]
        }
        Ok(()) => {
            let r = Reply {
                status: Status::Data,
                len: req.len,
                offset: req.offset,
            };
            buf[..HEADER_LEN].copy_from_slice(&r.to_bytes());
            &buf[..HEADER_LEN + len]
        }
        Err(msg) => {
            let m = msg.as_bytes();
            let m = &m[..m.len().min(1024)];
            let r = Reply {
                status: Status::Error,
                len: m.len() as u32,
                offset: req.offset,
            };
            buf.truncate(0);
            buf.extend_from_slice(&r.to_bytes());
            buf.extend_from_slice(m);
            &buf[..]
        }
    };
    stream
        .write_all(out)
        .map_err(|e| Error::io("send reply", e))
}

fn serve_push<S>(mut stream: S, src: &dyn PageSource, from: u64, unit: u64) -> Result<()>
where
    S: Read + Write + TryCloneStream + Send + 'static,
{
    // Restart requests arrive while we stream; a reader thread keeps only the latest one.
    const NONE: u64 = u64::MAX;
    let restart = Arc::new(AtomicU64::new(NONE));
    let closed = Arc::new(AtomicBool::new(false));
    let mut rd = stream
        .try_clone_stream()
        .map_err(|e| Error::io("clone push stream", e))?;
    let (r2, c2) = (restart.clone(), closed.clone());
    std::thread::Builder::new()
        .name("lazy-push-ctl".into())
        .spawn(move || {
            let mut h = [0u8; HEADER_LEN];
            while rd.read_exact(&mut h).is_ok() {
                match Request::parse(&PageHeaderPacket::new_unchecked(&h[..])) {
                    Ok(Request {
                        op: Op::PushRestart,
                        offset,
                        ..
                    }) => r2.store(offset, Ordering::Release),
                    _ => break,
                }
            }
            c2.store(true, Ordering::Release);
        })
        .map_err(|e| Error::io("spawn push reader", e))?;
    let mut cur = PushCursor::new(src.len(), from, unit);
    let mut buf = vec![0u8; HEADER_LEN + MAX_CHUNK as usize];
    // Pages the source says are zero are pushed as such without being read (an arena or a
    // sparse file is mostly room nothing uses).
    let known = Hello {
        len: src.len(),
        segments: Vec::new(),
        zero_map: src.zero_map(),
    };
    loop {
        if closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let r = restart.swap(NONE, Ordering::AcqRel);
        if r != NONE {
            cur.restart(r);
        }
        let Some((at, n)) = cur.next_chunk() else {
            let end = Reply {
                status: Status::End,
                len: 0,
                offset: 0,
            };
            stream
                .write_all(&end.to_bytes())
                .map_err(|e| Error::io("send push end", e))?;
            // Stay until the client restarts us or goes away.
            while !closed.load(Ordering::Acquire) {
                let r = restart.swap(NONE, Ordering::AcqRel);
                if r != NONE {
                    cur.restart(r);
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            continue;
        };
        // A chunk that mixes pages the zero map names with others goes as runs of whole
        // units of each kind: the zero runs unread and free of the client's rate limit.
        let end = at + n;
        let step = if unit.is_power_of_two() && (4096..=MAX_CHUNK as u64).contains(&unit) {
            unit
        } else {
            n.max(1)
        };
        let mut run = at;
        while run < end {
            let zero_run = known.is_zero(run, step.min(end - run));
            let mut stop = (run + step).min(end);
            while stop < end && known.is_zero(stop, step.min(end - stop)) == zero_run {
                stop = (stop + step).min(end);
            }
            send_push_run(
                &mut stream,
                src,
                run,
                (stop - run) as usize,
                zero_run,
                &mut buf,
            )?;
            run = stop;
        }
    }
}

/// Sends `[at, at+n)` of a push as one reply: zero (known, or read and found so) or data.
fn send_push_run<S: Write>(
    stream: &mut S,
    src: &dyn PageSource,
    at: u64,
    n: usize,
    known_zero: bool,
    buf: &mut [u8],
) -> Result<()> {
    let zero = known_zero || {
        src.read_at(at, &mut buf[HEADER_LEN..HEADER_LEN + n])?;
        is_zero(&buf[HEADER_LEN..HEADER_LEN + n])
    };
    let r = Reply {
        status: if zero { Status::Zero } else { Status::Data },
        len: n as u32,
        offset: at,
    };
    buf[..HEADER_LEN].copy_from_slice(&r.to_bytes());
    let out = if zero {
        &buf[..HEADER_LEN]
    } else {
        &buf[..HEADER_LEN + n]
    };
    stream
        .write_all(out)
        .map_err(|e| Error::io("send push chunk", e))
}

/// How long a connection thread busy-polls for the next request before sleeping in recv.
const SERVER_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Streams that can be split into a reader and a writer.
pub trait TryCloneStream: Sized + Read {
    /// A second handle on the same connection.
    fn try_clone_stream(&self) -> std::io::Result<Self>;
    /// Reads one request header (busy-polling briefly where the stream supports it).
    fn recv_request(&mut self, h: &mut [u8]) -> std::io::Result<()> {
        self.read_exact(h)
    }
}
impl TryCloneStream for TcpStream {
    fn try_clone_stream(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
    fn recv_request(&mut self, h: &mut [u8]) -> std::io::Result<()> {
        crate::sys::recv_exact_spin(self, h, SERVER_SPIN)
    }
}
impl TryCloneStream for std::os::unix::net::UnixStream {
    fn try_clone_stream(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
}
