//! AVX2 kernel: `‖t‖² − 2 q·t` with `vpmaddwd` on zero-extended i16, exact in i32.
//!
//! Layout (built once per call): each query is a row of i32 words, each word two consecutive
//! dimensions as i16 (`q[2k] | q[2k+1] << 16`), so one broadcast feeds `vpmaddwd`. Train points
//! are packed in tiles of 16: for each dimension pair one 64-byte line holding the pair of each of
//! the 16 points. A micro-step multiplies 2 train vectors by 6 broadcast queries into 12 i32
//! accumulators (12 `vpmaddwd` + 12 `vpaddd` for 192 products); after the tile the keys are
//! compared with each query's second-best key with one compare and `movemask` per vector, and
//! the rare candidates go through the scalar [`Top2`] in index order.

use std::arch::x86_64::*;

use super::{train_norms, Line, PAD_NORM};
use crate::top2::Top2;

/// Queries per micro-row.
pub(crate) const MR: usize = 6;
/// Train points per tile.
const NR: usize = 16;

pub(crate) struct Prepared {
    /// Dimension pairs per descriptor.
    kp: usize,
    n_train: usize,
    /// `rows × kp` i16 pairs, rows padded to a multiple of `MR` with zeros.
    q: Vec<i32>,
    /// Per query, `‖q‖²`.
    qnorm: Vec<i32>,
    /// `tiles × kp` lines.
    t: Vec<Line>,
    /// Per train point (padded to whole tiles), `‖t‖²`.
    tnorm: Vec<i32>,
}

impl Prepared {
    pub fn new(query: &[u8], train: &[u8], dim: usize) -> Self {
        let kp = dim.div_ceil(2);
        let at = |v: &[u8], i: usize| v.get(i).copied().unwrap_or(0) as u32;
        let n_query = query.len() / dim;
        let rows = n_query.div_ceil(MR) * MR;
        let mut q = vec![0i32; rows * kp];
        for (i, d) in query.chunks_exact(dim).enumerate() {
            for k in 0..kp {
                q[i * kp + k] = (at(d, 2 * k) | at(d, 2 * k + 1) << 16) as i32;
            }
        }
        let qnorm = train_norms(query, dim, 0);
        let n_train = train.len() / dim;
        let tiles = n_train.div_ceil(NR);
        let mut t = vec![Line([0; 64]); tiles * kp];
        for (j, d) in train.chunks_exact(dim).enumerate() {
            let (tile, lane) = (j / NR, j % NR);
            for k in 0..kp {
                let w = at(d, 2 * k) | at(d, 2 * k + 1) << 16;
                t[tile * kp + k].0[lane * 4..lane * 4 + 4].copy_from_slice(&w.to_le_bytes());
            }
        }
        let tnorm = train_norms(train, dim, tiles * NR);
        debug_assert!(tnorm[n_train..].iter().all(|&x| x == PAD_NORM));
        Prepared {
            kp,
            n_train,
            q,
            qnorm,
            t,
            tnorm,
        }
    }

    pub fn tiles(&self) -> usize {
        self.n_train.div_ceil(NR)
    }

    pub fn tiles_per_block(&self) -> usize {
        ((256 << 10) / (64 * self.kp)).max(1)
    }

    pub fn offset(&self, q: usize) -> i32 {
        self.qnorm[q]
    }

    /// # Safety
    /// The CPU must support AVX2. Bounds are checked here (panics only on internal misuse).
    #[target_feature(enable = "avx2")]
    pub unsafe fn scan(&self, row0: usize, tiles: std::ops::Range<usize>, tops: &mut [Top2<i32>]) {
        let kp = self.kp;
        assert!(tops.len() == MR && (row0 + MR) * kp <= self.q.len());
        assert!(tiles.end * kp <= self.t.len() && tiles.end * NR <= self.tnorm.len());
        let qp = self.q.as_ptr().add(row0 * kp);
        for tile in tiles {
            let tp = self.t.as_ptr().add(tile * kp) as *const __m256i;
            let mut acc = [[_mm256_setzero_si256(); 2]; MR];
            for k in 0..kp {
                // SAFETY (whole loop): line `tile * kp + k` and query words `r * kp + k` are
                // inside the vectors, as asserted above.
                let t0 = _mm256_load_si256(tp.add(2 * k));
                let t1 = _mm256_load_si256(tp.add(2 * k + 1));
                for (r, a) in acc.iter_mut().enumerate() {
                    let b = _mm256_set1_epi32(*qp.add(r * kp + k));
                    a[0] = _mm256_add_epi32(a[0], _mm256_madd_epi16(t0, b));
                    a[1] = _mm256_add_epi32(a[1], _mm256_madd_epi16(t1, b));
                }
            }
            let tn = self.tnorm.as_ptr().add(tile * NR) as *const __m256i;
            let (tn0, tn1) = (_mm256_loadu_si256(tn), _mm256_loadu_si256(tn.add(1)));
            for (a, top) in acc.iter().zip(tops.iter_mut()) {
                let v0 = _mm256_sub_epi32(tn0, _mm256_slli_epi32::<1>(a[0]));
                let v1 = _mm256_sub_epi32(tn1, _mm256_slli_epi32::<1>(a[1]));
                let thr = _mm256_set1_epi32(top.d2);
                let m0 = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(thr, v0)));
                let m1 = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(thr, v1)));
                let mut m = (m0 as u32) | (m1 as u32) << 8;
                if m != 0 {
                    let mut keys = [0i32; NR];
                    _mm256_storeu_si256(keys.as_mut_ptr() as *mut __m256i, v0);
                    _mm256_storeu_si256(keys.as_mut_ptr().add(8) as *mut __m256i, v1);
                    while m != 0 {
                        let lane = m.trailing_zeros() as usize;
                        m &= m - 1;
                        let j = tile * NR + lane;
                        if j < self.n_train {
                            top.push(keys[lane], j as u32);
                        }
                    }
                }
            }
        }
    }
}
