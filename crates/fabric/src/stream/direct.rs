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
//! Every access is still checked here, on the requester's side: the remote key must name a
//! granted region, the range must lie inside it (checked arithmetic) and the region must carry
//! the right. A refused access completes with `RemoteAccessError`, and on RC the queue pair goes
//! to the error state, as after a NAK.
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
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use remora_mem::{Access, Buffer, Region};

use crate::wr::{Completion, Status, WcOpcode};

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
    base: u64,
    rkey: u32,
    read: bool,
    write: bool,
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
        Ok(Grant {
            base,
            rkey,
            read: code & GRANT_READ != 0,
            write,
            map,
        })
    }

    pub(super) fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Where `[va, va+len)` of the granted region is mapped here, if it lies inside and the
    /// grant carries `need`.
    pub(super) fn check(&self, va: u64, len: usize, need: Access) -> Option<*mut u8> {
        if need.contains(Access::REMOTE_WRITE) && !self.write {
            return None;
        }
        if need.contains(Access::REMOTE_READ) && !self.read {
            return None;
        }
        let off = va.checked_sub(self.base)?;
        let end = off.checked_add(len as u64)?;
        // The mapping is page-rounded; the grant is what the peer registered.
        (end <= self.map.len() as u64).then(|| {
            // SAFETY: off + len is within the mapping.
            unsafe { self.map.as_ptr().add(off as usize) }
        })
    }
}

/// What of a region to grant the peer: `None` unless it is a sealed memfd with remote rights;
/// else the frame's access code and the descriptor to hand over (read-only without write).
pub(super) fn grantable(r: &Region) -> Option<(u8, OwnedFd)> {
    let fd = r.memfd()?;
    let sealed =
        rustix::fs::fcntl_get_seals(fd).is_ok_and(|s| s.contains(rustix::fs::SealFlags::SHRINK));
    let a = r.access();
    let code = (a.contains(Access::REMOTE_READ) as u8 * GRANT_READ)
        | (a.contains(Access::REMOTE_WRITE) as u8 * GRANT_WRITE);
    if !sealed || code == 0 {
        return None;
    }
    let handed = if code & GRANT_WRITE != 0 {
        fd.try_clone_to_owned().ok()?
    } else {
        // A fresh read-only open of the same file: a writable shared mapping of it fails.
        let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        rustix::fs::open(
            path.as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok()?
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
