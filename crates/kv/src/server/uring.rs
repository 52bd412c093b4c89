//! One worker thread on io_uring: every connection keeps one `recv` in flight into its read
//! buffer; replies go out as `send` operations; the thread makes one `io_uring_enter`
//! (`submit_and_wait`) per loop turn for all of its connections, instead of a read, a write
//! and a share of an `epoll_wait` per request.
//!
//! Request handling is the same as the epoll loop's: [`process`] runs whole requests, output
//! is capped per connection (a connection with [`OUT_LIMIT`] bytes of replies queued is not
//! read until they drain), and `-R` yields a pipelining connection to the others. Buffers
//! handed to the kernel are not touched (or freed) until their operation completes: replies
//! are double-buffered (one queue in flight as a `sendmsg` over its pieces, large values by
//! reference, and one filling).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use io_uring::{opcode, squeue, types, IoUring};
use rustix::event::EventfdFlags;
use rustix::fs::OFlags;
use rustix::io::Errno;
use rustix::net::{SendFlags, Shutdown};

use super::conn::{
    echo_closed, idle_expired, list_conn, new_session, note_wait, Stream, IOV_BATCH, OUT_LIMIT,
};
use super::readbuf::ReadBuf;
use crate::handler::{process, Cache, Session};
use crate::out::Out;
use crate::stats;
use crate::sys::MsgHdr;

/// Submission queue size; each connection has at most two operations in flight.
const ENTRIES: u32 = 1024;
/// `user_data` of the wake-up read on the worker's eventfd.
const WAKE: u64 = u64::MAX;
const OP_RECV: u64 = 0;
const OP_SEND: u64 = 1;

// The errors met here (a completion's `res` carries one negated).
const EINTR: i32 = Errno::INTR.raw_os_error();
const EAGAIN: i32 = Errno::AGAIN.raw_os_error();
const ENOBUFS: i32 = Errno::NOBUFS.raw_os_error();
const EBUSY: i32 = Errno::BUSY.raw_os_error();
const ETIME: i32 = Errno::TIME.raw_os_error();

/// Builds a ring for one worker thread: single-issuer with deferred task work where the kernel
/// has it (6.1+), a plain ring otherwise.
pub fn build_ring() -> io::Result<IoUring> {
    IoUring::builder()
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(ENTRIES)
        .or_else(|_| IoUring::new(ENTRIES))
}

/// A blocking eventfd the acceptor writes to after handing over a connection.
pub fn eventfd() -> io::Result<OwnedFd> {
    Ok(rustix::event::eventfd(0, EventfdFlags::CLOEXEC)?)
}

/// Wakes a worker blocked in `submit_and_wait` by completing its eventfd read.
pub fn wake(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    let _ = rustix::io::write(fd, &one);
}

struct Conn {
    fd: OwnedFd,
    rbuf: ReadBuf,
    /// Replies being gathered.
    wbuf: Out,
    /// Replies handed to the kernel; untouched while a send is armed.
    sending: Out,
    /// The armed send's pieces and message header (on the heap: `conns` may move the `Conn`).
    msg: MsgHdr,
    recv_armed: bool,
    send_armed: bool,
    session: Session,
    /// No more requests are run: close once the output is sent.
    closing: bool,
    /// Drop as soon as nothing is in flight.
    dead: bool,
    /// Queued to run again (yielded under `-R`, or waiting for output room).
    queued: bool,
    table_fd: Option<i32>,
}

impl Conn {
    fn inflight(&self) -> bool {
        self.recv_armed || self.send_armed
    }
}

/// The worker's connections and the operations waiting for submission-queue room.
struct Worker {
    ring: IoUring,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    backlog: VecDeque<squeue::Entry>,
    ready: VecDeque<usize>,
}

fn user_data(slot: usize, op: u64) -> u64 {
    ((slot as u64) << 1) | op
}

