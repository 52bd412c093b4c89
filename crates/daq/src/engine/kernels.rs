//! The hot loops, written so LLVM vectorises them. Each works on one chunk of a frame; the CPU
//! engine runs chunks on its pool and compiles an AVX2 copy of each (see `cpu.rs`).
use std::mem::MaybeUninit;

use super::ConvStats;
use crate::azint::PixelMajor;
use crate::geometry::{AssemblyMap, Run};

/// Output element of the conversion: energy (`f32`) or photon count (`i32`).
pub(crate) trait Sink: Copy + Send + Sync + Default {
    fn make(e: f32, energy: f32) -> Self;
}

impl Sink for f32 {
    #[inline(always)]
    fn make(e: f32, _: f32) -> f32 {
        e
    }
}

impl Sink for i32 {
    /// Same results as `(e / energy).round_ties_even() as i32` (saturating, NaN → MIN), written
    /// with a clamp and selects so it vectorises (`as` does not).
    #[inline(always)]
    fn make(e: f32, energy: f32) -> i32 {
        let q = (e / energy).round_ties_even();
        // `max` turns NaN into the lower bound, so `c` is a number in i32 range (`clamp` would
        // keep NaN).
        #[allow(clippy::manual_clamp)]
        let c = q.max(-2_147_483_648.0).min(2_147_483_520.0);
        // SAFETY: `c` is not NaN and lies in [-2^31, 2^31 - 128], representable as i32.
        let v = unsafe { c.to_int_unchecked::<i32>() };
        let v = if q > 2_147_483_520.0 { i32::MAX } else { v };
        if e.is_nan() {
            i32::MIN
        } else {
            v
        }
    }
}

