//! The arena store: memcached's item semantics (CAS, expiry, `flush_all`, meta's stale and
//! recache state, eviction counters, the size histogram) over one [`Arena`] behind one lock.
//!
//! One lock, not shards: the arena's hash table, LRU lists and free lists are shared by every
//! key, as memcached's are. The lock is held for a lookup and a copy of a small value; a large
//! value is pinned and sent after the lock is released, so the lock never covers a send.
//!
//! Here: opening the arena and the [`EntryStore`] face. The item commands are in
//! `arena_commands.rs`; the page limit, `stats` figures, crawler, maintainer and page moves
//! in `arena_maint.rs`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::arena::{Arena, ArenaConfig, ArenaError, Backing, LruConfig, Mapping, Opened};

use super::*;

/// How the arena's memory is found or made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opening {
    /// Fresh anonymous memory.
    Anonymous,
    /// A memfd (shareable by descriptor).
    Memfd,
    /// A file for warm restarts (`-e PATH`).
    File(std::path::PathBuf),
}

pub(super) struct Inner {
    pub(super) arena: Arena,
    pub(super) total_items: u64,
    pub(super) get_expired: u64,
    pub(super) get_flushed: u64,
    /// `-o track_sizes`: items per 32-byte bucket.
    pub(super) sizes: Option<BTreeMap<usize, u64>>,
    pub(super) evict_hook: Option<EvictHook>,
    /// Closed for a warm restart: nothing more may change the arena.
    pub(super) closed: bool,
    /// The slab automover's window (mode 1), made on its first pass.
    pub(super) mover: Option<super::automove::Automover>,
    /// Each class' evictions at the last mode-2 automove pass.
    pub(super) last_evicted: Vec<u64>,
    /// Maintainer passes (`lru_maintainer_juggles`).
    pub(super) juggles: u64,
}

/// Items in one arena.
pub struct ArenaStore {
    pub(super) inner: Mutex<Inner>,
    pub(super) config: StoreConfig,
    pub(super) arena_config: ArenaConfig,
    pub(super) flush: super::flush::Flush,
    pub(super) mem_limit: AtomicUsize,
    /// Bytes counted as allocated before any page (memcached's `T_MEMD_INITIAL_MALLOC`).
    pub(super) premalloc: AtomicUsize,
    /// `cache_memlimit` went below the pages allocated: the maintainer frees pages as they
    /// empty (the first page a class gets beyond the limit is not what this is about).
    pub(super) shrinking: AtomicBool,
    pub(super) opened: Opened,
}

pub(super) use super::flush::Ctx;

impl ArenaStore {
    /// Opens (or makes) the arena for `config`; `arena` gives the slab settings (its
    /// `memory` and `item_max` follow `config`). A file arena of the same settings left clean
    /// by [`EntryStore::close`] is restored; see [`ArenaStore::opened`].
    pub fn open(
        config: StoreConfig,
        arena: ArenaConfig,
        opening: &Opening,
    ) -> Result<ArenaStore, ArenaError> {
        let ac = ArenaConfig {
            memory: config.mem_limit,
            item_max: config.item_max,
            cas: config.use_cas,
            ..arena
        };
        let backing = match opening {
            Opening::Anonymous => Backing::Anonymous,
            Opening::Memfd => Backing::Memfd,
            Opening::File(p) => Backing::File(p.clone()),
        };
        let map = Mapping::new(backing, ac.mapped())?;
        ArenaStore::from_mapping(config, ac, map, None)
    }

    /// Opens a remotely readable arena for `config` registered with `pd` for remote READs
    /// ([`Mapping::register`]): a fresh one in a memfd (`Opening::Anonymous` or `Memfd`), or
    /// the `-e` file's, restored as [`open`](Self::open) restores it; returns the store and
    /// the region to grant.
    pub fn open_registered(
        config: StoreConfig,
        arena: ArenaConfig,
        opening: &Opening,
        pd: &remora_mem::Pd,
    ) -> Result<(ArenaStore, std::sync::Arc<remora_mem::Region>), ArenaError> {
        let ac = ArenaConfig {
            memory: config.mem_limit,
            item_max: config.item_max,
            cas: config.use_cas,
            remote: true,
            ..arena
        };
        let backing = match opening {
            // Peers on this host map a sealed memfd: anonymous memory cannot be granted so.
            Opening::Anonymous | Opening::Memfd => Backing::Memfd,
            Opening::File(p) => Backing::File(p.clone()),
        };
        let (map, region) = Mapping::new(backing, ac.mapped())?.register(pd)?;
        Ok((ArenaStore::from_mapping(config, ac, map, None)?, region))
    }

