//! The portable kernels: one pair at a time, in plain Rust that the compiler vectorises.
//!
//! Also the f32 distance, shared by every f32 search: eight partial sums in a fixed lane
//! order, reduced by a fixed tree, so a pair's distance never depends on tiling or threads.

use crate::top2::Top2;

/// Queries per micro-row (they share each train point while it is in L1).
pub(crate) const MR: usize = 4;
/// Train points per tile.
const NR: usize = 64;

/// The u8 sets, as given.
pub(crate) struct Prepared<'a> {
    query: &'a [u8],
    train: &'a [u8],
    dim: usize,
}

impl<'a> Prepared<'a> {
    pub fn new(query: &'a [u8], train: &'a [u8], dim: usize) -> Self {
        Prepared { query, train, dim }
    }

    pub fn tiles(&self) -> usize {
        (self.train.len() / self.dim).div_ceil(NR)
    }

    pub fn tiles_per_block(&self) -> usize {
        ((256 << 10) / (NR * self.dim)).max(1)
    }

    pub fn scan(&self, row0: usize, tiles: std::ops::Range<usize>, tops: &mut [Top2<i32>]) {
        let dim = self.dim;
        let n_train = self.train.len() / dim;
        let (t0, t1) = (tiles.start * NR, (tiles.end * NR).min(n_train));
        if t0 >= t1 {
            return;
        }
        for (r, top) in tops.iter_mut().enumerate() {
            let Some(q) = self.query.get((row0 + r) * dim..(row0 + r + 1) * dim) else {
                break;
            };
            for (j, t) in self.train[t0 * dim..t1 * dim].chunks_exact(dim).enumerate() {
                top.push(dist_u8(q, t) as i32, (t0 + j) as u32);
            }
        }
    }
}

/// Exact squared distance of two u8 descriptors of equal length (at most 2²⁶ for 1024 values).
#[inline]
pub(crate) fn dist_u8(a: &[u8], b: &[u8]) -> u32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = x as i32 - y as i32;
            (d * d) as u32
        })
        .sum()
}

/// Squared distance of two f32 descriptors of equal length, in a fixed order.
#[inline(always)]
pub(crate) fn dist_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            let d = x[l] - y[l];
            acc[l] += d * d;
        }
    }
    for l in 0..ra.len() {
        let d = ra[l] - rb[l];
        acc[l] += d * d;
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}
