//! The pipeline: header checks → memory estimate → decode (shrinking in the DCT domain) →
//! resample → orient → crop (the service's fills) → encode, with the metadata carried over.
//! Every check that needs only the headers and the geometry (pixel limits, the JPEG scan
//! count, the JPEG side limit, the job's memory estimate) runs before the first allocation;
//! the job's deadline is checked between the stages and inside their long loops.

use crate::budget::{self, Estimate, Stop};
use crate::error::{Error, Result};
use crate::exif;
use crate::markers::{self, JpegHeader};
use crate::options::{Filter, Format, Job, Sampling};
use crate::orient::{self, Pixels};
use crate::quality::{estimate_quality, DEFAULT_QUALITY};
use crate::resample;

/// A resized image and how it was made.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The encoded image.
    pub data: Vec<u8>,
    /// Its format.
    pub format: Format,
    /// Output width.
    pub width: u32,
    /// Output height.
    pub height: u32,
    /// Input width as stored (before orientation).
    pub input_width: u32,
    /// Input height as stored.
    pub input_height: u32,
    /// JPEG quality written (`None` for PNG).
    pub quality: Option<u8>,
    /// JPEG chroma subsampling written (`None` for gray JPEG and PNG).
    pub sampling: Option<Sampling>,
    /// Filter of the final resample (`None` when the size did not change).
    pub filter: Option<Filter>,
    /// The JPEG decoder's DCT-domain shrink: 1, 2, 4 or 8.
    pub decode_shrink: u8,
    /// The engine that resampled (`cpu-fir`, `gpu-wgpu`; `None` when the size did not change).
    pub engine: Option<&'static str>,
}

/// Resizes a JPEG or PNG image (sniffed from its first bytes).
pub fn resize(input: &[u8], job: &Job) -> Result<Output> {
    run(input, job, None, &Stop::new(job.timeout, None))
}

/// A crop of the resized, oriented image: at most `width`×`height`, its origin `anchor` halves
/// of the slack on each axis (0 left/top, 1 centre, 2 right/bottom).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Crop {
    pub width: u32,
    pub height: u32,
    pub anchor: (u8, u8),
}

/// The whole pipeline on a JPEG or PNG, with an optional crop at the end, stopping when `stop`
/// says so.
pub(crate) fn run(input: &[u8], job: &Job, crop: Option<Crop>, stop: &Stop<'_>) -> Result<Output> {
    match Format::detect(input) {
        Some(Format::Jpeg) => jpeg(input, job, crop, stop),
        Some(Format::Png) => png(input, job, crop, stop),
        None => Err(Error::UnknownFormat),
    }
}

fn check_input_bytes(input: &[u8], job: &Job) -> Result<()> {
    let n = input.len() as u64;
    if n > job.limits.max_input_bytes {
        return Err(Error::TooLarge {
            what: "input bytes",
            value: n,
            limit: job.limits.max_input_bytes,
        });
    }
    Ok(())
}

fn check_pixels(what: &'static str, w: u32, h: u32, limit: u64) -> Result<()> {
    let n = u64::from(w) * u64::from(h);
    if n > limit {
        return Err(Error::TooLarge {
            what,
            value: n,
            limit,
        });
    }
    Ok(())
}

/// Resizes a JPEG.
///
/// ```
/// use remora_resize::{resize_jpeg, Job};
/// # let jpeg = remora_resize::testing::gradient_jpeg(64, 48, 90);
/// let out = resize_jpeg(&jpeg, &Job::parse("16x16").unwrap()).unwrap();
/// assert_eq!((out.width, out.height), (16, 12));
/// assert_eq!(out.quality, Some(90)); // estimated from the input's tables
/// ```
pub fn resize_jpeg(input: &[u8], job: &Job) -> Result<Output> {
    jpeg(input, job, None, &Stop::new(job.timeout, None))
}

/// The largest side libjpeg-turbo writes.
const JPEG_MAX_SIDE: u32 = 65_500;

/// The size after the crop, and a JPEG output's sides checked against libjpeg's limit.
fn final_size(format: Format, (tw, th): (u32, u32), crop: Option<Crop>) -> Result<(u32, u32)> {
    let (fw, fh) = match crop {
        Some(c) => (c.width.clamp(1, tw), c.height.clamp(1, th)),
        None => (tw, th),
    };
    if format == Format::Jpeg && fw.max(fh) > JPEG_MAX_SIDE {
        return Err(Error::TooLarge {
            what: "JPEG output side",
            value: u64::from(fw.max(fh)),
            limit: u64::from(JPEG_MAX_SIDE),
        });
    }
    Ok((fw, fh))
}

