//! The arena store: memcached's item semantics (CAS, expiry, `flush_all`, meta's stale and
//! recache state, eviction counters, the size histogram) over one [`Arena`] behind one lock.
//!
//! One lock, not shards: the arena's hash table, LRU lists and free lists are shared by every
//! key, as memcached's are. The lock is held for a lookup and a copy of a small value; a large
//! value is pinned and sent after the lock is released, so the lock never covers a send.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::arena::{
    bits, Arena, ArenaConfig, ArenaError, Backing, Item, LruConfig, Mapping, Opened, Victim,
};
use crate::out::SHARE_MIN;

use super::decide::{decide, Decision, Found, Value};
use super::shard::parse_counter;
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

impl Ctx {
    /// Invalidated by a `flush_all` (memcached checks this before expiry).
    fn flushed(&self, it: &Item<'_>) -> bool {
        self.flushed_at(it.cas, it.time)
    }

    pub(super) fn live(&self, it: &Item<'_>) -> bool {
        self.live_at(it.exptime, it.cas, it.time)
    }
}

/// memcached's item size for the histogram (`stats sizes`), bucketed by 32 bytes.
fn size_bucket(key: usize, value: usize, flags: u32) -> usize {
    const MC_ITEM_HEADER: usize = 48;
    let n = MC_ITEM_HEADER + key + 1 + value + 2 + if flags != 0 { 4 } else { 0 } + 8;
    n.div_ceil(32)
}

impl Inner {
    /// Recounts the size histogram after items went in bulk (a crawl is rare).
    pub(super) fn rebuild_sizes(&mut self, use_cas: bool) {
        let Some(h) = self.sizes.as_mut() else {
            return;
        };
        h.clear();
        if !use_cas {
            return;
        }
        let mut all = Vec::new();
        self.arena
            .crawl(|_, it| all.push(size_bucket(it.key.len(), it.value_len, it.flags)));
        let h = self.sizes.as_mut().expect("checked");
        for b in all {
            *h.entry(b).or_default() += 1;
        }
    }

    /// Unlinks a dead or deleted item, keeping the histogram right.
    fn remove(&mut self, off: u64, use_cas: bool) {
        if self.sizes.is_some() {
            let it = self.arena.item(off);
            let (k, v, f) = (it.key.len(), it.value_len, it.flags);
            if let Some(h) = self.sizes.as_mut() {
                if use_cas {
                    let n = h.entry(size_bucket(k, v, f)).or_default();
                    *n = n.saturating_sub(1);
                }
            }
        }
        self.arena.unlink(off);
    }

    /// The live item of `key`; a dead one is reclaimed and `Err(Some(flushed))` says why.
    fn lookup(&mut self, key: &[u8], ctx: &Ctx, use_cas: bool) -> Result<u64, Option<bool>> {
        let off = self.arena.find(key).ok_or(None)?;
        let it = self.arena.item(off);
        if ctx.live(&it) {
            return Ok(off);
        }
        let flushed = ctx.flushed(&it);
        self.arena.count_dead(off);
        self.remove(off, use_cas);
        Err(Some(flushed))
    }

    /// A chunk for `key` with `len` value bytes, evicting by memcached's rules.
    fn alloc(
        &mut self,
        key: &[u8],
        len: usize,
        ctx: &Ctx,
        cfg: &StoreConfig,
    ) -> Result<u64, ArenaError> {
        let Inner {
            arena,
            evict_hook,
            sizes,
            ..
        } = self;
        let mut victim = |it: Item<'_>| {
            let live = ctx.live(&it);
            if live && cfg.no_evict {
                return Victim::Keep;
            }
            if let (Some(h), true) = (sizes.as_mut(), cfg.use_cas) {
                let n = h
                    .entry(size_bucket(it.key.len(), it.value_len, it.flags))
                    .or_default();
                *n = n.saturating_sub(1);
            }
            if !live {
                return Victim::Reclaim;
            }
            if let Some(h) = evict_hook {
                h(&crate::logger::Evicted {
                    key: it.key,
                    fetched: it.fetched(),
                    ttl: if it.exptime == 0 {
                        -1
                    } else {
                        it.exptime as i64 - ctx.now as i64
                    },
                    last_access: ctx.now.saturating_sub(it.time),
                    size: it.value_len,
                });
            }
            Victim::Evict
        };
        arena.alloc(key, len, &mut victim)
    }

    #[allow(clippy::too_many_arguments)]
    /// Links `off` as the item of its key (replacing the old one, whose histogram entry goes).
    fn link(
        &mut self,
        off: u64,
        cas: u64,
        flags: u32,
        exptime: u32,
        now: u32,
        b: u8,
        cas_on: bool,
    ) {
        let key_old = {
            let key = self.arena.item(off).key;
            self.arena.find(key)
        };
        if let Some(old) = key_old {
            self.remove(old, cas_on);
        }
        self.arena.link(off, cas, flags, exptime, now, b);
        self.total_items += 1;
        let it = self.arena.item(off);
        let (k, v, f) = (it.key.len(), it.value_len, it.flags);
        if let (Some(h), true) = (self.sizes.as_mut(), cas_on) {
            *h.entry(size_bucket(k, v, f)).or_default() += 1;
        }
    }
}

