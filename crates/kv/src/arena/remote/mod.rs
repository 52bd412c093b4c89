//! A remotely readable arena: what lets a reader that holds only the arena's bytes (a process
//! with a read-only grant of its memfd, or a host READing it over the fabric) find a key with
//! no lock and no server CPU, and always notice when what it read was being changed.
//!
//! With [`ArenaConfig::remote`](super::ArenaConfig::remote) the layout carries three versions,
//! each a seqlock (odd while written, bumped to even when done):
//! - every item has a version at [`I_VER`] and a CRC-32 at [`I_SUM`] of what a GET returns (key,
//!   value, flags, expiry, CAS). An item is odd while it is filled, rewritten in place (touch,
//!   incr), and from its unlink on, through free and reuse, until it is linked again;
//! - every bucket entry is 16 bytes, the chain's head and a version ([`B_VER`]) that is odd
//!   while the chain changes (an item linked or unlinked, a page move relocating one, a split
//!   while the table grows);
//! - the hash table's state (level, split cursor) has its own version ([`H_HASH_VER`]).
//!
//! [`Reader::get`] walks a bucket's chain like the server does and trusts
//! - a hit when the item's snapshot is consistent (version even and the same before and after,
//!   its CRC matching), linked, whole (not chunked) and of the key: the item was live for that
//!   key while it was read;
//! - a miss only when the bucket's version is even and unchanged across the walk and the table's
//!   state did not move: no item of the key was linked in that bucket meanwhile.
//!
//! Anything else is retried, and after a bound the caller falls back to the protocol. The
//! writer is the arena's single writer ([`Arena`] under its owner's lock); the hooks below are
//! no-ops in an arena that is not remotely readable.
//!
//! Written by hand: the seqlocks are the mechanism itself, over a layout no crate knows.

use std::sync::atomic::{fence, AtomicU32, Ordering};

use super::layout::*;
use super::{hash_with, Arena};

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

    /// The 32-bit version word at `off` (4-aligned), read with acquire order where the bytes
    /// are local.
    fn version(&mut self, off: u64) -> std::io::Result<u32> {
        let mut b = [0u8; 4];
        self.fetch(off, &mut b)?;
        fence(Ordering::Acquire);
        Ok(u32::from_le_bytes(b))
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

/// Why an arena cannot be read remotely.
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    /// Not a remote-readable remora arena of this layout, or hashed by another build.
    #[error("not a remotely readable arena: {0}")]
    Layout(String),
    /// Fetching bytes failed.
    #[error("reading the arena: {0}")]
    Io(#[from] std::io::Error),
}

/// A lock-free reader of a remotely readable arena, over any [`Fetch`].
#[derive(Debug, Clone)]
pub struct Reader {
    seed: u64,
    epoch: i64,
    /// log2 of the most buckets (the table's reserved room).
    hash_power: u32,
    /// Where items may lie: the pages.
    items: std::ops::Range<u64>,
    /// Tries before [`Why::Contended`].
    pub tries: u32,
    /// Longest value read (larger: [`Why::Large`]).
    pub max_value: usize,
    /// Longest chain walked.
    pub max_chain: usize,
    /// Reads that met a change under way and were tried again.
    pub retries: u64,
    /// The table's state as last read, with its version: valid while the version is the same.
    state: Option<(u32, HashState)>,
}

/// Bytes of value read with an item's header in one fetch (a larger value takes a second).
const INLINE: usize = 256;

/// The hash table state a reader computes buckets from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HashState {
    level: u32,
    split: u64,
}

