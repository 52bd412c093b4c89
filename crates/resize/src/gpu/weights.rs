//! The filter weights of one axis, computed on the host exactly as fast_image_resize 6.1 does
//! for the CPU engine (`convolution/mod.rs` `precompute_coefficients`, `optimisations.rs`
//! `Normalizer16`, `resizer.rs` `resample_nearest`), so that the device's integer arithmetic
//! gives the CPU's pixels: the same support scaled by the shrink factor, the same zero weights
//! trimmed from both ends of each window, the same normalisation in f64 and the same i16
//! fixed-point weights with one precision per axis.

use crate::options::Filter;
use crate::resampler::{lanczos_sharp, LANCZOS_SHARP_BLUR};
use std::f64::consts::PI;

/// One axis of the resample: for output index `i`, `bounds[i] = [first source index, taps]` and
/// `weights[i·window ..][..taps]` in fixed point with `precision` fractional bits.
#[derive(Debug, Clone)]
pub(super) struct Axis {
    pub bounds: Vec<[u32; 2]>,
    pub window: usize,
    pub weights: Vec<i32>,
    pub precision: u32,
}

impl Axis {
    /// The widest window actually used (source lines one output line needs).
    pub fn max_taps(&self) -> u32 {
        self.bounds.iter().map(|b| b[1]).max().unwrap_or(0)
    }
}

/// Which axis: nearest-neighbour sampling walks rows differently from columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dir {
    Horizontal,
    Vertical,
}

/// The weights for resampling `in_size` samples to `out_size` with `filter`.
pub(super) fn axis(in_size: u32, out_size: u32, filter: Filter, dir: Dir) -> Axis {
    let (f, support): (fn(f64) -> f64, f64) = match filter {
        Filter::Point => return nearest(in_size, out_size, dir),
        Filter::Box => (box_filter, 0.5),
        Filter::Triangle => (bilinear_filter, 1.0),
        Filter::CatmullRom => (catmull_rom_filter, 2.0),
        Filter::Mitchell => (mitchell_filter, 2.0),
        Filter::Gaussian => (gaussian_filter, 3.0),
        Filter::Lanczos3 => (lanczos_filter, 3.0),
        Filter::LanczosSharp => (lanczos_sharp, 3.0 * LANCZOS_SHARP_BLUR),
    };
    convolution(in_size, out_size, f, support)
}

/// Nearest neighbour as one tap of weight 1.0: columns at `⌊(x + 0.5)·scale⌋`, rows by adding
/// the scale row after row (fast_image_resize's `iter_rows_with_step`, whose f64 sum can round
/// differently from the product).
fn nearest(in_size: u32, out_size: u32, dir: Dir) -> Axis {
    let scale = f64::from(in_size) / f64::from(out_size);
    let last = in_size.saturating_sub(1);
    let bounds = match dir {
        Dir::Horizontal => {
            let start = scale * 0.5;
            (0..out_size)
                .map(|x| [((start + scale * f64::from(x)) as u32).min(last), 1])
                .collect()
        }
        Dir::Vertical => {
            let mut y = scale * 0.5;
            (0..out_size)
                .map(|_| {
                    let row = (y as u32).min(last);
                    y += scale;
                    [row, 1]
                })
                .collect()
        }
    };
    const PRECISION: u32 = 8;
    Axis {
        bounds,
        window: 1,
        weights: vec![1 << PRECISION; out_size as usize],
        precision: PRECISION,
    }
}

