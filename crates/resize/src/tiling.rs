//! The CPU engine's resample, in tiles when one call would need large tables.
//!
//! fast_image_resize precomputes, for each axis that changes, a table of filter weights per
//! output pixel: `2·⌈support · max(1, in/out)⌉ + 1` weights of 8 bytes (and again of 2 once
//! normalised) for each of the `out` pixels. For a square image those tables are small, but
//! they grow with the longest side, not the area: forcing a 200×150 image to 50,000,000×1
//! needs 50 M columns × 5 weights (≈ 5 GB), and fitting a 1×50,000,000 PNG into 100×100
//! needs 100 rows × 3 M weights (≈ 3 GB), against 150 MB of pixels. It also keeps an
//! intermediate image of (source columns read) × (output rows) after its vertical pass.
//!
//! Two steps keep both bounded by a few MiB:
//! - an axis shrunk more than [`BOX_ABOVE`]× is first averaged over whole blocks of source
//!   pixels (a box filter, alpha-weighted) down to [`BOX_MARGIN`]× its output, as libvips'
//!   `shrink` before its `reduce`: the filter that follows still spans 32 or more averaged
//!   pixels, so the result is the filter's to within rounding, at a fraction of the CPU (the
//!   untiled tables of a 500,000× shrink hold 3 M weights per output pixel);
//! - [`plan`] splits the output into tiles whose tables and intermediate image stay under
//!   [`TILE_BYTES`], and [`resize`] resamples each tile from the part of the source its filter
//!   window reads, with fast_image_resize's fractional source crop placing the tile exactly
//!   where it lies in the whole image: the weights are those of the untiled call but for
//!   floating-point rounding of the tile's offset (at most two grey levels apart for the
//!   continuous filters, tested below; Box and Point, whose kernels jump, can take a
//!   neighbouring pixel at a tile's edge).
//!
//! A resample that needs neither — every ordinary photograph — is the single untiled call,
//! unchanged.

use crate::budget::Stop;
use crate::error::{Error, Result};
use crate::options::Filter;
use crate::resampler::{lanczos_sharp, LANCZOS_SHARP_BLUR};
use fast_image_resize as fir;

/// Most bytes of tables and intermediate image one tile may hold.
pub(crate) const TILE_BYTES: u64 = 16 << 20;

/// An axis shrunk by more than this is box-averaged first.
const BOX_ABOVE: f64 = 256.0;

/// What the box average leaves for the filter: at least this many averaged pixels per output.
const BOX_MARGIN: f64 = 32.0;

/// The filter's support (radius in source pixels at scale 1), as fast_image_resize's.
fn support(filter: Filter) -> f64 {
    match filter {
        Filter::Point => 0.0,
        Filter::Box => 0.5,
        Filter::Triangle => 1.0,
        Filter::CatmullRom | Filter::Mitchell => 2.0,
        Filter::Gaussian | Filter::Lanczos3 => 3.0,
        Filter::LanczosSharp => 3.0 * LANCZOS_SHARP_BLUR,
    }
}

/// One axis of a resample: the source pixels there are (`src`), how far of them the output
/// covers (`extent`: `src`, or less after a box average that left a partial last block), the
/// output size, the scale, the filter radius and table bytes per output pixel.
#[derive(Debug, Clone, Copy)]
struct Axis {
    src: u32,
    extent: f64,
    dst: u32,
    scale: f64,
    radius: f64,
    per_out: u64,
}

impl Axis {
    fn new(src: u32, dst: u32, filter: Filter) -> Axis {
        Axis::covering(src, f64::from(src), dst, filter)
    }

    fn covering(src: u32, extent: f64, dst: u32, filter: Filter) -> Axis {
        let scale = extent / f64::from(dst);
        let (radius, per_out) = if extent == f64::from(dst) {
            (0.0, 0)
        } else if filter == Filter::Point {
            // A source index per output column.
            (1.0, 8)
        } else {
            let r = support(filter) * scale.max(1.0);
            // f64 and i16 weights per tap, a bound and two chunk descriptors per output.
            let window = 2 * r.ceil() as u64 + 1;
            (r, window * 10 + 64)
        };
        Axis {
            src,
            extent,
            dst,
            scale,
            radius,
            per_out,
        }
    }

    fn changes(&self) -> bool {
        self.extent != f64::from(self.dst)
    }

