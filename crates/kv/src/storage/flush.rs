//! `flush_all` state and the liveness rule both stores judge items by, in one place.
//!
//! An immediate flush records the next CAS: items with a lower (non-zero) CAS are dead, so
//! items stored later in the same second survive. A delayed flush (or an immediate one under
//! `-C`, where CAS is 0) records a time: items last written at or before it die once the
//! clock reaches it. Dead items stay stored until a read or the LRU finds them, as in
//! memcached.

use std::sync::atomic::{AtomicU64, Ordering};

/// The flush marks, shared by a store's threads.
#[derive(Debug)]
pub(super) struct Flush {
    cas: AtomicU64,
    oldest_live: AtomicU64,
}

impl Default for Flush {
    fn default() -> Flush {
        Flush {
            cas: AtomicU64::new(0),
            oldest_live: AtomicU64::new(u64::MAX),
        }
    }
}

impl Flush {
    /// Liveness at relative time `now`.
    pub(super) fn ctx(&self, now: u32) -> Ctx {
        Ctx {
            now,
            flush_cas: self.cas.load(Ordering::Relaxed),
            oldest_live: self.oldest_live.load(Ordering::Relaxed),
        }
    }

    /// `flush_all` now: every item with a CAS below `next_cas` is dead; without CAS values
    /// (`use_cas` false) liveness rests on time alone, so the mark is `now` instead.
    pub(super) fn now(&self, next_cas: u64, now: u32, use_cas: bool) {
        self.cas.store(next_cas, Ordering::Relaxed);
        let t = if use_cas { u64::MAX } else { now as u64 };
        self.oldest_live.store(t, Ordering::Relaxed);
    }

    /// `flush_all N`: items last written at or before `t` die once the clock reaches it.
    pub(super) fn at(&self, t: u32) {
        self.oldest_live.store(t as u64, Ordering::Relaxed);
    }

    /// The marks, for a warm restart's metadata: (flush CAS, oldest live time; 0 = none).
    pub(super) fn marks(&self) -> (u64, u32) {
        let live = self.oldest_live.load(Ordering::Relaxed);
        (
            self.cas.load(Ordering::Relaxed),
            u32::try_from(live).unwrap_or(0),
        )
    }

    /// Restores marks saved by [`Flush::marks`].
    pub(super) fn restore(&self, cas: u64, oldest_live: u32) {
        self.cas.store(cas, Ordering::Relaxed);
        let live = if oldest_live == 0 {
            u64::MAX
        } else {
            u64::from(oldest_live)
        };
        self.oldest_live.store(live, Ordering::Relaxed);
    }
}

/// Time and flush marks that judge an item's liveness.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ctx {
    pub(super) now: u32,
    pub(super) flush_cas: u64,
    pub(super) oldest_live: u64,
}

impl Ctx {
    /// Invalidated by a `flush_all` (memcached checks this before expiry, and counts a read of
    /// it in `get_flushed` rather than `get_expired`).
    pub(super) fn flushed_at(&self, cas: u64, time: u32) -> bool {
        if cas < self.flush_cas && cas != 0 {
            return true;
        }
        self.oldest_live <= self.now as u64 && time as u64 <= self.oldest_live
    }

    /// Neither expired nor flushed.
    pub(super) fn live_at(&self, exptime: u32, cas: u64, time: u32) -> bool {
        let expired = exptime != 0 && exptime <= self.now;
        !expired && !self.flushed_at(cas, time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_marks_kill_by_cas_or_by_time_and_survive_a_restore() {
        let f = Flush::default();
        assert!(f.ctx(10).live_at(0, 5, 10));
        f.now(7, 10, true);
        let c = f.ctx(10);
        assert!(!c.live_at(0, 6, 10) && c.live_at(0, 7, 10) && c.live_at(0, 0, 10));
        f.now(9, 20, false);
        assert!(
            !f.ctx(20).live_at(0, 0, 20),
            "-C: the same second is flushed"
        );
        assert!(f.ctx(21).live_at(0, 0, 21));
        f.at(30);
        assert!(f.ctx(29).live_at(0, 100, 25) && !f.ctx(30).live_at(0, 100, 25));
        assert!(!f.ctx(30).live_at(30, 100, 29), "expired");
        let g = Flush::default();
        let (cas, live) = f.marks();
        g.restore(cas, live);
        assert_eq!(g.marks(), (9, 30));
    }
}
