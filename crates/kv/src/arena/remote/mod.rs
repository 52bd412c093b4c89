//! A remotely readable arena: what lets a reader that holds only the arena's bytes (a process
//! with a read-only grant of its memfd, or a host READing it over the fabric) find a key with
//! no lock and no server CPU, and always notice when what it read was being changed.
//!
//! With [`ArenaConfig::remote`](super::ArenaConfig::remote) the layout carries three versions,
//! each a seqlock (odd while written, bumped to even when done):
//! - every item has a version at [`I_VER`] and a CRC-32 at [`I_SUM`] of what a GET returns (key,
//!   value, flags, expiry, CAS). An item is odd while it is filled, rewritten in place (touch,
//!   incr), and from its unlink on, through free and reuse, until it is linked again;
//! - every bucket entry is 16 bytes: the chain's head, a version ([`B_VER`]) that is odd
//!   while the chain changes (an item linked or unlinked, a page move relocating one, a split
//!   while the table grows) and the bucket's level ([`B_LEVEL`]), which lets a reader check
//!   that its cached table state still sends the key there;
//! - the hash table's state (level, split cursor) has its own version ([`H_HASH_VER`]).
//!
//! [`Reader::get_many`] ([`reader`]) walks each key's bucket chain like the server does and trusts
//! - a hit when the item's snapshot is consistent (version even and the same before and after,
//!   its CRC matching), linked, whole (not chunked) and of the key: the item was live for that
//!   key while it was read;
//! - a miss only when the bucket's version is even and unchanged across the walk and the
//!   bucket's level says the key hashes there: no item of the key was linked in it meanwhile.
//!
//! Anything else is retried, and after a bound the caller falls back to the protocol. The
//! writer is the arena's single writer ([`Arena`] under its owner's lock); the hooks below are
//! no-ops in an arena that is not remotely readable.
//!
//! Written by hand: the seqlocks are the mechanism itself, over a layout no crate knows.

use std::sync::atomic::{fence, AtomicU32, Ordering};

use super::layout::*;
use super::Arena;

mod reader;
pub use reader::{Reader, ReaderError};

/// The hash table state's version: odd while the level or the split cursor change.
pub const H_HASH_VER: usize = 212;

/// CRC-32 of what a GET of the item returns: its key, value, flags, expiry and CAS.
pub fn item_sum(key: &[u8], value: &[u8], flags: u32, exptime: u32, cas: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[key.len() as u8]);
    h.update(key);
    h.update(&(value.len() as u32).to_le_bytes());
    h.update(value);
    h.update(&flags.to_le_bytes());
    h.update(&exptime.to_le_bytes());
    h.update(&cas.to_le_bytes());
    h.finalize()
}

impl Arena {
    /// Whether readers without the lock follow this arena ([`ArenaConfig::remote`]).
    pub fn remote(&self) -> bool {
        self.hdr == REMOTE_ITEM_HEADER
    }

    fn version(&self, at: usize) -> &AtomicU32 {
        debug_assert!(at % 4 == 0 && at + 4 <= self.map.len());
        // SAFETY: `at` is 4-aligned and inside the mapping, which lives as long as `self`;
        // version words are only ever accessed atomically (here and by readers).
        unsafe { &*self.map.as_ptr().add(at).cast::<AtomicU32>() }
    }

    /// Makes the version at `at` odd (a no-op when it is): readers retry from here on.
    fn open_version(&self, at: usize) {
        let v = self.version(at);
        let n = v.load(Ordering::Relaxed);
        if n & 1 == 0 {
            v.store(n.wrapping_add(1), Ordering::Relaxed);
            // The odd version is visible before any byte written after it.
            fence(Ordering::Release);
        }
    }

    /// Makes the version at `at` even again, after every byte written since it was opened.
    fn close_version(&self, at: usize) {
        let v = self.version(at);
        let n = v.load(Ordering::Relaxed);
        if n & 1 == 1 {
            v.store(n.wrapping_add(1), Ordering::Release);
        }
    }

    /// Before a chain changes: its bucket (the entry at `bucket`) reads as changing.
    pub(super) fn open_bucket(&self, bucket: usize) {
        if self.remote() {
            self.open_version(bucket + B_VER);
        }
    }

    pub(super) fn close_bucket(&self, bucket: usize) {
        if self.remote() {
            self.close_version(bucket + B_VER);
        }
    }

    /// Before the item at `off` is written, unlinked or freed.
    pub(super) fn open_item(&self, off: u64) {
        if self.remote() {
            self.open_version(off as usize + I_VER);
        }
    }

