//! The client side of a page server: [`PageFetcher`] fetches one range of the source into a
//! staging buffer (or reports it zero) on the urgent path, and opens a [`PushStream`] for the bulk
//! path. `LocalFetcher` serves from a source in the same process (the userfaultfd floor);
//! `TcpFetcher` talks the [`protocol`](crate::protocol) to a [`PageServer`](crate::PageServer).
use crate::protocol::{
    hello_len, Hello, Op, PageHeaderPacket, PageHelloPacket, Reply, Request, Status, HEADER_LEN,
    HELLO_FIXED_LEN,
};
use crate::source::{is_zero, PageSource, PushCursor};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a fetch produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetched {
    /// The buffer holds the bytes.
    Data,
    /// The range is all zero (the buffer is untouched).
    Zero,
}

/// Why a fetch failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// Worth retrying (connection refused or reset, timeout).
    #[error("{0}")]
    Transient(String),
    /// Retrying will not help (the server refused the range, protocol violation).
    #[error("{0}")]
    Fatal(String),
}

/// One chunk of a push stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushChunk {
    /// Offset in the source.
    pub offset: u64,
    /// Bytes.
    pub len: usize,
    /// True if the range is zero (nothing in the buffer).
    pub zero: bool,
}

/// What a push stream produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushNext {
    /// A chunk; its bytes are in the buffer unless it is zero.
    Chunk(PushChunk),
    /// Nothing arrived within the timeout.
    Idle,
    /// The stream covered the whole source (a restart starts it again).
    End,
}

/// The bulk channel of a page server.
pub trait PushStream: Send {
    /// Moves the stream to `from` (the pages after a fault).
    fn restart(&mut self, from: u64) -> Result<(), FetchError>;
    /// The next chunk, its bytes in `buf` (resized as needed).
    fn next(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> Result<PushNext, FetchError>;
}

/// Fetches ranges of a remote (or local) source.
pub trait PageFetcher: Send + Sync {
    /// Bytes in the source.
    fn len(&self) -> u64;
    /// True if the source is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fills `buf` with `[offset, offset+buf.len())` (bytes past the source's end read as zero),
    /// or reports the range zero. Must return by `deadline`.
    fn fetch(&self, offset: u64, buf: &mut [u8], deadline: Instant) -> Result<Fetched, FetchError>;
    /// True if the range is known to be zero without asking (file holes).
    fn known_zero(&self, _offset: u64, _len: u64) -> bool {
        false
    }
    /// The bytes of `[offset, offset+len)` in this process's memory, if the source lives here
    /// and holds the whole range: they are installed straight from there, with no staging copy.
    fn direct(&self, _offset: u64, _len: usize) -> Option<&[u8]> {
        None
    }
    /// Opens the bulk channel starting at `from`; chunks cover whole `unit`s.
    fn open_push(&self, from: u64, unit: u64) -> Result<Box<dyn PushStream>, FetchError>;
    /// Transport name for reports (`local`, `tcp`, ...).
    fn transport(&self) -> &'static str;
}

/// Serves from a source in this process: the cost of userfaultfd alone.
pub struct LocalFetcher {
    src: Arc<dyn PageSource>,
    mem: Option<Arc<crate::source::MemorySource>>,
}

impl LocalFetcher {
    /// Serves `src`.
    pub fn new(src: Arc<dyn PageSource>) -> LocalFetcher {
        LocalFetcher { src, mem: None }
    }
    /// Serves bytes held in memory; faults install straight from them (no staging copy).
    pub fn memory(src: Arc<crate::source::MemorySource>) -> LocalFetcher {
        LocalFetcher {
            src: src.clone(),
            mem: Some(src),
        }
    }
}

impl PageFetcher for LocalFetcher {
    fn len(&self) -> u64 {
        self.src.len()
    }
    fn fetch(
        &self,
        offset: u64,
        buf: &mut [u8],
        _deadline: Instant,
    ) -> Result<Fetched, FetchError> {
        self.src
            .read_at(offset, buf)
            .map_err(|e| FetchError::Fatal(e.to_string()))?;
        Ok(if is_zero(buf) {
            Fetched::Zero
        } else {
            Fetched::Data
        })
    }
    fn direct(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let b = self.mem.as_ref()?.bytes();
        let start = usize::try_from(offset).ok()?;
        b.get(start..start.checked_add(len)?)
    }
    fn open_push(&self, from: u64, unit: u64) -> Result<Box<dyn PushStream>, FetchError> {
        Ok(Box::new(LocalPush {
            src: self.src.clone(),
            cur: PushCursor::new(self.src.len(), from, unit),
        }))
    }
    fn transport(&self) -> &'static str {
        "local"
    }
}

