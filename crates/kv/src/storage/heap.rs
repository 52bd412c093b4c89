//! The heap store: a sharded hash table with one LRU list per shard, a byte budget (`-m`)
//! enforced by evicting from the LRU tail. Values are plain heap allocations of their exact
//! size; there are no slab classes. Kept beside the arena (`-o storage=heap`) as the
//! reference the arena is tested and benchmarked against.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::shard::{self, Shard};
use super::*;

/// The sharded heap item store.
pub struct HeapStore {
    shards: Box<[Mutex<Shard>]>,
    mask: u64,
    next_cas: AtomicU64,
    config: StoreConfig,
    flush: super::flush::Flush,
    mem_limit: std::sync::atomic::AtomicUsize,
}

impl HeapStore {
    /// Creates an empty store.
    pub fn new(config: StoreConfig) -> HeapStore {
        // Enough shards to spread lock contention, few enough that one shard still holds
        // at least two largest items.
        let mut n = 64usize;
        while n > 1 && config.mem_limit / n < 2 * config.item_max {
            n /= 2;
        }
        let per = config.mem_limit / n;
        let sizes = config.track_sizes.then_some(config.use_cas);
        let shards = (0..n).map(|_| Mutex::new(Shard::new(per, sizes))).collect();
        HeapStore {
            shards,
            mask: (n - 1) as u64,
            next_cas: AtomicU64::new(1),
            config,
            flush: Default::default(),
            mem_limit: std::sync::atomic::AtomicUsize::new(config.mem_limit),
        }
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
        self.flush.ctx(now)
    }
}

impl EntryStore for HeapStore {
    /// Sets what is told about evictions (`watch evictions`).
    fn set_evict_hook(&mut self, hook: EvictHook) {
        let hook: Arc<EvictHook> = Arc::new(hook);
        for s in self.shards.iter_mut() {
            match s.get_mut() {
                Ok(g) => g.evict_hook = Some(hook.clone()),
                Err(p) => p.into_inner().evict_hook = Some(hook.clone()),
            }
        }
    }

    /// The limits this store was made with.
    fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// `stats sizes` with `-o track_sizes`: (size rounded up to 32 bytes, items) for every
    /// non-empty bucket in size order; `None` when not tracking.
    fn sizes(&self) -> Option<Vec<(usize, u64)>> {
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
    fn reset_read_counters(&self) {
        for s in self.shards.iter() {
            s.lock()
                .unwrap_or_else(|p| p.into_inner())
                .reset_read_counters();
        }
    }

    /// `stats cachedump`: up to `limit` live items (0 = all) as (key, value length, relative
    /// exptime), each shard's from most to least recently used.
    fn dump(&self, class: usize, limit: usize, now: u32) -> Vec<(Vec<u8>, usize, u32)> {
        // Without slab classes every item is reported under class 1.
        if class != 1 {
            return Vec::new();
        }
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
    fn fits(&self, key_len: usize, value_len: usize) -> bool {
        key_len + value_len + ITEM_OVERHEAD <= self.config.item_max
    }

    fn read(
        &self,
        key: &[u8],
        now: u32,
        opts: ReadOpts,
        exptime_abs: u32,
        f: &mut dyn FnMut(ItemRef<'_>),
    ) -> bool {
        let h = Self::hash(key);
        let ctx = self.ctx(now);
        self.shard(h)
            .get(h, key, &ctx, opts, exptime_abs, f)
            .is_some()
    }

    /// Stores an item; `data` is the value without the trailing CRLF.
    fn store(
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
    fn invalidate(
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
    fn delete(&self, key: &[u8], now: u32, cas: Option<u64>) -> DeleteOutcome {
        let h = Self::hash(key);
        let ctx = self.ctx(now);
        self.shard(h).delete(h, key, &ctx, cas)
    }

    /// incr (`incr = true`, wraps at 2^64) or decr (floors at 0).
    fn arith(
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

    /// `flush_all` without a delay at relative time `now`. With CAS values (the default) items
    /// stored later in the same second survive (their CAS is higher); without them (`-C`)
    /// memcached can only compare times, so items stored in the same second as the flush are
    /// flushed too, as memcached does.
    fn flush_now(&self, now: u32) {
        self.flush.now(
            self.next_cas.load(Ordering::Relaxed),
            now,
            self.config.use_cas,
        );
        // Without CAS values liveness rests on the time mark alone, which a later delayed
        // flush moves: the items go now.
        if !self.config.use_cas {
            for s in self.shards.iter() {
                s.lock().unwrap_or_else(|p| p.into_inner()).clear();
            }
        }
    }

    /// Invalidates every item now (`delay_until` = None) or once `now` reaches the given time.
    fn flush(&self, delay_until: Option<u32>) {
        match delay_until {
            // The relative clock never reads 0, so an immediate flush's time mark is moot.
            None => self.flush_now(0),
            Some(t) => self.flush.at(t),
        }
    }

    /// Changes the memory budget at run time (`cache_memlimit`); items beyond a smaller budget
    /// are evicted at once. The shard count stays as created.
    fn set_mem_limit(&self, bytes: usize, now: u32) {
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
    fn mem_limit(&self) -> usize {
        self.mem_limit.load(Ordering::Relaxed)
    }

    /// Sums item counters over all shards.
    fn counters(&self) -> StoreCounters {
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
}
