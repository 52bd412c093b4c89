//! Raw pixels in and out, with no codec (for callers that already hold decoded pixels, such as
//! the Python binding's numpy path), and an image's header facts read without decoding.
//!
//! ```
//! use remora_resize::pixels::{image_info, resize_pixels};
//! use remora_resize::{Format, Job};
//! let rgb = vec![128u8; 64 * 48 * 3];
//! let out = resize_pixels(&rgb, 64, 48, 3, &Job::parse("16x16").unwrap()).unwrap();
//! assert_eq!((out.width, out.height, out.data.len()), (16, 12, 16 * 12 * 3));
//!
//! # let jpeg = remora_resize::testing::gradient_jpeg(64, 48, 90);
//! let info = image_info(&jpeg).unwrap();
//! assert_eq!((info.format, info.width, info.height, info.quality), (Format::Jpeg, 64, 48, Some(90)));
//! ```

use crate::error::{Error, Result};
use crate::markers;
use crate::options::{Filter, Format, Job, Sampling};
use crate::quality::{estimate_quality, DEFAULT_QUALITY};
use std::io::Cursor;

/// Resized raw pixels: interleaved 8-bit, `channels` bytes per pixel, rows packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawImage {
    /// The pixels, `width · height · channels` bytes.
    pub data: Vec<u8>,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// Bytes per pixel: 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA.
    pub channels: u8,
    /// Filter of the resample (`None` when the size did not change).
    pub filter: Option<Filter>,
    /// The engine that resampled (`cpu-fir`, `gpu-wgpu`; `None` when the size did not change).
    pub engine: Option<&'static str>,
}

/// Resizes interleaved 8-bit pixels (`channels` 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA; rows
/// packed) to the job's geometry, borrowing `src` without a copy. It is the engine's final
/// resample without the codecs: the same filters and defaults (the job's filter, else
/// LanczosSharp for thumbnails, Mitchell when the area grows, Lanczos3 otherwise), alpha
/// premultiplied while resampling, on the job's [`engine`](Job::engine). Only the job's
/// geometry, filter, thumbnail flag, engine, timeout, output pixel limit and job memory limit
/// apply (the input is already in memory); its encoding and metadata options are ignored. An
/// unchanged size gives a copy.
pub fn resize_pixels(
    src: &[u8],
    width: u32,
    height: u32,
    channels: u8,
    job: &Job,
) -> Result<RawImage> {
    if !(1..=4).contains(&channels) {
        return Err(Error::BadOption(format!(
            "{channels} channels per pixel (1 to 4 are handled)"
        )));
    }
    if width == 0 || height == 0 {
        return Err(Error::BadOption(format!("empty image {width}x{height}")));
    }
    let want = u64::from(width) * u64::from(height) * u64::from(channels);
    if src.len() as u64 != want {
        return Err(Error::BadOption(format!(
            "{} bytes for {width}x{height} pixels of {channels} channels ({want} expected)",
            src.len()
        )));
    }
    let (tw, th) = job.geometry.apply(width, height);
    let (tw, th) = (tw.max(1), th.max(1));
    let n = u64::from(tw) * u64::from(th);
    if n > job.limits.max_output_pixels {
        return Err(Error::TooLarge {
            what: "output pixels",
            value: n,
            limit: job.limits.max_output_pixels,
        });
    }
    if (tw, th) == (width, height) {
        return Ok(RawImage {
            data: src.to_vec(),
            width,
            height,
            channels,
            filter: None,
            engine: None,
        });
    }
    let filter = choose_filter(job, (width, height), (tw, th));
    let mut e = crate::budget::Estimate::new(src.len());
    let working =
        crate::resample::working_bytes((width, height), (tw, th), channels, filter, job.engine);
    e.stage(
        "resample",
        crate::budget::pixels(tw, th, channels) + working,
    );
    e.check(job.limits.max_job_memory)?;
    let stop = crate::budget::Stop::new(job.timeout, None);
    let (data, engine) = crate::resample::run(
        src,
        (width, height),
        channels,
        (tw, th),
        filter,
        job.engine,
        &stop,
    )?;
    Ok(RawImage {
        data,
        width: tw,
        height: th,
        channels,
        filter: Some(filter),
        engine: Some(engine),
    })
}

/// The engine's choice (`engine::choose_filter`) for a size change.
fn choose_filter(job: &Job, (w, h): (u32, u32), (tw, th): (u32, u32)) -> Filter {
    if let Some(f) = job.filter {
        return f;
    }
    if job.thumbnail {
        return Filter::LanczosSharp;
    }
    let (fx, fy) = (f64::from(tw) / f64::from(w), f64::from(th) / f64::from(h));
    if fx * fy > 1.0 {
        Filter::Mitchell
    } else {
        Filter::Lanczos3
    }
}

/// What an image's headers say, read without decoding any pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// Its format.
    pub format: Format,
    /// Width as stored (before any EXIF orientation).
    pub width: u32,
    /// Height as stored.
    pub height: u32,
    /// Channels once decoded: JPEG 1 (gray) or 3 (CMYK/YCCK: 4); PNG 1 to 4 (palettes
    /// expanded, `tRNS` as alpha).
    pub channels: u8,
    /// JPEG: the quality ImageMagick reports and reuses (`identify -format %Q`): the estimate
    /// from the quantisation tables when exact or ≥ 51, else 92. `None` for PNG.
    pub quality: Option<u8>,
    /// The EXIF orientation (1–8; 1 when none, and for PNG).
    pub orientation: u16,
    /// JPEG chroma subsampling (`None` for gray JPEG, layouts turbojpeg cannot write, and PNG).
    pub sampling: Option<Sampling>,
}

