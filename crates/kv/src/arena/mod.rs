//! Item memory in one relocatable arena with slab classes, as memcached lays it out: the
//! storage `remora kv serve` keeps its items in (through [`crate::storage::ArenaStore`]).
//!
//! Every item (its header, key and value), the hash chains, the per-class LRU lists (hot,
//! warm, cold and temp: memcached's segmented LRU, `lru.rs`), the free
//! lists and the counters live in one [`Mapping`] (anonymous memory, a memfd or a file on
//! tmpfs/hugetlbfs), linked by offsets only, so the arena can be mapped at any address by
//! another process or host. Memory is cut into pages (1 MiB by default) handed to slab classes
//! on demand; a class's chunk size grows by the factor (`-f`) from memcached's 48-byte header
//! plus the minimum space (`-n`) up to `slab_chunk_max`, so the classes are memcached's. A class
//! with no free chunk and no page left evicts from its LRU tail (the caller decides what goes
//! and counts it). Pages move between classes ([`Arena::move_page`], memcached's
//! `slab_reassign`). A graceful [`Arena::close`] marks the arena clean; opening a clean arena
//! of the same configuration restores every item (warm restart), anything else starts cold and
//! says why.
//!
//! Values are sent by reference: a reply [`pin`](Arena::pin)s a large item and hands its bytes
//! to the kernel after the store's lock is released. A pinned item that is replaced or deleted
//! is unlinked at once but its chunk stays `HELD` until the last [`Pin`] is gone (memcached's
//! item reference count), and eviction and page moves pass over pinned items.
//!
//! Concurrency: the arena is single-writer; its owner holds one lock around every call. Pins
//! read their bytes without the lock, which is sound because nothing writes a pinned chunk.
//!
//! An item larger than `slab_chunk_max` is chunked as memcached's are (`alloc.rs`): a header
//! item linked in the largest class' LRU, its value in a chain of chunks of the largest class
//! (the last from the class that fits it), allocated, evicted, moved and freed as one item.
//! Such a value is copied out under the lock for a reply (a [`Pin`] that owns its bytes).
//!
//! ```
//! use remora_kv::arena::{Arena, ArenaConfig, Backing, Mapping};
//! let cfg = ArenaConfig::new(8 << 20);
//! let map = Mapping::new(Backing::Anonymous, cfg.mapped()).unwrap();
//! let (mut a, _) = Arena::open(map, &cfg).unwrap();
//! a.set(b"k", b"value", 7, 0, 1000).unwrap();
//! let it = a.get(b"k", 1000).unwrap();
//! assert_eq!((it.value, it.flags), (&b"value"[..], 7));
//! ```
mod alloc;
mod check;
mod config;
mod handover;
mod hash;
mod items;
mod layout;
mod lru;
#[cfg(test)]
mod lru_tests;
mod memory;
mod pins;
pub mod remote;
#[cfg(test)]
mod remote_tests;
mod slabs;
mod stats;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Weak};

pub use config::{ArenaConfig, ArenaError};
pub use handover::ZERO_PAGE;
use layout::*;
pub use layout::{COLD, HOT, TEMP, WARM};
pub use lru::{LruConfig, UPDATE_INTERVAL};
pub use memory::{Backing, Mapping};
pub use stats::{ArenaStats, ClassStats, Moved};

/// How [`Arena::open`] found the memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// A clean arena of the same configuration: every item it held is served again.
    Restored {
        /// Items restored.
        items: u64,
        /// Unix time of the relative clock's zero when it was closed.
        epoch: i64,
    },
    /// Started empty; the reason when the memory held something else (an unclean stop, another
    /// configuration, not an arena).
    Cold(Option<String>),
}

/// A stored item, borrowed from the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// Client flags.
    pub flags: u32,
    /// CAS.
    pub cas: u64,
    /// Expiry on the relative clock (0: never).
    pub exptime: u32,
    /// Last access on the relative clock.
    pub time: u32,
    /// Fetched, stale and recache-token bits.
    pub bits: u8,
    /// Slab class (of its LRU: the largest for a chunked item).
    pub class: usize,
    /// Value bytes (`value` is empty for a chunked item: see [`Arena::value_bytes`]).
    pub value_len: usize,
    /// Chunked: the value lies in a chain of chunks.
    pub chunked: bool,
}