    /// Opens the arena in `map` (made for `ac`, whose `memory`, `item_max` and `cas` must
    /// follow `config`): a migration target's lazily mapped arena (with the held chunks its
    /// source named: [`Arena::open_handed_over`]), or any other mapping.
    pub fn from_mapping(
        config: StoreConfig,
        ac: ArenaConfig,
        map: Mapping,
        held: Option<&[u64]>,
    ) -> Result<ArenaStore, ArenaError> {
        let (arena, opened) = match held {
            Some(h) => Arena::open_handed_over(map, &ac, h)?,
            None => Arena::open(map, &ac)?,
        };
        Ok(ArenaStore {
            inner: Mutex::new(Inner {
                arena,
                total_items: 0,
                get_expired: 0,
                get_flushed: 0,
                sizes: config.track_sizes.then(BTreeMap::new),
                evict_hook: None,
                closed: false,
                mover: None,
                last_evicted: Vec::new(),
                juggles: 0,
            }),
            config,
            arena_config: ac,
            flush: Default::default(),
            mem_limit: AtomicUsize::new(config.mem_limit),
            premalloc: AtomicUsize::new(0),
            shrinking: AtomicBool::new(false),
            opened,
        })
    }

    /// An anonymous arena with memcached's slab defaults (tests, in-process use).
    pub fn new(config: StoreConfig) -> ArenaStore {
        ArenaStore::open(
            config,
            ArenaConfig::new(config.mem_limit),
            &Opening::Anonymous,
        )
        .expect("anonymous memory for the arena")
    }

    /// Counts `bytes` as allocated before any page, as memcached's test hook
    /// `T_MEMD_INITIAL_MALLOC` does: `total_malloced` starts there and the pages `-m` allows
    /// shrink by as much.
    pub fn set_premalloc(&self, bytes: usize) {
        self.premalloc.store(bytes, Ordering::Relaxed);
        self.set_mem_limit(self.mem_limit(), 0);
    }

    /// The flush state and next CAS a warm restart carries in its metadata file (the arena's
    /// own header holds the same CAS; see [`EntryStore::restart_state`]).
    pub fn restore(&self, st: &RestartState) {
        self.flush.restore(st.flush_cas, st.oldest_live);
    }

    /// Empties a restored arena: the start is cold after all (`why`: the restart metadata is
    /// missing or disagrees with the arena).
    pub fn start_cold(&mut self, why: String) -> Result<(), ArenaError> {
        let ac = self.arena_config.clone();
        self.lock().arena.reset(&ac)?;
        self.opened = Opened::Cold(Some(why));
        Ok(())
    }

    /// How items move between each class' hot, warm, cold and temp LRUs (the arena starts
    /// flat: one LRU per class).
    pub fn set_lru(&self, cfg: LruConfig) {
        self.lock().arena.set_lru_config(cfg);
    }

    /// Whether the arena was restored or started cold (and why).
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// The arena's layout settings.
    pub fn arena_config(&self) -> &ArenaConfig {
        &self.arena_config
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn ctx(&self, now: u32) -> Ctx {
        self.flush.ctx(now)
    }
}

impl EntryStore for ArenaStore {
    fn config(&self) -> &StoreConfig {
        &self.config
    }

    fn set_evict_hook(&mut self, hook: EvictHook) {
        self.lock().evict_hook = Some(hook);
    }

    fn sizes(&self) -> Option<Vec<(usize, u64)>> {
        let g = self.lock();
        g.sizes.as_ref().map(|h| {
            h.iter()
                .filter(|&(_, &n)| n > 0)
                .map(|(&b, &n)| (b * 32, n))
                .collect()
        })
    }

    fn reset_read_counters(&self) {
        let mut g = self.lock();
        g.get_expired = 0;
        g.get_flushed = 0;
        g.arena.reset_counters();
    }

    fn dump(&self, class: usize, limit: usize, now: u32) -> Vec<(Vec<u8>, usize, u32)> {
        let ctx = self.ctx(now);
        let g = self.lock();
        let limit = if limit == 0 { usize::MAX } else { limit };
        let mut v = Vec::new();
        g.arena.lru(class.wrapping_sub(1), |it| {
            if v.len() < limit && ctx.live(&it) {
                v.push((it.key.to_vec(), it.value_len, it.exptime));
            }
            v.len() < limit
        });
        v
    }

    fn fits(&self, key_len: usize, value_len: usize) -> bool {
        self.arena_config.item_size(key_len, value_len) <= self.arena_config.item_max
    }