    /// Source pixels read for `n` consecutive outputs.
    fn span(&self, n: u32) -> u64 {
        if !self.changes() {
            return u64::from(n);
        }
        let s = (f64::from(n) * self.scale + 2.0 * self.radius).ceil() as u64 + 3;
        s.min(u64::from(self.src))
    }

    /// Where outputs `a..b` lie in the source, as fast_image_resize places them.
    fn input(&self, a: u32, b: u32) -> (f64, f64) {
        if !self.changes() {
            return (f64::from(a), f64::from(b));
        }
        let hi = if b == self.dst {
            self.extent
        } else {
            f64::from(b) * self.scale
        };
        (f64::from(a) * self.scale, hi)
    }

    /// The source pixels `lo..hi` the filter window reads for the input range `(i0, i1)`.
    fn window(&self, (i0, i1): (f64, f64)) -> (u32, u32) {
        if !self.changes() {
            return (i0 as u32, i1 as u32);
        }
        let lo = ((i0 - self.radius).floor() - 1.0).max(0.0) as u32;
        let hi = ((i1 + self.radius).ceil() + 1.0).min(f64::from(self.src)) as u32;
        (lo, hi)
    }
}

/// The box-average factors of each axis (1: none), `None` when no axis needs one.
fn box_factors(size: (u32, u32), to: (u32, u32), filter: Filter) -> Option<(u32, u32)> {
    if filter == Filter::Point {
        return None;
    }
    let k = |src: u32, dst: u32| {
        let scale = f64::from(src) / f64::from(dst.max(1));
        if scale > BOX_ABOVE {
            (scale / BOX_MARGIN).floor() as u32
        } else {
            1
        }
    };
    let f = (k(size.0, to.0), k(size.1, to.1));
    (f != (1, 1)).then_some(f)
}

/// The size after a box average by `k`.
fn boxed_size(size: (u32, u32), k: (u32, u32)) -> (u32, u32) {
    (size.0.div_ceil(k.0), size.1.div_ceil(k.1))
}

/// Averages `k.0`×`k.1` blocks of `src` (a partial last block over what it has); with alpha,
/// colours are weighted by it. Checks `stop` on every output row.
fn box_average(
    src: &[u8],
    size: (u32, u32),
    channels: u8,
    k: (u32, u32),
    stop: &Stop<'_>,
) -> Result<Vec<u8>> {
    let (w, c) = (size.0 as usize, usize::from(channels));
    let (ow, oh) = boxed_size(size, k);
    let (ow, kx, ky) = (ow as usize, k.0 as usize, k.1 as usize);
    let alpha = channels == 2 || channels == 4;
    let mut out = vec![0u8; ow * oh as usize * c];
    // Per output pixel: the sum of each channel (colours times alpha with alpha) and the count.
    let mut sums = vec![0u64; ow * c];
    let mut counts = vec![0u64; ow];
    for (oy, out_row) in out.chunks_exact_mut(ow * c).enumerate() {
        stop.check("resample")?;
        sums.fill(0);
        counts.fill(0);
        let y1 = ((oy + 1) * ky).min(size.1 as usize);
        for row in src[oy * ky * w * c..y1 * w * c].chunks_exact(w * c) {
            for (x, px) in row.chunks_exact(c).enumerate() {
                let o = x / kx;
                let s = &mut sums[o * c..o * c + c];
                counts[o] += 1;
                if alpha {
                    let a = u64::from(px[c - 1]);
                    for i in 0..c - 1 {
                        s[i] += u64::from(px[i]) * a;
                    }
                    s[c - 1] += a;
                } else {
                    for i in 0..c {
                        s[i] += u64::from(px[i]);
                    }
                }
            }
        }
        for (o, px) in out_row.chunks_exact_mut(c).enumerate() {
            let (s, n) = (&sums[o * c..o * c + c], counts[o].max(1));
            if alpha {
                let a = s[c - 1];
                for i in 0..c - 1 {
                    // All transparent: no colour.
                    px[i] = (s[i] + a / 2).checked_div(a).unwrap_or(0) as u8;
                }
                px[c - 1] = ((a + n / 2) / n) as u8;
            } else {
                for i in 0..c {
                    px[i] = ((s[i] + n / 2) / n) as u8;
                }
            }
        }
    }
    Ok(out)
}