impl Item<'_> {
    /// Read since it was stored.
    pub fn fetched(&self) -> bool {
        self.bits & FETCHED != 0
    }

    /// Invalidated by meta `I`, served with `X` until rewritten.
    pub fn stale(&self) -> bool {
        self.bits & STALE != 0
    }

    /// A recache token (`W`) was handed out.
    pub fn win_sent(&self) -> bool {
        self.bits & WIN_SENT != 0
    }
}

/// Item bits, for [`Arena::set_bits`].
pub mod bits {
    pub use super::layout::{ACTIVE, FETCHED, STALE, WIN_SENT};
}

/// What the caller of an allocation decides about an LRU tail item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Victim {
    /// A live item: evict it (counted as an eviction).
    Evict,
    /// A dead item (expired or flushed): reclaim it.
    Reclaim,
    /// Keep it: the allocation fails (no-evict mode).
    Keep,
}

/// A pinned item's key and value, readable without the arena's lock until dropped. A
/// chunked item's are copied out instead (its value is not contiguous in the arena).
#[derive(Debug)]
pub struct Pin {
    map: Arc<Mapping>,
    start: usize,
    len: usize,
    copy: Option<Box<[u8]>>,
}

impl Pin {
    /// The item's key followed by its value.
    pub fn bytes(&self) -> &[u8] {
        if let Some(c) = &self.copy {
            return c;
        }
        // SAFETY: `start + len` lies inside the mapping, which `map` keeps alive; the arena
        // never writes a chunk while a pin on it exists (it is neither freed, moved nor
        // evicted, and replacing the item writes a new chunk).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.start), self.len) }
    }
}

/// The arena: one mapping, addressed by offsets.
#[derive(Debug)]
pub struct Arena {
    map: Arc<Mapping>,
    geo: Geometry,
    classes: usize,
    seed: u64,
    cas_bytes: bool,
    /// Bytes of an item's header ([`ArenaConfig::item_header`]).
    hdr: usize,
    /// The active hash table (kept in the header too): log2 of its buckets, whether it grows,
    /// and how many old buckets are split so far.
    hpower: u32,
    hexpanding: bool,
    hsplit: usize,
    /// Pinned items by offset.
    pins: HashMap<u64, Weak<Pin>>,
    /// Unlinked items still pinned: freed by [`Arena::reap`] once only this list holds them.
    held: Vec<(u64, Arc<Pin>)>,
    /// How items move between the sub-LRUs (a setting, not kept in the arena).
    lru: LruConfig,
    /// Cold items reads made active, for the maintainer to move to warm.
    bumps: Vec<u64>,
    /// Reads that found `bumps` full.
    bumps_dropped: u64,
}

impl Arena {
    /// Opens `map` as an arena of `cfg`: restores a clean arena of the same configuration,
    /// else lays out an empty one (with the reason when the memory held another).
    pub fn open(map: Mapping, cfg: &ArenaConfig) -> Result<(Arena, Opened), ArenaError> {
        Arena::open_with(map, cfg, None)
    }

    /// [`open`](Self::open) for an arena another server handed over, which names the chunks
    /// its replies held (`held`, [`Arena::held_offsets`]): a restore frees those instead of
    /// walking every chunk, so it reads the header pages only (a lazily mapped arena fetches
    /// nothing else before it serves).
    pub fn open_handed_over(
        map: Mapping,
        cfg: &ArenaConfig,
        held: &[u64],
    ) -> Result<(Arena, Opened), ArenaError> {
        Arena::open_with(map, cfg, Some(held))
    }

