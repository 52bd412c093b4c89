//! Preview images: a converted frame (keV) as an 8-bit indexed PNG with a colour map, log or
//! linear scale, and the detector's gaps and masked pixels in a colour of their own.
//!
//! Indexed colour keeps a 4M image at one byte per pixel, so encoding stays a few tens of
//! milliseconds and never competes with the acquisition for long.
use std::borrow::Cow;

use crate::tap::Preview;

/// How to map energies to colours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Contrast {
    /// Logarithmic (`log10(1 + v)`) instead of linear.
    pub log: bool,
    /// Saturation in keV; `None`: the 99.9th percentile of the measured pixels.
    pub max: Option<f32>,
    /// Average `bin` × `bin` blocks (1 = full resolution).
    pub bin: usize,
}

impl Default for Contrast {
    fn default() -> Self {
        Contrast {
            log: true,
            max: None,
            bin: 1,
        }
    }
}

/// Palette index of gaps and masked pixels.
const GAP: u8 = 255;

/// 255 colours from dark to bright (an inferno-like ramp), then the gap colour.
fn palette() -> Vec<u8> {
    const STOPS: [(f32, [f32; 3]); 5] = [
        (0.0, [0.0, 0.0, 4.0]),
        (0.25, [87.0, 16.0, 110.0]),
        (0.5, [188.0, 55.0, 84.0]),
        (0.75, [249.0, 142.0, 9.0]),
        (1.0, [252.0, 255.0, 164.0]),
    ];
    let mut p = Vec::with_capacity(256 * 3);
    for i in 0..255 {
        let t = i as f32 / 254.0;
        let k = STOPS.iter().rposition(|s| s.0 <= t).unwrap_or(0).min(3);
        let (t0, c0) = STOPS[k];
        let (t1, c1) = STOPS[k + 1];
        let f = (t - t0) / (t1 - t0);
        for ch in 0..3 {
            p.push((c0[ch] + f * (c1[ch] - c0[ch])).round() as u8);
        }
    }
    p.extend_from_slice(&[96, 110, 128]);
    p
}

/// The saturation level: `c.max`, or a high percentile of a sample of measured pixels.
pub fn saturation(pixels: &[f32], c: &Contrast) -> f32 {
    if let Some(m) = c.max {
        return m.max(f32::MIN_POSITIVE);
    }
    let step = (pixels.len() / 200_000).max(1);
    let mut s: Vec<f32> = pixels
        .iter()
        .step_by(step)
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    if s.is_empty() {
        return 1.0;
    }
    let k = ((s.len() as f64 * 0.999) as usize).min(s.len() - 1);
    let (_, v, _) = s.select_nth_unstable_by(k, f32::total_cmp);
    v.max(1e-3)
}

const LUT_SIZE: usize = 1 << 16;

/// Palette level of each of `LUT_SIZE` steps over [0, max].
fn levels(max: f32, log: bool) -> Vec<u8> {
    let scale = if log { (1.0 + max).log10() } else { max };
    (0..LUT_SIZE)
        .map(|i| {
            let v = i as f32 * max / (LUT_SIZE - 1) as f32;
            let x = if log { (1.0 + v).log10() } else { v };
            ((x / scale).min(1.0) * 254.0) as u8
        })
        .collect()
}

/// The mean of each `bin` × `bin` block's measured pixels (NaN where a block has none), as a
/// `w` × `h` image: rows are summed into one accumulator row at a time, without a branch per
/// pixel, so that a 4M frame bins in a few milliseconds on the HTTP thread.
fn binned(p: &Preview, bin: usize, w: usize, h: usize) -> Cow<'_, [f32]> {
    if bin == 1 {
        return Cow::Borrowed(&p.pixels);
    }
    let mut out = Vec::with_capacity(w * h);
    let (mut sum, mut n) = (vec![0f32; p.width], vec![0u32; p.width]);
    for y in 0..h {
        sum.fill(0.0);
        n.fill(0);
        for line in p.pixels[y * bin * p.width..((y + 1) * bin).min(p.height) * p.width]
            .chunks_exact(p.width)
        {
            for ((s, c), &v) in sum.iter_mut().zip(n.iter_mut()).zip(line) {
                let ok = v.is_finite();
                *s += if ok { v } else { 0.0 };
                *c += ok as u32;
            }
        }
        out.extend(sum.chunks(bin).zip(n.chunks(bin)).map(|(s, c)| {
            let c: u32 = c.iter().sum();
            if c == 0 {
                f32::NAN
            } else {
                s.iter().sum::<f32>() / c as f32
            }
        }));
    }
    Cow::Owned(out)
}

