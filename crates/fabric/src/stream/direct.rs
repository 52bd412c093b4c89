//! One-sided shm: the requester maps the memfd regions its peer granted and performs WRITE and
//! READ itself, and tells the peer about a WRITE-with-immediate through a completion ring in
//! shared memory that the peer's completion queue drains.
//!
//! Setup: at the start of every shm queue pair each side hands the other its completion ring
//! (a small memfd, `SCM_RIGHTS` over the unix socket). Regions are granted on request: the
//! first request to a remote key the requester has no grant for takes the stream as before and
//! asks for a grant (GRANT_REQ); the responder answers with the region's memfd only if the key
//! names one of its regions that is a sealed memfd with remote rights, as a read-only
//! descriptor when the region has no remote write, so the peer cannot map it writable. Knowing
//! the remote key stays the capability, as with RDMA: a peer is given only regions it can name.
//! Memory that is not a memfd keeps the copy path through the stream.
//!
//! Every access is still checked here, on the requester's side, by the engine's own check
//! ([`crate::engine::access::check`], the one its responder applies to requests that arrive):
//! the remote key must name a granted region, the region must carry the right and the range
//! must lie inside it (checked arithmetic). A refused access completes with
//! `RemoteAccessError`, and on RC the queue pair goes to the error state, as after a NAK.
//!
//! The ring is single-producer (the peer's posting threads, serialized by a lock) and
//! single-consumer (this side, under a lock). The producer publishes an entry with a release
//! store of `head` after the payload's memcpy, so a consumer that sees the entry sees the data.
//! Neither side trusts the other's counters: the consumer keeps its own tail and consumes at
//! most a ring's worth, the producer keeps its own head. When the consumer may be asleep it
//! raises the doorbell flag, and the producer then also sends a DOORBELL frame on the stream,
//! which the consumer's receive thread turns into a drain of the ring into the completion queue
//! (Dekker pattern on two SeqCst atomics: the producer stores head then loads the flag, the
//! consumer stores the flag then loads head, so one of them sees the other). A producer that
//! finds the ring full rings the doorbell anyway and waits for room, which the consumer's
//! receive thread makes whether or not its application polls: backpressure, as a receiver not
//! ready, never a lost immediate.
//!
//! Order: a request takes this path only when no request of the queue pair is outstanding on
//! the stream (RC) or the queue pair never used the stream (UC), and the receive thread drains
//! the ring before it delivers a completion of its own, so completions keep the posting order.
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use remora_mem::{Access, Buffer, Region};

use super::frame::*;
use super::io::Conn;
use super::{lock, resident_slice, DataPath, Shared, StreamQp, MAX_PEER_MAPS};
use crate::engine::access::{self, Window};
use crate::error::Error;
use crate::wr::{Completion, SendWr, Status, WcOpcode, WrOp};

/// Longest a WRITE-with-immediate waits for room in the peer's completion ring.
const RING_FULL_LIMIT: Duration = Duration::from_secs(10);

/// Entries in a completion ring.
pub(super) const RING_SLOTS: u64 = 1024;
const HEAD: usize = 0;
const TAIL: usize = 64;
const DOORBELL: usize = 128;
const ENTRIES: usize = 192;
const ENTRY: usize = 16;
/// Bytes of a ring memfd.
pub(super) const RING_BYTES: usize = ENTRIES + ENTRY * RING_SLOTS as usize;

/// `code` bits of a GRANT frame.
pub(super) const GRANT_READ: u8 = 1;
pub(super) const GRANT_WRITE: u8 = 2;

/// A region of the peer mapped here.
pub(super) struct Grant {
    rkey: u32,
    window: Window,
    map: Buffer,
}

impl Grant {
    /// Maps a granted memfd (read-only unless the grant includes remote write).
    pub(super) fn map(
        fd: OwnedFd,
        base: u64,
        len: u64,
        rkey: u32,
        code: u8,
    ) -> Result<Grant, String> {
        let write = code & GRANT_WRITE != 0;
        let len = usize::try_from(len).map_err(|_| "granted region too large".to_string())?;
        let map = Buffer::map_memfd_with(fd, len, write).map_err(|e| e.to_string())?;
        let mut rights = Access::NONE;
        if code & GRANT_READ != 0 {
            rights |= Access::REMOTE_READ;
        }
        if write {
            rights |= Access::REMOTE_WRITE;
        }
        Ok(Grant {
            rkey,
            // The mapping is page-rounded; the grant is what the peer registered.
            window: Window {
                base,
                size: map.len() as u64,
                access: rights,
            },
            map,
        })
    }

