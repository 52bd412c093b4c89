//! One worker thread: a mio (epoll) loop over its connections (the default, `-o io=epoll`,
//! and the fallback when an io_uring cannot be set up).

use std::collections::HashMap;
use std::io::{self, IoSlice, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpStream, UnixStream};
use mio::{event::Source, Events, Interest, Poll, Registry, Token};

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use super::conn_table::{addr_text, ConnEntry, ConnKind, STATE_NREAD, STATE_SWALLOW};
use crate::handler::{process, Cache, Proto, Session};
use crate::out::Out;
use crate::stats;

use super::readbuf::ReadBuf;
use super::WAKER;

/// Unsent reply bytes per connection (values queued by reference included) at which it stops
/// parsing, and reading, more requests until they drain.
pub(super) const OUT_LIMIT: usize = 1 << 20;
/// Pieces handed to one `writev`.
pub(super) const IOV_BATCH: usize = 64;

/// An accepted stream.
pub enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix domain.
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
    /// One `sendmsg`, not std's `writev`: a socket send skips the VFS write path (permission
    /// and fsnotify hooks), which cost measurably per reply (`write` is a `send` too).
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendFlags};
        // No control data: the empty buffer makes a msghdr with no name and no control.
        let mut control = SendAncillaryBuffer::default();
        Ok(sendmsg(&*self, b, &mut control, SendFlags::NOSIGNAL)?)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}

struct Conn {
    stream: Stream,
    rbuf: ReadBuf,
    wbuf: Out,
    session: Session,
    closing: bool,
    drained: bool,
    token: Token,
    /// Descriptor of a TCP connection listed by `stats conns`.
    table_fd: Option<i32>,
    /// Registered for writability (only while output is stuck).
    want_write: bool,
    /// Stopped after `-R` requests with input left: driven again after the other events.
    yielded: bool,
}