    /// After a linked item is complete: its checksum, then its version even.
    pub(super) fn seal_item(&mut self, off: u64) {
        if !self.remote() {
            return;
        }
        let o = off as usize;
        let b = self.b();
        let value: &[u8] = if self.is_chunked(off) {
            &[]
        } else {
            let nkey = b[o + I_NKEY] as usize;
            let n = u32_at(b, o + I_NBYTES) as usize;
            &b[o + self.hdr + nkey..o + self.hdr + nkey + n]
        };
        let sum = item_sum(
            self.key_of(off),
            value,
            u32_at(b, o + I_FLAGS),
            u32_at(b, o + I_EXP),
            u64_at(b, o + I_CAS),
        );
        put_u32(self.bm(), o + I_SUM, sum);
        self.close_version(o + I_VER);
    }

    /// Copies the linked item at `off` into the free chunk `new` (a page move): the old chunk
    /// reads as changing from here on, the copy until [`seal_item`](Self::seal_item), with a
    /// version that goes on from the chunk's own (a reader holding `new` from before never
    /// sees an old version again).
    pub(super) fn copy_item(&mut self, off: u64, new: u64, len: usize) {
        self.open_item(off);
        self.open_item(new);
        let kept = self
            .remote()
            .then(|| self.version(new as usize + I_VER).load(Ordering::Relaxed));
        let o = off as usize;
        self.bm().copy_within(o..o + len, new as usize);
        if let Some(v) = kept {
            self.version(new as usize + I_VER)
                .store(v, Ordering::Relaxed);
        }
    }

    /// Before the table's level or split cursor change.
    pub(super) fn open_hash_state(&self) {
        if self.remote() {
            self.open_version(H_HASH_VER);
        }
    }

    pub(super) fn close_hash_state(&self) {
        if self.remote() {
            self.close_version(H_HASH_VER);
        }
    }
}

/// Where a [`Reader`] gets the arena's bytes: a mapping, or READs over the fabric.
pub trait Fetch {
    /// Fills `buf` with the arena's bytes at `off`.
    fn fetch(&mut self, off: u64, buf: &mut [u8]) -> std::io::Result<()>;

    /// Fills `out` with the bytes of each `(offset, len)` in turn, each read's loads done
    /// before the next one's: a version, the data and the version again read as a seqlock
    /// reader does. A fetcher over the fabric sends them as one batch of READs.
    fn fetch_all(&mut self, reads: &[(u64, usize)], out: &mut [u8]) -> std::io::Result<()> {
        let mut at = 0;
        for &(off, len) in reads {
            self.fetch(off, &mut out[at..at + len])?;
            fence(Ordering::Acquire);
            at += len;
        }
        Ok(())
    }
}

/// What a lock-free GET found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Got {
    /// The item, live for the key while it was read.
    Hit(RemoteItem),
    /// No live item of the key (absent or expired), decided on a bucket that did not change.
    Miss,
    /// Undecided: ask the server ([`Why`]).
    Fallback(Why),
}

/// Why a lock-free GET gives the question back to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Every try met a change under way.
    Contended,
    /// The item is chunked (larger than `slab_chunk_max`) or larger than the reader's budget.
    Large,
    /// The chain was longer than the reader walks.
    LongChain,
}

/// An item a [`Reader`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteItem {
    /// The value.
    pub value: Vec<u8>,
    /// Client flags.
    pub flags: u32,
    /// CAS.
    pub cas: u64,
    /// Expiry on the arena's relative clock (0: never).
    pub exptime: u32,
}

/// [`Fetch`] from a mapping of the arena in this process (same-host readers map the granted
/// memfd read-only; tests share the writer's mapping).
pub struct Mapped {
    base: *const u8,
    len: usize,
    _keep: std::sync::Arc<super::Mapping>,
}

// SAFETY: the mapping is shared memory that lives as long as `_keep`; `Mapped` only reads it.
unsafe impl Send for Mapped {}

impl Mapped {
    /// A fetcher over `arena`'s own mapping.
    pub fn of(arena: &Arena) -> Mapped {
        Mapped {
            base: arena.map.as_ptr(),
            len: arena.map.len(),
            _keep: arena.map.clone(),
        }
    }
}

impl Fetch for Mapped {
    fn fetch(&mut self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let end = (off as usize).checked_add(buf.len());
        if end.is_none_or(|e| e > self.len) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} bytes at {off}: outside the arena", buf.len()),
            ));
        }
        // SAFETY: inside the mapping (checked above). The writer may change these bytes
        // concurrently; volatile reads keep the compiler from assuming otherwise, and the
        // versions read around them tell a torn copy.
        unsafe {
            let src = self.base.add(off as usize);
            for (k, b) in buf.iter_mut().enumerate() {
                *b = std::ptr::read_volatile(src.add(k));
            }
        }
        Ok(())
    }
}