/// The bytes one `tw`×`th` tile holds besides the source and destination images.
fn cost(x: &Axis, y: &Axis, (tw, th): (u32, u32), channels: u8, filter: Filter) -> u64 {
    let c = u64::from(channels);
    let tables = x.per_out * u64::from(tw) + y.per_out * u64::from(th);
    let convolution = filter != Filter::Point;
    let intermediate = if convolution && x.changes() && y.changes() {
        x.span(tw) * u64::from(th) * c
    } else {
        0
    };
    // Alpha is premultiplied into a copy of the source part read.
    let premultiplied = if convolution && (channels == 2 || channels == 4) {
        x.span(tw) * y.span(th) * c
    } else {
        0
    };
    tables + intermediate + premultiplied
}

/// The tile size for resampling `x.src`×`y.src` to `x.dst`×`y.dst` and the bytes one tile
/// holds besides the source and destination: the whole output when that holds no more than
/// [`TILE_BYTES`] or the two images themselves (fast_image_resize's intermediate image of a
/// large photograph is as large as the photograph: no amplification), else tiles halved along
/// the costlier axis until they hold at most [`TILE_BYTES`] (or are single pixels).
fn plan_axes(x: &Axis, y: &Axis, channels: u8, filter: Filter) -> ((u32, u32), u64) {
    let c = u64::from(channels);
    let images = u64::from(x.src) * u64::from(y.src) * c + u64::from(x.dst) * u64::from(y.dst) * c;
    let mut t = (x.dst.max(1), y.dst.max(1));
    let whole = cost(x, y, t, channels, filter);
    if whole <= TILE_BYTES.max(images) {
        return (t, whole);
    }
    loop {
        let bytes = cost(x, y, t, channels, filter);
        if bytes <= TILE_BYTES || t == (1, 1) {
            return (t, bytes);
        }
        let (cx, cy) = (x.per_out * u64::from(t.0), y.per_out * u64::from(t.1));
        if (cx >= cy && t.0 > 1) || t.1 == 1 {
            t.0 = t.0.div_ceil(2);
        } else {
            t.1 = t.1.div_ceil(2);
        }
    }
}

/// The axes of a resample of `size` to `to`, after the box average `k` (if any).
fn axes(size: (u32, u32), to: (u32, u32), filter: Filter, k: Option<(u32, u32)>) -> (Axis, Axis) {
    match k {
        None => (
            Axis::new(size.0, to.0, filter),
            Axis::new(size.1, to.1, filter),
        ),
        Some(k) => {
            let b = boxed_size(size, k);
            (
                Axis::covering(b.0, f64::from(size.0) / f64::from(k.0), to.0, filter),
                Axis::covering(b.1, f64::from(size.1) / f64::from(k.1), to.1, filter),
            )
        }
    }
}

/// The tile size of the filter step for resampling `size` to `to`, and the bytes the whole
/// resample holds at once besides the source and destination (the box-averaged image and its
/// sums, or one tile's tables and intermediate image, whichever is more).
pub(crate) fn plan(
    size: (u32, u32),
    to: (u32, u32),
    channels: u8,
    filter: Filter,
) -> ((u32, u32), u64) {
    let k = box_factors(size, to, filter);
    let (x, y) = axes(size, to, filter, k);
    let (tile, bytes) = plan_axes(&x, &y, channels, filter);
    let boxed = k.map_or(0, |k| {
        let b = boxed_size(size, k);
        let image = u64::from(b.0) * u64::from(b.1) * u64::from(channels);
        image + u64::from(b.0) * (u64::from(channels) + 1) * 8
    });
    (tile, boxed + bytes)
}

/// The bytes of the tables of an untiled resample (what an engine that does not tile needs).
pub(crate) fn untiled_bytes(size: (u32, u32), to: (u32, u32), channels: u8, filter: Filter) -> u64 {
    let (x, y) = (
        Axis::new(size.0, to.0, filter),
        Axis::new(size.1, to.1, filter),
    );
    cost(&x, &y, to, channels, filter)
}

/// fast_image_resize's algorithm for one of ImageMagick's filters.
fn algorithm(filter: Filter) -> Result<fir::ResizeAlg> {
    use fir::{FilterType as F, ResizeAlg as A};
    Ok(match filter {
        Filter::Point => A::Nearest,
        Filter::Box => A::Convolution(F::Box),
        Filter::Triangle => A::Convolution(F::Bilinear),
        Filter::CatmullRom => A::Convolution(F::CatmullRom),
        Filter::Mitchell => A::Convolution(F::Mitchell),
        Filter::Gaussian => A::Convolution(F::Gaussian),
        Filter::Lanczos3 => A::Convolution(F::Lanczos3),
        Filter::LanczosSharp => {
            let f = fir::Filter::new("lanczossharp", lanczos_sharp, 3.0 * LANCZOS_SHARP_BLUR)
                .map_err(|e| Error::Resample(e.to_string()))?;
            A::Convolution(F::Custom(f))
        }
    })
}