impl Conn {
    /// Sends buffered output; Ok(true) when all of it left.
    fn flush(&mut self, counters: &stats::Counters) -> io::Result<bool> {
        while !self.wbuf.is_empty() {
            let mut iov = [IoSlice::new(&[]); IOV_BATCH];
            let n = self.wbuf.io_slices(&mut iov);
            // One piece (replies without a shared value) goes out with a plain send.
            let sent = if n == 1 {
                self.stream.write(&iov[0])
            } else {
                self.stream.write_vectored(&iov[..n])
            };
            match sent {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.wbuf.advance(n);
                    stats::add(&counters.bytes_written, n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Runs the connection until it would block; false = drop it.
    fn drive(&mut self, eng: &Cache, registry: &Registry) -> bool {
        let counters = self.session.counters.clone();
        self.yielded = false;
        loop {
            let mut stalled = false;
            if self.rbuf.has_pending() && !self.closing {
                let o = process(
                    eng,
                    &mut self.session,
                    self.rbuf.pending(),
                    &mut self.wbuf,
                    OUT_LIMIT,
                );
                self.rbuf.consume(o.consumed);
                if o.close {
                    self.closing = true;
                }
                self.yielded = o.yielded;
                stalled = self.wbuf.len() >= OUT_LIMIT;
                note_wait(&self.session, self.rbuf.pending(), stalled);
            }
            match self.flush(&counters) {
                Err(_) => return false,
                Ok(false) => {
                    // Ask for writability only while output is stuck: fewer wakeups otherwise.
                    if !self.want_write {
                        self.want_write = true;
                        let i = Interest::READABLE | Interest::WRITABLE;
                        if self.stream.reregister(registry, self.token, i).is_err() {
                            return false;
                        }
                    }
                    return true;
                }
                Ok(true) => {
                    if self.want_write {
                        self.want_write = false;
                        let r = self
                            .stream
                            .reregister(registry, self.token, Interest::READABLE);
                        if r.is_err() {
                            return false;
                        }
                    }
                }
            }
            if self.closing {
                return false;
            }
            if self.yielded {
                return true;
            }
            // A request may be waiting on output room: run again before reading more.
            if stalled {
                continue;
            }
            if self.drained {
                // The last read came back short: the socket was empty, and edge-triggered
                // epoll will report new data. Skipping the EAGAIN read saves a syscall.
                self.drained = false;
                return true;
            }
            self.rbuf.reserve();
            let spare = self.rbuf.spare();
            let room = spare.len();
            match self.stream.read(spare) {
                Ok(0) => return false,
                Ok(n) => {
                    self.rbuf.filled(n);
                    self.drained = n < room;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }
}

/// Lists a TCP or unix-socket connection in the `stats conns` table.
pub(super) fn list_conn(eng: &Cache, s: &Stream) -> Option<(i32, Arc<ConnEntry>)> {
    let t = match s {
        Stream::Tcp(t) => t,
        Stream::Unix(u) => {
            // memcached prints an unnamed unix peer as an unknown family, and the socket path
            // as the listening address.
            let path = u.local_addr().ok()?.as_pathname()?.display().to_string();
            let fd = u.as_raw_fd();
            let e = eng.conn_table.add(
                fd,
                ConnKind::Client,
                "?:<AF 0>".into(),
                Some(format!("unix:{path}")),
                eng.now(),
            );
            return Some((fd, e));
        }
    };
    let peer = t.peer_addr().ok()?;
    // memcached prints the listener's address; an accepted socket's local address is that
    // address whenever the listener is bound to a specific one.
    let local = t.local_addr().ok()?;
    let fd = t.as_raw_fd();
    let e = eng.conn_table.add(
        fd,
        ConnKind::Client,
        addr_text("tcp", &peer),
        Some(addr_text("tcp", &local)),
        eng.now(),
    );
    Some((fd, e))
}

/// After a connection's input was run: what `stats conns` shows it waiting for, as memcached's
/// state machine would (`conn_nread` with a command line received and its data not, or a
/// binary header without its body; `conn_swallow` while discarding a refused value).
pub(super) fn note_wait(s: &Session, pending: &[u8], stalled: bool) {
    let Some(e) = &s.conn else {
        return;
    };
    if s.swallow > 0 {
        e.waiting(STATE_SWALLOW);
    } else if !stalled
        && match s.proto {
            Proto::Binary => pending.len() >= crate::protocol::binary::HEADER_LEN,
            _ => pending.contains(&b'\n'),
        }
    {
        e.waiting(STATE_NREAD);
    }
}

/// `-o idle_timeout`: whether a connection waiting for a command has been silent for longer
/// than the timeout (memcached's check: `current_time - last_cmd_time > idle_timeout`).
pub(super) fn idle_expired(eng: &Cache, s: &Session, now: u32) -> bool {
    let t = eng.settings.tunables.idle_timeout;
    t > 0
        && s.conn
            .as_ref()
            .and_then(|e| e.idle_since())
            .is_some_and(|since| now.saturating_sub(since) > t)
}

/// memcached's `READ_BUFFER_SIZE`: the unit its per-thread buffer cache hands out, to read
/// buffers and to bundles of response objects alike.
const MC_BUFFER: u64 = 16384;
/// Response objects in one memcached bundle (`MAX_RESP_PER_BUNDLE` on 64-bit Linux:
/// (16384 - 24) / 1184).
const MC_RESP_PER_BUNDLE: usize = 13;

/// `-o read_buf_mem_limit`: the response objects a connection may hold unsent. memcached
/// splits the limit between its worker threads in 16 KiB buffers (at least one); a connection
/// busy with a request holds one as its read buffer, and each other one holds 13 responses.
/// remora applies the share per connection.
pub(super) fn resp_limit(eng: &Cache) -> usize {
    let limit = eng.settings.tunables.read_buf_mem_limit;
    if limit == 0 {
        return usize::MAX;
    }
    let bufs = (limit / eng.settings.threads.max(1) as u64 / MC_BUFFER).max(1);
    (bufs as usize - 1).saturating_mul(MC_RESP_PER_BUNDLE)
}

/// A new connection's session, listed in `stats conns` when `entry` is given.
pub(super) fn new_session(
    eng: &Cache,
    counters: &Arc<stats::Counters>,
    fd: i32,
    entry: Option<&Arc<ConnEntry>>,
) -> Session {
    let mut s = Session::new(counters.clone());
    // memcached names a connection by its descriptor in -vv output.
    s.id = fd as u64;
    s.conn = entry.cloned();
    s.max_reqs = eng.settings.reqs_per_event;
    s.resp_limit = resp_limit(eng);
    if eng.settings.verbose >= 2 {
        eprintln!("<{fd} new auto-negotiating client connection");
    }
    // `watch connevents`: conn_new.
    s.opened(eng, fd);
    s
}

/// `-vv`: memcached's line for a closed connection.
pub(super) fn echo_closed(eng: &Cache, s: &Session) {
    if eng.settings.verbose >= 2 {
        eprintln!("<{} connection closed.", s.id);
    }
    // `watch connevents`: conn_close.
    s.closed(eng);
}

/// A worker thread's loop.
pub fn worker(mut poll: Poll, rx: Receiver<Stream>, eng: Arc<Cache>, stop: Arc<AtomicBool>) {
    let counters = eng.register_worker();
    let mut conns: HashMap<usize, Conn> = HashMap::new();
    let mut next_token = 0usize;
    let mut events = Events::with_capacity(1024);
    // Connections that yielded under -R: no new edge will come for the input they hold.
    let mut ready: Vec<usize> = Vec::new();
    let mut again: Vec<usize> = Vec::new();
    let mut idle_checked = eng.now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let now = eng.now();
        if eng.settings.tunables.idle_timeout > 0 && now != idle_checked {
            idle_checked = now;
            kick_idle(&mut conns, &eng, poll.registry(), &counters, now);
        }
        let timeout = if ready.is_empty() {
            Duration::from_millis(200)
        } else {
            Duration::ZERO
        };
        if let Err(e) = poll.poll(&mut events, Some(timeout)) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!("worker poll: {e}");
            }
            continue;
        }
        for ev in events.iter() {
            if ev.token() == WAKER {
                while let Ok(mut s) = rx.try_recv() {
                    let t = next_token;
                    next_token = (next_token + 1) % (usize::MAX - 1);
                    if s.register(
                        poll.registry(),
                        Token(t),
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .is_err()
                    {
                        eng.conns.curr.fetch_sub(1, Ordering::Relaxed);
                        continue;
                    }
                    let listed = list_conn(&eng, &s);
                    let fd = s.as_raw_fd();
                    conns.insert(
                        t,
                        Conn {
                            stream: s,
                            session: new_session(
                                &eng,
                                &counters,
                                fd,
                                listed.as_ref().map(|(_, e)| e),
                            ),
                            rbuf: ReadBuf::default(),
                            wbuf: Out::new(),
                            closing: false,
                            drained: false,
                            token: Token(t),
                            table_fd: listed.map(|(fd, _)| fd),
                            want_write: false,
                            yielded: false,
                        },
                    );
                }
                continue;
            }
            let t = ev.token().0;
            if ready.contains(&t) {
                // Driven below; this edge means the socket has new data to read.
                if let Some(c) = conns.get_mut(&t) {
                    c.drained = false;
                }
            } else {
                drive(&mut conns, t, &eng, poll.registry(), &mut again);
            }
        }
        for t in std::mem::take(&mut ready) {
            drive(&mut conns, t, &eng, poll.registry(), &mut again);
        }
        std::mem::swap(&mut ready, &mut again);
        if eng.shutdown.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Closes every connection idle for longer than `-o idle_timeout` (counted in `idle_kicks`).
fn kick_idle(
    conns: &mut HashMap<usize, Conn>,
    eng: &Cache,
    registry: &Registry,
    counters: &stats::Counters,
    now: u32,
) {
    let idle: Vec<usize> = conns
        .iter()
        .filter(|(_, c)| idle_expired(eng, &c.session, now))
        .map(|(&t, _)| t)
        .collect();
    for t in idle {
        if let Some(c) = conns.remove(&t) {
            stats::inc(&counters.idle_kicks);
            close(eng, registry, c);
        }
    }
}

/// Forgets a connection and closes its socket.
fn close(eng: &Cache, registry: &Registry, mut c: Conn) {
    echo_closed(eng, &c.session);
    let _ = c.stream.deregister(registry);
    if let Some(fd) = c.table_fd {
        eng.conn_table.remove(fd);
    }
    eng.conns.curr.fetch_sub(1, Ordering::Relaxed);
}

/// Drives one connection; drops it when done, queues it in `again` when it yielded.
fn drive(
    conns: &mut HashMap<usize, Conn>,
    t: usize,
    eng: &Cache,
    registry: &Registry,
    again: &mut Vec<usize>,
) {
    let keep = match conns.get_mut(&t) {
        Some(c) => {
            let keep = c.drive(eng, registry);
            if keep && c.yielded {
                again.push(t);
            }
            keep
        }
        None => return,
    };
    if !keep {
        if let Some(c) = conns.remove(&t) {
            close(eng, registry, c);
        }
    }
}