/// The headers of a JPEG or PNG (sniffed from its first bytes), without decoding.
pub fn image_info(data: &[u8]) -> Result<ImageInfo> {
    match Format::detect(data) {
        Some(Format::Jpeg) => {
            let h = markers::parse(data)?;
            let sampling = match h.components.as_slice() {
                [y, cb, cr] if cb == cr && y.h % cb.h == 0 && y.v % cb.v == 0 => {
                    Sampling::from_factors(y.h / cb.h, y.v / cb.v)
                }
                _ => None,
            };
            Ok(ImageInfo {
                format: Format::Jpeg,
                width: h.width,
                height: h.height,
                channels: h.components.len() as u8,
                quality: Some(estimate_quality(&h.qtables).unwrap_or(DEFAULT_QUALITY)),
                orientation: crate::jpeg_orientation(data)?,
                sampling,
            })
        }
        Some(Format::Png) => {
            let mut d = png::Decoder::new(Cursor::new(data));
            d.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
            let r = d.read_info().map_err(|e| match e {
                png::DecodingError::IoError(_) => Error::Truncated("PNG header"),
                e => Error::Decode(e.to_string()),
            })?;
            let (color, _) = r.output_color_type();
            let info = r.info();
            Ok(ImageInfo {
                format: Format::Png,
                width: info.width,
                height: info.height,
                channels: color.samples() as u8,
                quality: None,
                orientation: 1,
                sampling: None,
            })
        }
        None => Err(Error::UnknownFormat),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::ResampleEngine;
    use crate::orient::Pixels;

    fn photo_like(w: u32, h: u32, c: u8) -> Vec<u8> {
        (0..w * h * u32::from(c))
            .map(|i| {
                let p = i / u32::from(c);
                let (x, y) = (p % w, p / w);
                ((x * 7 + y * 3 + (x ^ y) * (i % 5)) % 251) as u8
            })
            .collect()
    }

    #[test]
    fn same_pixels_as_the_engine_resample_for_every_filter() {
        let filters = Filter::ALL;
        for c in 1..=4u8 {
            let src = photo_like(97, 61, c);
            for geometry in ["40x40", "150%", "33x80!"] {
                for f in filters {
                    let mut job = Job::parse(geometry).unwrap();
                    job.filter = Some(f);
                    let out = resize_pixels(&src, 97, 61, c, &job).unwrap();
                    let (tw, th) = job.geometry.apply(97, 61);
                    let px = Pixels {
                        data: src.clone(),
                        width: 97,
                        height: 61,
                        channels: c,
                    };
                    let stop = crate::budget::Stop::never();
                    let (want, _) =
                        crate::resample::resize(px, tw, th, Some(f), ResampleEngine::Cpu, &stop)
                            .unwrap();
                    assert_eq!((out.width, out.height), (tw, th));
                    assert!(out.data == want.data, "{c} channels, {geometry}, {f}");
                }
            }
        }
    }

    #[test]
    fn default_filters_and_checks() {
        let src = photo_like(40, 30, 3);
        let down = resize_pixels(&src, 40, 30, 3, &Job::parse("20x20").unwrap()).unwrap();
        assert_eq!(
            (down.width, down.height, down.filter),
            (20, 15, Some(Filter::Lanczos3))
        );
        let up = resize_pixels(&src, 40, 30, 3, &Job::parse("200%").unwrap()).unwrap();
        assert_eq!(
            (up.width, up.height, up.filter),
            (80, 60, Some(Filter::Mitchell))
        );
        let same = resize_pixels(&src, 40, 30, 3, &Job::parse("40x30").unwrap()).unwrap();
        assert_eq!((same.data, same.filter), (src.clone(), None));
        let job = Job::parse("10x10").unwrap();
        assert!(resize_pixels(&src, 40, 30, 5, &job).is_err());
        assert!(resize_pixels(&src, 41, 30, 3, &job).is_err());
        assert!(resize_pixels(&[], 0, 0, 3, &job).is_err());
        let huge = Job::parse("100000x100000!").unwrap();
        assert!(matches!(
            resize_pixels(&src, 40, 30, 3, &huge),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn info_of_jpeg_and_png_and_garbage() {
        let jpeg = crate::testing::gradient_jpeg(64, 48, 85);
        let i = image_info(&jpeg).unwrap();
        assert_eq!(
            (
                i.format,
                i.width,
                i.height,
                i.channels,
                i.quality,
                i.orientation,
                i.sampling
            ),
            (Format::Jpeg, 64, 48, 3, Some(85), 1, Some(Sampling::S420))
        );
        let png = crate::png_io::encode(
            &Pixels {
                data: photo_like(5, 4, 2),
                width: 5,
                height: 4,
                channels: 2,
            },
            &crate::budget::Stop::never(),
        )
        .unwrap();
        let i = image_info(&png).unwrap();
        assert_eq!(
            (i.format, i.width, i.height, i.channels),
            (Format::Png, 5, 4, 2)
        );
        assert!(matches!(image_info(b"GIF89a"), Err(Error::UnknownFormat)));
        assert!(image_info(&jpeg[..3]).is_err());
        assert!(image_info(&png[..20]).is_err());
    }
}
