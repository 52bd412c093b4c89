//! Per-page residency bitmap and the page-in policies of PART.
//!
//! The map records what the engine believes: pages it populated (or found resident with
//! `mincore`) are marked, pages it evicted are cleared. The kernel may still reclaim a marked
//! page later; that costs a fault, never correctness.

use std::ops::Range;
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering};

/// How many pages to make resident when an access faults (PART's PIO, PI4 and PIA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageIn {
    /// PIO: only the page that faulted.
    OnePage,
    /// PI*n*: the aligned block of this many pages holding the faulting page (PI4 with 4 KB
    /// pages is `Block(4)`, 16 KB). `Block(0)` is treated as `Block(1)`.
    Block(usize),
    /// PIA: every page from the faulting one to the end of the region.
    All,
}

impl PageIn {
    /// The pages this policy covers for a fault on `page` in a map of `pages` pages.
    pub fn pages_for(self, page: usize, pages: usize) -> Range<usize> {
        if page >= pages {
            return pages..pages;
        }
        match self {
            PageIn::OnePage => page..page + 1,
            PageIn::Block(n) => {
                let n = n.max(1);
                let start = page - page % n;
                start..start.saturating_add(n).min(pages)
            }
            PageIn::All => page..pages,
        }
    }
}

/// A bitmap with one bit per page, set when the page is resident. Lock-free (`AtomicU64`
/// words) so the receive engine and page-in workers can share it.
pub struct ResidencyMap {
    words: Box<[AtomicU64]>,
    pages: usize,
    page_size: usize,
    // Signed: a concurrent clear may be counted before the set it undoes.
    resident: AtomicIsize,
}

impl std::fmt::Debug for ResidencyMap {
    // A summary: the bitmap of a large region is too long to print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResidencyMap")
            .field("pages", &self.pages)
            .field("page_size", &self.page_size)
            .field("resident", &self.resident_count())
            .finish()
    }
}

impl ResidencyMap {
    /// A map of `ceil(len / page_size)` pages, none resident. `page_size` must be a power of
    /// two (it is rounded up to one otherwise; 0 counts as 1). The bitmap takes one bit per
    /// page, allocated here (regions size it from their real mapping).
    pub fn new(len: usize, page_size: usize) -> ResidencyMap {
        let page_size = page_size.max(1).next_power_of_two();
        let pages = len.div_ceil(page_size);
        let words = (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        ResidencyMap {
            words,
            pages,
            page_size,
            resident: AtomicIsize::new(0),
        }
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Number of pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// True if `page` is marked resident (false past the end).
    #[inline]
    pub fn is_resident(&self, page: usize) -> bool {
        page < self.pages && self.words[page / 64].load(Ordering::Acquire) & (1 << (page % 64)) != 0
    }

    /// True if every page of `pages` (clamped to the map) is resident.
    pub fn all_resident(&self, pages: Range<usize>) -> bool {
        self.first_missing(pages).is_none()
    }

    /// Marks `pages` (clamped to the map) resident.
    pub fn mark_resident(&self, pages: Range<usize>) {
        self.mark_resident_counted(pages);
    }

    /// Marks `pages` resident and returns how many were not marked before.
    pub(crate) fn mark_resident_counted(&self, pages: Range<usize>) -> usize {
        let mut added = 0;
        self.for_words(pages, |w, mask| {
            let old = w.fetch_or(mask, Ordering::AcqRel);
            added += (mask & !old).count_ones() as usize;
        });
        self.resident.fetch_add(added as isize, Ordering::AcqRel);
        added
    }

    /// Sets every page's bit to `resident(page)`.
    pub(crate) fn set_all(&self, resident: impl Fn(usize) -> bool) {
        for (i, w) in self.words.iter().enumerate() {
            let mut bits = 0u64;
            for b in 0..64 {
                let p = i * 64 + b;
                if p < self.pages && resident(p) {
                    bits |= 1 << b;
                }
            }
            let old = w.swap(bits, Ordering::AcqRel);
            let delta = bits.count_ones() as isize - old.count_ones() as isize;
            self.resident.fetch_add(delta, Ordering::AcqRel);
        }
    }

    /// Marks `pages` (clamped to the map) missing.
    pub fn mark_missing(&self, pages: Range<usize>) {
        let mut removed = 0;
        self.for_words(pages, |w, mask| {
            let old = w.fetch_and(!mask, Ordering::AcqRel);
            removed += (mask & old).count_ones() as usize;
        });
        self.resident.fetch_sub(removed as isize, Ordering::AcqRel);
    }

    /// Number of pages marked resident.
    pub fn resident_count(&self) -> usize {
        self.resident.load(Ordering::Acquire).max(0) as usize
    }

    /// The first page of `pages` (clamped to the map) that is not resident.
    pub fn first_missing(&self, pages: Range<usize>) -> Option<usize> {
        let mut found = None;
        self.try_words(pages, |i, w, mask| {
            let miss = !w.load(Ordering::Acquire) & mask;
            if miss != 0 {
                found = Some(i * 64 + miss.trailing_zeros() as usize);
                false
            } else {
                true
            }
        });
        found
    }

    /// The pages of `pages` (clamped to the map) that are not resident, in order.
    pub fn missing(&self, pages: Range<usize>) -> impl Iterator<Item = usize> + '_ {
        let end = pages.end.min(self.pages);
        let mut next = pages.start;
        std::iter::from_fn(move || {
            if next >= end {
                return None;
            }
            let p = self.first_missing(next..end)?;
            next = p + 1;
            Some(p)
        })
    }

    /// Runs of consecutive missing pages in `pages` (clamped), as ranges.
    pub fn missing_runs(&self, pages: Range<usize>) -> impl Iterator<Item = Range<usize>> + '_ {
        let end = pages.end.min(self.pages);
        let mut next = pages.start;
        std::iter::from_fn(move || {
            if next >= end {
                return None;
            }
            let start = self.first_missing(next..end)?;
            let mut stop = start + 1;
            while stop < end && !self.is_resident(stop) {
                stop += 1;
            }
            next = stop;
            Some(start..stop)
        })
    }

