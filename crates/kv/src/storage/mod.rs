//! Item storage behind one trait, [`EntryStore`] (pelikan's `entrystore`): CAS, expiry,
//! `flush_all`, LRU eviction within a byte budget (`-m`), and the meta protocol's stale and
//! recache state. Two implementations:
//!
//! - [`ArenaStore`], the server's: every item in one relocatable arena with memcached's slab
//!   classes ([`crate::arena`]), warm restart with `-e`, values sent by reference through pins;
//! - [`HeapStore`] (`-o storage=heap`): sharded heap allocations, the reference the arena is
//!   tested and benchmarked against.
//!
//! Time is passed in (`now`, seconds on the server's relative clock) so the storage is
//! deterministic and testable without sleeping. The tests in `tests.rs` run against both.

mod arena_commands;
mod arena_maint;
mod arena_store;
mod automove;
mod decide;
mod flush;
mod heap;
mod shard;

use std::sync::Arc;

pub use arena_store::{ArenaStore, Opening};
pub use heap::HeapStore;
pub use shard::ItemRef;

/// Bytes the heap store charges per item beyond its key and value: an honest estimate of its
/// bookkeeping (entry struct, table slot, allocator headers).
pub const ITEM_OVERHEAD: usize = 96;

/// Relative expiry boundary: larger exptimes are absolute Unix times (memcached's rule).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// How a store command treats an existing item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if absent.
    Add,
    /// Store only if present.
    Replace,
    /// Append the data to an existing item; with a CAS, only if the item's equals it
    /// (binary and meta requests may carry one).
    Append(Option<u64>),
    /// Prepend the data to an existing item; with a CAS, as for `Append`.
    Prepend(Option<u64>),
    /// Store only if the item's CAS equals the given value.
    Cas(u64),
    /// Meta `ms … C<cas> I`: like `Cas`, but a CAS older than the item's still stores, keeping
    /// the old expiry and marking the new value stale (memcached's stale-while-revalidate).
    CasStale(u64),
}

/// Result of a store command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Stored with this CAS.
    Stored(u64),
    /// A condition failed (add on present, replace/append/prepend on absent).
    NotStored,
    /// CAS mismatch.
    Exists,
    /// CAS on an absent item.
    NotFound,
    /// The item is larger than the item size limit.
    TooLarge,
    /// No room could be made (no-evict mode, or the item exceeds a shard's budget).
    NoMemory,
}

/// Result of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Removed.
    Deleted,
    /// No such item.
    NotFound,
    /// CAS given and it did not match.
    Exists,
}

/// Result of incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    /// New value and CAS.
    Value(u64, u64),
    /// No such item.
    NotFound,
    /// The stored value is not a decimal number.
    NonNumeric,
    /// CAS given and it did not match.
    Exists,
}

/// Item counters summed over shards.
#[derive(Debug, Default, Clone, Copy)]
pub struct StoreCounters {
    /// Items currently stored (expired ones count until reclaimed).
    pub curr_items: u64,
    /// Items ever stored.
    pub total_items: u64,
    /// Bytes charged (keys + values + overhead).
    pub bytes: u64,
    /// Items evicted to make room.
    pub evictions: u64,
    /// Expired items whose memory was reused.
    pub reclaimed: u64,
    /// Expired items that were never fetched.
    pub expired_unfetched: u64,
    /// Reads that found an expired item.
    pub get_expired: u64,
    /// Reads that found an item invalidated by `flush_all`.
    pub get_flushed: u64,
    /// Evicted items that were never fetched.
    pub evicted_unfetched: u64,
    /// Pages moved between slab classes (`slabs_moved`).
    pub slabs_moved: u64,
    /// Dead items the LRU crawler took back (`crawler_reclaimed`).
    pub crawler_reclaimed: u64,
    /// Items the LRU crawler looked at (`crawler_items_checked`).
    pub crawler_checked: u64,
    /// Bytes of slab pages allocated (`total_malloced`); 0 without slabs.
    pub malloced: u64,
    /// Pages in the global pool (`slab_global_page_pool`).
    pub pool_pages: u64,
    /// Live items page moves copied elsewhere (`slab_reassign_rescues`).
    pub reassign_rescues: u64,
    /// Live items page moves evicted for want of a free chunk
    /// (`slab_reassign_evictions_nomem`).
    pub reassign_evictions_nomem: u64,
    /// Free chunks in the moving page a rescue met (`slab_reassign_inline_reclaim`).
    pub reassign_inline_reclaim: u64,
    /// Chunks of chunked items a page move copied out (`slab_reassign_chunk_rescues`).
    pub reassign_chunk_rescues: u64,
    /// Items in use by replies that made a page busy (`slab_reassign_busy_items`).
    pub reassign_busy_items: u64,
    /// Evicted items that were active (`evicted_active`).
    pub evicted_active: u64,
    /// Hot or warm items moved down to cold (`moves_to_cold`).
    pub moves_to_cold: u64,
    /// Active items moved to warm (`moves_to_warm`).
    pub moves_to_warm: u64,
    /// Active warm items moved back to its head (`moves_within_lru`).
    pub moves_within_lru: u64,
    /// Allocation rounds that evicted or moved first (`direct_reclaims`).
    pub direct_reclaims: u64,
    /// Pinned tail items eviction passed over (`lrutail_reflocked`).
    pub lrutail_reflocked: u64,
    /// Reads whose move to warm was dropped, the queue being full (`lru_bumps_dropped`).
    pub lru_bumps_dropped: u64,
    /// Maintainer passes (`lru_maintainer_juggles`).
    pub lru_maintainer_juggles: u64,
}