impl Worker {
    fn push(&mut self, e: squeue::Entry) {
        if !self.backlog.is_empty() {
            self.backlog.push_back(e);
            return;
        }
        // SAFETY: every entry's buffer belongs to a connection (or the wake buffer) that is
        // kept alive, unmoved, until the entry's completion is reaped.
        if unsafe { self.ring.submission().push(&e) }.is_err() {
            self.backlog.push_back(e);
        }
    }

    /// Moves queued entries into the submission queue as room allows.
    fn refill(&mut self) {
        let mut sq = self.ring.submission();
        while let Some(e) = self.backlog.front() {
            // SAFETY: as in `push`.
            if unsafe { sq.push(e) }.is_err() {
                break;
            }
            self.backlog.pop_front();
        }
    }

    fn arm_recv(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        // No receive is in flight, so the buffer may move.
        c.rbuf.reserve();
        let spare = c.rbuf.spare();
        let room = spare.len();
        // The buffer is not resized or read past its filled part while the receive is armed.
        let ptr = spare.as_mut_ptr();
        let e = opcode::Recv::new(types::Fd(c.fd.as_raw_fd()), ptr, room as u32)
            .build()
            .user_data(user_data(slot, OP_RECV));
        c.recv_armed = true;
        self.push(e);
    }

    /// Hands gathered replies to the kernel if none are in flight.
    fn start_send(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        if c.send_armed || c.wbuf.is_empty() {
            return;
        }
        std::mem::swap(&mut c.wbuf, &mut c.sending);
        self.send_rest(slot);
    }

    fn send_rest(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        let msg = c.msg.point_at(c.sending.pieces().take(IOV_BATCH));
        // The pieces and `msg` stay unmoved and unchanged until the send completes:
        // `sending` is only advanced, and `msg` only pointed elsewhere, after that.
        let e = opcode::SendMsg::new(types::Fd(c.fd.as_raw_fd()), msg)
            .flags(SendFlags::NOSIGNAL.bits())
            .build()
            .user_data(user_data(slot, OP_SEND));
        c.send_armed = true;
        self.push(e);
    }

    /// Runs buffered requests, sends replies, and re-arms the receive.
    fn run(&mut self, eng: &Cache, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        c.queued = false;
        let mut yielded = false;
        // With a receive armed the kernel owns the buffer's tail, and everything complete
        // before it has been run already: leave the buffer alone.
        if !c.closing
            && !c.dead
            && !c.recv_armed
            && c.rbuf.has_pending()
            && c.wbuf.len() < OUT_LIMIT
        {
            let o = process(
                eng,
                &mut c.session,
                c.rbuf.pending(),
                &mut c.wbuf,
                OUT_LIMIT,
            );
            c.rbuf.consume(o.consumed);
            c.closing |= o.close;
            yielded = o.yielded;
            note_wait(&c.session, c.rbuf.pending(), c.wbuf.len() >= OUT_LIMIT);
        }
        let stalled = c.wbuf.len() >= OUT_LIMIT;
        self.start_send(slot);
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        if c.dead || c.closing {
            if !c.send_armed {
                self.kill(slot);
            }
            return;
        }
        if yielded {
            // -R: let the other connections run first; this one continues next turn.
            c.queued = true;
            self.ready.push_back(slot);
        } else if !stalled && !c.recv_armed {
            // Input left here is an incomplete request: read more.
            self.arm_recv(slot);
        }
        // A stalled connection is run again when its send completes.
    }

    /// Marks a connection for closing; it is dropped once nothing of it is in flight.
    fn kill(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        c.dead = true;
        if c.inflight() {
            // Completes the armed receive (and fails a stuck send) so the slot can go.
            let _ = rustix::net::shutdown(&c.fd, Shutdown::Both);
        }
    }

