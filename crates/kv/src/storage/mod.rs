//! Item storage: a sharded hash table with one LRU list per shard, a byte budget (`-m`)
//! enforced by evicting from the LRU tail, CAS, expiry and `flush_all`.
//!
//! Time is passed in (`now`, seconds on the server's relative clock, see [`crate::clock`]) so the
//! storage is deterministic and testable without sleeping.
//!
//! Memory accounting: each item is charged its key and value lengths plus [`ITEM_OVERHEAD`], an
//! honest estimate of the per-item bookkeeping (entry struct, table slot, allocator headers).
//! There are no slab classes: values are plain heap allocations of their exact size.

mod shard;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use shard::ItemRef;
use shard::Shard;

/// Bytes charged per item beyond its key and value.
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
    /// Append the data to an existing item.
    Append,
    /// Prepend the data to an existing item.
    Prepend,
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

/// The sharded item store.
pub struct Store {
    shards: Box<[Mutex<Shard>]>,
    mask: u64,
    next_cas: AtomicU64,
    config: StoreConfig,
    /// Immediate flushes invalidate every item with a lower CAS (items stored in the same second
    /// as the flush survive only if they come after it).
    flush_cas: AtomicU64,
    /// Delayed flush: items last written at or before this time die once `now` reaches it.
    oldest_live: AtomicU64,
    mem_limit: std::sync::atomic::AtomicUsize,
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

impl Store {
    /// Creates an empty store.
    pub fn new(config: StoreConfig) -> Store {
        // Enough shards to spread lock contention, few enough that one shard still holds
        // at least two largest items.
        let mut n = 64usize;
        while n > 1 && config.mem_limit / n < 2 * config.item_max {
            n /= 2;
        }
        let per = config.mem_limit / n;
        let sizes = config.track_sizes.then_some(config.use_cas);
        let shards = (0..n).map(|_| Mutex::new(Shard::new(per, sizes))).collect();
        Store {
            shards,
            mask: (n - 1) as u64,
            next_cas: AtomicU64::new(1),
            config,
            flush_cas: AtomicU64::new(0),
            oldest_live: AtomicU64::new(u64::MAX),
            mem_limit: std::sync::atomic::AtomicUsize::new(config.mem_limit),
        }
    }

    /// Sets what is told about evictions (`watch evictions`).
    pub fn set_evict_hook(&mut self, hook: EvictHook) {
        let hook: Arc<EvictHook> = Arc::new(hook);
        for s in self.shards.iter_mut() {
            match s.get_mut() {
                Ok(g) => g.evict_hook = Some(hook.clone()),
                Err(p) => p.into_inner().evict_hook = Some(hook.clone()),
            }
        }
    }