struct LocalPush {
    src: Arc<dyn PageSource>,
    cur: PushCursor,
}

impl PushStream for LocalPush {
    fn restart(&mut self, from: u64) -> Result<(), FetchError> {
        self.cur.restart(from);
        Ok(())
    }
    fn next(&mut self, buf: &mut Vec<u8>, _t: Duration) -> Result<PushNext, FetchError> {
        let Some((offset, len)) = self.cur.next_chunk() else {
            return Ok(PushNext::End);
        };
        let len = len as usize;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        self.src
            .read_at(offset, &mut buf[..len])
            .map_err(|e| FetchError::Fatal(e.to_string()))?;
        Ok(PushNext::Chunk(PushChunk {
            offset,
            len,
            zero: is_zero(&buf[..len]),
        }))
    }
}

/// Client of a TCP page server. Keeps a pool of connections so that several handler threads
/// fetch in parallel; a broken connection is dropped and the next fetch reconnects.
pub struct TcpFetcher {
    addr: SocketAddr,
    hello: Hello,
    pool: Mutex<Vec<TcpStream>>,
    /// Longest wait for one attempt (connect or reply) before it counts as failed.
    attempt: Duration,
}

fn read_hello(s: &mut TcpStream) -> Result<Hello, FetchError> {
    let mut fixed = vec![0u8; HELLO_FIXED_LEN];
    s.read_exact(&mut fixed)
        .map_err(|e| FetchError::Transient(format!("read hello: {e}")))?;
    let total = hello_len(&fixed).map_err(|e| FetchError::Fatal(e.to_string()))?;
    fixed.resize(total, 0);
    s.read_exact(&mut fixed[HELLO_FIXED_LEN..])
        .map_err(|e| FetchError::Transient(format!("read hello: {e}")))?;
    Hello::parse(&PageHelloPacket::new_unchecked(&fixed[..]))
        .map_err(|e| FetchError::Fatal(e.to_string()))
}

impl TcpFetcher {
    /// Connects to a page server and reads its hello.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> crate::Result<TcpFetcher> {
        let mut s = Self::dial(addr, timeout)
            .map_err(|e| crate::Error::Protocol(format!("connect {addr}: {e}")))?;
        let hello =
            read_hello(&mut s).map_err(|e| crate::Error::Protocol(format!("{addr}: {e}")))?;
        Ok(TcpFetcher {
            addr,
            hello,
            pool: Mutex::new(vec![s]),
            attempt: Duration::from_millis(250),
        })
    }
    /// The server's hello (length, segments, zero map).
    pub fn hello(&self) -> &Hello {
        &self.hello
    }
    /// Sets how long one attempt may take before it is retried (default 250 ms).
    pub fn set_attempt_timeout(&mut self, t: Duration) {
        self.attempt = t;
    }

    fn dial(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, FetchError> {
        let s = TcpStream::connect_timeout(&addr, timeout.max(Duration::from_millis(1)))
            .map_err(|e| FetchError::Transient(format!("connect {addr}: {e}")))?;
        s.set_nodelay(true).ok();
        s.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .ok();
        Ok(s)
    }

    fn conn(&self, deadline: Instant) -> Result<TcpStream, FetchError> {
        if let Some(s) = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Ok(s);
        }
        let t = deadline
            .saturating_duration_since(Instant::now())
            .min(self.attempt);
        let mut s = Self::dial(self.addr, t)?;
        let h = read_hello(&mut s)?;
        if h.len != self.hello.len {
            return Err(FetchError::Fatal(format!(
                "server at {} now serves {} bytes, was {}",
                self.addr, h.len, self.hello.len
            )));
        }
        Ok(s)
    }
}

/// How long a fetch busy-polls for its reply before sleeping in recv.
const CLIENT_SPIN: Duration = Duration::from_micros(100);

fn read_reply(s: &mut TcpStream) -> Result<Reply, FetchError> {
    let mut h = [0u8; HEADER_LEN];
    crate::sys::recv_exact_spin(s, &mut h, CLIENT_SPIN)
        .map_err(|e| FetchError::Transient(format!("read reply: {e}")))?;
    Reply::parse(&PageHeaderPacket::new_unchecked(&h[..]))
        .map_err(|e| FetchError::Fatal(e.to_string()))
}