    fn read(
        &self,
        key: &[u8],
        now: u32,
        opts: ReadOpts,
        exptime_abs: u32,
        f: &mut dyn FnMut(ItemRef<'_>),
    ) -> bool {
        self.read_item(key, now, opts, exptime_abs, f)
    }

    fn store(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime_abs: u32,
        data: &[u8],
        now: u32,
    ) -> StoreOutcome {
        self.store_item(mode, key, flags, exptime_abs, data, now)
    }

    fn invalidate(
        &self,
        key: &[u8],
        now: u32,
        cas: Option<u64>,
        exptime_abs: Option<u32>,
    ) -> DeleteOutcome {
        self.invalidate_item(key, now, cas, exptime_abs)
    }

    fn delete(&self, key: &[u8], now: u32, cas: Option<u64>) -> DeleteOutcome {
        self.delete_item(key, now, cas)
    }

    fn arith(
        &self,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: u32,
        cas: Option<u64>,
    ) -> ArithOutcome {
        self.arith_item(key, incr, delta, now, cas)
    }

    fn flush_now(&self, now: u32) {
        let mut g = self.lock();
        self.flush.now(g.arena.peek_cas(), now, self.config.use_cas);
        // Without CAS values liveness rests on the time mark alone, which a later delayed
        // flush moves: the items go now.
        if !self.config.use_cas {
            g.arena.flush();
            if let Some(h) = g.sizes.as_mut() {
                h.clear();
            }
        }
    }

    fn flush(&self, delay_until: Option<u32>) {
        match delay_until {
            // The relative clock never reads 0, so an immediate flush's time mark is moot.
            None => self.flush_now(0),
            Some(t) => self.flush.at(t),
        }
    }

    fn set_mem_limit(&self, bytes: usize, _now: u32) {
        self.arena_set_mem_limit(bytes)
    }

    fn mem_limit(&self) -> usize {
        self.mem_limit.load(Ordering::Relaxed)
    }

    fn counters(&self) -> StoreCounters {
        self.arena_counters()
    }

    fn slabs(&self, now: u32) -> Option<Vec<SlabClass>> {
        self.arena_slabs(now)
    }

    fn class_count(&self) -> usize {
        self.lock().arena.class_count()
    }

    fn metadump(&self, now: u32, which: &Dump) -> Option<Vec<MetaLine>> {
        self.arena_metadump(now, which)
    }

    fn crawl(&self, now: u32, classes: Option<&[usize]>, max: usize) -> (u64, u64) {
        self.crawl_pass(now, classes, max)
    }

    fn maintain(&self, now: u32) -> u64 {
        self.maintain_pass(now)
    }

    fn reassign(&self, from: usize, to: usize, now: u32) -> Result<u64, ArenaError> {
        self.arena_reassign(from, to, now)
    }

    fn automove(&self, now: u32, mode: u32, window: u32, ratio: f64) -> u64 {
        self.automove_pass(now, mode, window, ratio)
    }

    fn close(&self, epoch: i64) -> std::io::Result<()> {
        let mut g = self.lock();
        if g.closed {
            return Ok(());
        }
        g.closed = true;
        g.arena.mark_clean(epoch)
    }

    fn publish_epoch(&self, epoch: i64) {
        let mut g = self.lock();
        if g.arena.remote() {
            g.arena.publish_epoch(epoch);
        }
    }

    fn restart_state(&self) -> Option<RestartState> {
        let g = self.lock();
        let (flush_cas, oldest_live) = self.flush.marks();
        Some(RestartState {
            cas: g.arena.peek_cas(),
            flush_cas,
            oldest_live,
            hash_power: g.arena.hash_level().0,
            page_size: self.arena_config.page_size,
        })
    }

    fn hash_table(&self) -> Option<(u32, bool)> {
        Some(self.lock().arena.hash_level())
    }

    fn hand_over(&self, epoch: i64) -> Option<Handover> {
        let mut g = self.lock();
        if g.closed {
            return None;
        }
        g.closed = true;
        g.arena.mark_handed_over(epoch);
        let (flush_cas, oldest_live) = self.flush.marks();
        Some(Handover {
            held: g.arena.held_offsets(),
            map: g.arena.shared_mapping(),
            zero_map: g.arena.zero_map(),
            state: RestartState {
                cas: g.arena.peek_cas(),
                flush_cas,
                oldest_live,
                hash_power: g.arena.hash_level().0,
                page_size: self.arena_config.page_size,
            },
        })
    }

    fn take_back(&self) {
        let mut g = self.lock();
        g.closed = false;
        g.arena.mark_running();
    }
}
