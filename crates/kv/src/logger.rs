//! memcached's log streams: `watch` turns a client connection into a stream of log lines
//! (`ts=… gid=… type=item_get key=… status=found …`) for the event kinds it named.
//!
//! As in memcached (logger.c), each watcher has a buffer of `-o watcher_logbuf_size` bytes; a
//! line that does not fit once the buffer was flushed as far as the socket takes is skipped and
//! counted, and the next line that fits is preceded by `skipped=N`. A writer thread sends the
//! buffers and notices watchers that hung up. Logging costs one atomic load while nobody
//! watches the event's stream.
//!
//! The worker that ran `watch` hands over a duplicate of the connection's descriptor and then
//! forgets the connection (without shutting the socket down): the log stream owns the socket
//! from there on, as memcached's logger thread does. Up to 20 watchers, as memcached.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{recv, send, RecvFlags, SendFlags};

pub use crate::protocol::watch;

/// memcached's `WATCHER_LIMIT`.
pub const WATCHER_LIMIT: usize = 20;

/// memcached's default `watcher_logbuf_size` (256 KB).
pub const DEFAULT_BUF_SIZE: usize = 256 * 1024;

/// How often the writer thread flushes buffers and checks for hung-up watchers.
const TICK: Duration = Duration::from_millis(5);

/// Why [`Logger::add_watcher`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddError {
    /// Already [`WATCHER_LIMIT`] watchers.
    TooMany,
}

/// How a connection ended, as `conn_close` lines name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CloseReason {
    /// A protocol error (an HTTP request line, an over-long line, binary garbage).
    Error,
    /// `quit`, or the client hung up.
    #[default]
    Normal,
    /// `-o idle_timeout`.
    IdleTimeout,
    /// `shutdown`.
    Shutdown,
}

impl CloseReason {
    fn name(self) -> &'static str {
        match self {
            CloseReason::Error => "error",
            CloseReason::Normal => "normal",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Shutdown => "shutdown",
        }
    }
}

/// Outcome of a store, as `item_store` lines name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreStatus {
    /// `not_stored`
    NotStored,
    /// `stored`
    Stored,
    /// `exists`
    Exists,
    /// `not_found`
    NotFound,
    /// `too_large`
    TooLarge,
    /// `no_memory`
    NoMemory,
}

impl StoreStatus {
    fn name(self) -> &'static str {
        match self {
            StoreStatus::NotStored => "not_stored",
            StoreStatus::Stored => "stored",
            StoreStatus::Exists => "exists",
            StoreStatus::NotFound => "not_found",
            StoreStatus::TooLarge => "too_large",
            StoreStatus::NoMemory => "no_memory",
        }
    }
}

/// An evicted item, for `eviction` lines.
#[derive(Debug, Clone, Copy)]
pub struct Evicted<'a> {
    /// Its key.
    pub key: &'a [u8],
    /// Whether it had been read.
    pub fetched: bool,
    /// Seconds it had left to live (-1 = no expiry).
    pub ttl: i64,
    /// Seconds since its last access.
    pub last_access: u32,
    /// Value length.
    pub size: usize,
}

struct Watcher {
    fd: OwnedFd,
    streams: u16,
    min_gid: u64,
    buf: VecDeque<u8>,
    skipped: u64,
    dead: bool,
}

impl Watcher {
    /// Sends as much of the buffer as the socket takes without blocking.
    fn flush(&mut self) {
        while !self.buf.is_empty() && !self.dead {
            let (a, _) = self.buf.as_slices();
            match send(&self.fd, a, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
                Ok(n) if n > 0 => {
                    self.buf.drain(..n);
                    continue;
                }
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => {}
                // Sent nothing (the peer is gone) or failed otherwise.
                _ => self.dead = true,
            }
            return;
        }
    }
}

#[derive(Default)]
struct State {
    watchers: Vec<Watcher>,
    writer_running: bool,
}

/// The log streams of one server.
pub struct Logger {
    /// Streams at least one watcher wants (the hot-path check).
    flags: AtomicU16,
    gid: AtomicU64,
    buf_size: usize,
    state: Mutex<State>,
    me: Weak<Logger>,
    written: AtomicU64,
    sent: AtomicU64,
    skipped: AtomicU64,
    watchers: AtomicU64,
}