fn pixel_type(channels: u8) -> fir::PixelType {
    match channels {
        1 => fir::PixelType::U8,
        2 => fir::PixelType::U8x2,
        3 => fir::PixelType::U8x3,
        _ => fir::PixelType::U8x4,
    }
}

fn fir_error(e: impl std::fmt::Display) -> Error {
    Error::Resample(e.to_string())
}

/// Resamples `src` (`size`, `channels` bytes a pixel, rows packed) to `to` with `filter` on
/// the CPU: box-averaged first along an axis shrunk more than [`BOX_ABOVE`]×, in tiles when
/// [`plan`] splits it, checking `stop` before each tile.
pub(crate) fn resize(
    src: &[u8],
    size: (u32, u32),
    channels: u8,
    to: (u32, u32),
    filter: Filter,
    stop: &Stop<'_>,
) -> Result<Vec<u8>> {
    stop.check("resample")?;
    let k = box_factors(size, to, filter);
    let (x, y) = axes(size, to, filter, k);
    match k {
        None => filter_step(src, &x, &y, channels, filter, stop),
        Some(k) => {
            let boxed = box_average(src, size, channels, k, stop)?;
            filter_step(&boxed, &x, &y, channels, filter, stop)
        }
    }
}

/// The filter resample of the `x.src`×`y.src` image `src` to `x.dst`×`y.dst`, over the
/// extents of the axes, in tiles when they are large.
fn filter_step(
    src: &[u8],
    x: &Axis,
    y: &Axis,
    channels: u8,
    filter: Filter,
    stop: &Stop<'_>,
) -> Result<Vec<u8>> {
    let pt = pixel_type(channels);
    let src_image = fir::images::ImageRef::new(x.src, y.src, src, pt).map_err(fir_error)?;
    let alg = algorithm(filter)?;
    let to = (x.dst, y.dst);
    let (tile, _) = plan_axes(x, y, channels, filter);
    let mut dst = fir::images::Image::new(to.0, to.1, pt);
    let mut resizer = fir::Resizer::new();
    let whole = x.extent == f64::from(x.src) && y.extent == f64::from(y.src);
    if tile == to && whole {
        // The ordinary case: one call, as fast_image_resize is meant to be used.
        let options = fir::ResizeOptions::new().resize_alg(alg);
        resizer
            .resize(&src_image, &mut dst, &options)
            .map_err(fir_error)?;
        return Ok(dst.into_vec());
    }
    for ty in (0..to.1).step_by(tile.1 as usize) {
        let by = ty.saturating_add(tile.1).min(to.1);
        let iy = y.input(ty, by);
        let (y0, y1) = y.window(iy);
        for tx in (0..to.0).step_by(tile.0 as usize) {
            stop.check("resample")?;
            let bx = tx.saturating_add(tile.0).min(to.0);
            let ix = x.input(tx, bx);
            let (x0, x1) = x.window(ix);
            let part = fir::images::CroppedImage::new(&src_image, x0, y0, x1 - x0, y1 - y0)
                .map_err(fir_error)?;
            let mut out = fir::images::CroppedImageMut::new(&mut dst, tx, ty, bx - tx, by - ty)
                .map_err(fir_error)?;
            let options = fir::ResizeOptions::new().resize_alg(alg).crop(
                ix.0 - f64::from(x0),
                iy.0 - f64::from(y0),
                ix.1 - ix.0,
                iy.1 - iy.0,
            );
            resizer
                .resize(&part, &mut out, &options)
                .map_err(fir_error)?;
        }
    }
    Ok(dst.into_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(w: u32, h: u32, c: u8, seed: u32) -> Vec<u8> {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        (0..w * h * u32::from(c))
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                // Smooth with some noise, as photographs.
                let p = i / u32::from(c);
                ((p % w) * 3 + (p / w) * 5 + (s & 31)) as u8
            })
            .collect()
    }

    /// The untiled call, forced.
    fn whole(src: &[u8], size: (u32, u32), c: u8, to: (u32, u32), f: Filter) -> Vec<u8> {
        let pt = [
            fir::PixelType::U8,
            fir::PixelType::U8x2,
            fir::PixelType::U8x3,
            fir::PixelType::U8x4,
        ][usize::from(c) - 1];
        let s = fir::images::ImageRef::new(size.0, size.1, src, pt).unwrap();
        let mut d = fir::images::Image::new(to.0, to.1, pt);
        let o = fir::ResizeOptions::new().resize_alg(algorithm(f).unwrap());
        fir::Resizer::new().resize(&s, &mut d, &o).unwrap();
        d.into_vec()
    }

    /// Resizes in tiles of `tile` (not the planned ones).
    fn tiled(
        src: &[u8],
        size: (u32, u32),
        c: u8,
        to: (u32, u32),
        f: Filter,
        tile: (u32, u32),
    ) -> Vec<u8> {
        let pt = [
            fir::PixelType::U8,
            fir::PixelType::U8x2,
            fir::PixelType::U8x3,
            fir::PixelType::U8x4,
        ][usize::from(c) - 1];
        let s = fir::images::ImageRef::new(size.0, size.1, src, pt).unwrap();
        let mut d = fir::images::Image::new(to.0, to.1, pt);
        let (x, y) = (Axis::new(size.0, to.0, f), Axis::new(size.1, to.1, f));
        let mut r = fir::Resizer::new();
        for ty in (0..to.1).step_by(tile.1 as usize) {
            let by = (ty + tile.1).min(to.1);
            let iy = y.input(ty, by);
            let (y0, y1) = y.window(iy);
            for tx in (0..to.0).step_by(tile.0 as usize) {
                let bx = (tx + tile.0).min(to.0);
                let ix = x.input(tx, bx);
                let (x0, x1) = x.window(ix);
                let p = fir::images::CroppedImage::new(&s, x0, y0, x1 - x0, y1 - y0).unwrap();
                let mut o =
                    fir::images::CroppedImageMut::new(&mut d, tx, ty, bx - tx, by - ty).unwrap();
                let opt = fir::ResizeOptions::new()
                    .resize_alg(algorithm(f).unwrap())
                    .crop(
                        ix.0 - f64::from(x0),
                        iy.0 - f64::from(y0),
                        ix.1 - ix.0,
                        iy.1 - iy.0,
                    );
                r.resize(&p, &mut o, &opt).unwrap();
            }
        }
        d.into_vec()
    }

    /// Colours times alpha (what the resampler works on): a colour under a near-zero alpha is
    /// unstable by nature.
    fn premultiplied(px: &[u8], c: u8) -> Vec<u16> {
        let c = usize::from(c);
        px.chunks_exact(c)
            .flat_map(|p| {
                let a = if c == 2 || c == 4 {
                    u16::from(p[c - 1])
                } else {
                    255
                };
                p.iter().enumerate().map(move |(i, &v)| {
                    if i == c - 1 && a != 255 {
                        v.into()
                    } else {
                        (u16::from(v) * a + 127) / 255
                    }
                })
            })
            .collect()
    }

    /// Box's kernel jumps from 1 to 0 at ±½ and Point picks one pixel: a tile's offset,
    /// rounded differently, can move a source pixel across such an edge (a whole pixel's
    /// weight); the continuous kernels move by a rounding of their fixed-point weights only
    /// (one level, two after both passes).
    #[test]
    fn tiles_give_the_untiled_pixels_within_two_levels() {
        let cases = [
            ((97, 61), (40, 23)),
            ((97, 61), (150, 90)),
            ((50, 40), (50, 13)),
            ((333, 7), (45, 29)),
            ((64, 64), (1000, 3)),
        ];
        for (k, (size, to)) in cases.into_iter().enumerate() {
            for c in [1u8, 3, 4] {
                let src = noise(size.0, size.1, c, k as u32 + u32::from(c));
                // One filter of each support (Gaussian and Catmull-Rom are of the same kinds).
                for f in [
                    Filter::Triangle,
                    Filter::Mitchell,
                    Filter::Lanczos3,
                    Filter::LanczosSharp,
                ] {
                    let want = whole(&src, size, c, to, f);
                    let single = (to.0 * to.1 <= 1000).then_some((1, 1));
                    for tile in [(29, 13), (to.0, 5), (17, to.1)].into_iter().chain(single) {
                        let got = tiled(&src, size, c, to, f, tile);
                        let worst = premultiplied(&want, c)
                            .iter()
                            .zip(&premultiplied(&got, c))
                            .map(|(a, b)| a.abs_diff(*b))
                            .max()
                            .unwrap();
                        assert!(
                            worst <= 2,
                            "{size:?} → {to:?}, {c} channels, {f}, tiles {tile:?}: off by {worst}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn ordinary_resamples_are_one_untiled_call() {
        for (size, to) in [((4032, 3024), (500, 375)), ((7071, 7071), (7000, 7000))] {
            let (tile, bytes) = plan(size, to, 3, Filter::Lanczos3);
            assert_eq!(tile, to, "{size:?}");
            let images = 3 * (u64::from(size.0 * size.1) + u64::from(to.0 * to.1));
            assert!(bytes <= TILE_BYTES.max(images));
        }
    }

    #[test]
    fn long_thin_resamples_are_tiled_with_small_tables() {
        // Forcing 200×150 to 50,000,000×1 (the finding): 5 GB of tables untiled.
        let (size, to) = ((200, 150), (50_000_000, 1));
        assert!(untiled_bytes(size, to, 1, Filter::Mitchell) > 4_000_000_000);
        let (tile, bytes) = plan(size, to, 1, Filter::Mitchell);
        assert!(tile.0 < to.0 && bytes <= TILE_BYTES, "{tile:?} {bytes}");
        // Fitting 1×50,000,000 into 100×100: 100 rows of 3 M weights each untiled; box
        // averaged to 3,200 rows first, then one small call.
        let (size, to) = ((1, 50_000_000), (1, 100));
        assert!(untiled_bytes(size, to, 1, Filter::Lanczos3) > 2_000_000_000);
        assert_eq!(box_factors(size, to, Filter::Lanczos3), Some((1, 15_625)));
        let (tile, bytes) = plan(size, to, 1, Filter::Lanczos3);
        assert_eq!(tile, to);
        assert!(bytes < 1 << 20, "{bytes}");
    }

    #[test]
    fn a_box_average_first_stays_within_a_level_or_two_of_the_filter_alone() {
        // Smooth content, as a photograph's: 1×20,000 and 20,000×3 shrunk 400× and more.
        for (size, to, c) in [((1, 20_000), (1, 40), 1u8), ((20_000, 3), (48, 2), 4)] {
            let src: Vec<u8> = (0..size.0 * size.1)
                .flat_map(|i| {
                    // A triangle wave of period 10,000 pixels.
                    let v = (((i % 10_000) as i32 - 5_000).unsigned_abs() / 20) as u8;
                    let mut px = vec![v; usize::from(c)];
                    px[usize::from(c) - 1] = if c == 4 { 255 } else { v };
                    px
                })
                .collect();
            assert!(box_factors(size, to, Filter::Lanczos3).is_some());
            let got = resize(&src, size, c, to, Filter::Lanczos3, &Stop::never()).unwrap();
            let want = whole(&src, size, c, to, Filter::Lanczos3);
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| a.abs_diff(*b))
                .max()
                .unwrap();
            assert!(worst <= 2, "{size:?} → {to:?}: off by {worst}");
        }
    }

    #[test]
    fn a_box_average_weights_colours_by_alpha() {
        // Two pixels: opaque red and transparent green average to half-opaque red.
        let src = [255, 0, 0, 255, 0, 255, 0, 0];
        let out = box_average(&src, (2, 1), 4, (2, 1), &Stop::never()).unwrap();
        assert_eq!(out, vec![255, 0, 0, 128]);
        let gray = [10, 20, 30, 41];
        assert_eq!(
            box_average(&gray, (2, 2), 1, (2, 2), &Stop::never()).unwrap(),
            vec![25]
        );
        // A partial last block averages what it has.
        assert_eq!(
            box_average(&[10, 20, 30], (3, 1), 1, (2, 1), &Stop::never()).unwrap(),
            vec![15, 30]
        );
    }

    #[test]
    fn a_tiled_resample_of_a_long_strip_matches_and_stops_when_told() {
        let src = noise(30, 20, 3, 9);
        let to = (400_000, 1);
        let out = resize(&src, (30, 20), 3, to, Filter::Mitchell, &Stop::never()).unwrap();
        let (tile, _) = plan((30, 20), to, 3, Filter::Mitchell);
        assert!(tile.0 < to.0);
        let want = whole(&src, (30, 20), 3, to, Filter::Mitchell);
        assert!(out.iter().zip(&want).all(|(a, b)| a.abs_diff(*b) <= 1));
        let flag = std::sync::atomic::AtomicBool::new(true);
        let stop = Stop::new(None, Some(&flag));
        assert!(matches!(
            resize(&src, (30, 20), 3, to, Filter::Mitchell, &stop),
            Err(Error::Cancelled)
        ));
    }
}