    pub(super) fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Where `[va, va+len)` of the granted region is mapped here, if it lies inside and the
    /// grant carries `need`.
    pub(super) fn check(&self, va: u64, len: usize, need: Access) -> Option<*mut u8> {
        let off = access::check(&self.window, va, len as u64, need)
            .map_err(|e| tracing::debug!(error = %e, "one-sided access refused"))
            .ok()?;
        // SAFETY: the check put off + len within the window, which is the mapping's length.
        Some(unsafe { self.map.as_ptr().add(off) })
    }
}

/// Whether a memfd is sealed against shrinking (a peer mapping it can never fault past its end).
pub(super) fn sealed(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_get_seals(fd).is_ok_and(|s| s.contains(rustix::fs::SealFlags::SHRINK))
}

/// A fresh read-only open of the same file: a writable shared mapping of it fails.
pub(super) fn read_only(fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    rustix::fs::open(
        path.as_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()
}

/// What of a region to grant the peer: `None` unless it is a sealed memfd with remote rights;
/// else the frame's access code and the descriptor to hand over (read-only without write).
pub(super) fn grantable(r: &Region) -> Option<(u8, OwnedFd)> {
    let fd = r.memfd()?;
    let a = r.access();
    let code = (a.contains(Access::REMOTE_READ) as u8 * GRANT_READ)
        | (a.contains(Access::REMOTE_WRITE) as u8 * GRANT_WRITE);
    if !sealed(fd) || code == 0 {
        return None;
    }
    let handed = if code & GRANT_WRITE != 0 {
        fd.try_clone_to_owned().ok()?
    } else {
        read_only(fd)?
    };
    Some((code, handed))
}

/// A completion ring mapping (ours as consumer, or the peer's as producer).
pub(super) struct Ring {
    map: Buffer,
}

impl Ring {
    /// A fresh ring for the peer to fill; `doorbell` raised from the start when no thread of
    /// ours polls it (progress by a thread).
    pub(super) fn create(doorbell: bool) -> Result<Ring, String> {
        let map = Buffer::memfd("remora-shm-ring", RING_BYTES).map_err(|e| e.to_string())?;
        let r = Ring { map };
        r.doorbell().store(doorbell as u32, Ordering::SeqCst);
        Ok(r)
    }

    /// Maps the ring the peer handed over.
    pub(super) fn map(fd: OwnedFd) -> Result<Ring, String> {
        let map = Buffer::map_memfd(fd, RING_BYTES).map_err(|e| e.to_string())?;
        Ok(Ring { map })
    }

    /// The ring's memfd, to hand over.
    pub(super) fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.map.fd()
    }

    fn word64(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is 8-aligned inside the page-aligned mapping, which lives as long as
        // self; the peer writes it only through atomics of the same width.
        unsafe { &*(self.map.as_ptr().add(at) as *const AtomicU64) }
    }

    fn head(&self) -> &AtomicU64 {
        self.word64(HEAD)
    }

    fn tail(&self) -> &AtomicU64 {
        self.word64(TAIL)
    }

    fn doorbell(&self) -> &AtomicU32 {
        // SAFETY: as in `word64`.
        unsafe { &*(self.map.as_ptr().add(DOORBELL) as *const AtomicU32) }
    }

    fn entry(&self, i: u64) -> *mut u8 {
        // SAFETY: the index is reduced modulo the slot count.
        unsafe {
            self.map
                .as_ptr()
                .add(ENTRIES + ENTRY * (i % RING_SLOTS) as usize)
        }
    }
}

/// The producing side: a ring of the peer and the next index to write.
pub(super) struct Producer {
    ring: Ring,
    head: u64,
}

/// What a push did.
pub(super) enum Pushed {
    /// Published; the consumer asked to be woken.
    Ring { doorbell: bool },
    /// No room: deliver it another way.
    Full,
}

impl Producer {
    pub(super) fn new(ring: Ring) -> Producer {
        let head = ring.head().load(Ordering::Acquire);
        Producer { ring, head }
    }

    /// Publishes an immediate of a WRITE whose bytes are already in place.
    pub(super) fn push(&mut self, imm: u32, len: u32) -> Pushed {
        let tail = self.ring.tail().load(Ordering::Acquire);
        if self.head.wrapping_sub(tail) >= RING_SLOTS {
            return Pushed::Full;
        }
        let e = self.ring.entry(self.head);
        // SAFETY: a 16-byte slot inside the mapping, not being read (the consumer reads only
        // slots below head).
        unsafe {
            std::ptr::write_volatile(e as *mut u32, imm);
            std::ptr::write_volatile(e.add(4) as *mut u32, len);
        }
        self.head = self.head.wrapping_add(1);
        self.ring.head().store(self.head, Ordering::SeqCst);
        Pushed::Ring {
            doorbell: self.ring.doorbell().load(Ordering::SeqCst) != 0,
        }
    }
}

