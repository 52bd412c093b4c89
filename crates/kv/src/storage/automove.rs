//! memcached 1.6's slab automover (`slab_automove=1`, its `slab_automove.c`): once per run it
//! compares each class' figures with the previous run's over a window of runs. A class with
//! more than 2.5 pages of free chunks and a quiet window (no eviction, no out-of-memory, no new
//! page) gives a page back to the global pool; else, once the window has filled, the class
//! evicting most recently (evictions in more than half the window, or over a quarter of all
//! evictions) takes a page from the class whose oldest item is oldest, when its own oldest
//! item is younger than `ratio` times that age.

/// A class needs more pages than this to give one to another class.
const MIN_PAGES_FOR_SOURCE: u64 = 2;
/// Free chunks, in pages, above which a quiet class gives a page to the pool.
const MIN_PAGES_FOR_RECLAIM: f64 = 2.5;

/// One class' figures at one run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Snap {
    /// Items evicted so far.
    pub evicted: u64,
    /// Allocations that found nothing to evict so far.
    pub outofmemory: u64,
    /// Pages of the class.
    pub pages: u64,
    /// Seconds since its LRU tail item was last used (0: no item).
    pub age: u64,
    /// Free chunks.
    pub free: u64,
    /// Chunks per page.
    pub per_page: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    age: u64,
    dirty: bool,
    evicted_ratio: f64,
    evicted_seen: bool,
}

/// A decision: move a page of class `src` to class `dst` (`None`: the global pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Decision {
    pub src: usize,
    pub dst: Option<usize>,
}

/// The automover's memory between runs.
#[derive(Debug)]
pub(super) struct Automover {
    window: usize,
    /// Runs so far (memcached's `window_cur`).
    cur: u64,
    slots: Vec<Slot>,
    before: Vec<Snap>,
}

impl Automover {
    /// A mover over `window` runs, its first figures `now` (memcached's dry run at start).
    pub fn new(window: usize, now: Vec<Snap>) -> Automover {
        let window = window.max(1);
        Automover {
            window,
            cur: 0,
            slots: vec![Slot::default(); window * now.len()],
            before: now,
        }
    }

    /// Whether this mover was made for `window` runs over `classes` classes.
    pub fn fits(&self, window: usize, classes: usize) -> bool {
        self.window == window.max(1) && self.before.len() == classes
    }

    /// One run over the classes' figures `after`; the page move to make, if any.
    pub fn run(&mut self, after: &[Snap], ratio: f64) -> Option<Decision> {
        let total: u64 = after
            .iter()
            .zip(&self.before)
            .map(|(a, b)| a.evicted.saturating_sub(b.evicted))
            .sum();
        self.cur += 1;
        let w = self.window;
        let mut oldest: Option<(usize, u64)> = None;
        let mut youngest: Option<(usize, u64, bool)> = None;
        let mut decision = None;
        for (n, (a, b)) in after.iter().zip(&self.before).enumerate() {
            let mut slot = Slot {
                age: a.age,
                ..Slot::default()
            };
            let evicted = a.evicted.saturating_sub(b.evicted);
            if evicted > 0 {
                slot.evicted_ratio = evicted as f64 / total as f64;
                slot.evicted_seen = true;
                slot.dirty = true;
            }
            if a.outofmemory > b.outofmemory || a.pages > b.pages {
                slot.dirty = true;
            }
            let row = &mut self.slots[n * w..(n + 1) * w];
            row[(self.cur % w as u64) as usize] = slot;
            let dirty = row.iter().any(|s| s.dirty);
            let seen = row.iter().filter(|s| s.evicted_seen).count();
            let ratio_sum: f64 = row.iter().map(|s| s.evicted_ratio).sum();
            let age = row.iter().map(|s| s.age).sum::<u64>() / w as u64;
            if a.free as f64 > a.per_page as f64 * MIN_PAGES_FOR_RECLAIM && !dirty {
                decision = Some(Decision { src: n, dst: None });
                break;
            }
            if age > oldest.map_or(0, |o| o.1) && a.pages > MIN_PAGES_FOR_SOURCE {
                oldest = Some((n, age));
            }
            if age < youngest.map_or(u64::MAX, |y| y.1)
                && (seen > w / 2 || ratio_sum / w as f64 > 0.25)
            {
                youngest = Some((n, age, slot.evicted_seen));
            }
        }
        self.before = after.to_vec();
        if decision.is_some() {
            return decision;
        }
        match (youngest, oldest) {
            (Some((y, y_age, evicting)), Some((o, o_age)))
                if self.cur > w as u64 && evicting && (y_age as f64) < o_age as f64 * ratio =>
            {
                Some(Decision {
                    src: o,
                    dst: Some(y),
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(evicted: u64, pages: u64, age: u64, free: u64) -> Snap {
        Snap {
            evicted,
            outofmemory: 0,
            pages,
            age,
            free,
            per_page: 10,
        }
    }

    #[test]
    fn a_quiet_class_with_free_pages_gives_one_to_the_pool() {
        let mut m = Automover::new(3, vec![snap(0, 5, 0, 0), snap(5, 5, 0, 0)]);
        // Evictions in class 1 keep its window dirty for 3 runs.
        let busy = [snap(0, 5, 10, 0), snap(9, 5, 10, 40)];
        assert_eq!(m.run(&busy, 0.8), None);
        let quiet = [snap(0, 5, 10, 0), snap(9, 5, 10, 40)];
        assert_eq!(m.run(&quiet, 0.8), None);
        assert_eq!(m.run(&quiet, 0.8), None);
        assert_eq!(m.run(&quiet, 0.8), Some(Decision { src: 1, dst: None }));
        // 25 free chunks of 10 per page: not above 2.5 pages.
        let kept = [snap(0, 5, 10, 0), snap(9, 4, 10, 25)];
        assert_eq!(m.run(&kept, 0.8), None);
    }

    #[test]
    fn an_evicting_young_class_takes_a_page_from_the_oldest_once_the_window_filled() {
        let mut m = Automover::new(3, vec![snap(0, 5, 0, 0), snap(0, 5, 0, 0)]);
        let mut ev = 0;
        let mut last = None;
        for _ in 0..5 {
            ev += 10;
            last = m.run(&[snap(0, 5, 1000, 0), snap(ev, 5, 10, 0)], 0.8);
        }
        assert_eq!(
            last,
            Some(Decision {
                src: 0,
                dst: Some(1)
            })
        );
        // Ages within the ratio: nothing moves.
        let mut m = Automover::new(3, vec![snap(0, 5, 0, 0), snap(0, 5, 0, 0)]);
        for i in 1..6 {
            assert_eq!(
                m.run(&[snap(0, 5, 100, 0), snap(i * 10, 5, 90, 0)], 0.8),
                None
            );
        }
    }
}