/// Half-samples a pixel has once JPEG-encoded with `sampling` (`None`: gray).
fn half_samples(sampling: Option<Sampling>) -> u8 {
    match sampling {
        None => 2,
        Some(Sampling::S444) => 6,
        Some(Sampling::S422 | Sampling::S440) => 4,
        Some(Sampling::S420 | Sampling::S411) => 3,
    }
}

/// The stages after the decode, estimated into `e`: the resample from `decoded` to `stored`
/// (the target in the stored orientation), the orientation to `shown`, the crop to `last`
/// and the encode of `last`.
#[allow(clippy::too_many_arguments)]
fn estimate_rest(
    e: &mut Estimate,
    job: &Job,
    c: u8,
    decoded: (u32, u32),
    (stored, filter): ((u32, u32), Option<Filter>),
    (shown, oriented): ((u32, u32), bool),
    last: (u32, u32),
    encode: u64,
) {
    if decoded != stored {
        let working = resample::working_bytes(
            decoded,
            stored,
            c,
            filter.unwrap_or(Filter::Lanczos3),
            job.engine,
        );
        let images =
            budget::pixels(decoded.0, decoded.1, c) + budget::pixels(stored.0, stored.1, c);
        e.stage("resample", images + working);
    }
    if oriented {
        e.stage("orient", 2 * budget::pixels(shown.0, shown.1, c));
    }
    if last != shown {
        e.stage(
            "crop",
            budget::pixels(shown.0, shown.1, c) + budget::pixels(last.0, last.1, c),
        );
    }
    e.stage("encode", encode);
}

/// The encode stage's bytes for `last` pixels of `c` channels.
fn encode_bytes(
    format: Format,
    last: (u32, u32),
    c: u8,
    sampling: Option<Sampling>,
    job: &Job,
    segments: u64,
) -> u64 {
    match format {
        Format::Png => budget::png_encode(last.0, last.1, c),
        Format::Jpeg => {
            let whole = job.optimize_huffman || (job.progressive && !job.thumbnail);
            budget::jpeg_encode(last.0, last.1, c, half_samples(sampling), whole) + 2 * segments
        }
    }
}

fn jpeg(input: &[u8], job: &Job, crop: Option<Crop>, stop: &Stop<'_>) -> Result<Output> {
    check_input_bytes(input, job)?;
    let header = markers::parse(input)?;
    let (w, h) = (header.width, header.height);
    check_pixels("input pixels", w, h, job.limits.max_pixels)?;
    if header.precision != 8 {
        return Err(Error::Unsupported(format!("{}-bit JPEG", header.precision)));
    }
    if matches!(header.sof, 0xC5..=0xC7 | 0xCD..=0xCF) {
        return Err(Error::Unsupported("hierarchical JPEG".into()));
    }
    let gray = match header.components.len() {
        1 => true,
        3 => false,
        n => {
            return Err(Error::Unsupported(format!(
                "JPEG with {n} components (CMYK/YCCK)"
            )))
        }
    };
    let orientation = if job.auto_orient {
        jpeg_orientation(&header)
    } else {
        1
    };
    let swap = orient::swaps_axes(orientation);
    let (ow, oh) = if swap { (h, w) } else { (w, h) };
    let (tw, th) = job.geometry.apply(ow, oh);
    check_pixels("output pixels", tw, th, job.limits.max_output_pixels)?;
    let format = job.format.unwrap_or(Format::Jpeg);
    let last = final_size(format, (tw, th), crop)?;
    // A scan bomb (thousands of scans, each a pass over every block) is refused unread.
    let scans = markers::count_scans(input, header.scan_at, u32::MAX);
    if scans > job.limits.max_scans {
        return Err(Error::TooLarge {
            what: "JPEG scans",
            value: u64::from(scans),
            limit: u64::from(job.limits.max_scans),
        });
    }
    // Target in the stored orientation.
    let (sw, sh) = if swap { (th, tw) } else { (tw, th) };
    let lossless = header.sof == 0xC3 || header.sof == 0xCB;
    let shrink = if lossless {
        1
    } else {
        dct_shrink(w, h, sw, sh)
    };
    let decoded_size = (w.div_ceil(shrink), h.div_ceil(shrink));
    let c: u8 = if gray { 1 } else { 3 };
    let resampled = decoded_size != (sw, sh);
    let filter = choose_filter(job, (ow, oh), (tw, th)).filter(|_| resampled);
    let quality = job.quality.or_else(|| {
        if lossless {
            Some(100)
        } else {
            estimate_quality(&header.qtables)
        }
    });
    let q = quality.unwrap_or(DEFAULT_QUALITY).clamp(1, 100);
    let input_sampling = input_sampling(&header);
    let sampling = output_sampling(job, q, input_sampling, c);
    let keep = kept_segments(&header, job);
    let segments: u64 = keep.iter().map(|(_, d)| d.len() as u64 + 4).sum();

    let mut e = Estimate::new(input.len());
    let whole_image = header.progressive() || scans > 1;
    e.stage(
        "decode",
        budget::jpeg_decode(decoded_size, c, (w, h), &header.factors(), whole_image),
    );
    let encoding = encode_bytes(format, last, c, sampling, job, segments);
    estimate_rest(
        &mut e,
        job,
        c,
        decoded_size,
        ((sw, sh), filter),
        ((tw, th), (2..=8).contains(&orientation)),
        last,
        encoding,
    );
    e.check(job.limits.max_job_memory)?;

    stop.check("decode")?;
    let decoded = decode_jpeg(input, shrink, gray, job.limits.max_scans)?;
    stop.check("resample")?;
    let (pixels, engine) = resample::resize(decoded, sw, sh, filter, job.engine, stop)?;
    let pixels = orient::apply(pixels, orientation, stop)?;
    let pixels = match crop {
        Some(c) => crop_pixels(pixels, c, stop)?,
        None => pixels,
    };
    stop.check("encode")?;
    let mut out = encode(pixels, job, format, q, sampling, &keep, stop)?;
    out.input_width = w;
    out.input_height = h;
    out.filter = filter;
    out.decode_shrink = shrink as u8;
    out.engine = engine;
    Ok(out)
}

