//! Walking the pages (the LRU crawler's and `metadump`'s order) and moving pages between
//! classes (`slabs reassign`).

use super::layout::*;
use super::{Arena, ArenaError, Item};

impl Arena {
    /// Calls `f` with every chunk of every page handed to a class, and its state.
    pub(super) fn chunks(&self, mut f: impl FnMut(u64, u8)) {
        let geo = self.geo;
        let used = u32_at(self.b(), H_PAGES_USED) as usize;
        for p in 0..used {
            let c = self.b()[geo.directory + p];
            if c == NO_CLASS {
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
            self.unlink(off);
        }
        self.add_header(H_RECLAIMED, gone.len() as i64);
        gone.len() as u64
    }

    /// Reclaims every expired item; returns how many.
    pub fn reclaim_expired(&mut self, now: u32) -> u64 {
        self.reclaim(|it| it.exptime != 0 && it.exptime <= now)
    }

    /// Moves one page from class `from` to class `to` (memcached's `slabs reassign`; `to` =
    /// None gives it back to no class): the page's items are evicted. Returns how many. A page
    /// with a pinned or held chunk is passed over.
    pub fn move_page(&mut self, from: usize, to: Option<usize>) -> Result<u64, ArenaError> {
        if from >= self.classes || to.is_some_and(|t| t >= self.classes || t == from) {
            return Err(ArenaError::Config(format!(
                "cannot move a page from class {from} to class {to:?} ({} classes)",
                self.classes
            )));
        }
        self.reap();
        let geo = self.geo;
        let used = u32_at(self.b(), H_PAGES_USED) as usize;
        let (size, per) = (self.field(from, C_SIZE), self.field(from, C_PER_PAGE));
        let base_of = |p: usize| (geo.first_page + p * geo.page_size) as u64;
        let movable = |a: &Arena, p: usize| {
            a.b()[geo.directory + p] == from as u8
                && (0..per).all(|k| {
                    let off = base_of(p) + k * size;
                    a.state_of(off) != HELD && !a.pinned(off)
                })
        };
        let Some(p) = (0..used).find(|&p| movable(self, p)) else {
            return Err(if self.field(from, C_PAGES) == 0 {
                ArenaError::Config(format!("class {from} has no page to move"))
            } else {
                ArenaError::Busy(from)
            });
        };
        let (base, end) = (base_of(p), base_of(p) + per * size);
        let mut evicted = 0;
        for k in 0..per {
            let off = base + k * size;
            if self.state_of(off) == LINKED {
                self.unlink(off);
                evicted += 1;
            }
        }
        // Take the page's chunks off the class' free list.
        let mut keep = Vec::new();
        let mut cur = self.field(from, C_FREE);
        while cur != 0 {
            if !(base..end).contains(&cur) {
                keep.push(cur);
            }
            cur = self.at(cur, I_NEXT);
        }
        self.set_field(from, C_FREE, 0);
        self.set_field(from, C_FREE_COUNT, 0);
        for &off in keep.iter().rev() {
            self.free_chunk(from, off);
        }
        self.set_field(from, C_PAGES, self.field(from, C_PAGES) - 1);
        self.set_field(from, C_EVICTED, self.field(from, C_EVICTED) + evicted);
        self.add_header(H_EVICTIONS, evicted as i64);
        self.add_header(H_MOVES, 1);
        match to {
            Some(to) => self.carve(p, to),
            None => self.bm()[geo.directory + p] = NO_CLASS,
        }
        Ok(evicted)
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
