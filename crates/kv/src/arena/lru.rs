//! memcached's segmented LRU (`items.c`): each class keeps four lists, hot, warm, cold and
//! temp. New items go to hot (temp for short TTLs with `temporary_ttl`); a read only sets bits
//! (fetched, then active) and the maintainer does the relinking ([`Arena::juggle`]): hot and
//! warm tails past their share of the class' bytes or age drop to cold, active hot items and
//! active cold items rise to warm, active warm items go back to warm's head. Allocation evicts
//! from cold's tail only. In flat mode (`-o no_lru_segmented`) items live in cold, and a read
//! relinks at most once a minute, as memcached's compat mode.
//!
//! Links are offsets, as everywhere in the arena; each list's head, tail, item count and bytes
//! live in the class record.

use super::layout::*;
use super::{Arena, ArenaError, Item, Victim};

/// Tail items one pull looks at (memcached's `tries`).
const PULL_TRIES: usize = 5;
/// Pull rounds per class and maintainer pass (memcached's bound).
const JUGGLE_ROUNDS: usize = 500;
/// Allocation rounds of evicting or moving before out of memory (memcached's 10).
const ALLOC_ROUNDS: u64 = 10;
/// Cold items a read made active, queued for the maintainer to move to warm (memcached's
/// per-thread bump buffer holds 8192).
const BUMP_QUEUE: usize = 8192;
/// Flat mode relinks a read item at most this often (memcached's `ITEM_UPDATE_INTERVAL`).
pub const UPDATE_INTERVAL: u32 = 60;

/// How items move between the sub-LRUs (memcached's settings of the same names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LruConfig {
    /// `lru_segmented`: hot, warm and cold lists; else every item in cold.
    pub segmented: bool,
    /// `hot_lru_pct`: hot's share of the class' bytes before its tail drops to cold.
    pub hot_pct: u32,
    /// `warm_lru_pct`: warm's share.
    pub warm_pct: u32,
    /// `hot_max_factor`: hot items idle longer than this times cold's tail age drop.
    pub hot_max_factor: f64,
    /// `warm_max_factor`: the same for warm.
    pub warm_max_factor: f64,
    /// `temporary_ttl` (`temp_lru`): items with at most this TTL go to the temp list, which
    /// is never evicted from, only reclaimed as they expire.
    pub temp_ttl: Option<u32>,
}

impl Default for LruConfig {
    /// memcached 1.6's defaults: segmented, 20% hot, 40% warm, factors 0.2 and 2.0.
    fn default() -> LruConfig {
        LruConfig {
            segmented: true,
            hot_pct: 20,
            warm_pct: 40,
            hot_max_factor: 0.2,
            warm_max_factor: 2.0,
            temp_ttl: None,
        }
    }
}

impl LruConfig {
    /// One LRU per class (memcached's `no_lru_segmented`).
    pub fn flat() -> LruConfig {
        LruConfig {
            segmented: false,
            ..LruConfig::default()
        }
    }
}

impl Arena {
    pub(super) fn lf(&self, c: usize, l: usize, f: usize) -> u64 {
        self.field(c, lru_field(l, f))
    }

    fn set_lf(&mut self, c: usize, l: usize, f: usize, v: u64) {
        self.set_field(c, lru_field(l, f), v)
    }

    pub(super) fn lru_of(&self, off: u64) -> usize {
        self.b()[off as usize + I_LRU] as usize
    }

    fn bits_of(&self, off: u64) -> u8 {
        self.b()[off as usize + I_BITS]
    }

    /// Takes a linked item off its sub-LRU.
    pub(super) fn lru_remove(&mut self, off: u64) {
        let (c, l) = (self.class_of(off), self.lru_of(off));
        let (prev, next) = (self.at(off, I_PREV), self.at(off, I_NEXT));
        if prev == 0 {
            self.set_lf(c, l, L_HEAD, next);
        } else {
            self.put(prev, I_NEXT, next);
        }
        if next == 0 {
            self.set_lf(c, l, L_TAIL, prev);
        } else {
            self.put(next, I_PREV, prev);
        }
        let size = self.size_of(off);
        self.set_lf(c, l, L_COUNT, self.lf(c, l, L_COUNT) - 1);
        self.set_lf(c, l, L_BYTES, self.lf(c, l, L_BYTES).wrapping_sub(size));
    }