/// The chroma subsampling of a JPEG output of `c` channels: the job's, else the input's,
/// else 4:4:4 at quality ≥ 90 and 4:2:0 below; `None` for gray.
fn output_sampling(job: &Job, q: u8, input: Option<Sampling>, c: u8) -> Option<Sampling> {
    (c >= 3).then(|| {
        job.sampling.or(input).unwrap_or(if q >= 90 {
            Sampling::S444
        } else {
            Sampling::S420
        })
    })
}

/// The crop window of `p`, its rows copied with `stop` checked as they go.
fn crop_pixels(p: Pixels, c: Crop, stop: &Stop<'_>) -> Result<Pixels> {
    let (cw, ch) = (c.width.clamp(1, p.width), c.height.clamp(1, p.height));
    if (cw, ch) == (p.width, p.height) {
        return Ok(p);
    }
    let x = (p.width - cw) as usize * usize::from(c.anchor.0.min(2)) / 2;
    let y = (p.height - ch) as usize * usize::from(c.anchor.1.min(2)) / 2;
    let n = usize::from(p.channels);
    let stride = p.width as usize * n;
    let row = cw as usize * n;
    let mut data = Vec::with_capacity(row * ch as usize);
    let every = budget::rows_per_check(row);
    for (i, r) in (y..y + ch as usize).enumerate() {
        if i % every == 0 {
            stop.check("crop")?;
        }
        let start = r * stride + x * n;
        data.extend_from_slice(&p.data[start..start + row]);
    }
    Ok(Pixels {
        data,
        width: cw,
        height: ch,
        channels: p.channels,
    })
}

/// The margin left after a 1/4 or 1/8 DCT-domain decode. libjpeg's reduced 4×4 and 2×2
/// inverse DCTs alias more than its 1/2 one: measured on `aloeL.jpg` (1282×1110, Q85 output,
/// luma SSIM against a full-precision Lanczos3 reference of the full decode), a 1/4 decode lost
/// 0.019 leaving 2×, 0.008 leaving 3.2× and 0.006 leaving 4×, while a 1/2 decode leaving 2× lost
/// 0.0014 (tests/photos.rs keeps these cases). So 1/4 and 1/8 are used only for large
/// reductions (thumbnails), where 8× remains.
const WIDE_MARGIN: f64 = 8.0;

/// The margin left after a 1/2 decode. Exactly 2× lost 0.0078 of luma SSIM on a real 2000×1353
/// photograph fitted to 500×338 (`bench/resize.sh`'s photos-2000 set; 0.0011 from its full-size
/// original, which keeps more than 3×), over the 0.005 the quality check allows.
const HALF_MARGIN: f64 = 3.0;

/// The EXIF orientation (1–8) of the first EXIF segment, 1 when none.
fn jpeg_orientation(h: &JpegHeader<'_>) -> u16 {
    h.segments
        .iter()
        .find(|s| s.is_exif())
        .and_then(|s| exif::orientation(s.data))
        .map_or(1, |(_, o)| o)
}