/// `precompute_coefficients` (no crop, adaptive kernel size) then `Normalizer16`.
fn convolution(in_size: u32, out_size: u32, filter: fn(f64) -> f64, support: f64) -> Axis {
    let scale = f64::from(in_size) / f64::from(out_size);
    let filter_scale = scale.max(1.0);
    let radius = support * filter_scale;
    let window = radius.ceil() as usize * 2 + 1;
    let recip_filter_scale = 1.0 / filter_scale;
    let mut values: Vec<f64> = Vec::with_capacity(window * out_size as usize);
    let mut bounds = Vec::with_capacity(out_size as usize);
    for out_x in 0..out_size {
        let in_center = (f64::from(out_x) + 0.5) * scale;
        let x_min = (in_center - radius).floor().max(0.0) as u32;
        let x_max = (in_center + radius).ceil().min(f64::from(in_size)) as u32;
        let cur = values.len();
        let mut sum = 0.0;
        let center = in_center - 0.5;
        let (mut start, mut end) = (x_min, x_max);
        for x in x_min..x_max {
            let w = filter((f64::from(x) - center) * recip_filter_scale);
            if x == start && w == 0.0 {
                start += 1;
            } else {
                values.push(w);
                sum += w;
            }
        }
        for &c in values.iter().rev() {
            if end <= start || c != 0.0 {
                break;
            }
            end -= 1;
        }
        if sum != 0.0 {
            values[cur..].iter_mut().for_each(|w| *w /= sum);
        }
        values.resize(cur + window, 0.0);
        bounds.push([start, end - start]);
    }
    // Normalizer16: the most fractional bits (at most 21) that keep the largest weight below
    // 2^15, each weight rounded half away from zero.
    let max_weight = values.iter().copied().reduce(f64::max).unwrap_or(0.0);
    let mut precision = 0u32;
    for p in 0..22u32 {
        precision = p;
        if (max_weight * f64::from(1u32 << (p + 1))).round() as i32 >= 1 << 15 {
            break;
        }
    }
    let fixed = f64::from(1u32 << precision);
    let mut weights = vec![0i32; values.len()];
    for (i, b) in bounds.iter().enumerate() {
        let at = i * window;
        for k in at..at + b[1] as usize {
            weights[k] = i32::from((values[k] * fixed).round() as i16);
        }
    }
    Axis {
        bounds,
        window,
        weights,
        precision,
    }
}

fn box_filter(x: f64) -> f64 {
    if x > -0.5 && x <= 0.5 {
        1.0
    } else {
        0.0
    }
}

fn bilinear_filter(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 {
        1.0 - x
    } else {
        0.0
    }
}

fn catmull_rom_filter(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.) * x - (A + 3.)) * x * x + 1.
    } else if x < 2.0 {
        (((x - 5.) * x + 8.) * x - 4.) * A
    } else {
        0.0
    }
}

fn mitchell_filter(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 {
        (7. * x / 6. - 2.) * x * x + 16. / 18.
    } else if x < 2.0 {
        ((2. - 7. * x / 18.) * x - 10. / 3.) * x + 16. / 9.
    } else {
        0.0
    }
}

fn gaussian_filter(x: f64) -> f64 {
    const R: f64 = 0.5;
    if (-3.0..3.0).contains(&x) {
        ((2.0 * PI).sqrt() * R).recip() * (-x.powi(2) / (2.0 * R.powi(2))).exp()
    } else {
        0.0
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let a = x * PI;
        a.sin() / a
    }
}

fn lanczos_filter(x: f64) -> f64 {
    if (-3.0..3.0).contains(&x) {
        sinc(x) * sinc(x / 3.)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_of_each_output_sum_to_one_in_fixed_point() {
        for f in Filter::ALL.into_iter().filter(|&f| f != Filter::Point) {
            for (n, m) in [(97, 13), (13, 97), (5, 4), (1, 7), (7, 1), (1000, 3)] {
                let a = axis(n, m, f, Dir::Horizontal);
                assert_eq!(a.bounds.len(), m as usize);
                let one = 1i64 << a.precision;
                for (i, b) in a.bounds.iter().enumerate() {
                    assert!(b[0] + b[1] <= n, "{f} {n}->{m} #{i}: {b:?}");
                    let s: i64 = a.weights[i * a.window..][..b[1] as usize]
                        .iter()
                        .map(|&w| i64::from(w))
                        .sum();
                    // Each weight rounds by at most half a unit.
                    assert!(
                        (s - one).abs() <= i64::from(b[1]),
                        "{f} {n}->{m} #{i}: {s} vs {one}"
                    );
                }
            }
        }
    }

    #[test]
    fn nearest_picks_the_source_pixel_under_each_centre() {
        let a = axis(10, 4, Filter::Point, Dir::Horizontal);
        assert_eq!(a.bounds, [[1, 1], [3, 1], [6, 1], [8, 1]]);
        let a = axis(2, 5, Filter::Point, Dir::Vertical);
        assert_eq!(a.bounds, [[0, 1], [0, 1], [1, 1], [1, 1], [1, 1]]);
    }
}