/// The consuming side: our ring and the next index to read (kept here, not trusted from the
/// shared page).
pub(super) struct Consumer {
    ring: Ring,
    tail: u64,
    /// Raised for good (progress by a thread): the receive thread drains on every doorbell.
    always_ring: bool,
}

impl Consumer {
    pub(super) fn new(ring: Ring, always_ring: bool) -> Consumer {
        Consumer {
            ring,
            tail: 0,
            always_ring,
        }
    }

    pub(super) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// True when nothing is waiting (one atomic load).
    pub(super) fn is_empty(&self) -> bool {
        self.ring.head().load(Ordering::Acquire) == self.tail
    }

    /// Moves the published immediates into `out` as completions; returns how many, or an error
    /// when the peer's head is beyond what a ring can hold (a corrupt or hostile peer).
    pub(super) fn drain(&mut self, out: &mut Vec<Completion>) -> Result<usize, String> {
        let head = self.ring.head().load(Ordering::Acquire);
        let n = head.wrapping_sub(self.tail);
        if n == 0 {
            return Ok(0);
        }
        if n > RING_SLOTS {
            return Err(format!(
                "the peer's completion ring claims {n} entries, more than its {RING_SLOTS} slots"
            ));
        }
        for i in self.tail..head {
            let e = self.ring.entry(i);
            // SAFETY: a slot below head, published by the producer's release store.
            let (imm, len) = unsafe {
                (
                    std::ptr::read_volatile(e as *const u32),
                    std::ptr::read_volatile(e.add(4) as *const u32),
                )
            };
            out.push(Completion {
                wr_id: 0,
                status: Status::Success,
                opcode: WcOpcode::RecvRdmaWithImm,
                byte_len: len,
                imm: Some(imm),
                in_sequence: u32::MAX,
            });
        }
        self.tail = head;
        self.ring.tail().store(head, Ordering::Release);
        Ok(n as usize)
    }

    /// Raises or lowers the doorbell flag around a sleep (no effect when it is up for good).
    pub(super) fn want_doorbell(&self, on: bool) {
        if !self.always_ring {
            self.ring.doorbell().store(on as u32, Ordering::SeqCst);
        }
    }
}

/// The shm side of the driver: rings and grants (frames handled by [`super::io`]).
impl Shared {
    /// Queues the RING frame that hands the peer our completion ring.
    pub(super) fn queue_ring(&self, c: &mut Conn) {
        let fd = self.consumer.as_ref().and_then(|cons| {
            lock(cons)
                .ring()
                .fd()
                .and_then(|f| f.try_clone_to_owned().ok())
        });
        if let Some(fd) = fd {
            let f = Frame {
                kind: RING,
                aux: RING_BYTES as u64,
                ..Frame::default()
            };
            c.ctl.push_back((f, Some(fd)));
        }
    }

    /// Maps the ring the peer handed over (RING frame).
    pub(super) fn take_ring(&self) {
        let ring = match self.sock.take_fd() {
            None => Err("RING frame without a descriptor".to_string()),
            Some(fd) => Ring::map(fd),
        };
        match ring {
            Ok(ring) => *lock(&self.producer) = Some(Producer::new(ring)),
            Err(e) => {
                self.count(|s| s.invalid_requests += 1);
                tracing::debug!(error = %e, "cannot map the peer's completion ring");
            }
        }
    }

    /// Maps a region the peer granted (GRANT frame).
    pub(super) fn take_grant(&self, f: Frame) {
        let mapped = match self.sock.take_fd() {
            None => Err("GRANT frame without a descriptor".to_string()),
            Some(fd) => Grant::map(fd, f.va, f.aux, f.rkey, f.code),
        };
        let mut grants = self.grants.write().unwrap_or_else(|e| e.into_inner());
        match mapped {
            Ok(_) if grants.len() >= MAX_PEER_MAPS => self.count(|s| s.invalid_requests += 1),
            Ok(g) => {
                grants.retain(|o| o.rkey() != g.rkey());
                grants.push(g);
            }
            // Not fatal: requests to that region take the stream.
            Err(e) => {
                self.count(|s| s.invalid_requests += 1);
                tracing::debug!(error = %e, "cannot map a region the peer granted");
            }
        }
    }

    /// The GRANT answering a GRANT_REQ: only a region the peer names by its remote key, with
    /// remote rights, backed by a sealed memfd; a bounded number per connection. No answer
    /// otherwise: the peer's requests to that key keep taking the stream, where the engine
    /// checks them.
    pub(super) fn answer_grant(&self, rkey: u32) -> Option<(Frame, Option<OwnedFd>)> {
        let given = self.grants_given.load(Ordering::Relaxed);
        if !matches!(self.path, DataPath::Shm) || given >= MAX_PEER_MAPS {
            return None;
        }
        let pd_region = self.pd.by_rkey(rkey);
        let Some((r, (code, fd))) = pd_region.and_then(|r| grantable(&r).map(|g| (r, g))) else {
            tracing::debug!(rkey, "shm: no grant for this key");
            return None;
        };
        self.grants_given.fetch_add(1, Ordering::Relaxed);
        let g = Frame {
            kind: GRANT,
            code,
            va: r.addr(),
            aux: r.len() as u64,
            rkey: r.rkey(),
            ..Frame::default()
        };
        Some((g, Some(fd)))
    }