fn outcome(e: ArenaError) -> StoreOutcome {
    match e {
        ArenaError::TooLarge(_) | ArenaError::BadKey(_) => StoreOutcome::TooLarge,
        _ => StoreOutcome::NoMemory,
    }
}

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

    fn cas(&self, g: &mut Inner) -> u64 {
        if self.config.use_cas {
            g.arena.next_cas()
        } else {
            0
        }
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
        let ctx = self.ctx(now);
        let mut g = self.lock();
        let off = match g.lookup(key, &ctx, self.config.use_cas) {
            Ok(off) => off,
            Err(dead) => {
                match dead {
                    Some(true) => g.get_flushed += 1,
                    Some(false) => g.get_expired += 1,
                    None => {}
                }
                return false;
            }
        };
        let a = &mut g.arena;
        let it = a.item(off);
        let (time, mut b, exp) = (it.time, it.bits, it.exptime);
        // A chunked value is copied out (its pin owns the copy) and sent from there.
        let big = it.value_len >= SHARE_MIN || it.chunked;
        let exptime = if opts.touch.is_some() {
            a.set_exptime(off, exptime_abs);
            exptime_abs
        } else {
            exp
        };
        let mut win = None;
        if opts.meta {
            let low_ttl = opts
                .recache
                .is_some_and(|r| exptime != 0 && (exptime as i64 - now as i64) < r);
            let sent = b & bits::WIN_SENT != 0;
            if (b & bits::STALE != 0 || low_ttl || opts.claim) && !sent {
                b |= bits::WIN_SENT;
                a.set_bits(off, b);
                win = Some(true);
            } else if sent {
                win = Some(false);
            }
        }
        let held = big.then(|| Held::Arena(a.pin(off)));
        let it = a.item(off);
        let value = match (&held, it.chunked) {
            (Some(h), true) => &h.bytes()[it.key.len()..],
            _ => it.value,
        };
        f(ItemRef {
            key: it.key,
            value,
            shared: held.as_ref(),
            flags: it.flags,
            cas: it.cas,
            exptime,
            last_access: time,
            fetched: it.fetched(),
            stale: it.stale(),
            win,
        });
        // Bits only (and a relink at most once a minute when flat): the maintainer moves
        // items between the LRUs.
        if !opts.no_bump {
            a.hit(off, now);
        }
        true
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
        let cas_on = self.config.use_cas;
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
        let ctx = self.ctx(now);
        let mut g = self.lock();
        if g.closed {
            return StoreOutcome::NoMemory;
        }
        let old = g.lookup(key, &ctx, cas_on).ok();
        let found = old.map(|off| {
            let it = g.arena.item(off);
            Found {
                cas: it.cas,
                flags: it.flags,
                exptime: it.exptime,
                win_sent: it.win_sent(),
            }
        });
        let (flags, exptime, made, stale_of) = match decide(mode, found, flags, exptime_abs) {
            Decision::Refuse { outcome, bump } => {
                if let (true, Some(off)) = (bump, old) {
                    g.arena.bump(off, now);
                }
                return outcome;
            }
            Decision::Write {
                flags,
                exptime,
                value,
                stale,
            } => (flags, exptime, value, stale),
        };
        // Append and prepend build the value from the old one: copied out first, as the new
        // chunk may be the old one's evicted neighbour.
        let mut joined = None;
        if let (Value::Append | Value::Prepend, Some(off)) = (made, old) {
            let it = g.arena.item(off);
            if !self.fits(key.len(), it.value_len + data.len()) {
                return StoreOutcome::TooLarge;
            }
            let old_value = g.arena.value_bytes(off);
            let mut v = Vec::with_capacity(old_value.len() + data.len());
            if made == Value::Append {
                v.extend_from_slice(&old_value);
                v.extend_from_slice(data);
            } else {
                v.extend_from_slice(data);
                v.extend_from_slice(&old_value);
            }
            joined = Some(v);
        }
        let value = joined.as_deref().unwrap_or(data);
        if let Some(off) = old {
            if !g.arena.lru_config().segmented {
                g.arena.bump(off, now);
            }
        }
        let off = match g.alloc(key, value.len(), &ctx, &self.config) {
            Ok(off) => off,
            Err(e) => return outcome(e),
        };
        g.arena.write_value(off, value);
        let cas = self.cas(&mut g);
        let b = match stale_of {
            Some(true) => bits::STALE | bits::WIN_SENT,
            Some(false) => bits::STALE,
            None => 0,
        };
        g.link(off, cas, flags, exptime, now, b, cas_on);
        StoreOutcome::Stored(cas)
    }

    fn invalidate(
        &self,
        key: &[u8],
        now: u32,
        cas: Option<u64>,
        exptime_abs: Option<u32>,
    ) -> DeleteOutcome {
        let ctx = self.ctx(now);
        let mut g = self.lock();
        let Ok(off) = g.lookup(key, &ctx, self.config.use_cas) else {
            return DeleteOutcome::NotFound;
        };
        let it = g.arena.item(off);
        if cas.is_some_and(|c| c != 0 && c != it.cas) {
            return DeleteOutcome::Exists;
        }
        let b = (it.bits | bits::STALE) & !bits::WIN_SENT;
        // Like memcached, invalidation counts as a modification: the CAS moves on.
        let new = self.cas(&mut g);
        g.arena.set_cas(off, new);
        g.arena.set_bits(off, b);
        if let Some(x) = exptime_abs {
            g.arena.set_exptime(off, x);
        }
        DeleteOutcome::Deleted
    }

    fn delete(&self, key: &[u8], now: u32, cas: Option<u64>) -> DeleteOutcome {
        let ctx = self.ctx(now);
        let mut g = self.lock();
        let Ok(off) = g.lookup(key, &ctx, self.config.use_cas) else {
            return DeleteOutcome::NotFound;
        };
        if cas.is_some_and(|c| c != 0 && g.arena.item(off).cas != c) {
            return DeleteOutcome::Exists;
        }
        g.remove(off, self.config.use_cas);
        DeleteOutcome::Deleted
    }

    fn arith(
        &self,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: u32,
        cas: Option<u64>,
    ) -> ArithOutcome {
        let ctx = self.ctx(now);
        let cas_on = self.config.use_cas;
        let mut g = self.lock();
        let Ok(off) = g.lookup(key, &ctx, cas_on) else {
            return ArithOutcome::NotFound;
        };
        let it = g.arena.item(off);
        if cas.is_some_and(|c| c != 0 && it.cas != c) {
            return ArithOutcome::Exists;
        }
        // A chunked value is far longer than any number.
        let Some(cur) = (!it.chunked).then(|| parse_counter(it.value)).flatten() else {
            return ArithOutcome::NonNumeric;
        };
        let v = if incr {
            cur.wrapping_add(delta)
        } else {
            cur.saturating_sub(delta)
        };
        let text = v.to_string();
        let (old_len, flags, exptime, b) = (it.value_len, it.flags, it.exptime, it.bits);
        // Like memcached, a number no longer than the old one is written in place, padded
        // with spaces; a longer one takes a new item.
        let off = if text.len() <= old_len && !g.arena.is_pinned(off) {
            off
        } else {
            let new = match g.alloc(key, text.len(), &ctx, &self.config) {
                Ok(n) => n,
                Err(_) => return ArithOutcome::NotFound,
            };
            g.link(new, 0, flags, exptime, now, b, cas_on);
            new
        };
        let dst = g.arena.value_mut_linked(off);
        dst[..text.len()].copy_from_slice(text.as_bytes());
        dst[text.len()..].fill(b' ');
        g.arena.bump(off, now);
        let new_cas = self.cas(&mut g);
        g.arena.set_cas(off, new_cas);
        g.arena.set_time(off, now);
        ArithOutcome::Value(v, new_cas)
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