    /// Puts an item at the head of class `c`'s sub-LRU `l`.
    pub(super) fn lru_push(&mut self, c: usize, l: usize, off: u64) {
        self.bm()[off as usize + I_LRU] = l as u8;
        let head = self.lf(c, l, L_HEAD);
        self.put(off, I_PREV, 0);
        self.put(off, I_NEXT, head);
        if head == 0 {
            self.set_lf(c, l, L_TAIL, off);
        } else {
            self.put(head, I_PREV, off);
        }
        self.set_lf(c, l, L_HEAD, off);
        let size = self.size_of(off);
        self.set_lf(c, l, L_COUNT, self.lf(c, l, L_COUNT) + 1);
        self.set_lf(c, l, L_BYTES, self.lf(c, l, L_BYTES) + size);
    }

    /// Moves a linked item to the head of sub-LRU `to` of its class.
    fn lru_move(&mut self, off: u64, to: usize) {
        let c = self.class_of(off);
        self.lru_remove(off);
        self.lru_push(c, to, off);
    }

    /// The sub-LRU a new item with this expiry goes to, as memcached's `do_item_alloc`
    /// decides (the TTL test wraps as its unsigned clock does: no expiry is never temp).
    pub(super) fn new_item_lru(&self, exptime: u32, now: u32) -> usize {
        match self.lru.temp_ttl {
            Some(ttl) if exptime.wrapping_sub(now) <= ttl => TEMP,
            _ if self.lru.segmented => HOT,
            _ => COLD,
        }
    }

    /// The LRU settings in force.
    pub fn lru_config(&self) -> LruConfig {
        self.lru
    }

    /// Changes the LRU settings (items already linked stay where they are; the maintainer
    /// drains hot and warm into cold when segmentation is off).
    pub fn set_lru_config(&mut self, cfg: LruConfig) {
        self.lru = cfg;
    }

    /// A read hit (memcached's `do_item_bump`). Segmented: the first read marks the item
    /// fetched, the second active (and refreshes its access time, or, in cold, queues it for
    /// the maintainer to move to warm); nothing is relinked here. Flat: fetched, the access
    /// time, and a relink at most once per [`UPDATE_INTERVAL`]. Bits and time are written only
    /// when they change, so a hot item's header stays shared between the cores reading it.
    pub fn hit(&mut self, off: u64, now: u32) {
        let b = self.bits_of(off);
        if !self.lru.segmented {
            let time = u32_at(self.b(), off as usize + I_TIME);
            if now.saturating_sub(time) >= UPDATE_INTERVAL {
                self.bump(off, now);
            }
            if b & FETCHED == 0 {
                self.set_bits(off, b | FETCHED);
            }
            if time != now {
                self.set_time(off, now);
            }
            return;
        }
        if b & ACTIVE != 0 {
            return;
        }
        if b & FETCHED == 0 {
            self.set_bits(off, b | FETCHED);
            return;
        }
        self.set_bits(off, b | ACTIVE);
        if self.lru_of(off) != COLD {
            self.set_time(off, now);
        } else if self.bumps.len() < BUMP_QUEUE {
            self.bumps.push(off);
        } else {
            // As memcached when its bump buffer is full: the item stays inactive.
            self.set_bits(off, b);
            self.bumps_dropped += 1;
        }
    }

    /// Refreshes a linked item (memcached's `do_item_update`: an `add` that collides, an
    /// in-place incr). Segmented: the access time, and an active cold item moves to warm.
    /// Flat: to the head of its list.
    pub fn bump(&mut self, off: u64, now: u32) {
        if !self.lru.segmented {
            let (c, l) = (self.class_of(off), self.lru_of(off));
            if self.lf(c, l, L_HEAD) != off {
                self.lru_move(off, l);
            }
            return;
        }
        self.set_time(off, now);
        let b = self.bits_of(off);
        if self.lru_of(off) == COLD && b & ACTIVE != 0 {
            self.set_bits(off, b & !ACTIVE);
            self.lru_move(off, WARM);
            self.count(self.class_of(off), C_MOVES_TO_WARM, 1);
        }
    }

