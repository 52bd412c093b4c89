//! AVX-512 VNNI kernel: `vpdpbusd` multiplies u8 by i8 and sums four products into i32 without
//! saturation, 64 products per instruction.
//!
//! Queries stay u8 (the unsigned operand, broadcast four dimensions at a time); train values are
//! stored as `t − 128` (the signed operand). Then `q·t = q·(t − 128) + 128 Σq`, so the key
//! `‖t‖² − 2 q·(t − 128)` differs from the squared distance by the per-query constant
//! `‖q‖² − 256 Σq`, all exact in i32. Train tiles of 32 points: for each group of four
//! dimensions two 64-byte lines (points 0–15, 16–31). Micro-step: 2 train vectors × 8 broadcast
//! queries into 16 accumulators. Candidate selection as in the AVX2 kernel.

use std::arch::x86_64::*;

use super::{train_norms, Line};
use crate::top2::Top2;

/// Queries per micro-row.
pub(crate) const MR: usize = 8;
/// Train points per tile.
const NR: usize = 32;

pub(crate) struct Prepared {
    /// Groups of four dimensions per descriptor.
    k4: usize,
    n_train: usize,
    /// `rows × k4` words of four u8, rows padded to a multiple of `MR` with zeros.
    q: Vec<i32>,
    /// Per query, `‖q‖² − 256 Σq`.
    offset: Vec<i32>,
    /// `tiles × k4 × 2` lines.
    t: Vec<Line>,
    /// Per train point (padded to whole tiles), `‖t‖²`.
    tnorm: Vec<i32>,
}

impl Prepared {
    pub fn new(query: &[u8], train: &[u8], dim: usize) -> Self {
        let k4 = dim.div_ceil(4);
        let n_query = query.len() / dim;
        let rows = n_query.div_ceil(MR) * MR;
        let mut q = vec![0i32; rows * k4];
        for (i, d) in query.chunks_exact(dim).enumerate() {
            for k in 0..k4 {
                let mut w = [0u8; 4];
                for (b, x) in w.iter_mut().zip(d.iter().skip(4 * k)) {
                    *b = *x;
                }
                q[i * k4 + k] = i32::from_le_bytes(w);
            }
        }
        let offset = query
            .chunks_exact(dim)
            .map(|d| {
                d.iter()
                    .map(|&x| x as i32 * x as i32 - 256 * x as i32)
                    .sum()
            })
            .collect();
        let n_train = train.len() / dim;
        let tiles = n_train.div_ceil(NR);
        // 0x80 is t = 0 in the shifted encoding; it pads both missing points and dimensions.
        let mut t = vec![Line([0x80; 64]); tiles * k4 * 2];
        for (j, d) in train.chunks_exact(dim).enumerate() {
            let (tile, lane) = (j / NR, j % NR);
            for (i, &x) in d.iter().enumerate() {
                let line = &mut t[(tile * k4 + i / 4) * 2 + lane / 16];
                line.0[(lane % 16) * 4 + i % 4] = x ^ 0x80;
            }
        }
        let tnorm = train_norms(train, dim, tiles * NR);
        Prepared {
            k4,
            n_train,
            q,
            offset,
            t,
            tnorm,
        }
    }

    pub fn tiles(&self) -> usize {
        self.n_train.div_ceil(NR)
    }

    pub fn tiles_per_block(&self) -> usize {
        ((256 << 10) / (128 * self.k4)).max(1)
    }

    pub fn offset(&self, q: usize) -> i32 {
        self.offset[q]
    }

    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI. Bounds are checked here.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn scan(&self, row0: usize, tiles: std::ops::Range<usize>, tops: &mut [Top2<i32>]) {
        let k4 = self.k4;
        assert!(tops.len() == MR && (row0 + MR) * k4 <= self.q.len());
        assert!(tiles.end * k4 * 2 <= self.t.len() && tiles.end * NR <= self.tnorm.len());
        let qp = self.q.as_ptr().add(row0 * k4);
        for tile in tiles {
            let tp = self.t.as_ptr().add(tile * k4 * 2) as *const __m512i;
            let mut acc = [[_mm512_setzero_si512(); 2]; MR];
            for k in 0..k4 {
                // SAFETY (whole loop): lines `(tile * k4 + k) * 2 + {0, 1}` and query words
                // `r * k4 + k` are inside the vectors, as asserted above.
                let t0 = _mm512_load_si512(tp.add(2 * k));
                let t1 = _mm512_load_si512(tp.add(2 * k + 1));
                for (r, a) in acc.iter_mut().enumerate() {
                    let b = _mm512_set1_epi32(*qp.add(r * k4 + k));
                    a[0] = _mm512_dpbusd_epi32(a[0], b, t0);
                    a[1] = _mm512_dpbusd_epi32(a[1], b, t1);
                }
            }
            let tn = self.tnorm.as_ptr().add(tile * NR) as *const __m512i;
            let (tn0, tn1) = (_mm512_loadu_si512(tn), _mm512_loadu_si512(tn.add(1)));
            for (a, top) in acc.iter().zip(tops.iter_mut()) {
                let v0 = _mm512_sub_epi32(tn0, _mm512_slli_epi32::<1>(a[0]));
                let v1 = _mm512_sub_epi32(tn1, _mm512_slli_epi32::<1>(a[1]));
                let thr = _mm512_set1_epi32(top.d2);
                let mut m = _mm512_cmplt_epi32_mask(v0, thr) as u32
                    | (_mm512_cmplt_epi32_mask(v1, thr) as u32) << 16;
                if m != 0 {
                    let mut keys = [0i32; NR];
                    _mm512_storeu_si512(keys.as_mut_ptr() as *mut __m512i, v0);
                    _mm512_storeu_si512(keys.as_mut_ptr().add(16) as *mut __m512i, v1);
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