    fn reap(&mut self, eng: &Cache, slot: usize) {
        let gone = matches!(&self.conns[slot], Some(c) if c.dead && !c.inflight());
        if gone {
            if let Some(c) = self.conns[slot].take() {
                echo_closed(eng, &c.session);
                if let Some(fd) = c.table_fd {
                    eng.conn_table.remove(fd);
                }
                eng.conns.curr.fetch_sub(1, Ordering::Relaxed);
            }
            self.free.push(slot);
        }
    }

    fn complete(&mut self, eng: &Cache, ud: u64, res: i32) {
        let slot = (ud >> 1) as usize;
        let op = ud & 1;
        let Some(c) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        if op == OP_RECV {
            c.recv_armed = false;
            if c.dead {
            } else if res > 0 {
                c.rbuf.filled(res as usize);
                self.run(eng, slot);
            } else if res == -EINTR || res == -EAGAIN || res == -ENOBUFS {
                self.arm_recv(slot);
            } else {
                // 0: the peer closed; negative: a socket error.
                self.kill(slot);
            }
        } else {
            c.send_armed = false;
            if res > 0 {
                c.sending.advance(res as usize);
                stats::add(&c.session.counters.bytes_written, res as u64);
            }
            if c.dead {
            } else if res < 0 && res != -EINTR && res != -EAGAIN {
                self.kill(slot);
            } else if !c.sending.is_empty() {
                self.send_rest(slot);
            } else {
                // Output room again: gather more (a stalled connection resumes here).
                if !c.queued {
                    self.run(eng, slot);
                }
            }
        }
        self.reap(eng, slot);
    }

    fn adopt(&mut self, eng: &Cache, s: Stream, counters: &Arc<stats::Counters>) {
        let listed = list_conn(eng, &s);
        let raw: RawFd = match s {
            Stream::Tcp(t) => t.into_raw_fd(),
            Stream::Unix(u) => u.into_raw_fd(),
        };
        // SAFETY: the descriptor came out of the stream above and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // io_uring completes operations on a non-blocking socket with EAGAIN instead of
        // waiting for it: make the socket blocking (only the ring ever waits on it).
        if let Ok(fl) = rustix::fs::fcntl_getfl(&fd) {
            let _ = rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK);
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let mut session = new_session(eng, counters, raw, listed.as_ref().map(|(_, e)| e));
        session.max_reqs = eng.settings.reqs_per_event;
        self.conns[slot] = Some(Conn {
            fd,
            rbuf: ReadBuf::default(),
            wbuf: Out::new(),
            sending: Out::new(),
            msg: MsgHdr::with_capacity(IOV_BATCH),
            recv_armed: false,
            send_armed: false,
            session,
            closing: false,
            dead: false,
            queued: false,
            table_fd: listed.map(|(fd, _)| fd),
        });
        self.arm_recv(slot);
    }
}