    /// Calls `f(word, mask)` for each word overlapping `pages` (clamped to the map).
    fn for_words(&self, pages: Range<usize>, mut f: impl FnMut(&AtomicU64, u64)) {
        self.try_words(pages, |_, w, m| {
            f(w, m);
            true
        });
    }

    /// Like `for_words` with the word index, stopping when `f` returns false.
    fn try_words(&self, pages: Range<usize>, mut f: impl FnMut(usize, &AtomicU64, u64) -> bool) {
        let end = pages.end.min(self.pages);
        let mut p = pages.start;
        while p < end {
            let i = p / 64;
            let lo = p % 64;
            let hi = (end - i * 64).min(64);
            let mask = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            if !f(i, &self.words[i], mask) {
                return;
            }
            p = (i + 1) * 64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn policies_cover_the_right_pages() {
        assert_eq!(PageIn::OnePage.pages_for(5, 10), 5..6);
        assert_eq!(PageIn::Block(4).pages_for(5, 10), 4..8);
        assert_eq!(PageIn::Block(4).pages_for(9, 10), 8..10);
        assert_eq!(PageIn::Block(0).pages_for(3, 10), 3..4);
        assert_eq!(PageIn::All.pages_for(3, 10), 3..10);
        assert_eq!(PageIn::All.pages_for(10, 10), 10..10);
        assert_eq!(PageIn::Block(usize::MAX).pages_for(3, 10), 0..10);
    }

    #[test]
    fn mark_and_query() {
        let m = ResidencyMap::new(200 * 4096 + 1, 4096);
        assert_eq!(m.pages(), 201);
        assert_eq!(m.first_missing(0..201), Some(0));
        m.mark_resident(0..130);
        assert_eq!(m.resident_count(), 130);
        assert!(m.is_resident(129));
        assert!(!m.is_resident(130));
        assert_eq!(m.first_missing(0..201), Some(130));
        m.mark_missing(60..70);
        assert_eq!(m.resident_count(), 120);
        assert_eq!(
            m.missing(0..140).collect::<Vec<_>>(),
            [
                60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 130, 131, 132, 133, 134, 135, 136, 137,
                138, 139
            ]
        );
        assert_eq!(
            m.missing_runs(0..201).collect::<Vec<_>>(),
            [60..70, 130..201]
        );
        // Out-of-range pages are clamped, never a panic.
        m.mark_resident(150..usize::MAX);
        assert!(!m.is_resident(usize::MAX));
        assert_eq!(m.resident_count(), 120 + 51);
    }

    proptest! {
        #[test]
        fn agrees_with_a_vec_of_bools(pages in 0usize..300,
                                      ops in proptest::collection::vec((any::<bool>(), 0usize..320, 0usize..320), 0..40)) {
            let m = ResidencyMap::new(pages * 4096, 4096);
            let mut model = vec![false; pages];
            for (set, a, b) in ops {
                let r = a.min(b)..a.max(b);
                if set { m.mark_resident(r.clone()) } else { m.mark_missing(r.clone()) }
                for m in &mut model[r.start.min(pages)..r.end.min(pages)] { *m = set; }
                prop_assert_eq!(m.resident_count(), model.iter().filter(|&&x| x).count());
                let q = a.min(b)..a.max(b);
                let want: Vec<usize> = (q.start..q.end.min(pages)).filter(|&p| !model[p]).collect();
                prop_assert_eq!(m.missing(q.clone()).collect::<Vec<_>>(), want.clone());
                prop_assert_eq!(m.first_missing(q), want.first().copied());
            }
            for (p, &r) in model.iter().enumerate() { prop_assert_eq!(m.is_resident(p), r); }
        }
    }
}
