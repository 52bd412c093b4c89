//! The pipeline: header checks → decode (shrinking in the DCT domain) → resample → orient →
//! encode, with the metadata carried over.

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
    match Format::detect(input) {
        Some(Format::Jpeg) => resize_jpeg(input, job),
        Some(Format::Png) => resize_png(input, job),
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
    // Target in the stored orientation.
    let (sw, sh) = if swap { (th, tw) } else { (tw, th) };
    let lossless = header.sof == 0xC3 || header.sof == 0xCB;
    let shrink = if lossless {
        1
    } else {
        dct_shrink(w, h, sw, sh)
    };

    let decoded = decode_jpeg(input, shrink, gray)?;
    let resampled = (decoded.width, decoded.height) != (sw, sh);
    let filter = choose_filter(job, (ow, oh), (tw, th)).filter(|_| resampled);
    let (pixels, engine) = resample::resize(decoded, sw, sh, filter, job.engine)?;
    let pixels = orient::apply(pixels, orientation);

    let quality = job.quality.or_else(|| {
        if lossless {
            Some(100)
        } else {
            estimate_quality(&header.qtables)
        }
    });
    let input_sampling = input_sampling(&header);
    let keep = kept_segments(&header, job);
    let mut out = encode(pixels, job, quality, input_sampling, &keep)?;
    out.input_width = w;
    out.input_height = h;
    out.filter = filter;
    out.decode_shrink = shrink as u8;
    out.engine = engine;
    Ok(out)
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

fn decode_jpeg(input: &[u8], shrink: u32, gray: bool) -> Result<Pixels> {
    let err = |e: turbojpeg::Error| Error::Decode(e.to_string());
    let mut d = turbojpeg::Decompressor::new().map_err(err)?;
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

/// Encodes in the job's format (default: JPEG).
fn encode(
    pixels: Pixels,
    job: &Job,
    quality: Option<u8>,
    input_sampling: Option<Sampling>,
    segments: &[(u8, Vec<u8>)],
) -> Result<Output> {
    let (width, height) = (pixels.width, pixels.height);
    let mut out = Output {
        data: Vec::new(),
        format: job.format.unwrap_or(Format::Jpeg),
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
    match out.format {
        Format::Png => out.data = crate::png_io::encode(&pixels)?,
        Format::Jpeg => {
            let q = quality.unwrap_or(DEFAULT_QUALITY).clamp(1, 100);
            let pixels = drop_alpha(pixels);
            let sampling = (pixels.channels == 3).then(|| {
                job.sampling.or(input_sampling).unwrap_or(if q >= 90 {
                    Sampling::S444
                } else {
                    Sampling::S420
                })
            });
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
    check_input_bytes(input, job)?;
    let (w, h) = crate::png_io::dimensions(input)?;
    check_pixels("input pixels", w, h, job.limits.max_pixels)?;
    let (tw, th) = job.geometry.apply(w, h);
    check_pixels("output pixels", tw, th, job.limits.max_output_pixels)?;
    let decoded = crate::png_io::decode(input)?;
    let filter = choose_filter(job, (w, h), (tw, th)).filter(|_| (w, h) != (tw, th));
    let (pixels, engine) = resample::resize(decoded, tw, th, filter, job.engine)?;
    let mut job = job.clone();
    job.format = Some(job.format.unwrap_or(Format::Png));
    let mut out = encode(pixels, &job, job.quality, None, &[])?;
    out.input_width = w;
    out.input_height = h;
    out.filter = filter;
    out.engine = engine;
    Ok(out)
}
