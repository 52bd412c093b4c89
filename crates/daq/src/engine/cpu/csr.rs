//! CSR compression on the CPU engine: two parallel passes with nothing serial between them but
//! a prefix over chunks. Each chunk of rows counts its kept pixels; the counts give every chunk
//! its exact place in the output; each chunk then writes its rows straight there.
//!
//! The single pass before grew vectors per chunk and joined them on one thread afterwards: a
//! copy of every entry, and the first touch of the output's pages, that no thread count
//! shortened. The AVX2 fill packs 8 pixels at a time with a permutation looked up from their
//! comparison mask. It is written by hand because the compiler does not vectorise stores whose
//! positions depend on the data, and no crate compacts `f32` values and their `u16` columns
//! in one pass.
use std::mem::MaybeUninit;

use rayon::prelude::*;
use remora_accel::simd::Level;
use remora_accel::CpuPool;

use super::dispatch as kernel;
use crate::engine::kernels;
use crate::sparse::SparseFrame;
use crate::{DaqError, Result};

/// One chunk's share of the output: its rows' pointers and its entries' exact slots.
struct Share<'a> {
    pixels: &'a [f32],
    base: u32,
    row_end: &'a mut [u32],
    col: &'a mut [MaybeUninit<u16>],
    val: &'a mut [MaybeUninit<f32>],
}

/// Pixels of `frame` (`rows` × `cols`, checked by the caller) strictly above `t`, in CSR form.
pub(super) fn compress(
    pool: &CpuPool,
    level: Level,
    frame: &[f32],
    rows: usize,
    cols: usize,
    t: f32,
) -> Result<SparseFrame> {
    let rows_per = pool.chunk_len(rows, 1).max(1);
    let spans: Vec<(usize, usize)> = (0..rows.div_ceil(rows_per))
        .map(|ci| (ci * rows_per, ((ci + 1) * rows_per).min(rows)))
        .collect();
    let pixels = |(r0, r1): (usize, usize)| &frame[r0 * cols..r1 * cols];
    let counts: Vec<usize> = pool.install(|| {
        spans
            .par_iter()
            .map(|&s| kernel::count(level, pixels(s), t) as usize)
            .collect()
    });
    let nnz: usize = counts.iter().sum();
    let mut row_ptr = vec![0u32; rows + 1];
    let mut col = Vec::<u16>::with_capacity(nnz);
    let mut values = Vec::<f32>::with_capacity(nnz);
    let mut shares = Vec::with_capacity(spans.len());
    {
        let mut col_left = &mut col.spare_capacity_mut()[..nnz];
        let mut val_left = &mut values.spare_capacity_mut()[..nnz];
        let mut rows_left = &mut row_ptr[1..];
        let mut base = 0;
        for (&s, &n) in spans.iter().zip(&counts) {
            let (c, cr) = std::mem::take(&mut col_left).split_at_mut(n);
            let (v, vr) = std::mem::take(&mut val_left).split_at_mut(n);
            let (r, rr) = std::mem::take(&mut rows_left).split_at_mut(s.1 - s.0);
            (col_left, val_left, rows_left) = (cr, vr, rr);
            shares.push(Share {
                pixels: pixels(s),
                // Fits: check_compress keeps the frame's length within u32.
                base: base as u32,
                row_end: r,
                col: c,
                val: v,
            });
            base += n;
        }
    }
    let filled = pool.install(|| {
        shares
            .into_par_iter()
            .all(|s| fill(level, cols, t, s) == Some(()))
    });
    if !filled {
        return Err(DaqError::Acquisition(
            "CSR compression: a chunk kept a different number of pixels than it counted".into(),
        ));
    }
    // SAFETY: every chunk wrote each slot of its share exactly once in order (`fill` returned
    // Some: its last row ended at the share's length), and the shares tile 0..nnz.
    unsafe {
        col.set_len(nnz);
        values.set_len(nnz);
    }
    Ok(SparseFrame {
        rows,
        cols,
        threshold: t,
        row_ptr,
        col,
        values,
    })
}

/// Writes one share's rows; `None` when the rows keep more or fewer pixels than the share has
/// slots for (never, as the count used the same comparison).
fn fill(level: Level, cols: usize, t: f32, s: Share<'_>) -> Option<()> {
    let mut n = 0;
    let rows = s.pixels.chunks_exact(cols.max(1));
    for (row, end) in rows.zip(s.row_end.iter_mut()) {
        n = dispatch::fill_row(level, row, t, s.col, s.val, n)?;
        *end = s.base + n as u32;
    }
    (n == s.col.len()).then_some(())
}

/// Picks the hand-written AVX2 fill when the CPU has it (the other kernels' copies are in the
/// engine's `dispatch`).
mod dispatch {
    use super::*;