/// A worker thread's loop on `ring`; `wake_fd` is written by the acceptor after each hand-over.
pub fn worker(
    ring: IoUring,
    wake_fd: Arc<OwnedFd>,
    rx: Receiver<Stream>,
    eng: Arc<Cache>,
    stop: Arc<AtomicBool>,
) {
    let counters = eng.register_worker();
    let mut w = Worker {
        ring,
        conns: Vec::new(),
        free: Vec::new(),
        backlog: VecDeque::new(),
        ready: VecDeque::new(),
    };
    // Boxed so its address stays fixed while the read is armed.
    let mut wake_buf = Box::new([0u8; 8]);
    let arm_wake = |w: &mut Worker, buf: &mut [u8; 8]| {
        let e = opcode::Read::new(types::Fd(wake_fd.as_raw_fd()), buf.as_mut_ptr(), 8)
            .build()
            .user_data(WAKE);
        w.push(e);
    };
    arm_wake(&mut w, &mut wake_buf);
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(ENTRIES as usize * 2);
    let idle_timeout = eng.settings.tunables.idle_timeout;
    let mut idle_checked = eng.now();
    // With `-o idle_timeout` the wait wakes up every second to look for idle connections
    // (a wait with a timeout needs Linux 5.11; before, idle ones are found when the loop turns).
    let tick = types::Timespec::new().sec(1);
    let timed_wait = idle_timeout > 0 && w.ring.params().is_feature_ext_arg();
    if idle_timeout > 0 && !timed_wait {
        tracing::warn!(
            "io_uring cannot wait with a timeout here: idle_timeout checks only on activity"
        );
    }
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = eng.now();
        if idle_timeout > 0 && now != idle_checked {
            idle_checked = now;
            for slot in 0..w.conns.len() {
                let expired = w.conns[slot]
                    .as_ref()
                    .is_some_and(|c| !c.dead && idle_expired(&eng, &c.session, now));
                if expired {
                    stats::inc(&counters.idle_kicks);
                    w.kill(slot);
                    w.reap(&eng, slot);
                }
            }
        }
        w.refill();
        // Connections that yielded run again right away, after one non-blocking reap.
        let want = if w.ready.is_empty() { 1 } else { 0 };
        let waited = if timed_wait && want == 1 {
            let args = types::SubmitArgs::new().timespec(&tick);
            match w.ring.submitter().submit_with_args(1, &args) {
                Err(e) if e.raw_os_error() == Some(ETIME) => Ok(0),
                r => r,
            }
        } else {
            w.ring.submit_and_wait(want)
        };
        match waited {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(EINTR) => {}
            Err(e) if e.raw_os_error() == Some(EBUSY) => {}
            Err(e) => {
                tracing::error!("io_uring submit: {e}");
                break;
            }
        }
        cqes.clear();
        cqes.extend(w.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(ud, res) in &cqes {
            if ud == WAKE {
                while let Ok(s) = rx.try_recv() {
                    w.adopt(&eng, s, &counters);
                }
                if !stop.load(Ordering::Relaxed) {
                    arm_wake(&mut w, &mut wake_buf);
                }
                let _ = res;
                continue;
            }
            w.complete(&eng, ud, res);
        }
        for _ in 0..w.ready.len() {
            if let Some(slot) = w.ready.pop_front() {
                w.run(&eng, slot);
                w.reap(&eng, slot);
            }
        }
        if eng.shutdown.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
        }
    }
    shutdown(w, &eng, wake_fd, wake_buf);
}

/// Closes every connection and waits (bounded) for the kernel to let go of their buffers.
fn shutdown(mut w: Worker, eng: &Cache, wake_fd: Arc<OwnedFd>, wake_buf: Box<[u8; 8]>) {
    for slot in 0..w.conns.len() {
        w.kill(slot);
        w.reap(eng, slot);
    }
    // Completes the wake read, if armed.
    wake(&wake_fd);
    let mut wake_done = false;
    let timeout = types::Timespec::new().nsec(100_000_000);
    for _ in 0..20 {
        let busy = w.conns.iter().any(|c| c.is_some()) || !wake_done;
        if !busy {
            break;
        }
        w.refill();
        let args = types::SubmitArgs::new().timespec(&timeout);
        let _ = w.ring.submitter().submit_with_args(1, &args);
        let done: Vec<(u64, i32)> = w
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (ud, _) in done {
            if ud == WAKE {
                wake_done = true;
                continue;
            }
            let slot = (ud >> 1) as usize;
            if let Some(c) = w.conns.get_mut(slot).and_then(|c| c.as_mut()) {
                if ud & 1 == OP_RECV {
                    c.recv_armed = false;
                } else {
                    c.send_armed = false;
                }
            }
            w.reap(eng, slot);
        }
    }
    if w.conns.iter().any(|c| c.is_some()) || !wake_done {
        // The kernel may still write into these buffers: never free them.
        tracing::warn!("io_uring worker stopped with operations in flight; leaking their buffers");
        std::mem::forget(w.conns);
        std::mem::forget(wake_buf);
    }
}
