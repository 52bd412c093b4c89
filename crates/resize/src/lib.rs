//! A JPEG resize engine with ImageMagick-compatible geometry: what `convert IN -resize GEOMETRY
//! -quality Q OUT` does, several times faster.
//!
//! What it does:
//! - [`Geometry`]: ImageMagick geometry strings (`W`, `xH`, `WxH`, `WxH^`, `WxH!`, `WxH>`,
//!   `WxH<`, `S%`, `SX%xSY%`, `A@`, `W:H`) and exactly ImageMagick 6's output sizes.
//! - [`resize_jpeg`] (and [`resize`] for JPEG or PNG input): header checks against [`Limits`]
//!   before any pixel is decoded (a 50,000 × 50,000 header is refused without allocating; so
//!   is a job whose memory, estimated from the headers and the geometry, is over
//!   [`Limits::max_job_memory`], and a JPEG of more than [`Limits::max_scans`] scans), and a
//!   [`Job::timeout`] checked between the stages and inside their long loops;
//!   decode with libjpeg-turbo shrinking by 1/2, 1/4 or 1/8 in the DCT domain, chosen so that
//!   at least a 3× final resample remains on both axes after 1/2 (8× after 1/4 and 1/8, whose
//!   reduced inverse DCTs alias measurably more); a separable SIMD resample
//!   (fast_image_resize; Lanczos3 when shrinking, Mitchell when enlarging, other [`Filter`]s by
//!   name; an axis shrunk more than 256× box-averaged first, and an output whose weight tables
//!   would be large — a long, thin one — resampled in tiles); EXIF orientation applied with
//!   `auto_orient`; libjpeg-turbo encode with quality,
//!   chroma [`Sampling`], progressive and optimised Huffman tables.
//! - ImageMagick's defaults: quality estimated from the input's quantisation tables
//!   ([`estimate_quality`], its `coders/jpeg.c` algorithm) else 92; the input's chroma sampling,
//!   else 4:4:4 at quality ≥ 90 and 4:2:0 below; EXIF, XMP, IPTC, comments and ICC copied unless
//!   `strip` (thumbnails keep only ICC).
//! - With the `http` feature (default): [`service`], the HTTP resize server, and its [`client`].
//! - Engines for the resample ([`resample::Resampler`], chosen by [`Job::engine`]): the CPU's
//!   (`cpu-fir`, the default) and, with the `gpu` feature (default), `gpu::GpuResampler`
//!   (`gpu-wgpu`: WGSL through wgpu on any Vulkan device, the same integer arithmetic as the
//!   CPU's, within one grey level of it). [`Output::engine`] says which one ran.
//!
//! Colour layouts: gray JPEGs stay gray; YCbCr/RGB JPEGs are resampled as RGB; CMYK/YCCK, 12-bit
//! and hierarchical JPEGs are refused with [`Error::Unsupported`]. PNG in (8/16-bit, palette,
//! alpha) and out (8-bit); alpha is premultiplied while resampling and dropped for JPEG output.
//!
//! Codecs: libjpeg-turbo 3.1 through the `turbojpeg` crate, built from its bundled source
//! (cmake and nasm; Debian 12's libturbojpeg is 2.1, older than the crate's pkg-config mode
//! accepts). It gives the DCT-domain scaling (`tj3SetScalingFactor`) that pure-Rust decoders
//! lack, and SIMD encode/decode.
//!
//! What it does not: the command line and batching (callers run jobs on their own threads; one
//! job uses one core), WebP, colour management (ICC profiles are copied, not
//! applied), gamma-correct (linear light) resampling — ImageMagick 6 resamples sRGB values too.
//!
//! Panics: none on any input; malformed, truncated or hostile images give an [`Error`].
//!
//! ```
//! use remora_resize::{resize_jpeg, Job, Sampling};
//! # let jpeg = remora_resize::testing::gradient_jpeg(800, 600, 85);
//! let mut job = Job::parse("500x500").unwrap();
//! job.quality = Some(80);
//! let out = resize_jpeg(&jpeg, &job).unwrap();
//! assert_eq!((out.width, out.height), (500, 375));
//! assert_eq!(out.sampling, Some(Sampling::S420)); // the input's (turbojpeg's Q85 default)
//! ```
#![warn(missing_docs)]

mod budget;
#[cfg(feature = "http")]
pub mod client;
mod cpu;
mod engine;
mod error;
mod exif;
pub mod fidelity;
pub mod geometry;
#[cfg(feature = "gpu")]
pub mod gpu;
mod markers;
mod options;
mod orient;
pub mod pixels;
mod png_io;
mod quality;
mod registry;
pub mod resample;
mod resampler;
#[cfg(feature = "http")]
pub mod service;
#[doc(hidden)]
pub mod testing;
mod tiling;

pub use engine::{resize, resize_jpeg, resize_png, Output};
pub use error::{Error, Result};
pub use exif::exif_with_orientation;
pub use geometry::{Geometry, GeometryError};
pub use options::{Filter, Format, Job, Limits, ResampleEngine, Sampling};
pub use quality::{estimate_quality, DEFAULT_QUALITY};

/// The quality ImageMagick would use for this JPEG when none is given: the estimate from its
/// quantisation tables (when exact or ≥ 51), else 92.
pub fn jpeg_quality(jpeg: &[u8]) -> Result<u8> {
    let h = markers::parse(jpeg)?;
    Ok(estimate_quality(&h.qtables).unwrap_or(DEFAULT_QUALITY))
}

/// Inserts an APP1 EXIF payload (as from [`exif_with_orientation`]) into a JPEG after its
/// SOI/JFIF header.
pub fn insert_app1(jpeg: Vec<u8>, payload: &[u8]) -> Vec<u8> {
    markers::insert_segments(jpeg, &[(0xE1, payload)])
}

/// The EXIF orientation (1–8) of a JPEG, 1 when it has none.
pub fn jpeg_orientation(jpeg: &[u8]) -> Result<u16> {
    let h = markers::parse(jpeg)?;
    Ok(h.segments
        .iter()
        .find(|s| s.is_exif())
        .and_then(|s| exif::orientation(s.data))
        .map_or(1, |(_, o)| o))
}