    fn open_with(
        map: Mapping,
        cfg: &ArenaConfig,
        held: Option<&[u64]>,
    ) -> Result<(Arena, Opened), ArenaError> {
        let sizes = cfg.classes()?;
        if map.len() != cfg.mapped() {
            return Err(ArenaError::Config(format!(
                "mapping of {} bytes where the configuration needs {}",
                map.len(),
                cfg.mapped()
            )));
        }
        let geo = Geometry::new(
            cfg.mapped(),
            cfg.page_size,
            cfg.hash_power,
            cfg.bucket_stride(),
            cfg.pages(),
        )
        .ok_or_else(|| ArenaError::Config("the mapping holds no page".into()))?;
        let existed = map.existed;
        let resized = map.resized_from.map(|l| {
            format!(
                "the memory file held {l} bytes where these settings need {}: it was made with \
                 other settings (-m, -f, -n, -I or hashpower)",
                cfg.mapped()
            )
        });
        let mut a = Arena {
            map: Arc::new(map),
            geo,
            classes: sizes.len(),
            seed: 0,
            cas_bytes: cfg.cas,
            hdr: cfg.item_header(),
            hpower: 0,
            hexpanding: false,
            hsplit: 0,
            pins: HashMap::new(),
            held: Vec::new(),
            lru: LruConfig::flat(),
            bumps: Vec::new(),
            bumps_dropped: 0,
        };
        let reason = if existed {
            a.mismatch(cfg, &sizes)
        } else {
            None
        };
        let opened = match (existed, reason) {
            (true, None) => {
                a.seed = u64_at(a.b(), H_SEED);
                a.load_hash_state();
                match held {
                    Some(offs) => a.free_named_held(offs),
                    None => a.free_held_chunks(),
                }
                Opened::Restored {
                    items: u64_at(a.b(), H_ITEMS),
                    epoch: u64_at(a.b(), H_EPOCH) as i64,
                }
            }
            (existed, reason) => {
                a.init(cfg, &sizes);
                Opened::Cold(existed.then_some(reason).flatten().or(resized))
            }
        };
        // Running: a crash from here on leaves the arena unclean, and the next start cold.
        put_u32(a.bm(), H_CLEAN, 0);
        Ok((a, opened))
    }

    /// Why the mapped bytes are not a clean arena of `cfg` (None: they are).
    fn mismatch(&self, cfg: &ArenaConfig, sizes: &[u32]) -> Option<String> {
        let b = self.b();
        if u64_at(b, H_MAGIC) != MAGIC {
            return Some("the memory file is not a remora kv arena".into());
        }
        if u32_at(b, H_VERSION) != VERSION {
            return Some(format!(
                "the memory file has arena layout {}, this build writes {VERSION}",
                u32_at(b, H_VERSION)
            ));
        }
        if u32_at(b, H_CLEAN) != 1 {
            return Some("the previous server did not stop cleanly (killed?)".into());
        }
        let same = u64_at(b, H_MEMORY) == cfg.memory as u64
            && u32_at(b, H_PAGE_SIZE) as usize == cfg.page_size
            && u32_at(b, H_HASH_POWER) == cfg.hash_power
            && u64_at(b, H_FACTOR) == cfg.growth_factor.to_bits()
            && u32_at(b, H_MIN_SPACE) as usize == cfg.min_space
            && u32_at(b, H_ITEM_MAX) as usize == cfg.item_max
            && u32_at(b, H_CHUNK_MAX) as usize == cfg.chunk_limit()
            && u32_at(b, H_CLASSES) as usize == sizes.len()
            && u32_at(b, H_PAGES) as usize == self.geo.pages
            && (u32_at(b, H_CAS_ON) == 1) == cfg.cas
            && (u32_at(b, H_REMOTE) == 1) == cfg.remote;
        let level = u32_at(b, H_HASH_LEVEL);
        if level > cfg.hash_power || (level == cfg.hash_power && u32_at(b, H_HASH_EXPANDING) != 0) {
            return Some("the arena's hash table is larger than its reserved room".into());
        }
        if !same {
            return Some(
                "the arena was made with other settings (-m, -f, -n, -I, -C, slab_chunk_max, hashpower or --one-sided)".into(),
            );
        }
        let seed = u64_at(b, H_SEED);
        if u32_at(b, H_HASH_CHECK) != hash_with(seed, b"remora") as u32 {
            return Some("the arena was written by a build that hashes keys differently".into());
        }
        None
    }