impl Reader {
    /// Checks the arena's header (magic, layout, remote, the hash of a fixed key) and keeps
    /// what every GET needs.
    pub fn open(f: &mut dyn Fetch) -> Result<Reader, ReaderError> {
        let mut h = vec![0u8; 256];
        f.fetch(0, &mut h)?;
        let bad = |m: &str| Err(ReaderError::Layout(m.into()));
        if u64_at(&h, H_MAGIC) != MAGIC || u32_at(&h, H_VERSION) != VERSION {
            return bad("no remora arena of this layout");
        }
        if u32_at(&h, H_REMOTE) != 1 {
            return bad("the server does not serve it remotely readable (--one-sided)");
        }
        let seed = u64_at(&h, H_SEED);
        if u32_at(&h, H_HASH_CHECK) != hash_with(seed, b"remora") as u32 {
            return bad("the server hashes keys differently from this build");
        }
        let (page_size, pages) = (
            u32_at(&h, H_PAGE_SIZE) as usize,
            u32_at(&h, H_PAGES) as usize,
        );
        let hash_power = u32_at(&h, H_HASH_POWER);
        let Some(geo) = Geometry::new(usize::MAX, page_size, hash_power, 16, pages) else {
            return bad("a header whose geometry does not fit");
        };
        Ok(Reader {
            seed,
            epoch: u64_at(&h, H_EPOCH) as i64,
            hash_power,
            items: geo.first_page as u64..(geo.first_page + pages * page_size) as u64,
            tries: 64,
            max_value: 1 << 20,
            max_chain: 64,
            retries: 0,
            state: None,
        })
    }

    /// Unix time of the arena's relative clock's zero (expiry is on that clock).
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// The arena's relative clock now, from this host's unix time: the `now` of [`get`](Self::get)
    /// (a reader on another host is as right as the two clocks agree).
    pub fn now(&self) -> u32 {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        (unix - self.epoch).clamp(0, i64::from(u32::MAX)) as u32
    }

    /// The item of `key` at `now` on the arena's relative clock.
    pub fn get(&mut self, f: &mut dyn Fetch, key: &[u8], now: u32) -> Result<Got, ReaderError> {
        for _ in 0..self.tries {
            match self.try_get(f, key, now)? {
                Some(got) => return Ok(got),
                None => self.retries += 1,
            }
        }
        Ok(Got::Fallback(Why::Contended))
    }

    /// The table's state, read again only when its version moved.
    fn hash_state(&mut self, f: &mut dyn Fetch) -> Result<Option<HashState>, ReaderError> {
        let v1 = f.version(H_HASH_VER as u64)?;
        if let Some((v, s)) = self.state {
            if v == v1 {
                return Ok(Some(s));
            }
        }
        let mut b = [0u8; H_HASH_SPLIT + 8 - H_HASH_LEVEL];
        f.fetch(H_HASH_LEVEL as u64, &mut b)?;
        fence(Ordering::Acquire);
        let v2 = f.version(H_HASH_VER as u64)?;
        let state = HashState {
            level: u32_at(&b, 0),
            split: u64_at(&b, H_HASH_SPLIT - H_HASH_LEVEL),
        };
        let sane = state.level <= self.hash_power
            && state.split < 1 << state.level
            && (state.level < self.hash_power || state.split == 0);
        let ok = v1 & 1 == 0 && v1 == v2 && sane;
        if ok {
            self.state = Some((v1, state));
        }
        Ok(ok.then_some(state))
    }