    /// Moves what the peer published in our ring into the completion queue.
    pub(super) fn drain_ring(&self) -> bool {
        if let Some(c) = &self.consumer {
            let mut c = lock(c);
            if !c.is_empty() {
                self.drain_locked(&mut c);
                return true;
            }
        }
        false
    }

    pub(super) fn drain_locked(&self, c: &mut Consumer) {
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

    /// Raises or lowers the doorbell around a sleep of a polling thread (draining what came
    /// before the flag went up).
    pub(super) fn want_doorbell(&self, on: bool) {
        if let Some(c) = &self.consumer {
            let c = lock(c);
            c.want_doorbell(on);
            if on && !c.is_empty() {
                drop(c);
                self.drain_ring();
            }
        }
    }
}

/// The one-sided requester.
impl StreamQp {
    /// shm, one-sided: carries out a WRITE or READ on a region the peer granted, when the
    /// order allows it; false when the request must take the stream.
    pub(super) fn try_direct(&self, wr: &SendWr) -> crate::Result<bool> {
        let sh = &self.shared;
        if !matches!(sh.path, DataPath::Shm) {
            return Ok(false);
        }
        let need = match wr.op {
            WrOp::Write { .. } => Access::REMOTE_WRITE,
            WrOp::Read => Access::REMOTE_READ,
            WrOp::Send { .. } => return Ok(false),
        };
        // Only when nothing of ours is in the stream, which it could overtake.
        let behind_stream = if sh.reliable {
            lock(&sh.conn).engine.outstanding() > 0
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
        if matches!(wr.op, WrOp::Write { imm: Some(_) }) && lock(&sh.producer).is_none() {
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
            let mut asked = lock(&sh.asked);
            if asked.len() >= MAX_PEER_MAPS || !asked.insert(rkey) {
                return;
            }
        }
        let f = Frame {
            kind: GRANT_REQ,
            rkey,
            ..Frame::default()
        };
        let _ = self.send_ctl(f);
    }

    /// Sends a frame of ours (and whatever the engine has queued) now.
    fn send_ctl(&self, f: Frame) -> crate::Result<()> {
        let sh = &self.shared;
        let mut c = lock(&sh.conn);
        c.ctl.push_back((f, None));
        if let Err(why) = sh.flush(&mut c) {
            sh.close(&mut c, &why);
            return Err(Error::Disconnected);
        }
        Ok(())
    }

    /// Publishes an immediate in the peer's ring, ringing the doorbell when it sleeps, and
    /// waiting for room when the ring is full (the peer drains it on the doorbell).
    fn notify(&self, imm: u32, len: u32) -> crate::Result<()> {
        let sh = &self.shared;
        let start = std::time::Instant::now();
        let mut waited = start;
        let mut rang = false;
        let doorbell = Frame {
            kind: super::frame::DOORBELL,
            ..Frame::default()
        };
        loop {
            let pushed = match lock(&sh.producer).as_mut() {
                Some(p) => p.push(imm, len),
                None => return Err(Error::QpError),
            };
            match pushed {
                Pushed::Ring { doorbell: ring } => {
                    if ring {
                        self.send_ctl(doorbell)?;
                    }
                    return Ok(());
                }
                Pushed::Full => {
                    if sh.error.load(Ordering::Acquire) || sh.is_closed() {
                        return Err(Error::Disconnected);
                    }
                    if start.elapsed() > RING_FULL_LIMIT {
                        // A ring full this long is a broken or hostile peer (its tail word is
                        // in memory it writes), not a slow one.
                        tracing::warn!("shm: the peer's completion ring stayed full; QP in error");
                        sh.error.store(true, Ordering::Release);
                        return Err(Error::QpError);
                    }
                    if !rang {
                        self.send_ctl(doorbell)?;
                        rang = true;
                        waited = std::time::Instant::now();
                    } else if waited.elapsed() > Duration::from_millis(100) {
                        // The doorbell may have been taken before the ring filled up.
                        rang = false;
                    }
                    // A polled side of ours may owe the peer answers meanwhile.
                    if self.polled() {
                        let _ = sh.progress(Duration::ZERO, None);
                    }
                    std::thread::yield_now();
                }
            }
        }
    }
}