/// One chunk of the conversion inputs (all slices the same length).
pub(crate) struct ConvChunk<'a> {
    pub raw: &'a [u16],
    pub ped: [&'a [f32]; 3],
    pub gain: [&'a [f32]; 3],
}

/// Pixels per block: a block whose words are all in G0 (the common case) takes the
/// branch-free vector path that reads only the G0 maps.
const BLOCK: usize = 32;

#[inline(always)]
#[allow(clippy::needless_range_loop)] // `k` indexes five arrays
pub(crate) fn convert<S: Sink>(c: &ConvChunk<'_>, out: &mut [S], energy: f32, t: f32) -> ConvStats {
    let n = c.raw.len().min(out.len());
    let mut st = ConvStats::default();
    let mut i = 0;
    while i + BLOCK <= n {
        let r: &[u16; BLOCK] = c.raw[i..i + BLOCK].try_into().unwrap_or(&[0; BLOCK]);
        let any = r.iter().fold(0u16, |a, &w| a | w);
        if any & 0xc000 == 0 {
            let p = &c.ped[0][i..i + BLOCK];
            let g = &c.gain[0][i..i + BLOCK];
            let o = &mut out[i..i + BLOCK];
            let mut above = 0u32;
            for k in 0..BLOCK {
                let e = (f32::from(r[k]) - p[k]) / g[k];
                above += u32::from(e > t);
                o[k] = S::make(e, energy);
            }
            st.above += u64::from(above);
        } else {
            for k in i..i + BLOCK {
                out[k] = S::make(convert_one(c, k, t, &mut st), energy);
            }
        }
        i += BLOCK;
    }
    for k in i..n {
        out[k] = S::make(convert_one(c, k, t, &mut st), energy);
    }
    st
}

#[inline(always)]
fn convert_one(c: &ConvChunk<'_>, k: usize, t: f32, st: &mut ConvStats) -> f32 {
    let w = c.raw[k];
    if c.ped[0][k].is_nan() {
        // Masked (NaN pedestal): flagged whatever the word, counted nowhere.
        return f32::NAN;
    }
    let e = match w {
        0xc000 => {
            st.saturated += 1;
            f32::INFINITY
        }
        0xffff | 0x4000 => {
            st.errors += 1;
            f32::NAN
        }
        _ => {
            let s = match w >> 14 {
                0 => 0,
                1 => 1,
                3 => 2,
                _ => {
                    st.invalid_gain += 1;
                    return f32::NAN;
                }
            };
            (f32::from(w & 0x3fff) - c.ped[s][k]) / c.gain[s][k]
        }
    };
    st.above += u64::from(e > t);
    e
}

#[inline(always)]
pub(crate) fn track_pedestal(raw: &[u16], ped0: &mut [f32], counts: &mut [u16], window: u16) {
    // Branch-free (selects) so it vectorises; pixels outside G0 keep their values.
    for ((&w, p), c) in raw.iter().zip(ped0.iter_mut()).zip(counts.iter_mut()) {
        let g0 = w >> 14 == 0;
        let n = c.saturating_add(1).min(window);
        let updated = *p + (f32::from(w) - *p) / f32::from(n);
        *p = if g0 { updated } else { *p };
        *c = if g0 { n } else { *c };
    }
}

#[inline(always)]
pub(crate) fn count_above(data: &[f32], t: f32) -> u64 {
    // u32 partial sums per block vectorise; the block bounds overflow.
    data.chunks(1 << 20)
        .map(|b| u64::from(b.iter().fold(0u32, |a, &v| a + u32::from(v > t))))
        .sum()
}

/// Assembles the runs of one image row into `out` (that row).
#[inline(always)]
pub(crate) fn assemble_row(runs: &[Run], row_start: usize, raw: &[f32], out: &mut [f32]) {
    for r in runs {
        let d = r.dst as usize - row_start;
        let Some(o) = out.get_mut(d..d + r.len as usize) else {
            continue;
        };
        match raw.get(r.src as usize..r.src as usize + r.len as usize) {
            Some(s) if r.src != AssemblyMap::GAP => {
                let w = r.weight();
                for (o, &v) in o.iter_mut().zip(s) {
                    *o = v * w;
                }
            }
            _ => o.fill(f32::NAN),
        }
    }
}

/// Pixels above `t` in one row from column `x0` on, written as (column, value) into slots
/// `n..` of `col` and `val`; returns the next free slot, or `None` when the slots run out. A
/// vector compare builds a 16-bit mask per block of 16 pixels; only the set bits are visited,
/// so the cost follows the number of kept pixels.
#[inline(always)]
pub(crate) fn fill_row(
    row: &[f32],
    x0: usize,
    t: f32,
    col: &mut [MaybeUninit<u16>],
    val: &mut [MaybeUninit<f32>],
    mut n: usize,
) -> Option<usize> {
    const W: usize = 16;
    let row = row.get(x0..)?;
    let mut x = x0;
    let mut keep = |j: usize, v: f32, n: &mut usize| -> Option<()> {
        col.get_mut(*n)?.write(j as u16);
        val.get_mut(*n)?.write(v);
        *n += 1;
        Some(())
    };
    let mut blocks = row.chunks_exact(W);
    for block in &mut blocks {
        let mut m = block
            .iter()
            .enumerate()
            .fold(0u32, |m, (j, &v)| m | (u32::from(v > t) << j));
        while m != 0 {
            let j = m.trailing_zeros() as usize;
            keep(x + j, block[j], &mut n)?;
            m &= m - 1;
        }
        x += W;
    }
    for (j, &v) in blocks.remainder().iter().enumerate() {
        if v > t {
            keep(x + j, v, &mut n)?;
        }
    }
    Some(n)
}

/// Accumulator lanes per bin: pixel `p` adds into lane `p mod 4`, so neighbouring pixels in
/// one bin (the common case) do not wait on each other's store.
const LANES: usize = 4;

/// One compensated (Kahan) step.
#[inline(always)]
pub(crate) fn kahan(s: &mut f64, c: &mut f64, x: f64) {
    let y = x - *c;
    let t = *s + y;
    *c = (t - *s) - y;
    *s = t;
}

/// Per-bin accumulators of one fixed pixel range: `f64` lanes per bin (one cache line holds
/// two bins), and what invalid pixels would have contributed. Sums are plain: every product of
/// two `f32` is exact in `f64`, and a lane of one range adds a few thousand of them at most
/// (relative error below 1e-12); the ranges' lanes are then added with compensation. A Kahan
/// step per entry cost a quarter of the integration. One spare bin takes the padding of a
/// record whose second bin is past the last.
pub(crate) struct BinAcc {
    pub lanes: Vec<[f64; LANES]>,
    pub bad: Vec<(f64, f64)>,
}

impl BinAcc {
    pub fn new(bins: usize) -> Self {
        Self {
            lanes: vec![[0.0; LANES]; bins + 1],
            bad: vec![(0.0, 0.0); bins + 1],
        }
    }
}

/// Streams records `records` of the pixel-major matrix, whose first pixel is `first`, with the
/// image, adding Σ c·I into the accumulators.
#[inline(always)]
pub(crate) fn integrate_pixels(
    pm: &PixelMajor,
    records: std::ops::Range<usize>,
    first: usize,
    image: &[f32],
    acc: &mut BinAcc,
) {
    let image = image.get(first..).unwrap_or(&[]);
    let Some(bin) = pm.bin.get(records.clone()) else {
        return;
    };
    if pm.whole_pixels() {
        // A record is a pixel, its coefficient 1: c·I is I.
        let ncoef = pm.ncoef.get(records).unwrap_or(&[]);
        for (p, ((&e, &v), &nc)) in bin.iter().zip(image).zip(ncoef).enumerate() {
            let b = (e & !PixelMajor::LAST) as usize;
            if let Some(lanes) = acc.lanes.get_mut(b) {
                if v.is_finite() {
                    lanes[p % LANES] += f64::from(v);
                } else {
                    acc.bad[b].0 += f64::from(nc);
                    acc.bad[b].1 += 1.0;
                }
            }
        }
        return;
    }
    let coef = pm.coef.get(records.clone()).unwrap_or(&[]);
    let ncoef = pm
        .ncoef
        .get(2 * records.start..2 * records.end)
        .unwrap_or(&[]);
    let mut p = 0;
    for ((&e, c), nc) in bin.iter().zip(coef).zip(ncoef.chunks_exact(2)) {
        let b = (e & !PixelMajor::LAST) as usize;
        let v = image.get(p).copied().unwrap_or(f32::NAN);
        if let Some(two) = acc.lanes.get_mut(b..b + 2) {
            if v.is_finite() {
                let v = f64::from(v);
                two[0][p % LANES] += f64::from(c[0]) * v;
                two[1][p % LANES] += f64::from(c[1]) * v;
            } else {
                acc.bad[b].0 += f64::from(nc[0]);
                acc.bad[b].1 += f64::from(c[0]);
                acc.bad[b + 1].0 += f64::from(nc[1]);
                acc.bad[b + 1].1 += f64::from(c[1]);
            }
        }
        p += (e >> 31) as usize;
    }
}