impl Logger {
    /// A logger whose watchers buffer `buf_size` bytes each.
    pub fn new(buf_size: usize) -> Arc<Logger> {
        Arc::new_cyclic(|me| Logger {
            flags: AtomicU16::new(0),
            gid: AtomicU64::new(0),
            buf_size: buf_size.max(256),
            state: Mutex::new(State::default()),
            me: me.clone(),
            written: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            watchers: AtomicU64::new(0),
        })
    }

    /// The next log line's id (memcached keeps it across a warm restart: `logger_gid`).
    pub fn gid(&self) -> u64 {
        self.gid.load(Relaxed)
    }

    /// Sets the next log line's id (a warm restart).
    pub fn set_gid(&self, gid: u64) {
        self.gid.store(gid, Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Whether some watcher wants `stream` (one of [`watch`]'s bits).
    #[inline]
    pub fn wants(&self, stream: u16) -> bool {
        self.flags.load(Relaxed) & stream != 0
    }

    /// Makes `fd` (a client socket) a watcher of `streams`; it is sent `OK` first.
    pub fn add_watcher(&self, fd: OwnedFd, streams: u16) -> Result<(), AddError> {
        let mut st = self.lock();
        if st.watchers.len() >= WATCHER_LIMIT {
            return Err(AddError::TooMany);
        }
        st.watchers.push(Watcher {
            fd,
            streams,
            min_gid: self.gid.load(Relaxed),
            buf: VecDeque::from(b"OK\r\n".to_vec()),
            skipped: 0,
            dead: false,
        });
        self.update(&st);
        if !st.writer_running {
            st.writer_running = true;
            let me = self.me.clone();
            let spawned = std::thread::Builder::new()
                .name("kv-logger".into())
                .spawn(move || writer(me));
            if spawned.is_err() {
                st.writer_running = false;
                // Without a writer the watcher would never see its lines.
                st.watchers.pop();
                self.update(&st);
                return Err(AddError::TooMany);
            }
        }
        Ok(())
    }

    fn update(&self, st: &State) {
        let f = st.watchers.iter().fold(0, |f, w| f | w.streams);
        self.flags.store(f, Relaxed);
        self.watchers.store(st.watchers.len() as u64, Relaxed);
    }

    /// Current watchers (`stats`: `log_watchers`).
    pub fn watcher_count(&self) -> u64 {
        self.watchers.load(Relaxed)
    }

    /// Lines logged (`log_worker_written`).
    pub fn written(&self) -> u64 {
        self.written.load(Relaxed)
    }

    /// Lines queued to watchers (`log_watcher_sent`).
    pub fn sent(&self) -> u64 {
        self.sent.load(Relaxed)
    }

    /// Lines watchers missed for a full buffer (`log_watcher_skipped`).
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Relaxed)
    }

    /// Logs one line of `stream`: `body` writes what follows `ts=… gid=… `.
    pub fn log(&self, stream: u16, body: impl FnOnce(&mut String)) {
        if !self.wants(stream) {
            return;
        }
        let gid = self.gid.fetch_add(1, Relaxed);
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut line = String::with_capacity(160);
        // memcached prints the microseconds unpadded ("%lld.%d").
        let _ = write!(
            line,
            "ts={}.{} gid={gid} ",
            ts.as_secs(),
            ts.subsec_micros()
        );
        body(&mut line);
        line.push('\n');
        self.written.fetch_add(1, Relaxed);
        let mut st = self.lock();
        for w in st.watchers.iter_mut() {
            if w.streams & stream == 0 || gid < w.min_gid || w.dead {
                continue;
            }
            // Room for the line and a `skipped=` line before it, as memcached asks.
            let room = |w: &Watcher| w.buf.len() + line.len() + 128 <= self.buf_size;
            if !room(w) {
                w.flush();
            }
            if !room(w) {
                w.skipped += 1;
                self.skipped.fetch_add(1, Relaxed);
                continue;
            }
            if w.skipped > 0 {
                w.buf.extend(format!("skipped={}\n", w.skipped).as_bytes());
                w.skipped = 0;
            }
            w.buf.extend(line.as_bytes());
            self.sent.fetch_add(1, Relaxed);
        }
    }

    /// `item_get`: a read of `key`, `size` = the value's length when found (`clsid` is 1 for a
    /// found item, remora's one pseudo slab class, and 0 otherwise, as memcached prints it).
    pub fn item_get(&self, key: &[u8], size: Option<usize>, cfd: i64) {
        self.log(watch::FETCHERS, |l| {
            l.push_str("type=item_get key=");
            uriencode(l, key);
            let _ = write!(
                l,
                " status={} clsid={} cfd={cfd} size={}",
                if size.is_some() { "found" } else { "not_found" },
                size.is_some() as u8,
                size.unwrap_or(0)
            );
        });
    }

    /// `item_store`: a store of `key` by `cmd` (`set`, `add`, …) with `ttl` seconds left
    /// (0 = never expires) and a value of `size` bytes.
    pub fn item_store(
        &self,
        key: &[u8],
        status: StoreStatus,
        cmd: &str,
        ttl: u32,
        size: usize,
        cfd: i64,
    ) {
        self.log(watch::MUTATIONS, |l| {
            l.push_str("type=item_store key=");
            uriencode(l, key);
            let _ = write!(
                l,
                " status={} cmd={cmd} ttl={ttl} clsid=1 cfd={cfd} size={size}",
                status.name()
            );
        });
    }

    /// `eviction`: an item pushed out to make room.
    pub fn eviction(&self, e: &Evicted<'_>) {
        self.log(watch::EVICTIONS, |l| {
            l.push_str("type=eviction key=");
            uriencode(l, e.key);
            let _ = write!(
                l,
                " fetch={} ttl={} la={} clsid=1 size={}",
                if e.fetched { "yes" } else { "no" },
                e.ttl,
                e.last_access,
                e.size
            );
        });
    }

    /// `conn_new`: an accepted connection.
    pub fn conn_new(&self, peer: Option<SocketAddr>, cfd: i64) {
        self.log(watch::CONNEVENTS, |l| {
            l.push_str("type=conn_new ");
            endpoint(l, peer);
            let _ = write!(l, " cfd={cfd}");
        });
    }

    /// `conn_close`: a connection that ended.
    pub fn conn_close(&self, peer: Option<SocketAddr>, reason: CloseReason, cfd: i64) {
        self.log(watch::CONNEVENTS, |l| {
            l.push_str("type=conn_close ");
            endpoint(l, peer);
            let _ = write!(l, " reason={} cfd={cfd}", reason.name());
        });
    }
}

/// `rip=… rport=… transport=…` (a unix-socket peer is `rip=unix rport=0 transport=local`).
fn endpoint(l: &mut String, peer: Option<SocketAddr>) {
    let _ = match peer {
        Some(a) => write!(l, "rip={} rport={} transport=tcp", a.ip(), a.port()),
        None => write!(l, "rip=unix rport=0 transport=local"),
    };
}

/// memcached's `uriencode`: bytes other than ASCII letters, digits and `-._~` as `%XX`.
pub fn uriencode(out: &mut String, key: &[u8]) {
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// The writer thread: flushes watcher buffers and drops watchers that hung up; exits when the
/// last watcher is gone (the next `watch` starts it again) or the logger was dropped.
fn writer(me: Weak<Logger>) {
    loop {
        std::thread::sleep(TICK);
        let Some(l) = me.upgrade() else {
            return;
        };
        let mut st = l.lock();
        // Each watcher's returned events (none when poll failed), taken before the loop below
        // borrows the watchers mutably.
        let revents: Vec<PollFlags> = {
            let mut fds: Vec<PollFd<'_>> = st
                .watchers
                .iter()
                .map(|w| {
                    let out = if w.buf.is_empty() {
                        PollFlags::empty()
                    } else {
                        PollFlags::OUT
                    };
                    PollFd::new(&w.fd, PollFlags::IN | out)
                })
                .collect();
            let none = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            match poll(&mut fds, Some(&none)) {
                Ok(n) if n > 0 => fds.iter().map(PollFd::revents).collect(),
                _ => Vec::new(),
            }
        };
        for (w, &p) in st.watchers.iter_mut().zip(&revents) {
            if p.contains(PollFlags::IN) {
                // Early detection of a hang-up; input on a watcher is read and dropped.
                let mut b = [0u8; 1];
                match recv(&w.fd, &mut b, RecvFlags::DONTWAIT) {
                    Ok((n, _)) if n > 0 => {}
                    Err(Errno::AGAIN) => {}
                    _ => w.dead = true,
                }
            }
            if p.intersects(PollFlags::HUP | PollFlags::ERR) {
                w.dead = true;
            }
            if p.contains(PollFlags::OUT) {
                w.flush();
            }
        }
        let before = st.watchers.len();
        st.watchers.retain(|w| !w.dead);
        if st.watchers.len() != before {
            l.update(&st);
        }
        if st.watchers.is_empty() {
            st.writer_running = false;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixStream;

    fn watcher(l: &Logger, streams: u16) -> BufReader<UnixStream> {
        let (a, b) = UnixStream::pair().unwrap();
        l.add_watcher(OwnedFd::from(a), streams).unwrap();
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        BufReader::new(b)
    }

    fn line(r: &mut BufReader<UnixStream>) -> String {
        let mut s = String::new();
        r.read_line(&mut s).unwrap();
        s
    }

    #[test]
    fn lines_reach_the_watchers_of_their_stream() {
        let l = Logger::new(DEFAULT_BUF_SIZE);
        assert!(!l.wants(watch::FETCHERS));
        let mut f = watcher(&l, watch::FETCHERS);
        let mut m = watcher(&l, watch::MUTATIONS);
        assert_eq!(l.watcher_count(), 2);
        l.item_get(b"a b", Some(3), 7);
        l.item_store(b"k", StoreStatus::Stored, "set", 0, 4, 8);
        assert_eq!(line(&mut f), "OK\r\n");
        let g = line(&mut f);
        assert!(g.starts_with("ts="), "{g}");
        assert!(
            g.ends_with(" type=item_get key=a%20b status=found clsid=1 cfd=7 size=3\n"),
            "{g}"
        );
        assert_eq!(line(&mut m), "OK\r\n");
        let s = line(&mut m);
        assert!(
            s.ends_with(
                " type=item_store key=k status=stored cmd=set ttl=0 clsid=1 cfd=8 size=4\n"
            ),
            "{s}"
        );
    }

    #[test]
    fn a_full_buffer_skips_lines_and_says_how_many() {
        // 256 bytes of buffer and a socket that is not read: lines are skipped once both fill.
        let l = Logger::new(256);
        let (a, b) = UnixStream::pair().unwrap();
        l.add_watcher(OwnedFd::from(a), watch::FETCHERS).unwrap();
        for _ in 0..100_000 {
            l.item_get(&[b'x'; 100], None, 1);
        }
        assert!(l.skipped() > 0);
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut r = BufReader::new(b);
        // Each line read makes room for another: the first that fits says what was missed.
        loop {
            let s = line(&mut r);
            if s.starts_with("skipped=") {
                break;
            }
            l.item_get(b"more", None, 1);
        }
        assert!(line(&mut r).contains("type=item_get key=more"));
    }

    #[test]
    fn a_watcher_that_hangs_up_is_dropped() {
        let l = Logger::new(DEFAULT_BUF_SIZE);
        let w = watcher(&l, watch::FETCHERS);
        drop(w);
        let t0 = std::time::Instant::now();
        while l.watcher_count() > 0 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(l.watcher_count(), 0);
        assert!(!l.wants(watch::FETCHERS));
    }

    #[test]
    fn at_most_twenty_watchers() {
        let l = Logger::new(DEFAULT_BUF_SIZE);
        let _keep: Vec<_> = (0..WATCHER_LIMIT)
            .map(|_| watcher(&l, watch::FETCHERS))
            .collect();
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(
            l.add_watcher(OwnedFd::from(a), watch::FETCHERS),
            Err(AddError::TooMany)
        );
    }

    #[test]
    fn keys_are_uri_encoded() {
        let mut s = String::new();
        uriencode(&mut s, b"a-Z_9.~#\x01");
        assert_eq!(s, "a-Z_9.~%23%01");
    }
}
