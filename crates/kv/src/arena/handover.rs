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
        mark(HEADER_BYTES + used_buckets * 8, geo.directory);
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
}
