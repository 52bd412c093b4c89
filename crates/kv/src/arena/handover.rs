//! Handing a frozen arena to another server (post-copy migration, `crate::migrate`): the
//! memory to serve and a map of the pages known to be zero, so the target installs those
//! without asking (an arena reserves far more room than its items use).

use std::sync::Arc;

use super::layout::*;
use super::{Arena, Mapping};

/// Bytes per bit of [`Arena::zero_map`] (remora-lazy's zero-map granularity).
pub const ZERO_PAGE: usize = 4096;

impl Arena {
    /// The mapping, shared: a page server reads the frozen arena through it.
    pub fn shared_mapping(&self) -> Arc<Mapping> {
        self.map.clone()
    }

    /// One bit per 4 KiB page of the mapping, set where nothing the arena refers to lies:
    /// hash buckets beyond the table in use (growth included), pages never handed to a
    /// class, and pages given back to the system. Such pages are zero in fresh memory, and
    /// their bytes mean nothing to the arena either way, so a target may install them as
    /// zero pages.
    pub fn zero_map(&self) -> Vec<u64> {
        let geo = self.geo;
        let len = self.map.len();
        let mut bits = vec![0u64; len.div_ceil(ZERO_PAGE).div_ceil(64)];
        let mut mark = |from: usize, to: usize| {
            // Whole pages inside [from, to) only.
            let first = from.div_ceil(ZERO_PAGE);
            let last = to.min(len) / ZERO_PAGE;
            for p in first..last {
                bits[p / 64] |= 1 << (p % 64);
            }
        };
        let (level, _) = self.hash_level();
        let used_buckets = 1usize << level.min(geo.buckets.trailing_zeros());
        mark(HEADER_BYTES + used_buckets * geo.stride, geo.directory);
        let b = self.b();
        let used = u32_at(b, H_PAGES_USED) as usize;
        let page = |p: usize| geo.first_page + p * geo.page_size;
        for p in 0..used {
            if b[geo.directory + p] == RELEASED {
                mark(page(p), page(p + 1));
            }
        }
        mark(page(used), len);
        bits
    }

    /// Marks the arena clean for its new owner (a clean arena opens restored) and keeps
    /// `epoch`, as a graceful stop does; nothing may change it afterwards until
    /// [`Arena::mark_running`].
    pub fn mark_handed_over(&mut self, epoch: i64) {
        put_u64(self.bm(), H_EPOCH, epoch as u64);
        put_u32(self.bm(), H_CLEAN, 1);
    }

    /// Takes the arena back (a migration that did not happen, or one that is over): a crash
    /// from here on leaves it unclean, as after any open.
    pub fn mark_running(&mut self) {
        put_u32(self.bm(), H_CLEAN, 0);
    }

    /// The chunks unlinked but still pinned by replies (freed by whoever opens the arena
    /// next: the pins stay here).
    pub fn held_offsets(&self) -> Vec<u64> {
        self.held.iter().map(|(off, _)| *off).collect()
    }

    /// Frees the held chunks a handing-over server named; an offset that is not the start of
    /// a held chunk is ignored (the list comes from another process).
    pub(super) fn free_named_held(&mut self, offs: &[u64]) {
        for &off in offs {
            if self.is_chunk_start(off) && self.state_of(off) == HELD {
                self.free_item(off);
            }
        }
    }

    /// Whether `off` is where a chunk of a page handed to a class begins.
    fn is_chunk_start(&self, off: u64) -> bool {
        let geo = self.geo;
        let Some(rel) = (off as usize).checked_sub(geo.first_page) else {
            return false;
        };
        let p = rel / geo.page_size;
        let used = u32_at(self.b(), H_PAGES_USED) as usize;
        if p >= used.min(geo.pages) {
            return false;
        }
        let c = self.b()[geo.directory + p];
        if c == NO_CLASS || c == RELEASED || c as usize >= self.classes {
            return false;
        }
        let (size, per) = (
            self.field(c as usize, C_SIZE) as usize,
            self.field(c as usize, C_PER_PAGE) as usize,
        );
        let within = rel % geo.page_size;
        size > 0 && within % size == 0 && within / size < per
    }
}
