//! The hash table: bucket heads at a fixed offset, room reserved for the largest table the
//! configuration allows, the active part growing as memcached's does (doubling once items pass
//! 1.5 per bucket). Growth splits bucket `i` into `i` and `i + 2^p` in place, a few buckets at a
//! time (memcached's incremental expansion): while it runs, an old bucket below the split
//! cursor is already split and keys use one more hash bit.

use super::layout::*;
use super::{hash_with, Arena};

/// Buckets split per link while the table grows: growth starts at 1.5 items per bucket and
/// ends before 3, after `2^p / STEP` links at most.
const STEP: usize = 2;

impl Arena {
    /// The offset of the bucket head for a key hashing to `h`.
    #[inline]
    pub(super) fn bucket_of_hash(&self, h: u64) -> usize {
        let old = h as usize & ((1usize << self.hpower) - 1);
        let i = if old < self.hsplit {
            h as usize & ((2usize << self.hpower) - 1)
        } else {
            old
        };
        self.bucket_at(i)
    }

    /// The offset of bucket `i`'s entry.
    #[inline]
    pub(super) fn bucket_at(&self, i: usize) -> usize {
        HEADER_BYTES + i * self.geo.stride
    }

    pub(super) fn bucket(&self, key: &[u8]) -> usize {
        self.bucket_of_hash(hash_with(self.seed, key))
    }

    /// Buckets in use: the active table plus the halves already split off.
    pub(super) fn buckets_in_use(&self) -> usize {
        (1usize << self.hpower) + self.hsplit
    }

    /// memcached's `hash_power_level` (counting a growth under way, as memcached does) and
    /// `hash_is_expanding`.
    pub fn hash_level(&self) -> (u32, bool) {
        (self.hpower + u32::from(self.hexpanding), self.hexpanding)
    }

    /// Reads the active table's state from the header (open, restore).
    pub(super) fn load_hash_state(&mut self) {
        let b = self.b();
        let (p, e, s) = (
            u32_at(b, H_HASH_LEVEL),
            u32_at(b, H_HASH_EXPANDING) == 1,
            u64_at(b, H_HASH_SPLIT) as usize,
        );
        (self.hpower, self.hexpanding, self.hsplit) = (p, e, s);
    }

    fn store_hash_state(&mut self) {
        let (p, e, s) = (self.hpower, self.hexpanding, self.hsplit);
        self.open_hash_state();
        let b = self.bm();
        put_u32(b, H_HASH_LEVEL, p);
        put_u32(b, H_HASH_EXPANDING, u32::from(e));
        put_u64(b, H_HASH_SPLIT, s as u64);
        self.close_hash_state();
    }

    /// After a link: starts a growth once items pass 1.5 per bucket (while the reserved room
    /// allows), and moves a running one on by a few buckets.
    pub(super) fn grow_on_link(&mut self) {
        if !self.hexpanding {
            let items = u64_at(self.b(), H_ITEMS);
            let buckets = 1u64 << self.hpower;
            if items <= buckets * 3 / 2 || (2usize << self.hpower) > self.geo.buckets {
                return;
            }
            self.hexpanding = true;
            self.hsplit = 0;
        }
        self.grow(STEP);
    }

    /// Splits up to `n` buckets of a growth under way (the maintainer finishes one without
    /// waiting for links); returns whether one is still under way.
    pub fn grow(&mut self, n: usize) -> bool {
        if !self.hexpanding {
            return false;
        }
        let half = 1usize << self.hpower;
        for _ in 0..n {
            let i = self.hsplit;
            let (lo_at, hi_at) = (self.bucket_at(i), self.bucket_at(i + half));
            self.open_bucket(lo_at);
            self.open_bucket(hi_at);
            let (mut lo, mut hi) = (0u64, 0u64);
            let mut off = u64_at(self.b(), lo_at);
            while off != 0 {
                let next = self.at(off, I_HNEXT);
                let h = hash_with(self.seed, self.key_of(off)) as usize;
                let head = if h & half != 0 { &mut hi } else { &mut lo };
                let old_head = *head;
                *head = off;
                self.put(off, I_HNEXT, old_head);
                off = next;
            }
            // The upper bucket may hold bytes from an earlier arena in this file: written,
            // never read before.
            put_u64(self.bm(), lo_at, lo);
            put_u64(self.bm(), hi_at, hi);
            if self.remote() {
                let bits = self.hpower + 2;
                put_u32(self.bm(), lo_at + B_LEVEL, bits);
                put_u32(self.bm(), hi_at + B_LEVEL, bits);
            }
            self.hsplit += 1;
            let done = self.hsplit == half;
            if done {
                self.hpower += 1;
                self.hsplit = 0;
                self.hexpanding = false;
            }
            // Inside the split's brackets: a reader that sees the buckets as they are now
            // computes its bucket from the state as it is now.
            self.store_hash_state();
            self.close_bucket(hi_at);
            self.close_bucket(lo_at);
            if done {
                break;
            }
        }
        self.store_hash_state();
        self.hexpanding
    }

    /// Sets up an empty table of `2^power` buckets (a cold start).
    pub(super) fn init_hash(&mut self, power: u32) {
        self.hpower = power;
        self.hsplit = 0;
        self.hexpanding = false;
        let n = self.geo.stride << power;
        self.bm()[HEADER_BYTES..HEADER_BYTES + n].fill(0);
        if self.remote() {
            for i in 0..1usize << power {
                let at = self.bucket_at(i) + B_LEVEL;
                put_u32(self.bm(), at, power + 1);
            }
        }
        self.store_hash_state();
    }

    /// Calls `f` with every linked item in hash table order (`lru_crawler metadump hash`).
    pub fn walk_hash<'s>(&'s self, mut f: impl FnMut(super::Item<'s>)) {
        for k in 0..self.buckets_in_use() {
            let mut off = u64_at(self.b(), self.bucket_at(k));
            while off != 0 {
                f(self.item(off));
                off = self.at(off, I_HNEXT);
            }
        }
    }
}