    fn init(&mut self, cfg: &ArenaConfig, sizes: &[u32]) {
        let geo = self.geo;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64);
        let b = self.bm();
        // The header and the directory only: the hash table is cleared as far as it is used,
        // so the room reserved for it stays untouched (and free) until it grows.
        b[..HEADER_BYTES].fill(0);
        b[geo.directory..geo.directory + geo.pages].fill(NO_CLASS);
        put_u64(b, H_MAGIC, MAGIC);
        put_u32(b, H_VERSION, VERSION);
        put_u32(b, H_CAS_ON, u32::from(cfg.cas));
        put_u32(b, H_REMOTE, u32::from(cfg.remote));
        put_u32(b, H_PAGE_SIZE, cfg.page_size as u32);
        put_u32(b, H_PAGES, geo.pages as u32);
        put_u32(b, H_PAGE_LIMIT, cfg.page_limit() as u32);
        put_u32(b, H_CLASSES, sizes.len() as u32);
        put_u32(b, H_HASH_POWER, cfg.hash_power);
        put_u64(b, H_FACTOR, cfg.growth_factor.to_bits());
        put_u32(b, H_MIN_SPACE, cfg.min_space as u32);
        put_u32(b, H_ITEM_MAX, cfg.item_max as u32);
        put_u32(b, H_CHUNK_MAX, cfg.chunk_limit() as u32);
        put_u64(b, H_SEED, seed);
        put_u32(b, H_HASH_CHECK, hash_with(seed, b"remora") as u32);
        put_u64(b, H_CAS, 1);
        put_u64(b, H_MEMORY, cfg.memory as u64);
        for (c, &s) in sizes.iter().enumerate() {
            put_u32(b, class_field(c, C_SIZE), s);
            put_u32(
                b,
                class_field(c, C_PER_PAGE),
                (cfg.page_size / s as usize) as u32,
            );
        }
        self.seed = seed;
        self.init_hash(cfg.hash_power_init.clamp(1, cfg.hash_power));
    }

    /// Empties the arena (a cold start decided after opening, e.g. when the restart metadata
    /// is missing or disagrees with the arena).
    pub fn reset(&mut self, cfg: &ArenaConfig) -> Result<(), ArenaError> {
        let sizes = cfg.classes()?;
        self.pins.clear();
        self.held.clear();
        self.bumps.clear();
        self.init(cfg, &sizes);
        put_u32(self.bm(), H_CLEAN, 0);
        Ok(())
    }

    /// Marks the arena clean and writes a file-backed one out: the next [`open`](Self::open)
    /// with the same configuration restores every item (memcached's SIGUSR1 stop with `-e`).
    /// `epoch` is the Unix time of the relative clock's zero, handed back by the next open.
    pub fn close(mut self, epoch: i64) -> std::io::Result<()> {
        self.mark_clean(epoch)
    }

    /// Writes the unix time of the relative clock's zero into the header, where remote readers
    /// find it ([`remote::Reader::epoch`]); [`close`](Self::close) writes it again.
    pub fn publish_epoch(&mut self, epoch: i64) {
        put_u64(self.bm(), H_EPOCH, epoch as u64);
    }

    /// [`close`](Self::close) for an owner that keeps the arena (behind its lock) until it
    /// exits: nothing may change the arena after this.
    pub fn mark_clean(&mut self, epoch: i64) -> std::io::Result<()> {
        put_u64(self.bm(), H_EPOCH, epoch as u64);
        put_u32(self.bm(), H_CLEAN, 1);
        self.map.sync()
    }

    fn b(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes and lives as long as `self.map`; writes happen
        // only through `bm`, which needs `&mut self`.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.map.len()) }
    }

    fn bm(&mut self) -> &mut [u8] {
        // SAFETY: as in `b`; `&mut self` makes this the only writer, and pinned chunks, which
        // others read concurrently, are never written (see `Pin::bytes`).
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr(), self.map.len()) }
    }

    fn field(&self, c: usize, f: usize) -> u64 {
        match f {
            C_SIZE | C_PER_PAGE | C_PAGES => u64::from(u32_at(self.b(), class_field(c, f))),
            _ => u64_at(self.b(), class_field(c, f)),
        }
    }

    fn set_field(&mut self, c: usize, f: usize, v: u64) {
        let at = class_field(c, f);
        match f {
            C_SIZE | C_PER_PAGE | C_PAGES => put_u32(self.bm(), at, v as u32),
            _ => put_u64(self.bm(), at, v),
        }
    }

    /// Adds `n` to class `c`'s counter `f`.
    fn count(&mut self, c: usize, f: usize, n: u64) {
        self.set_field(c, f, self.field(c, f).wrapping_add(n));
    }

    /// `stats reset`: zeroes the per-class item counters and the totals made of them.
    pub fn reset_counters(&mut self) {
        for c in 0..self.classes {
            for f in C_COUNTERS {
                self.set_field(c, f, 0);
            }
        }
        put_u64(self.bm(), H_EVICTIONS, 0);
        put_u64(self.bm(), H_RECLAIMED, 0);
    }

    fn add_header(&mut self, at: usize, d: i64) {
        let v = u64_at(self.b(), at).wrapping_add_signed(d);
        put_u64(self.bm(), at, v);
    }

    /// Changes how many pages items may take (`cache_memlimit`), up to the pages mapped
    /// beyond one per class; returns the limit set.
    pub fn set_page_limit(&mut self, pages: usize) -> usize {
        let max = self.geo.pages.saturating_sub(self.classes).max(1);
        let p = pages.clamp(1, max);
        put_u32(self.bm(), H_PAGE_LIMIT, p as u32);
        p
    }

    /// The page size.
    pub fn page_size(&self) -> usize {
        self.geo.page_size
    }

    /// Each class' figures, smallest chunks first.
    pub fn class_stats(&self) -> Vec<ClassStats> {
        (0..self.classes)
            .map(|c| ClassStats {
                chunk_size: self.field(c, C_SIZE) as u32,
                chunks_per_page: self.field(c, C_PER_PAGE) as u32,
                pages: self.field(c, C_PAGES) as u32,
                used: self.field(c, C_USED),
                free: self.field(c, C_FREE_COUNT),
                evicted: self.field(c, C_EVICTED),
                requested: self.field(c, C_REQUESTED),
                reclaimed: self.field(c, C_RECLAIMED),
                crawler_reclaimed: self.field(c, C_CRAWLER_RECLAIMED),
                crawler_checked: self.field(c, C_CRAWLER_CHECKED),
                expired_unfetched: self.field(c, C_EXPIRED_UNFETCHED),
                evicted_unfetched: self.field(c, C_EVICTED_UNFETCHED),
                evicted_nonzero: self.field(c, C_EVICTED_NONZERO),
                outofmemory: self.field(c, C_OUTOFMEMORY),
                lru_items: self.lru_counts(c),
                moves_to_cold: self.field(c, C_MOVES_TO_COLD),
                moves_to_warm: self.field(c, C_MOVES_TO_WARM),
                moves_within_lru: self.field(c, C_MOVES_WITHIN),
                evicted_active: self.field(c, C_EVICTED_ACTIVE),
                direct_reclaims: self.field(c, C_DIRECT_RECLAIMS),
                reflocked: self.field(c, C_REFLOCKED),
            })
            .collect()
    }

    /// Whole-arena figures.
    pub fn stats(&self) -> ArenaStats {
        let b = self.b();
        ArenaStats {
            items: u64_at(b, H_ITEMS),
            bytes: u64_at(b, H_BYTES),
            pages_used: u32_at(b, H_PAGES_USED),
            page_limit: u32_at(b, H_PAGE_LIMIT),
            pages: u32_at(b, H_PAGES),
            evictions: u64_at(b, H_EVICTIONS),
            reclaimed: u64_at(b, H_RECLAIMED),
            moves: u64_at(b, H_MOVES),
            chunk_rescues: u64_at(b, H_CHUNK_RESCUES),
            held: self.held.len() as u64,
        }
    }

    /// The memory, to share the arena (descriptor) or find its file.
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    #[cfg(test)]
    fn mapping_bytes(&mut self) -> &mut [u8] {
        self.bm()
    }
}

/// The arena's key hash: seeded per arena (kept in its header, so a restored arena hashes as
/// before), fast for short keys.
fn hash_with(seed: u64, key: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::with_seed(seed as usize);
    h.write(key);
    h.finish()
}
