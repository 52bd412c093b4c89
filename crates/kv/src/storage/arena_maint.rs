//! The arena store's maintenance: the page limit, `stats` figures, the LRU crawler and
//! maintainer passes, the hash table's growth, and page moves (`slabs reassign`, automove).

use std::sync::atomic::Ordering;

use crate::arena::{ArenaError, Item, COLD, HOT, WARM};

use super::arena_store::ArenaStore;
use super::automove::{Automover, Snap};
use super::*;

/// Hash buckets the maintainer splits per pass while the table grows (a few ms of lock).
const GROW_PER_PASS: usize = 1 << 15;

impl ArenaStore {
    pub(super) fn arena_set_mem_limit(&self, bytes: usize) {
        let mut g = self.lock();
        let page = g.arena.page_size();
        let premalloc = self.premalloc.load(Ordering::Relaxed);
        let limit = g
            .arena
            .set_page_limit(bytes.saturating_sub(premalloc) / page);
        g.arena.release_free_pages();
        // Pages freed later, as items go, until the arena is back within the lowered limit.
        self.shrinking
            .store(g.arena.malloced_pages() > limit as u64, Ordering::Relaxed);
        self.mem_limit.store(bytes, Ordering::Relaxed);
    }

    pub(super) fn arena_counters(&self) -> StoreCounters {
        let g = self.lock();
        let st = g.arena.stats();
        let classes = g.arena.class_stats();
        let moves = g.arena.move_counters();
        let sum = |f: fn(&crate::arena::ClassStats) -> u64| classes.iter().map(f).sum::<u64>();
        StoreCounters {
            curr_items: st.items,
            total_items: g.total_items,
            bytes: st.bytes,
            evictions: st.evictions,
            reclaimed: st.reclaimed,
            expired_unfetched: sum(|c| c.expired_unfetched),
            get_expired: g.get_expired,
            get_flushed: g.get_flushed,
            evicted_unfetched: sum(|c| c.evicted_unfetched),
            crawler_reclaimed: sum(|c| c.crawler_reclaimed),
            crawler_checked: sum(|c| c.crawler_checked),
            // Pool pages stay allocated, as in memcached's `mem_malloced`.
            malloced: g.arena.malloced_pages() * g.arena.page_size() as u64
                + self.premalloc.load(Ordering::Relaxed) as u64,
            pool_pages: g.arena.pool_pages(),
            slabs_moved: st.moves,
            reassign_rescues: moves.0,
            reassign_evictions_nomem: moves.1,
            reassign_inline_reclaim: moves.2,
            reassign_chunk_rescues: st.chunk_rescues,
            reassign_busy_items: moves.3,
            evicted_active: sum(|c| c.evicted_active),
            moves_to_cold: sum(|c| c.moves_to_cold),
            moves_to_warm: sum(|c| c.moves_to_warm),
            moves_within_lru: sum(|c| c.moves_within_lru),
            direct_reclaims: sum(|c| c.direct_reclaims),
            lrutail_reflocked: sum(|c| c.reflocked),
            lru_bumps_dropped: g.arena.bumps_dropped(),
            lru_maintainer_juggles: g.juggles,
        }
    }

    pub(super) fn arena_slabs(&self, now: u32) -> Option<Vec<SlabClass>> {
        let g = self.lock();
        Some(
            g.arena
                .class_stats()
                .into_iter()
                .enumerate()
                .filter(|(_, c)| c.pages > 0 || c.used > 0)
                .map(|(i, stats)| SlabClass {
                    id: i + 1,
                    stats,
                    age: g.arena.lru_age(i, COLD, now),
                    age_hot: g.arena.lru_age(i, HOT, now),
                    age_warm: g.arena.lru_age(i, WARM, now),
                })
                .collect(),
        )
    }