/// Renders `p` as a PNG.
pub fn render_png(p: &Preview, c: &Contrast) -> Result<Vec<u8>, String> {
    let bin = c.bin.clamp(1, 16);
    let (w, h) = (p.width.div_ceil(bin), p.height.div_ceil(bin));
    if w == 0 || h == 0 || p.pixels.len() != p.width * p.height {
        return Err(format!(
            "preview of {}x{} with {} pixels",
            p.width,
            p.height,
            p.pixels.len()
        ));
    }
    let pixels = binned(p, bin, w, h);
    // The saturation of what is shown: binning averages the noise down.
    let max = saturation(&pixels, c);
    // Levels through a table over [0, max]: a log10 per pixel would cost more than the rest of
    // the rendering together.
    let lut = levels(max, c.log);
    let step = (LUT_SIZE - 1) as f32 / max;
    let idx: Vec<u8> = pixels
        .iter()
        .map(|&v| {
            if v.is_nan() {
                GAP
            } else {
                // `as usize` saturates: negatives go to 0, above max (and +inf) to the last
                // entry.
                lut[((v * step) as usize).min(LUT_SIZE - 1)]
            }
        })
        .collect();
    let mut out = Vec::with_capacity(w * h / 2);
    {
        let mut e = png::Encoder::new(&mut out, w as u32, h as u32);
        e.set_color(png::ColorType::Indexed);
        e.set_depth(png::BitDepth::Eight);
        e.set_palette(palette());
        e.set_compression(png::Compression::Fast);
        let mut wr = e.write_header().map_err(|e| e.to_string())?;
        wr.write_image_data(&idx).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preview(px: Vec<f32>, w: usize) -> Preview {
        Preview {
            frame: 1,
            receiver: 0,
            width: w,
            height: px.len() / w,
            pixels: px.as_slice().into(),
            assembled: true,
        }
    }

    #[test]
    fn a_png_decodes_to_the_levels_and_gaps_it_was_given() {
        let p = preview(vec![0.0, 10.0, f32::NAN, 1000.0, 5.0, 0.0], 3);
        let c = Contrast {
            log: false,
            max: Some(10.0),
            bin: 1,
        };
        let png = render_png(&p, &c).unwrap();
        let dec = png::Decoder::new(std::io::Cursor::new(png));
        let mut r = dec.read_info().unwrap();
        let mut buf = vec![0; r.output_buffer_size().unwrap()];
        let info = r.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (3, 2));
        // Levels come from a 65536-step table: half of saturation may land one level low.
        assert_eq!(
            [buf[0], buf[1], buf[2], buf[3], buf[5]],
            [0, 254, GAP, 254, 0]
        );
        assert!((126..=127).contains(&buf[4]), "{}", buf[4]);
    }

    #[test]
    fn binning_averages_measured_pixels_and_skips_gaps() {
        let p = preview(vec![2.0, f32::NAN, 4.0, f32::NAN], 2);
        let c = Contrast {
            log: false,
            max: Some(3.0),
            bin: 2,
        };
        let png = render_png(&p, &c).unwrap();
        let mut r = png::Decoder::new(std::io::Cursor::new(png))
            .read_info()
            .unwrap();
        let mut buf = vec![0; r.output_buffer_size().unwrap()];
        r.next_frame(&mut buf).unwrap();
        assert_eq!(buf[0], 254, "mean 3 keV is saturation");
    }

    #[test]
    fn automatic_saturation_ignores_gaps_and_zeros() {
        let mut px = vec![0.0; 1000];
        px.extend((1..=1000).map(|i| i as f32));
        px.push(f32::NAN);
        let s = saturation(&px, &Contrast::default());
        assert!((998.0..=1000.0).contains(&s), "{s}");
    }
}