/// Which items `lru_crawler metadump` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dump {
    /// `all`: every class.
    All,
    /// Classes by memcached's id (1-based).
    Classes(Vec<usize>),
    /// `hash`: in hash table order.
    Hash,
}

/// Storage limits.
#[derive(Debug, Clone, Copy)]
pub struct StoreConfig {
    /// Memory budget in bytes (`-m`).
    pub mem_limit: usize,
    /// Largest item (`-I`), counting key, value and overhead.
    pub item_max: usize,
    /// Refuse to evict (`-M`): stores fail with out-of-memory instead.
    pub no_evict: bool,
    /// Whether CAS values are kept (`-C` turns them off: CAS reads 0).
    pub use_cas: bool,
    /// Keep memcached's item size histogram (`-o track_sizes`).
    pub track_sizes: bool,
}

/// Converts a protocol exptime into an absolute relative-clock time (0 = never, 1 = already
/// expired), following memcached: negative expires at once, up to 30 days is relative, beyond
/// is a Unix time.
pub fn exptime(exptime: i64, now: u32, process_started: i64) -> u32 {
    if exptime < 0 {
        return 1;
    }
    if exptime == 0 {
        return 0;
    }
    if exptime > REALTIME_MAXDELTA {
        if exptime <= process_started {
            return 1;
        }
        return (exptime - process_started).min(u32::MAX as i64) as u32;
    }
    (exptime + now as i64).min(u32::MAX as i64) as u32
}

/// A stored value held for a reply that sends it by reference after the store's lock is
/// released: the item's key followed by its value.
#[derive(Debug, Clone)]
pub enum Held {
    /// The heap store's shared allocation.
    Heap(Arc<[u8]>),
    /// An arena item, pinned.
    Arena(Arc<crate::arena::Pin>),
}

impl Held {
    /// The key followed by the value.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Held::Heap(a) => a,
            Held::Arena(p) => p.bytes(),
        }
    }
}

/// One slab class as `stats slabs` and `stats items` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlabClass {
    /// memcached's class id (1-based).
    pub id: usize,
    /// The arena's figures.
    pub stats: crate::arena::ClassStats,
    /// Age in seconds of the class' cold LRU tail (`age`).
    pub age: u32,
    /// The same for the hot LRU (`age_hot`).
    pub age_hot: u32,
    /// The same for the warm LRU (`age_warm`).
    pub age_warm: u32,
}

/// One line of `lru_crawler metadump`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaLine {
    /// The key.
    pub key: Vec<u8>,
    /// Expiry on the relative clock (0: never).
    pub exptime: u32,
    /// Last access on the relative clock.
    pub time: u32,
    /// CAS.
    pub cas: u64,
    /// Read since stored.
    pub fetched: bool,
    /// memcached's class id (1-based).
    pub class: usize,
    /// Bytes as memcached counts them.
    pub size: usize,
    /// Client flags.
    pub flags: u32,
}

/// What a warm restart carries besides the arena (memcached's `.meta` file): the next CAS,
/// the flush state and the hash table's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartState {
    /// The CAS the next store gets (`current_cas`).
    pub cas: u64,
    /// Items with a CAS below this are flushed (`oldest_cas`; 0: none).
    pub flush_cas: u64,
    /// Items last written at or before this time are flushed (`oldest_live`; 0: none).
    pub oldest_live: u32,
    /// log2 of the hash buckets (`hashpower`).
    pub hash_power: u32,
    /// The arena's page size (`slab_page_size`, a setting the metadata file checks).
    pub page_size: usize,
}