    /// One walk: `None` when it met a change under way.
    fn try_get(
        &mut self,
        f: &mut dyn Fetch,
        key: &[u8],
        now: u32,
    ) -> Result<Option<Got>, ReaderError> {
        let Some(state) = self.hash_state(f)? else {
            return Ok(None);
        };
        let h = hash_with(self.seed, key) as usize;
        let p = state.level;
        let old = h & ((1usize << p) - 1);
        let i = if (old as u64) < state.split {
            h & ((2usize << p) - 1)
        } else {
            old
        };
        let entry = (HEADER_BYTES + i * 16) as u64;
        let bv = f.version(entry + B_VER as u64)?;
        if bv & 1 == 1 || self.hash_state(f)? != Some(state) {
            return Ok(None);
        }
        let mut head = [0u8; 8];
        f.fetch(entry, &mut head)?;
        let mut off = u64::from_le_bytes(head);
        let mut buf = Vec::new();
        let mut walked = 0;
        while off != 0 {
            walked += 1;
            if walked > self.max_chain {
                return Ok(Some(Got::Fallback(Why::LongChain)));
            }
            // A link read while it changed may point anywhere: only an item's place is read.
            if off % 8 != 0 || !self.fits(off, REMOTE_ITEM_HEADER) {
                return Ok(None);
            }
            let ver = f.version(off + I_VER as u64)?;
            if ver & 1 == 1 {
                return Ok(None);
            }
            // The header, the key and the start of the value in one fetch.
            let room = (self.items.end - off) as usize;
            buf.resize((REMOTE_ITEM_HEADER + key.len() + INLINE).min(room), 0);
            f.fetch(off, &mut buf)?;
            let next = u64_at(&buf, I_HNEXT);
            if buf[I_NKEY] as usize == key.len() {
                match self.item_at(f, off, ver, &buf, key, now)? {
                    Step::Found(got) => return Ok(Some(got)),
                    Step::Torn => return Ok(None),
                    Step::Other => {}
                }
            }
            off = next;
        }
        // A miss holds only if the chain did not change while it was walked.
        fence(Ordering::Acquire);
        Ok((f.version(entry + B_VER as u64)? == bv).then_some(Got::Miss))
    }

    /// Whether `len` bytes at `off` lie in the pages.
    fn fits(&self, off: u64, len: usize) -> bool {
        off >= self.items.start
            && off
                .checked_add(len as u64)
                .is_some_and(|e| e <= self.items.end)
    }

    /// The item at `off` whose header `hdr` (with what followed it), read after its even
    /// version `ver`, names a key of `key`'s length.
    fn item_at(
        &self,
        f: &mut dyn Fetch,
        off: u64,
        ver: u32,
        hdr: &[u8],
        key: &[u8],
        now: u32,
    ) -> Result<Step, ReaderError> {
        if hdr[I_STATE] != LINKED || u32_at(hdr, I_VER) != ver {
            // Not linked (a chunk the chain no longer holds), or changed since its version.
            return Ok(Step::Torn);
        }
        let n = u32_at(hdr, I_NBYTES) as usize;
        if !self.fits(off, REMOTE_ITEM_HEADER + key.len() + n.min(self.max_value)) {
            return Ok(Step::Torn);
        }
        if hdr[I_KIND] == CHUNKED || n > self.max_value {
            let mut k = vec![0u8; key.len()];
            f.fetch(off + REMOTE_ITEM_HEADER as u64, &mut k)?;
            return Ok(if k == key {
                Step::Found(Got::Fallback(Why::Large))
            } else {
                Step::Other
            });
        }
        let end = REMOTE_ITEM_HEADER + key.len() + n;
        let fetched;
        let kv = if end <= hdr.len() {
            &hdr[REMOTE_ITEM_HEADER..end]
        } else {
            let mut rest = vec![0u8; key.len() + n];
            f.fetch(off + REMOTE_ITEM_HEADER as u64, &mut rest)?;
            fetched = rest;
            &fetched[..]
        };
        fence(Ordering::Acquire);
        if f.version(off + I_VER as u64)? != ver {
            return Ok(Step::Torn);
        }
        let (k, value) = kv.split_at(key.len());
        let (flags, exptime, cas) = (u32_at(hdr, I_FLAGS), u32_at(hdr, I_EXP), u64_at(hdr, I_CAS));
        if item_sum(k, value, flags, exptime, cas) != u32_at(hdr, I_SUM) {
            return Ok(Step::Torn);
        }
        if k != key {
            return Ok(Step::Other);
        }
        if exptime != 0 && exptime <= now {
            return Ok(Step::Found(Got::Miss));
        }
        Ok(Step::Found(Got::Hit(RemoteItem {
            value: value.to_vec(),
            flags,
            cas,
            exptime,
        })))
    }
}

enum Step {
    Found(Got),
    Torn,
    Other,
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
