//! Walking the pages (the LRU crawler's and `metadump`'s order) and moving pages between
//! classes (`slabs reassign`).

use super::layout::*;
use super::{Arena, ArenaError, Item, Moved};

impl Arena {
    /// Calls `f` with every chunk of every page handed to a class, and its state.
    pub(super) fn chunks(&self, mut f: impl FnMut(u64, u8)) {
        let geo = self.geo;
        let used = u32_at(self.b(), H_PAGES_USED) as usize;
        for p in 0..used {
            let c = self.b()[geo.directory + p];
            if c == NO_CLASS || c == RELEASED {
                continue;
            }
            let (size, per) = (
                self.field(c as usize, C_SIZE),
                self.field(c as usize, C_PER_PAGE),
            );
            let base = (geo.first_page + p * geo.page_size) as u64;
            for k in 0..per {
                let off = base + k * size;
                f(off, self.state_of(off));
            }
        }
    }

    /// Calls `f` with every chunk of class `c`'s pages, and its state.
    pub(super) fn page_chunks(&self, c: usize, mut f: impl FnMut(u64, u8)) {
        let geo = self.geo;
        let used = u32_at(self.b(), H_PAGES_USED) as usize;
        let (size, per) = (self.field(c, C_SIZE), self.field(c, C_PER_PAGE));
        for p in (0..used).filter(|&p| self.b()[geo.directory + p] as usize == c) {
            let base = (geo.first_page + p * geo.page_size) as u64;
            for k in 0..per {
                let off = base + k * size;
                f(off, self.state_of(off));
            }
        }
    }

    /// Calls `f` with every linked item, in page order.
    pub fn crawl<'s>(&'s self, mut f: impl FnMut(u64, Item<'s>)) {
        self.chunks(|off, state| {
            if state == LINKED {
                f(off, self.item(off))
            }
        });
    }