    /// The limits this store was made with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    fn hash(key: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one(key)
    }

    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, Shard> {
        // Top bits pick the shard; hashbrown uses the low and top-7 bits inside it.
        let i = ((hash >> 40) & self.mask) as usize;
        match self.shards[i].lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn new_cas(&self) -> u64 {
        if self.config.use_cas {
            self.next_cas.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        }
    }

    fn ctx(&self, now: u32) -> shard::Ctx {
        shard::Ctx {
            now,
            flush_cas: self.flush_cas.load(Ordering::Relaxed),
            oldest_live: self.oldest_live.load(Ordering::Relaxed),
        }
    }

    /// Converts a protocol exptime into an absolute relative-clock time (0 = never, 1 = already
    /// expired), following memcached: negative expires at once, up to 30 days is relative,
    /// beyond is a Unix time.
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

    /// `stats sizes` with `-o track_sizes`: (size rounded up to 32 bytes, items) for every
    /// non-empty bucket in size order; `None` when not tracking.
    pub fn sizes(&self) -> Option<Vec<(usize, u64)>> {
        if !self.config.track_sizes {
            return None;
        }
        let mut total: std::collections::BTreeMap<usize, u64> = Default::default();
        for s in self.shards.iter() {
            let g = s.lock().unwrap_or_else(|p| p.into_inner());
            for (b, n) in g.sizes() {
                *total.entry(b).or_default() += n;
            }
        }
        Some(
            total
                .into_iter()
                .filter(|&(_, n)| n > 0)
                .map(|(b, n)| (b * 32, n))
                .collect(),
        )
    }

    /// `stats reset`: zeroes `get_expired` and `get_flushed`.
    pub fn reset_read_counters(&self) {
        for s in self.shards.iter() {
            s.lock()
                .unwrap_or_else(|p| p.into_inner())
                .reset_read_counters();
        }
    }

    /// `stats cachedump`: up to `limit` live items (0 = all) as (key, value length, relative
    /// exptime), each shard's from most to least recently used.
    pub fn dump(&self, limit: usize, now: u32) -> Vec<(Vec<u8>, usize, u32)> {
        let ctx = self.ctx(now);
        let limit = if limit == 0 { usize::MAX } else { limit };
        let mut v = Vec::new();
        for s in self.shards.iter() {
            if v.len() >= limit {
                break;
            }
            let g = s.lock().unwrap_or_else(|p| p.into_inner());
            g.dump(&ctx, limit, &mut v);
        }
        v
    }

    /// Whether an item of this size fits at all.
    pub fn fits(&self, key_len: usize, value_len: usize) -> bool {
        key_len + value_len + ITEM_OVERHEAD <= self.config.item_max
    }

    /// Reads one item; `f` sees it while the shard is locked (copy out what you need).
    pub fn get<R>(
        &self,
        key: &[u8],
        now: u32,
        opts: ReadOpts,
        exptime_abs: u32,
        f: impl FnOnce(ItemRef<'_>) -> R,
    ) -> Option<R> {
        let h = Self::hash(key);
        let ctx = self.ctx(now);
        self.shard(h).get(h, key, &ctx, opts, exptime_abs, f)
    }

    /// Stores an item; `data` is the value without the trailing CRLF.
    pub fn store(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime_abs: u32,
        data: &[u8],
        now: u32,
    ) -> StoreOutcome {
        if !self.fits(key.len(), data.len()) {
            // memcached drops the old value so a failed overwrite cannot leave stale data.
            if matches!(
                mode,
                StoreMode::Set | StoreMode::Cas(_) | StoreMode::CasStale(_)
            ) {
                self.delete(key, now, None);
            }
            return StoreOutcome::TooLarge;
        }
        let h = Self::hash(key);
        let ctx = self.ctx(now);
        let mut s = self.shard(h);
        s.store(
            h,
            mode,
            key,
            flags,
            exptime_abs,
            data,
            &ctx,
            &|| self.new_cas(),
            self.config.item_max,
            self.config.no_evict,
        )
    }

    /// Marks an item stale for stale-while-revalidate (meta delete with `I`).
    pub fn invalidate(
        &self,
        key: &[u8],
        now: u32,
        cas: Option<u64>,
        exptime_abs: Option<u32>,
    ) -> DeleteOutcome {
        let h = Self::hash(key);
        let ctx = self.ctx(now);
        self.shard(h)
            .invalidate(h, key, &ctx, cas, exptime_abs, &|| self.new_cas())
    }

    /// Deletes an item, optionally only if its CAS matches.
    pub fn delete(&self, key: &[u8], now: u32, cas: Option<u64>) -> DeleteOutcome {
        let h = Self::hash(key);
        let ctx = self.ctx(now);
        self.shard(h).delete(h, key, &ctx, cas)
    }

    /// incr (`incr = true`, wraps at 2^64) or decr (floors at 0).
    pub fn arith(
        &self,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: u32,
        cas: Option<u64>,
    ) -> ArithOutcome {
        let h = Self::hash(key);
        let ctx = self.ctx(now);
        self.shard(h)
            .arith(h, key, incr, delta, &ctx, cas, &|| self.new_cas())
    }

    /// Sets a new expiry; returns whether the item exists.
    pub fn touch(&self, key: &[u8], exptime_abs: u32, now: u32) -> bool {
        let opts = ReadOpts {
            touch: Some(0),
            ..ReadOpts::default()
        };
        self.get(key, now, opts, exptime_abs, |_| ()).is_some()
    }

    /// `flush_all` without a delay at relative time `now`. With CAS values (the default) items
    /// stored later in the same second survive (their CAS is higher); without them (`-C`)
    /// memcached can only compare times, so items stored in the same second as the flush are
    /// flushed too, as memcached does.
    pub fn flush_now(&self, now: u32) {
        self.flush(None);
        if !self.config.use_cas {
            self.oldest_live.store(now as u64, Ordering::Relaxed);
        }
    }

    /// Invalidates every item now (`delay_until` = None) or once `now` reaches the given time.
    pub fn flush(&self, delay_until: Option<u32>) {
        match delay_until {
            None => {
                let c = self.next_cas.load(Ordering::Relaxed);
                self.flush_cas.store(c, Ordering::Relaxed);
                self.oldest_live.store(u64::MAX, Ordering::Relaxed);
                // With CAS values the flushed items stay, dead, until a read finds them (and
                // counts `get_flushed`) or the LRU reclaims them, as in memcached. Without
                // them (`-C`) liveness rests on `oldest_live` alone, which a later delayed
                // flush moves: the items go now.
                if self.config.use_cas {
                    return;
                }
                for s in self.shards.iter() {
                    let mut g = match s.lock() {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    };
                    g.clear();
                }
            }
            Some(t) => self.oldest_live.store(t as u64, Ordering::Relaxed),
        }
    }

    /// Changes the memory budget at run time (`cache_memlimit`); items beyond a smaller budget
    /// are evicted at once. The shard count stays as created.
    pub fn set_mem_limit(&self, bytes: usize, now: u32) {
        let n = self.shards.len();
        let ctx = self.ctx(now);
        for s in self.shards.iter() {
            let mut g = match s.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            g.set_limit(bytes / n, &ctx);
        }
        self.mem_limit.store(bytes, Ordering::Relaxed);
    }

    /// The current memory budget in bytes.
    pub fn mem_limit(&self) -> usize {
        self.mem_limit.load(Ordering::Relaxed)
    }

    /// Sums item counters over all shards.
    pub fn counters(&self) -> StoreCounters {
        let mut c = StoreCounters::default();
        for s in self.shards.iter() {
            let g = match s.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            g.add_counters(&mut c);
        }
        c
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

#[cfg(test)]
mod tests;
