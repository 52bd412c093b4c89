//! How close a resize is to an ideal one: the slow reference resize and the luma SSIM that the
//! engine's quality tests and `remora bench resize` compare against.
//!
//! Reference: Lanczos3 of the full-size decode in f64 (ImageMagick's support scaling: 3·scale
//! taps each side when shrinking, pixel centres at `(i + 0.5)·scale − 0.5`, normalised weights),
//! separable, rounded to 8 bits. SSIM on luma (BT.601) over 8×8 windows at a stride of 4 with the
//! usual constants (K1 = 0.01, K2 = 0.03, L = 255), averaged.
//!
//! ```
//! use remora_resize::fidelity::{luma, reference, ssim};
//! let flat = vec![100u8; 40 * 30 * 3];
//! let small = reference(&flat, 40, 30, 10, 7);
//! assert!(small.iter().all(|&v| v == 100));
//! let y = luma(&small);
//! assert!((ssim(&y, &y, 10, 7) - 1.0).abs() < 1e-12);
//! ```

/// One axis of a separable Lanczos3 resample in f64: `count` lines of `len` items (item `i` of
/// line `l` at `l·stride_line + i·stride_item`, `n` channels) to `out_len` items each.
fn lanczos_axis(
    src: &[f64],
    (len, count): (usize, usize),
    (stride_item, stride_line): (usize, usize),
    out_len: usize,
    n: usize,
) -> Vec<f64> {
    let scale = len as f64 / out_len as f64;
    let fscale = scale.max(1.0);
    let support = 3.0 * fscale;
    let lanczos = |x: f64| {
        if x.abs() >= 3.0 {
            0.0
        } else if x == 0.0 {
            1.0
        } else {
            let a = std::f64::consts::PI * x;
            3.0 * a.sin() * (a / 3.0).sin() / (a * a)
        }
    };
    let mut out = vec![0.0; count * out_len * n];
    for o in 0..out_len {
        let centre = (o as f64 + 0.5) * scale - 0.5;
        let lo = (centre - support).ceil().max(0.0) as usize;
        let hi = ((centre + support).floor().max(0.0) as usize).min(len - 1);
        let weights: Vec<f64> = (lo..=hi)
            .map(|i| lanczos((i as f64 - centre) / fscale))
            .collect();
        let total: f64 = weights.iter().sum();
        for l in 0..count {
            for c in 0..n {
                let acc: f64 = (lo..=hi)
                    .zip(&weights)
                    .map(|(i, w)| w * src[l * stride_line + i * stride_item + c])
                    .sum();
                out[(l * out_len + o) * n + c] = acc / total;
            }
        }
    }
    out
}

/// The reference resize of packed RGB `px` (`w`×`h`) to `tw`×`th`.
pub fn reference(px: &[u8], w: usize, h: usize, tw: usize, th: usize) -> Vec<u8> {
    let src: Vec<f64> = px.iter().map(|&v| f64::from(v)).collect();
    let horiz = lanczos_axis(&src, (w, h), (3, w * 3), tw, 3);
    // Columns of the horizontal result, stored column-major: tw lines of th.
    let vert = lanczos_axis(&horiz, (h, tw), (tw * 3, 3), th, 3);
    let mut out = vec![0u8; tw * th * 3];
    for x in 0..tw {
        for y in 0..th {
            for c in 0..3 {
                out[(y * tw + x) * 3 + c] =
                    vert[(x * th + y) * 3 + c].round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    out
}

/// BT.601 luma of packed RGB.
pub fn luma(px: &[u8]) -> Vec<f64> {
    px.chunks_exact(3)
        .map(|p| 0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2]))
        .collect()
}

/// Mean SSIM of two luma planes of `w`×`h` over 8×8 windows at a stride of 4 (1 for images
/// under 8 pixels on a side, which have no window).
pub fn ssim(a: &[f64], b: &[f64], w: usize, h: usize) -> f64 {
    let (c1, c2) = ((0.01f64 * 255.0).powi(2), (0.03f64 * 255.0).powi(2));
    let (mut total, mut count) = (0.0, 0usize);
    for y in (0..h.saturating_sub(7)).step_by(4) {
        for x in (0..w.saturating_sub(7)).step_by(4) {
            let (mut sa, mut sb, mut saa, mut sbb, mut sab) = (0.0, 0.0, 0.0, 0.0, 0.0);
            for j in y..y + 8 {
                for i in x..x + 8 {
                    let (p, q) = (a[j * w + i], b[j * w + i]);
                    sa += p;
                    sb += q;
                    saa += p * p;
                    sbb += q * q;
                    sab += p * q;
                }
            }
            let (ma, mb) = (sa / 64.0, sb / 64.0);
            let va = saa / 64.0 - ma * ma;
            let vb = sbb / 64.0 - mb * mb;
            let cov = sab / 64.0 - ma * mb;
            total += ((2.0 * ma * mb + c1) * (2.0 * cov + c2))
                / ((ma * ma + mb * mb + c1) * (va + vb + c2));
            count += 1;
        }
    }
    if count == 0 {
        1.0
    } else {
        total / count as f64
    }
}
