//! The running two smallest of a stream of (distance, index) pairs.
//!
//! Every kernel feeds candidates in increasing index order, so a strict `<` keeps the lower
//! index among equal distances, for the best and the second best alike.

/// Index meaning "none yet".
pub(crate) const NONE: u32 = u32::MAX;

/// The two smallest distances seen so far and their indices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Top2<D> {
    pub d1: D,
    pub i1: u32,
    pub d2: D,
    pub i2: u32,
}

impl<D: Copy + PartialOrd> Top2<D> {
    /// Empty, with `max` a distance no candidate reaches.
    pub fn new(max: D) -> Self {
        Top2 {
            d1: max,
            i1: NONE,
            d2: max,
            i2: NONE,
        }
    }

    /// Offers a candidate; indices must come in increasing order.
    #[inline(always)]
    pub fn push(&mut self, d: D, i: u32) {
        // The `NONE` checks only matter for f32 distances that overflowed to infinity, which
        // equal the sentinel; integer keys never reach it.
        if d < self.d2 || self.i2 == NONE {
            if d < self.d1 || self.i1 == NONE {
                self.d2 = self.d1;
                self.i2 = self.i1;
                self.d1 = d;
                self.i1 = i;
            } else {
                self.d2 = d;
                self.i2 = i;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_distances_keep_the_lower_indices() {
        let mut t = Top2::new(u32::MAX);
        for i in 0..5 {
            t.push(7, i);
        }
        assert_eq!((t.d1, t.i1, t.d2, t.i2), (7, 0, 7, 1));
        t.push(3, 9);
        assert_eq!((t.d1, t.i1, t.d2, t.i2), (3, 9, 7, 0));
    }

    #[test]
    fn infinite_distances_still_count() {
        let mut t = Top2::new(f32::INFINITY);
        t.push(f32::INFINITY, 0);
        t.push(f32::INFINITY, 1);
        t.push(f32::INFINITY, 2);
        assert_eq!((t.i1, t.i2), (0, 1));
    }
}