    /// Every linked item, in page order (`lru_crawler metadump`).
    pub fn metadump(&self) -> Vec<Item<'_>> {
        let mut v = Vec::new();
        self.crawl(|_, it| v.push(it));
        v
    }

    /// Reclaims every item `dead` says is dead (the LRU crawler's pass); returns how many.
    pub fn reclaim(&mut self, mut dead: impl FnMut(Item<'_>) -> bool) -> u64 {
        let mut gone = Vec::new();
        self.crawl(|off, it| {
            if dead(it) {
                gone.push(off)
            }
        });
        for &off in &gone {
            self.count_dead(off);
            self.unlink(off);
        }
        gone.len() as u64
    }

    /// The LRU crawler's pass over class `c`: up to `max` items (0: all) of each of its
    /// sub-LRUs from the tail are checked (memcached crawls each sub-LRU), and those `dead`
    /// says are dead are taken back (`crawler_items_checked`, `crawler_reclaimed`,
    /// `expired_unfetched`). Returns (checked, reclaimed).
    pub fn crawl_class(
        &mut self,
        c: usize,
        max: usize,
        mut dead: impl FnMut(Item<'_>) -> bool,
    ) -> (u64, u64) {
        if c >= self.classes {
            return (0, 0);
        }
        let (mut checked, mut gone) = (0, Vec::new());
        let max = if max == 0 { u64::MAX } else { max as u64 };
        for l in [HOT, WARM, COLD, TEMP] {
            let (mut n, mut off) = (0, self.lf(c, l, L_TAIL));
            while off != 0 && n < max {
                n += 1;
                if dead(self.item(off)) {
                    gone.push(off);
                }
                off = self.at(off, I_PREV);
            }
            checked += n;
        }
        for &off in &gone {
            let unfetched = !self.item(off).fetched();
            self.count(c, C_EXPIRED_UNFETCHED, u64::from(unfetched));
            self.unlink(off);
        }
        self.count(c, C_CRAWLER_CHECKED, checked);
        self.count(c, C_CRAWLER_RECLAIMED, gone.len() as u64);
        (checked, gone.len() as u64)
    }

    /// The LRU maintainer's pass over class `c`: looks at up to `max` items from each
    /// sub-LRU's tail and takes back those `dead` says are dead (counted as `reclaimed`);
    /// returns how many.
    /// Bounded, so the owner's lock is held briefly however large the class.
    pub fn reclaim_tail(
        &mut self,
        c: usize,
        max: usize,
        mut dead: impl FnMut(Item<'_>) -> bool,
    ) -> u64 {
        if c >= self.classes {
            return 0;
        }
        let mut gone = Vec::new();
        for l in [HOT, WARM, COLD, TEMP] {
            let (mut seen, mut off) = (0, self.lf(c, l, L_TAIL));
            while off != 0 && seen < max {
                if dead(self.item(off)) {
                    gone.push(off);
                }
                seen += 1;
                off = self.at(off, I_PREV);
            }
        }
        for &off in &gone {
            self.count_dead(off);
            self.unlink(off);
        }
        gone.len() as u64
    }

    /// Pages handed to classes.
    pub fn pages_in_classes(&self) -> u64 {
        (0..self.classes).map(|c| self.field(c, C_PAGES)).sum()
    }

    /// Pages in the global pool (given back by `slabs reassign N 0`), still allocated.
    pub fn pool_pages(&self) -> u64 {
        let used = u32_at(self.b(), H_PAGES_USED) as usize;
        let dir = &self.b()[self.geo.directory..self.geo.directory + used];
        dir.iter().filter(|&&c| c == NO_CLASS).count() as u64
    }

    /// Pages allocated: in classes or in the global pool (memcached's `total_malloced`).
    pub fn malloced_pages(&self) -> u64 {
        self.pages_in_classes() + self.pool_pages()
    }

    /// While more pages are allocated than the page limit allows (after `cache_memlimit`
    /// lowered it), hands pool pages, then class pages whose chunks are all free, back to
    /// the system, as memcached frees pages beyond its limit; returns how many.
    pub fn release_free_pages(&mut self) -> u64 {
        self.reap();
        let limit = u64::from(u32_at(self.b(), H_PAGE_LIMIT));
        let geo = self.geo;
        let mut released = 0;
        let mut malloced = self.malloced_pages();
        if malloced > limit {
            // Queued offsets must not outlive their page's class.
            self.clear_bumps();
        }
        while malloced > limit {
            let used = u32_at(self.b(), H_PAGES_USED) as usize;
            let p = match (0..used).find(|&p| self.b()[geo.directory + p] == NO_CLASS) {
                Some(p) => p,
                None => {
                    let Some(p) = self.free_whole_page() else {
                        break;
                    };
                    let c = self.b()[geo.directory + p] as usize;
                    let (size, per) = (self.field(c, C_SIZE), self.field(c, C_PER_PAGE));
                    let base = (geo.first_page + p * geo.page_size) as u64;
                    self.drop_free_chunks(c, base, base + per * size);
                    self.set_field(c, C_PAGES, self.field(c, C_PAGES) - 1);
                    p
                }
            };
            self.bm()[geo.directory + p] = RELEASED;
            self.map
                .discard(geo.first_page + p * geo.page_size, geo.page_size);
            released += 1;
            malloced -= 1;
        }
        released
    }

    /// A page of some class whose chunks are all free.
    fn free_whole_page(&self) -> Option<usize> {
        let geo = self.geo;
        let used = u32_at(self.b(), H_PAGES_USED) as usize;
        (0..used).find(|&p| {
            let c = self.b()[geo.directory + p];
            if c == NO_CLASS || c == RELEASED {
                return false;
            }
            let (size, per) = (
                self.field(c as usize, C_SIZE),
                self.field(c as usize, C_PER_PAGE),
            );
            let base = (geo.first_page + p * geo.page_size) as u64;
            (0..per).all(|k| self.state_of(base + k * size) == FREE)
        })
    }

    /// Takes the chunks in `base..end` off class `c`'s free list.
    fn drop_free_chunks(&mut self, c: usize, base: u64, end: u64) {
        let mut keep = Vec::new();
        let mut cur = self.field(c, C_FREE);
        while cur != 0 {
            if !(base..end).contains(&cur) {
                keep.push(cur);
            }
            cur = self.at(cur, I_NEXT);
        }
        self.set_field(c, C_FREE, 0);
        self.set_field(c, C_FREE_COUNT, 0);
        for &off in keep.iter().rev() {
            self.free_chunk(c, off);
        }
    }

    /// Reclaims every expired item; returns how many.
    pub fn reclaim_expired(&mut self, now: u32) -> u64 {
        self.reclaim(|it| it.exptime != 0 && it.exptime <= now)
    }

    /// Moves one page from class `from` to class `to` (memcached's `slab_reassign`; `to` =
    /// None gives it to the global pool). The page with the fewest live items is taken; its
    /// dead items (`dead` says which) are dropped, its live ones rescued into free chunks of
    /// the class elsewhere, and evicted only when none is left. A page holding an item a
    /// reply still sends is busy and not taken; when every page is, the move fails with
    /// [`ArenaError::Busy`].
    pub fn move_page(
        &mut self,
        from: usize,
        to: Option<usize>,
        dead: &mut dyn FnMut(Item<'_>) -> bool,
    ) -> Result<Moved, ArenaError> {
        if from >= self.classes || to.is_some_and(|t| t >= self.classes || t == from) {
            return Err(ArenaError::Config(format!(
                "cannot move a page from class {from} to class {to:?} ({} classes)",
                self.classes
            )));
        }
        self.reap();
        // Queued offsets must not outlive their page's class (or an item's old chunk).
        self.clear_bumps();
        let geo = self.geo;
        let used = u32_at(self.b(), H_PAGES_USED) as usize;
        let (size, per) = (self.field(from, C_SIZE), self.field(from, C_PER_PAGE));
        let base_of = |p: usize| (geo.first_page + p * geo.page_size) as u64;
        // (busy chunks, live items, page) of each page of the class; the least busy, then
        // least full, first.
        let best = (0..used)
            .filter(|&p| self.b()[geo.directory + p] == from as u8)
            .map(|p| {
                let (mut busy, mut live) = (0u64, 0u64);
                for k in 0..per {
                    let off = base_of(p) + k * size;
                    match self.state_of(off) {
                        HELD => busy += 1,
                        LINKED if self.pinned(off) => busy += 1,
                        LINKED => live += 1,
                        _ => {}
                    }
                }
                (busy, live, p)
            })
            .min();
        let p = match best {
            None => {
                return Err(ArenaError::Config(format!(
                    "class {from} has no page to move"
                )))
            }
            Some((busy, ..)) if busy > 0 => {
                self.add_header(H_BUSY_ITEMS, busy as i64);
                return Err(ArenaError::Busy(from));
            }
            Some((_, _, p)) => p,
        };
        let (base, end) = (base_of(p), base_of(p) + per * size);
        let mut moved = Moved::default();
        for k in 0..per {
            let off = base + k * size;
            match self.state_of(off) {
                LINKED => {}
                CHUNK => {
                    // A piece of a chunked item: copied out, or the whole item goes (its
                    // chunks in this page come off the free list below).
                    let head = self.head_of(off);
                    if dead(self.item(head)) {
                        self.unlink(head);
                        moved.dropped += 1;
                    } else if let Some(new) = self.rescue_chunk(from, base..end) {
                        self.relocate_chunk(off, new);
                        self.add_header(H_CHUNK_RESCUES, 1);
                    } else {
                        self.unlink(head);
                        moved.evicted += 1;
                    }
                    continue;
                }
                _ => continue,
            }
            if dead(self.item(off)) {
                self.unlink(off);
                self.take_free_head(from, off);
                moved.dropped += 1;
            } else if let Some(new) = self.rescue_chunk(from, base..end) {
                self.relocate(off, new);
                moved.rescued += 1;
            } else {
                self.unlink(off);
                self.take_free_head(from, off);
                moved.evicted += 1;
            }
        }
        self.drop_free_chunks(from, base, end);
        self.set_field(from, C_PAGES, self.field(from, C_PAGES) - 1);
        self.add_header(H_RESCUES, moved.rescued as i64);
        self.add_header(H_EVICT_NOMEM, moved.evicted as i64);
        self.add_header(H_MOVES, 1);
        match to {
            Some(to) => self.carve(p, to),
            None => self.bm()[geo.directory + p] = NO_CLASS,
        }
        Ok(moved)
    }

    /// Takes `off`, just freed (so at the head of class `c`'s free list), off the list again:
    /// a chunk of the page being moved must not be handed out.
    fn take_free_head(&mut self, c: usize, off: u64) {
        debug_assert_eq!(self.field(c, C_FREE), off);
        self.set_field(c, C_FREE, self.at(off, I_NEXT));
        self.set_field(c, C_FREE_COUNT, self.field(c, C_FREE_COUNT) - 1);
    }

    /// A free chunk of class `c` outside `page`, as memcached's `slab_rebalance_alloc`: free
    /// chunks inside the page met on the way are taken off the list (`inline_reclaim`).
    fn rescue_chunk(&mut self, c: usize, page: std::ops::Range<u64>) -> Option<u64> {
        loop {
            let off = self.field(c, C_FREE);
            if off == 0 {
                return None;
            }
            self.set_field(c, C_FREE, self.at(off, I_NEXT));
            self.set_field(c, C_FREE_COUNT, self.field(c, C_FREE_COUNT) - 1);
            if !page.contains(&off) {
                return Some(off);
            }
            self.add_header(H_INLINE_RECLAIM, 1);
        }
    }

    /// Copies the linked item at `off` into the free chunk `new` of the same class and puts
    /// the copy in its place in the hash chain and the LRU.
    fn relocate(&mut self, off: u64, new: u64) {
        let o = off as usize;
        let len = self.used_len(off);
        let bucket = self.bucket(self.key_of(off));
        self.open_bucket(bucket);
        self.copy_item(off, new, len);
        if self.is_chunked(new) {
            let first = self.first_chunk(new);
            if first != 0 {
                self.put(first, I_PREV, new);
            }
        }
        let mut prev = 0u64;
        let mut cur = u64_at(self.b(), bucket);
        while cur != off {
            prev = cur;
            cur = self.at(cur, I_HNEXT);
        }
        if prev == 0 {
            put_u64(self.bm(), bucket, new);
        } else {
            self.put(prev, I_HNEXT, new);
        }
        let (c, l) = (self.class_of(new), self.lru_of(new));
        let (lp, ln) = (self.at(new, I_PREV), self.at(new, I_NEXT));
        if lp == 0 {
            self.set_field(c, lru_field(l, L_HEAD), new);
        } else {
            self.put(lp, I_NEXT, new);
        }
        if ln == 0 {
            self.set_field(c, lru_field(l, L_TAIL), new);
        } else {
            self.put(ln, I_PREV, new);
        }
        self.seal_item(new);
        self.close_bucket(bucket);
        // The old chunk is on no list; its page is carved afresh or pooled.
        self.bm()[o + I_STATE] = FREE;
    }

    /// Copies chain chunk `off` into the free chunk `new` of its class and relinks its
    /// neighbours to the copy.
    fn relocate_chunk(&mut self, off: u64, new: u64) {
        let o = off as usize;
        let len = self.used_len(off);
        self.bm().copy_within(o..o + len, new as usize);
        let (prev, next) = (self.at(new, I_PREV), self.at(new, I_HNEXT));
        if self.state_of(prev) == CHUNK {
            self.put(prev, I_HNEXT, new);
        } else {
            self.set_first_chunk(prev, new);
        }
        if next != 0 {
            self.put(next, I_PREV, new);
        }
        self.bm()[o + I_STATE] = FREE;
    }

    /// Page-move counters: (`slab_reassign_rescues`, `slab_reassign_evictions_nomem`,
    /// `slab_reassign_inline_reclaim`, `slab_reassign_busy_items`).
    pub fn move_counters(&self) -> (u64, u64, u64, u64) {
        let b = self.b();
        (
            u64_at(b, H_RESCUES),
            u64_at(b, H_EVICT_NOMEM),
            u64_at(b, H_INLINE_RECLAIM),
            u64_at(b, H_BUSY_ITEMS),
        )
    }

    /// Pages of class `c`.
    pub fn class_pages(&self, c: usize) -> u64 {
        if c < self.classes {
            self.field(c, C_PAGES)
        } else {
            0
        }
    }

    /// Classes.
    pub fn class_count(&self) -> usize {
        self.classes
    }
}
