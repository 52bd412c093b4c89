//! The hot loops, written so LLVM vectorises them. Each works on one chunk of a frame; the CPU
//! engine runs chunks on its pool and compiles an AVX2 copy of each (see `cpu.rs`).
use super::ConvStats;
use crate::geometry::AssemblyMap;

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
    #[inline(always)]
    fn make(e: f32, energy: f32) -> i32 {
        if e.is_nan() {
            i32::MIN
        } else {
            // `as` saturates: +inf (saturated pixel) becomes i32::MAX.
            (e / energy).round_ties_even() as i32
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
const BLOCK: usize = 16;

#[inline(always)]
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
    for ((&w, p), c) in raw.iter().zip(ped0.iter_mut()).zip(counts.iter_mut()) {
        if w >> 14 == 0 {
            let n = c.saturating_add(1).min(window);
            *c = n;
            *p += (f32::from(w) - *p) / f32::from(n);
        }
    }
}

#[inline(always)]
pub(crate) fn count_above(data: &[f32], t: f32) -> u64 {
    // u32 partial sums per block vectorise; the block bounds overflow.
    data.chunks(1 << 20)
        .map(|b| u64::from(b.iter().fold(0u32, |a, &v| a + u32::from(v > t))))
        .sum()
}

#[inline(always)]
pub(crate) fn assemble(src: &[u32], raw: &[f32], out: &mut [f32]) {
    for (o, &e) in out.iter_mut().zip(src) {
        *o = AssemblyMap::gather(e, raw);
    }
}

/// Sums of one CSR row (bin): Kahan-compensated signal and normalisation, plain count.
#[inline(always)]
pub(crate) fn integrate_bin(
    indices: &[u32],
    coef: &[f32],
    ncoef: &[f32],
    image: &[f32],
) -> (f64, f64, f64) {
    let (mut sig, mut sig_c) = (0.0f64, 0.0f64);
    let (mut nrm, mut nrm_c) = (0.0f64, 0.0f64);
    let mut cnt = 0.0f64;
    for ((&j, &c), &nc) in indices.iter().zip(coef).zip(ncoef) {
        let v = image.get(j as usize).copied().unwrap_or(f32::NAN);
        if v.is_finite() {
            let y = f64::from(c) * f64::from(v) - sig_c;
            let t = sig + y;
            sig_c = (t - sig) - y;
            sig = t;
            let y = f64::from(nc) - nrm_c;
            let t = nrm + y;
            nrm_c = (t - nrm) - y;
            nrm = t;
            cnt += f64::from(c);
        }
    }
    (sig, nrm, cnt)
}

/// Pixels above `t` in one row, appended as (column, value).
#[inline(always)]
pub(crate) fn compress_row(row: &[f32], t: f32, cols: &mut Vec<u16>, vals: &mut Vec<f32>) {
    for (x, &v) in row.iter().enumerate() {
        if v > t {
            cols.push(x as u16);
            vals.push(v);
        }
    }
}