/// The largest libjpeg shrink (8, 4, 2, else 1) that leaves at least [`HALF_MARGIN`]× the target
/// on both axes for 1/2 and [`WIDE_MARGIN`]× for 1/4 and 1/8, so that the final resample always
/// does the last 3× or more.
pub(crate) fn dct_shrink(w: u32, h: u32, tw: u32, th: u32) -> u32 {
    for d in [8u32, 4, 2] {
        let m = if d == 2 { HALF_MARGIN } else { WIDE_MARGIN };
        if f64::from(w.div_ceil(d)) >= m * f64::from(tw)
            && f64::from(h.div_ceil(d)) >= m * f64::from(th)
        {
            return d;
        }
    }
    1
}

/// ImageMagick's choice: the job's filter; else LanczosSharp for thumbnails; none (a copy) when
/// the size is unchanged; Mitchell when the area grows; Lanczos otherwise.
fn choose_filter(job: &Job, (w, h): (u32, u32), (tw, th): (u32, u32)) -> Option<Filter> {
    if let Some(f) = job.filter {
        return Some(f);
    }
    if job.thumbnail {
        return Some(Filter::LanczosSharp);
    }
    let (fx, fy) = (f64::from(tw) / f64::from(w), f64::from(th) / f64::from(h));
    Some(if fx * fy > 1.0 {
        Filter::Mitchell
    } else {
        Filter::Lanczos3
    })
}

fn decode_jpeg(input: &[u8], shrink: u32, gray: bool, max_scans: u32) -> Result<Pixels> {
    let err = |e: turbojpeg::Error| Error::Decode(e.to_string());
    let mut d = turbojpeg::Decompressor::new().map_err(err)?;
    // Also libjpeg-turbo's own guard (its progress monitor counts the scans it decodes).
    d.set_scan_limit(max_scans.min(i32::MAX as u32))
        .map_err(err)?;
    let factor = turbojpeg::ScalingFactor::new(1, shrink as usize);
    d.set_scaling_factor(factor).map_err(err)?;
    let header = d.read_header(input).map_err(err)?.scaled(factor);
    let (format, channels) = if gray {
        (turbojpeg::PixelFormat::GRAY, 1)
    } else {
        (turbojpeg::PixelFormat::RGB, 3)
    };
    let pitch = header.width * channels;
    let mut data = vec![0u8; pitch * header.height];
    let image = turbojpeg::Image {
        pixels: data.as_mut_slice(),
        width: header.width,
        pitch,
        height: header.height,
        format,
    };
    d.decompress(input, image).map_err(err)?;
    Ok(Pixels {
        data,
        width: header.width as u32,
        height: header.height as u32,
        channels: channels as u8,
    })
}

/// The input's chroma subsampling, when it is one turbojpeg can write.
fn input_sampling(h: &JpegHeader<'_>) -> Option<Sampling> {
    match h.components.as_slice() {
        [y, cb, cr] if cb == cr && y.h % cb.h == 0 && y.v % cb.v == 0 => {
            Sampling::from_factors(y.h / cb.h, y.v / cb.v)
        }
        _ => None,
    }
}

/// Metadata segments to copy: none with `strip`; only ICC for thumbnails; else EXIF (its
/// orientation reset when auto-orienting), XMP, ICC, IPTC and comments.
fn kept_segments(h: &JpegHeader<'_>, job: &Job) -> Vec<(u8, Vec<u8>)> {
    if job.strip {
        return Vec::new();
    }
    h.segments
        .iter()
        .filter(|s| {
            s.is_icc()
                || (!job.thumbnail && (s.is_exif() || s.is_xmp() || s.is_iptc() || s.is_comment()))
        })
        .map(|s| {
            let data = if s.is_exif() && job.auto_orient {
                exif::reset_orientation(s.data)
            } else {
                s.data.to_vec()
            };
            (s.marker, data)
        })
        .collect()
}

/// Encodes in `format` at quality `q` with `sampling` (JPEG), with the metadata `segments`.
fn encode(
    pixels: Pixels,
    job: &Job,
    format: Format,
    q: u8,
    sampling: Option<Sampling>,
    segments: &[(u8, Vec<u8>)],
    stop: &Stop<'_>,
) -> Result<Output> {
    let (width, height) = (pixels.width, pixels.height);
    let mut out = Output {
        data: Vec::new(),
        format,
        width,
        height,
        input_width: 0,
        input_height: 0,
        quality: None,
        sampling: None,
        filter: None,
        decode_shrink: 1,
        engine: None,
    };
    match format {
        Format::Png => out.data = crate::png_io::encode(&pixels, stop)?,
        Format::Jpeg => {
            let pixels = drop_alpha(pixels);
            let data = encode_jpeg(&pixels, q, sampling, job)?;
            let segs: Vec<(u8, &[u8])> = segments.iter().map(|(m, d)| (*m, d.as_slice())).collect();
            out.data = markers::insert_segments(data, &segs);
            out.quality = Some(q);
            out.sampling = sampling;
        }
    }
    Ok(out)
}