    pub(super) fn fill_row(
        level: Level,
        row: &[f32],
        t: f32,
        col: &mut [MaybeUninit<u16>],
        val: &mut [MaybeUninit<f32>],
        n: usize,
    ) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if level == Level::Avx2 {
            // SAFETY: `Level::Avx2` comes from runtime detection, so the CPU has AVX2.
            return unsafe { avx2::fill_row(row, t, col, val, n) };
        }
        let _ = level;
        kernels::fill_row(row, 0, t, col, val, n)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    use crate::engine::kernels;

    /// For each 8-bit mask, the positions of its set bits in order (the rest 0): the
    /// permutation that moves the kept lanes of 8 pixels to the front.
    const PACK: [[u32; 8]; 256] = {
        let mut table = [[0u32; 8]; 256];
        let mut m = 0;
        while m < 256 {
            let (mut k, mut j) = (0, 0);
            while j < 8 {
                if (m >> j) & 1 == 1 {
                    table[m][k] = j as u32;
                    k += 1;
                }
                j += 1;
            }
            m += 1;
        }
        table
    };

    /// `kernels::fill_row` 8 pixels at a time: each step stores 8 values and 8 columns at slot
    /// `n` and advances `n` by the number kept, so a step needs 8 free slots. Near the share's
    /// end, where fewer are left, the portable kernel finishes the row.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) fn fill_row(
        row: &[f32],
        t: f32,
        col: &mut [MaybeUninit<u16>],
        val: &mut [MaybeUninit<f32>],
        mut n: usize,
    ) -> Option<usize> {
        let slots = col.len().min(val.len());
        let tv = _mm256_set1_ps(t);
        let mut x = 0;
        while x + 8 <= row.len() && n + 8 <= slots {
            // SAFETY: x + 8 <= row.len().
            let v = unsafe { _mm256_loadu_ps(row.as_ptr().add(x)) };
            // Ordered compare: NaN is not kept, as with `>`.
            let m = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(v, tv)) as usize;
            // SAFETY: m < 256 and each entry is 32 bytes.
            let perm = unsafe { _mm256_loadu_si256(PACK[m].as_ptr().cast()) };
            let kept = _mm256_permutevar8x32_ps(v, perm);
            // Columns x + lane < 65536 (check_compress), so the saturating pack is exact.
            let at = _mm256_add_epi32(perm, _mm256_set1_epi32(x as i32));
            let at16 = _mm_packus_epi32(
                _mm256_castsi256_si128(at),
                _mm256_extracti128_si256::<1>(at),
            );
            // SAFETY: n + 8 <= both lengths. Lanes past the kept ones land in slots a later
            // step (or the tail) overwrites: the count makes every slot below the share's
            // length a kept pixel's.
            unsafe {
                _mm256_storeu_ps(val.as_mut_ptr().add(n).cast(), kept);
                _mm_storeu_si128(col.as_mut_ptr().add(n).cast(), at16);
            }
            n += m.count_ones() as usize;
            x += 8;
        }
        kernels::fill_row(row, x, t, col, val, n)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::engine::{CpuEngine, Engine, ScalarEngine};

    proptest! {
        /// Both fills (AVX2 where the CPU has it, and the portable one) on any thread count
        /// give the reference's CSR bit for bit: shares end mid-block, rows are shorter than a
        /// step, NaN and infinities sit beside kept pixels, whole rows or frames keep nothing.
        #[test]
        fn fills_equal_the_reference(
            rows in 0usize..40, cols in 1usize..200, threads in 1usize..5,
            seed in any::<u64>(), keep_one_in in 1u64..12, t in -1.0f32..2.0,
        ) {
            let frame: Vec<f32> = (0..rows * cols)
                .map(|i| {
                    let x = (i as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    match (x >> 7) % 97 {
                        0 => f32::NAN,
                        1 => f32::INFINITY,
                        2 => f32::NEG_INFINITY,
                        _ if (x >> 20) % keep_one_in == 0 => t + 1.0 + (x >> 40) as f32 * 1e-6,
                        _ => t - ((x >> 40) % 3) as f32,
                    }
                })
                .collect();
            let want = ScalarEngine.compress(&frame, rows, cols, t).unwrap();
            let fast = CpuEngine::new(threads).unwrap();
            for e in [fast.clone(), fast.baseline()] {
                let got = e.compress(&frame, rows, cols, t).unwrap();
                prop_assert_eq!(&got.row_ptr, &want.row_ptr);
                prop_assert_eq!(&got.col, &want.col);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                prop_assert_eq!(bits(&got.values), bits(&want.values));
            }
        }
    }
}