    /// Moves the cold items reads made active to warm (memcached's `lru_maintainer_bumps`);
    /// returns how many. The queue holds offsets: it is emptied whenever a page changes
    /// class, so each still names the start of a chunk of its page's class.
    pub fn drain_bumps(&mut self, now: u32) -> u64 {
        let mut n = 0;
        for off in std::mem::take(&mut self.bumps) {
            // The item may have gone since (its chunk freed or reused): only a linked, active
            // cold item moves, which is what the queue asked for.
            if self.state_of(off) == LINKED
                && self.lru_of(off) == COLD
                && self.bits_of(off) & ACTIVE != 0
            {
                self.bump(off, now);
                n += 1;
            }
        }
        n
    }

    /// Forgets queued reads (a page is about to change class or go back to the system).
    pub(super) fn clear_bumps(&mut self) {
        self.bumps.clear();
    }

    /// One look at sub-LRU `l`'s tail (memcached's `lru_pull_tail` without eviction): dead
    /// items there are reclaimed (`dead` says which), then the first live one may move:
    /// hot/warm active → warm (`moves_to_warm`, `moves_within_lru`), hot/warm over their
    /// share of `total` bytes or idle beyond `max_age` → cold (`moves_to_cold`), active cold
    /// → warm. Returns the items reclaimed or moved.
    pub(super) fn pull_tail(
        &mut self,
        c: usize,
        l: usize,
        total: u64,
        max_age: u32,
        now: u32,
        dead: &mut dyn FnMut(Item<'_>) -> bool,
    ) -> u64 {
        let mut removed = 0;
        let mut off = self.lf(c, l, L_TAIL);
        let mut tries = PULL_TRIES;
        while tries > 0 && off != 0 {
            tries -= 1;
            let prev = self.at(off, I_PREV);
            if dead(self.item(off)) {
                self.count_dead(off);
                self.unlink(off);
                removed += 1;
                off = prev;
                continue;
            }
            let b = self.bits_of(off);
            match l {
                HOT | WARM => {
                    let mut limit = if l == HOT {
                        total * u64::from(self.lru.hot_pct) / 100
                    } else {
                        0
                    };
                    if limit == 0 {
                        limit = total * u64::from(self.lru.warm_pct) / 100;
                    }
                    let idle = now.saturating_sub(u32_at(self.b(), off as usize + I_TIME));
                    if b & ACTIVE != 0 {
                        self.set_bits(off, b & !ACTIVE);
                        let counter = if l == WARM {
                            C_MOVES_WITHIN
                        } else {
                            C_MOVES_TO_WARM
                        };
                        self.count(c, counter, 1);
                        self.lru_move(off, WARM);
                        removed += 1;
                    } else if self.lf(c, l, L_BYTES) > limit || idle > max_age {
                        self.count(c, C_MOVES_TO_COLD, 1);
                        self.lru_move(off, COLD);
                        removed += 1;
                    }
                }
                COLD if b & ACTIVE != 0 && self.lru.segmented => {
                    self.set_bits(off, b & !ACTIVE);
                    self.count(c, C_MOVES_TO_WARM, 1);
                    self.lru_move(off, WARM);
                    removed += 1;
                }
                // Temp is only reclaimed from; a live cold tail stays.
                _ => {}
            }
            break;
        }
        removed
    }

    /// memcached's `lru_pull_tail(COLD, LRU_PULL_EVICT)`: dead items at cold's tail are
    /// reclaimed and the first live one evicted, as `victim` decides; pinned items are passed
    /// over (`lrutail_reflocked`). Whether a chunk was freed.
    fn evict_tail(
        &mut self,
        c: usize,
        victim: &mut dyn FnMut(Item<'_>) -> Victim,
    ) -> Result<bool, ArenaError> {
        let mut freed = false;
        let mut off = self.lf(c, COLD, L_TAIL);
        let mut tries = PULL_TRIES;
        while tries > 0 && off != 0 {
            tries -= 1;
            let prev = self.at(off, I_PREV);
            if self.pinned(off) {
                self.count(c, C_REFLOCKED, 1);
                off = prev;
                continue;
            }
            let it = self.item(off);
            let (fetched, expires) = (it.fetched(), it.exptime != 0);
            let active = it.bits & ACTIVE != 0;
            match victim(it) {
                Victim::Keep => return Err(ArenaError::NoMemory(c)),
                Victim::Reclaim => {
                    self.count_dead(off);
                    self.unlink(off);
                    freed = true;
                    off = prev;
                }
                Victim::Evict => {
                    self.count(c, C_EVICTED, 1);
                    self.count(c, C_EVICTED_UNFETCHED, u64::from(!fetched));
                    self.count(c, C_EVICTED_NONZERO, u64::from(expires));
                    self.count(c, C_EVICTED_ACTIVE, u64::from(active));
                    self.add_header(H_EVICTIONS, 1);
                    self.unlink(off);
                    return Ok(true);
                }
            }
        }
        Ok(freed)
    }

    /// A free chunk of class `c` (memcached's `do_item_alloc_pull`): from its free list or a
    /// new page, else up to 10 rounds of evicting cold's tail, or, when cold has nothing to
    /// give, moving hot's (else warm's) tail down to cold. Rounds count as `direct_reclaims`.
    pub(super) fn chunk(
        &mut self,
        c: usize,
        victim: &mut dyn FnMut(Item<'_>) -> Victim,
    ) -> Result<u64, ArenaError> {
        self.reap();
        let mut rounds = 0;
        let got = loop {
            if let Some(off) = self.take_free(c) {
                break Ok(off);
            }
            if rounds == ALLOC_ROUNDS {
                break Err(ArenaError::NoMemory(c));
            }
            rounds += 1;
            match self.evict_tail(c, victim) {
                Err(e) => break Err(e),
                Ok(true) => {}
                Ok(false) => {
                    let never = &mut |_: Item<'_>| false;
                    if self.pull_tail(c, HOT, 0, 0, 0, never) == 0
                        && self.pull_tail(c, WARM, 0, 0, 0, never) == 0
                    {
                        break Err(ArenaError::NoMemory(c));
                    }
                }
            }
        };
        self.count(c, C_DIRECT_RECLAIMS, rounds);
        if got.is_err() {
            self.count(c, C_OUTOFMEMORY, 1);
        }
        got
    }

    /// The maintainer's juggle of class `c` (memcached's `lru_maintainer_juggle`): temp's
    /// tail is reclaimed as it expires, then hot, warm and cold tails are pulled until nothing
    /// moves (at most 500 rounds). Hot and warm may hold their share of the class' bytes, and
    /// items idle for up to `hot_max_factor` (`warm_max_factor`) times cold's tail age; flat
    /// mode drains them into cold. Returns the rounds that did something.
    pub fn juggle(&mut self, c: usize, now: u32, dead: &mut dyn FnMut(Item<'_>) -> bool) -> u64 {
        if c >= self.classes {
            return 0;
        }
        let mut did = 0;
        if self.lru.temp_ttl.is_some() {
            for _ in 0..JUGGLE_ROUNDS {
                if self.pull_tail(c, TEMP, 0, 0, now, dead) == 0 {
                    break;
                }
                did += 1;
            }
        }
        let (mut total, mut hot_age, mut warm_age) = (0, 0, 0);
        if self.lru.segmented {
            let cold_age = self.lru_age(c, COLD, now);
            hot_age = (f64::from(cold_age) * self.lru.hot_max_factor) as u32;
            warm_age = (f64::from(cold_age) * self.lru.warm_max_factor) as u32;
            total = [HOT, WARM, COLD]
                .iter()
                .map(|&l| self.lf(c, l, L_BYTES))
                .sum();
        }
        for _ in 0..JUGGLE_ROUNDS {
            let mut more = u64::from(
                self.pull_tail(c, HOT, total, hot_age, now, dead) > 0
                    || self.pull_tail(c, WARM, total, warm_age, now, dead) > 0,
            );
            if self.lru.segmented {
                more += self.pull_tail(c, COLD, total, 0, now, dead);
            }
            if more == 0 {
                break;
            }
            did += 1;
        }
        did
    }

    /// Seconds since sub-LRU `l`'s tail item was accessed (0: empty).
    pub fn lru_age(&self, c: usize, l: usize, now: u32) -> u32 {
        if c >= self.classes {
            return 0;
        }
        match self.lf(c, l, L_TAIL) {
            0 => 0,
            off => now.saturating_sub(u32_at(self.b(), off as usize + I_TIME)),
        }
    }

    /// Items in each of class `c`'s sub-LRUs (hot, warm, cold, temp).
    pub fn lru_counts(&self, c: usize) -> [u64; LRUS] {
        std::array::from_fn(|l| self.lf(c, l, L_COUNT))
    }

    /// Reads that found the bump queue full (`lru_bumps_dropped`).
    pub fn bumps_dropped(&self) -> u64 {
        self.bumps_dropped
    }
}