fn drop_alpha(p: Pixels) -> Pixels {
    match p.channels {
        2 | 4 => {
            let c = usize::from(p.channels);
            let data = p
                .data
                .chunks_exact(c)
                .flat_map(|px| px[..c - 1].iter().copied())
                .collect();
            Pixels {
                data,
                channels: p.channels - 1,
                ..p
            }
        }
        _ => p,
    }
}

fn encode_jpeg(p: &Pixels, quality: u8, sampling: Option<Sampling>, job: &Job) -> Result<Vec<u8>> {
    use turbojpeg::Subsamp;
    let err = |e: turbojpeg::Error| Error::Encode(e.to_string());
    let mut c = turbojpeg::Compressor::new().map_err(err)?;
    c.set_quality(i32::from(quality)).map_err(err)?;
    let (format, subsamp) = match sampling {
        None => (turbojpeg::PixelFormat::GRAY, Subsamp::Gray),
        Some(s) => (
            turbojpeg::PixelFormat::RGB,
            match s {
                Sampling::S444 => Subsamp::None,
                Sampling::S422 => Subsamp::Sub2x1,
                Sampling::S420 => Subsamp::Sub2x2,
                Sampling::S440 => Subsamp::Sub1x2,
                Sampling::S411 => Subsamp::Sub4x1,
            },
        ),
    };
    c.set_subsamp(subsamp).map_err(err)?;
    c.set_optimize(job.optimize_huffman).map_err(err)?;
    c.set_progressive(job.progressive && !job.thumbnail)
        .map_err(err)?;
    let w = p.width as usize;
    let image = turbojpeg::Image {
        pixels: p.data.as_slice(),
        width: w,
        pitch: w * usize::from(p.channels),
        height: p.height as usize,
        format,
    };
    c.compress_to_vec(image).map_err(err)
}

/// Resizes a PNG (output PNG unless the job asks for JPEG).
pub fn resize_png(input: &[u8], job: &Job) -> Result<Output> {
    png(input, job, None, &Stop::new(job.timeout, None))
}

fn png(input: &[u8], job: &Job, crop: Option<Crop>, stop: &Stop<'_>) -> Result<Output> {
    check_input_bytes(input, job)?;
    let (w, h) = crate::png_io::dimensions(input)?;
    check_pixels("input pixels", w, h, job.limits.max_pixels)?;
    let (tw, th) = job.geometry.apply(w, h);
    check_pixels("output pixels", tw, th, job.limits.max_output_pixels)?;
    let format = job.format.unwrap_or(Format::Png);
    let last = final_size(format, (tw, th), crop)?;
    let (_, _, c, interlaced) = crate::png_io::header(input)?;
    let filter = choose_filter(job, (w, h), (tw, th)).filter(|_| (w, h) != (tw, th));
    let q = job.quality.unwrap_or(DEFAULT_QUALITY).clamp(1, 100);
    // Alpha is dropped for JPEG.
    let sampling = output_sampling(job, q, None, c - u8::from(c == 2 || c == 4));

    let mut e = Estimate::new(input.len());
    let decode = budget::png_decode(w, h, c)
        + if interlaced {
            budget::pixels(w, h, c)
        } else {
            0
        };
    e.stage("decode", decode);
    let encoding = encode_bytes(format, last, c, sampling, job, 0);
    estimate_rest(
        &mut e,
        job,
        c,
        (w, h),
        ((tw, th), filter),
        ((tw, th), false),
        last,
        encoding,
    );
    e.check(job.limits.max_job_memory)?;

    let decoded = crate::png_io::decode(input, stop)?;
    stop.check("resample")?;
    let (pixels, engine) = resample::resize(decoded, tw, th, filter, job.engine, stop)?;
    let pixels = match crop {
        Some(c) => crop_pixels(pixels, c, stop)?,
        None => pixels,
    };
    stop.check("encode")?;
    let mut out = encode(pixels, job, format, q, sampling, &[], stop)?;
    out.input_width = w;
    out.input_height = h;
    out.filter = filter;
    out.engine = engine;
    Ok(out)
}