/// Item storage: everything the protocol handlers need.
pub trait EntryStore: Send + Sync {
    /// The limits this store was made with.
    fn config(&self) -> &StoreConfig;
    /// Sets what is told about evictions (`watch evictions`).
    fn set_evict_hook(&mut self, hook: EvictHook);
    /// `stats sizes` with `-o track_sizes`: (size rounded up to 32 bytes, items) for every
    /// non-empty bucket in size order; `None` when not tracking.
    fn sizes(&self) -> Option<Vec<(usize, u64)>>;
    /// `stats reset`: zeroes `get_expired` and `get_flushed` (and the arena's per-class item
    /// counters, as memcached's `item_stats_reset`).
    fn reset_read_counters(&self);
    /// `stats cachedump`: up to `limit` live items (0 = all) of slab class `class` as (key,
    /// value length, relative exptime), most recently used first.
    fn dump(&self, class: usize, limit: usize, now: u32) -> Vec<(Vec<u8>, usize, u32)>;
    /// Whether an item of this size fits at all.
    fn fits(&self, key_len: usize, value_len: usize) -> bool;
    /// Reads one item; `f` sees it while the store is locked (copy out what you need, or keep
    /// [`ItemRef::shared`]). Whether it was found.
    fn read(
        &self,
        key: &[u8],
        now: u32,
        opts: ReadOpts,
        exptime_abs: u32,
        f: &mut dyn FnMut(ItemRef<'_>),
    ) -> bool;
    /// Stores an item; `data` is the value without the trailing CRLF.
    fn store(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime_abs: u32,
        data: &[u8],
        now: u32,
    ) -> StoreOutcome;
    /// Marks an item stale for stale-while-revalidate (meta delete with `I`).
    fn invalidate(
        &self,
        key: &[u8],
        now: u32,
        cas: Option<u64>,
        exptime_abs: Option<u32>,
    ) -> DeleteOutcome;
    /// Deletes an item, optionally only if its CAS matches.
    fn delete(&self, key: &[u8], now: u32, cas: Option<u64>) -> DeleteOutcome;
    /// incr (`incr = true`, wraps at 2^64) or decr (floors at 0).
    fn arith(&self, key: &[u8], incr: bool, delta: u64, now: u32, cas: Option<u64>)
        -> ArithOutcome;
    /// `flush_all` without a delay at relative time `now`. With CAS values (the default)
    /// items stored later in the same second survive (their CAS is higher); without them
    /// (`-C`) memcached can only compare times, so items stored in the same second as the
    /// flush are flushed too, as memcached does.
    fn flush_now(&self, now: u32);
    /// Invalidates every item now (`delay_until` = None) or once `now` reaches the given time.
    fn flush(&self, delay_until: Option<u32>);
    /// Changes the memory budget at run time (`cache_memlimit`).
    fn set_mem_limit(&self, bytes: usize, now: u32);
    /// The current memory budget in bytes.
    fn mem_limit(&self) -> usize;
    /// Item counters.
    fn counters(&self) -> StoreCounters;
    /// Slab classes with pages or items (`stats slabs`, `stats items`); `None`: no slabs.
    fn slabs(&self, _now: u32) -> Option<Vec<SlabClass>> {
        None
    }
    /// The live items `which` names (`lru_crawler metadump`); `None`: not supported.
    fn metadump(&self, _now: u32, _which: &Dump) -> Option<Vec<MetaLine>> {
        None
    }
    /// Slab classes (0: none).
    fn class_count(&self) -> usize {
        0
    }
    /// The LRU crawler: checks the items of the given classes (1-based; `None`: all), at most
    /// `max` per class from the LRU tail (0: all), and takes back expired and flushed ones;
    /// returns (checked, reclaimed).
    fn crawl(&self, _now: u32, _classes: Option<&[usize]>, _max: usize) -> (u64, u64) {
        (0, 0)
    }
    /// The LRU maintainer's periodic pass: takes back dead items near the LRU tails and gives
    /// pages beyond the memory limit back to the system; returns the items taken back.
    fn maintain(&self, _now: u32) -> u64 {
        0
    }
    /// Moves a page from class `from` to class `to` (1-based; `to` 0 gives it back to the
    /// global pool): memcached's `slabs reassign`. Its live items are rescued into free
    /// chunks of their class where there are some; returns how many were evicted.
    fn reassign(
        &self,
        _from: usize,
        _to: usize,
        _now: u32,
    ) -> Result<u64, crate::arena::ArenaError> {
        Err(crate::arena::ArenaError::Config(
            "this storage has no slab classes".into(),
        ))
    }
    /// A graceful stop: the arena is left clean for a warm restart (`-e`); `epoch` is the Unix
    /// time of the relative clock's zero.
    fn close(&self, _epoch: i64) -> std::io::Result<()> {
        Ok(())
    }
    /// The slab automover's periodic pass (`slab_automove` mode 1 or 2, over a `window` of
    /// passes, with memcached's age `ratio`); returns the pages moved.
    fn automove(&self, _now: u32, _mode: u32, _window: u32, _ratio: f64) -> u64 {
        0
    }
    /// What a warm restart needs besides the arena; `None`: nothing survives a restart.
    fn restart_state(&self) -> Option<RestartState> {
        None
    }
    /// Tells one-sided readers the unix time of the relative clock's zero (their expiry
    /// checks use it); a no-op where nobody reads the store remotely.
    fn publish_epoch(&self, _epoch: i64) {}
    /// The hash table: log2 of its buckets (counting a growth under way) and whether it grows;
    /// `None`: no single table.
    fn hash_table(&self) -> Option<(u32, bool)> {
        None
    }
    /// Freezes the items for a post-copy migration: nothing changes them from here on (the
    /// caller keeps every request away too), and the arena is marked clean so another
    /// server opens it restored; `None`: this storage cannot be handed over (the heap), or
    /// it is closed already.
    fn hand_over(&self, _epoch: i64) -> Option<Handover> {
        None
    }
    /// Undoes [`hand_over`](Self::hand_over): the items are this server's again.
    fn take_back(&self) {}
}

/// A store frozen for migration ([`EntryStore::hand_over`]).
pub struct Handover {
    /// The arena's memory, to serve to the target.
    pub map: Arc<crate::arena::Mapping>,
    /// One bit per 4 KiB page the target may install as zero without a fetch.
    pub zero_map: Vec<u64>,
    /// Chunks replies still hold here: the target frees them ([`crate::arena::Arena::held_offsets`]).
    pub held: Vec<u64>,
    /// The state outside the arena, as a warm restart's metadata carries it.
    pub state: RestartState,
}

/// The handlers' name for the store.
pub type Store = dyn EntryStore;

impl<'s> dyn EntryStore + 's {
    /// Reads one item; `f` sees it while the store is locked.
    pub fn get<R>(
        &self,
        key: &[u8],
        now: u32,
        opts: ReadOpts,
        exptime_abs: u32,
        f: impl FnOnce(ItemRef<'_>) -> R,
    ) -> Option<R> {
        let mut f = Some(f);
        let mut r = None;
        self.read(key, now, opts, exptime_abs, &mut |it| {
            if let Some(f) = f.take() {
                r = Some(f(it));
            }
        });
        r
    }

    /// Sets a new expiry; returns whether the item exists.
    pub fn touch(&self, key: &[u8], exptime_abs: u32, now: u32) -> bool {
        let opts = ReadOpts {
            touch: Some(0),
            ..ReadOpts::default()
        };
        self.read(key, now, opts, exptime_abs, &mut |_| ())
    }

    /// Number of items stored.
    pub fn len(&self) -> usize {
        self.counters().curr_items as usize
    }

    /// True when no item is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Called with each item evicted to make room (under its shard's lock: keep it short).
pub type EvictHook = Box<dyn Fn(&crate::logger::Evicted<'_>) + Send + Sync>;

/// Outcome of `get`-like reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Found and handed to the reader.
    Hit,
    /// Absent, expired or flushed.
    Miss,
}

/// Options of a read.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOpts {
    /// New exptime to set (gat, mg T).
    pub touch: Option<i64>,
    /// Leave the LRU position and fetched bit alone (mg u).
    pub no_bump: bool,
    /// A meta read: hand out recache tokens (`W`/`Z`) for stale or low-TTL items.
    pub meta: bool,
    /// mg `R`: the reader wins a recache token when the remaining TTL is below this.
    pub recache: Option<i64>,
    /// Claim the recache token unconditionally (the reader just vivified the item).
    pub claim: bool,
}

#[cfg(test)]
mod tests;