impl PageFetcher for TcpFetcher {
    fn len(&self) -> u64 {
        self.hello.len
    }
    fn known_zero(&self, offset: u64, len: u64) -> bool {
        self.hello.is_zero(offset, len)
    }
    fn fetch(&self, offset: u64, buf: &mut [u8], deadline: Instant) -> Result<Fetched, FetchError> {
        // Clip to the source; the tail of the last unit reads as zero.
        let avail = self.hello.len.saturating_sub(offset).min(buf.len() as u64) as usize;
        if avail == 0 {
            return Ok(Fetched::Zero);
        }
        let mut s = self.conn(deadline)?;
        let t = deadline
            .saturating_duration_since(Instant::now())
            .min(self.attempt)
            .max(Duration::from_millis(1));
        s.set_read_timeout(Some(t)).ok();
        let req = Request {
            op: Op::Read,
            len: avail as u32,
            offset,
        };
        s.write_all(&req.to_bytes())
            .map_err(|e| FetchError::Transient(format!("send request: {e}")))?;
        let r = read_reply(&mut s)?;
        if r.offset != offset {
            return Err(FetchError::Fatal(format!(
                "reply for {:#x}, asked {offset:#x}",
                r.offset
            )));
        }
        let out = match r.status {
            Status::Data if r.len as usize == avail => {
                crate::sys::recv_exact_spin(&mut s, &mut buf[..avail], CLIENT_SPIN)
                    .map_err(|e| FetchError::Transient(format!("read data: {e}")))?;
                buf[avail..].fill(0);
                Fetched::Data
            }
            Status::Zero => Fetched::Zero,
            Status::Error => {
                let mut m = vec![0u8; r.len as usize];
                s.read_exact(&mut m).ok();
                return Err(FetchError::Fatal(String::from_utf8_lossy(&m).into_owned()));
            }
            _ => return Err(FetchError::Fatal(format!("unexpected reply {r:?}"))),
        };
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).push(s);
        Ok(out)
    }
    fn open_push(&self, from: u64, unit: u64) -> Result<Box<dyn PushStream>, FetchError> {
        let mut s = Self::dial(self.addr, self.attempt)?;
        read_hello(&mut s)?;
        s.write_all(
            &Request {
                op: Op::PushStart,
                len: unit.min(crate::protocol::MAX_CHUNK as u64) as u32,
                offset: from,
            }
            .to_bytes(),
        )
        .map_err(|e| FetchError::Transient(format!("start push: {e}")))?;
        Ok(Box::new(TcpPush { s }))
    }
    fn transport(&self) -> &'static str {
        "tcp"
    }
}

struct TcpPush {
    s: TcpStream,
}

impl PushStream for TcpPush {
    fn restart(&mut self, from: u64) -> Result<(), FetchError> {
        let r = Request {
            op: Op::PushRestart,
            len: 0,
            offset: from,
        };
        self.s
            .write_all(&r.to_bytes())
            .map_err(|e| FetchError::Transient(format!("restart push: {e}")))
    }
    fn next(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> Result<PushNext, FetchError> {
        self.s
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .ok();
        let mut h = [0u8; HEADER_LEN];
        // Peek so a timeout between chunks does not lose a half-read header.
        match self.s.peek(&mut h) {
            Ok(n) if n < HEADER_LEN => {
                self.s.set_read_timeout(Some(Duration::from_secs(5))).ok();
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(PushNext::Idle)
            }
            Err(e) => return Err(FetchError::Transient(format!("push: {e}"))),
        }
        self.s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let r = read_reply(&mut self.s)?;
        match r.status {
            Status::End => Ok(PushNext::End),
            Status::Zero => Ok(PushNext::Chunk(PushChunk {
                offset: r.offset,
                len: r.len as usize,
                zero: true,
            })),
            Status::Data => {
                let n = r.len as usize;
                if buf.len() < n {
                    buf.resize(n, 0);
                }
                self.s
                    .read_exact(&mut buf[..n])
                    .map_err(|e| FetchError::Transient(format!("push data: {e}")))?;
                Ok(PushNext::Chunk(PushChunk {
                    offset: r.offset,
                    len: n,
                    zero: false,
                }))
            }
            Status::Error => Err(FetchError::Fatal("push refused by server".into())),
        }
    }
}