    pub(super) fn arena_metadump(&self, now: u32, which: &Dump) -> Option<Vec<MetaLine>> {
        let ctx = self.ctx(now);
        let g = self.lock();
        let mut v = Vec::new();
        let mut f = |it: Item<'_>| {
            if ctx.live(&it) {
                v.push(MetaLine {
                    key: it.key.to_vec(),
                    exptime: it.exptime,
                    time: it.time,
                    cas: it.cas,
                    fetched: it.fetched(),
                    class: it.class + 1,
                    size: self.arena_config.item_size(it.key.len(), it.value_len),
                    flags: it.flags,
                });
            }
        };
        match which {
            Dump::Hash => g.arena.walk_hash(&mut f),
            Dump::All => g.arena.crawl(|_, it| f(it)),
            Dump::Classes(ids) => {
                for &id in ids {
                    g.arena.lru(id.wrapping_sub(1), |it| {
                        f(it);
                        true
                    });
                }
            }
        }
        Some(v)
    }

    pub(super) fn crawl_pass(&self, now: u32, classes: Option<&[usize]>, max: usize) -> (u64, u64) {
        let ctx = self.ctx(now);
        let mut g = self.lock();
        let all: Vec<usize> = (1..=g.arena.class_count()).collect();
        let (mut checked, mut reclaimed) = (0, 0);
        for &id in classes.unwrap_or(&all) {
            let (c, r) = g
                .arena
                .crawl_class(id.wrapping_sub(1), max, |it| !ctx.live(&it));
            checked += c;
            reclaimed += r;
        }
        if reclaimed > 0 {
            g.rebuild_sizes(self.config.use_cas);
        }
        (checked, reclaimed)
    }

    /// The maintainer's pass: dead items near each sub-LRU's tail are taken back, cold items
    /// reads made active move to warm, and each class' LRUs are juggled (memcached's
    /// `lru_maintainer_juggle`). Returns the items reclaimed by the tail sweep.
    pub(super) fn maintain_pass(&self, now: u32) -> u64 {
        /// Items looked at per sub-LRU and pass: keeps the lock short on a large cache.
        const TAIL: usize = 1000;
        let ctx = self.ctx(now);
        let mut g = self.lock();
        if g.closed {
            return 0;
        }
        g.juggles += 1;
        let mut n = 0;
        for c in 0..g.arena.class_count() {
            n += g.arena.reclaim_tail(c, TAIL, |it| !ctx.live(&it));
        }
        g.arena.drain_bumps(now);
        let reclaimed_before = g.arena.stats().reclaimed;
        for c in 0..g.arena.class_count() {
            g.arena.juggle(c, now, &mut |it| !ctx.live(&it));
        }
        if n > 0 || g.arena.stats().reclaimed != reclaimed_before {
            g.rebuild_sizes(self.config.use_cas);
        }
        if self.shrinking.load(Ordering::Relaxed) {
            g.arena.release_free_pages();
            let limit = u64::from(g.arena.stats().page_limit);
            self.shrinking
                .store(g.arena.malloced_pages() > limit, Ordering::Relaxed);
        }
        // A growing hash table finishes within a few passes even when no item is linked.
        g.arena.grow(GROW_PER_PASS);
        n
    }

    pub(super) fn arena_reassign(
        &self,
        from: usize,
        to: usize,
        now: u32,
    ) -> Result<u64, ArenaError> {
        let ctx = self.ctx(now);
        let mut g = self.lock();
        let from = from
            .checked_sub(1)
            .ok_or_else(|| ArenaError::Config("class 0 has no pages of its own".into()))?;
        let moved = g
            .arena
            .move_page(from, to.checked_sub(1), &mut |it| !ctx.live(&it))?;
        if moved.evicted + moved.dropped > 0 {
            g.rebuild_sizes(self.config.use_cas);
        }
        Ok(moved.evicted)
    }

    /// The slab automover's pass (the maintainer's, once a second): mode 1 is memcached's
    /// windowed mover ([`Automover`]); runs that give pages to the global pool repeat at once
    /// (memcached re-runs those within a millisecond), up to a bound that keeps the lock
    /// short. Mode 2 moves a page to every class that evicted since the last pass, from the
    /// next class with a page to spare (memcached does that on each eviction). Returns the
    /// pages moved.
    pub(super) fn automove_pass(&self, now: u32, mode: u32, window: u32, ratio: f64) -> u64 {
        /// Pool moves per pass at most.
        const POOL_MOVES: usize = 64;
        let ctx = self.ctx(now);
        let mut g = self.lock();
        if g.closed || mode == 0 {
            g.mover = None;
            return 0;
        }
        let mut moved = 0;
        if mode == 2 {
            let evicted: Vec<u64> = g.arena.class_stats().iter().map(|c| c.evicted).collect();
            let before = std::mem::replace(&mut g.last_evicted, evicted.clone());
            let classes = evicted.len();
            for dst in (0..classes).filter(|&c| before.get(c).is_some_and(|&b| evicted[c] > b)) {
                let src = (1..classes)
                    .map(|k| (dst + k) % classes)
                    .find(|&c| g.arena.class_pages(c) > 1);
                if let Some(src) = src {
                    let r = g.arena.move_page(src, Some(dst), &mut |it| !ctx.live(&it));
                    moved += u64::from(r.is_ok());
                }
            }
        } else {
            for _ in 0..POOL_MOVES {
                let snaps = snaps(&g.arena, now);
                let mover = match g.mover.as_mut() {
                    Some(m) if m.fits(window as usize, snaps.len()) => m,
                    _ => {
                        // The first run only records the figures, as memcached's dry run.
                        g.mover = Some(Automover::new(window as usize, snaps));
                        break;
                    }
                };
                let Some(d) = mover.run(&snaps, ratio) else {
                    break;
                };
                if g.arena
                    .move_page(d.src, d.dst, &mut |it| !ctx.live(&it))
                    .is_err()
                {
                    break;
                }
                moved += 1;
                if d.dst.is_some() {
                    break;
                }
            }
        }
        if moved > 0 {
            g.rebuild_sizes(self.config.use_cas);
        }
        moved
    }
}

/// Each class' figures for the automover.
fn snaps(a: &crate::arena::Arena, now: u32) -> Vec<Snap> {
    a.class_stats()
        .iter()
        .enumerate()
        .map(|(c, s)| Snap {
            evicted: s.evicted,
            outofmemory: s.outofmemory,
            pages: u64::from(s.pages),
            age: a
                .lru_tail(c)
                .map_or(0, |it| u64::from(now.saturating_sub(it.time))),
            free: s.free,
            per_page: u64::from(s.chunks_per_page),
        })
        .collect()
}
