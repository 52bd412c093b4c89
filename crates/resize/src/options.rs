//! What a resize job asks for: filter, chroma sampling, limits, formats.

use crate::error::{Error, Result};
use crate::geometry::Geometry;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A resampling filter, by ImageMagick's `-filter` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Nearest neighbour (`point`, `nearest`, `sample`).
    Point,
    /// Box (`box`): area average when shrinking.
    Box,
    /// Triangle (`triangle`, `bilinear`).
    Triangle,
    /// Catmull-Rom cubic (`catrom`, `catmull-rom`).
    CatmullRom,
    /// Mitchell-Netravali cubic, B = C = 1/3 (`mitchell`): ImageMagick's default when enlarging.
    Mitchell,
    /// Gaussian, σ = 0.5 (`gaussian`).
    Gaussian,
    /// Lanczos, 3 lobes (`lanczos`, `lanczos3`): ImageMagick's default when shrinking.
    Lanczos3,
    /// Lanczos 3 lobes with ImageMagick's sharpening blur 0.9812505644269356 (`lanczossharp`):
    /// the `-thumbnail` default.
    LanczosSharp,
}

impl Filter {
    /// Every filter, in declaration order.
    pub const ALL: [Filter; 8] = [
        Filter::Point,
        Filter::Box,
        Filter::Triangle,
        Filter::CatmullRom,
        Filter::Mitchell,
        Filter::Gaussian,
        Filter::Lanczos3,
        Filter::LanczosSharp,
    ];
}

impl FromStr for Filter {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let k: String = s
            .chars()
            .filter(|c| !matches!(c, '-' | '_' | ' '))
            .collect();
        Ok(match k.to_ascii_lowercase().as_str() {
            "point" | "nearest" | "sample" => Filter::Point,
            "box" => Filter::Box,
            "triangle" | "bilinear" | "linear" => Filter::Triangle,
            "catrom" | "catmullrom" | "catmull" => Filter::CatmullRom,
            "mitchell" => Filter::Mitchell,
            "gaussian" => Filter::Gaussian,
            "lanczos" | "lanczos3" => Filter::Lanczos3,
            "lanczossharp" => Filter::LanczosSharp,
            _ => return Err(Error::BadOption(format!("unknown filter {s:?}"))),
        })
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Filter::Point => "point",
            Filter::Box => "box",
            Filter::Triangle => "triangle",
            Filter::CatmullRom => "catrom",
            Filter::Mitchell => "mitchell",
            Filter::Gaussian => "gaussian",
            Filter::Lanczos3 => "lanczos",
            Filter::LanczosSharp => "lanczossharp",
        })
    }
}

/// Which engine does the resample (decode and encode stay on the CPU either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResampleEngine {
    /// fast_image_resize's SIMD convolution on the calling thread (`cpu-fir`); the default.
    #[default]
    Cpu,
    /// The GPU engine (`gpu-wgpu`) on the device `gpu::device()` picks
    /// (`REMORA_GPU`'s policy); [`Error::Gpu`] when none opens or the crate was built without
    /// its `gpu` feature.
    Gpu,
    /// The GPU engine when a hardware GPU opens (never a CPU-type Vulkan device such as
    /// lavapipe, which is slower than the CPU engine), else the CPU; a failure on the device
    /// falls back to the CPU too.
    Auto,
}

impl FromStr for ResampleEngine {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(ResampleEngine::Cpu),
            "gpu" => Ok(ResampleEngine::Gpu),
            "auto" => Ok(ResampleEngine::Auto),
            _ => Err(Error::BadOption(format!(
                "unknown engine {s:?} (cpu, gpu or auto)"
            ))),
        }
    }
}

impl fmt::Display for ResampleEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResampleEngine::Cpu => "cpu",
            ResampleEngine::Gpu => "gpu",
            ResampleEngine::Auto => "auto",
        })
    }
}

/// JPEG chroma subsampling of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// No subsampling (`4:4:4`, `1x1`).
    S444,
    /// Half horizontal resolution (`4:2:2`, `2x1`).
    S422,
    /// Half resolution both ways (`4:2:0`, `2x2`).
    S420,
    /// Half vertical resolution (`4:4:0`, `1x2`).
    S440,
    /// Quarter horizontal resolution (`4:1:1`, `4x1`).
    S411,
}

impl Sampling {
    /// The subsampling whose luma factors are `h`×`v` with 1×1 chroma.
    pub fn from_factors(h: u8, v: u8) -> Option<Sampling> {
        Some(match (h, v) {
            (1, 1) => Sampling::S444,
            (2, 1) => Sampling::S422,
            (2, 2) => Sampling::S420,
            (1, 2) => Sampling::S440,
            (4, 1) => Sampling::S411,
            _ => return None,
        })
    }
}

impl FromStr for Sampling {
    type Err = Error;
    /// `4:4:4`, `4:2:2`, `4:2:0`, `4:4:0`, `4:1:1`, or ImageMagick's `HxV[,1x1,1x1]`
    /// (the luma factors; chroma must be 1x1).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::BadOption(format!("unknown sampling factor {s:?}"));
        let t = s.trim();
        let by_ratio = match t {
            "4:4:4" => Some(Sampling::S444),
            "4:2:2" => Some(Sampling::S422),
            "4:2:0" => Some(Sampling::S420),
            "4:4:0" => Some(Sampling::S440),
            "4:1:1" => Some(Sampling::S411),
            _ => None,
        };
        if let Some(v) = by_ratio {
            return Ok(v);
        }
        let mut parts = t.split(',');
        let factor = |p: &str| -> Option<(u8, u8)> {
            let (h, v) = p.trim().split_once(['x', 'X'])?;
            Some((h.parse().ok()?, v.parse().ok()?))
        };
        let (h, v) = factor(parts.next().ok_or_else(bad)?).ok_or_else(bad)?;
        for p in parts {
            if factor(p) != Some((1, 1)) {
                return Err(bad());
            }
        }
        Sampling::from_factors(h, v).ok_or_else(bad)
    }
}

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sampling::S444 => "4:4:4",
            Sampling::S422 => "4:2:2",
            Sampling::S420 => "4:2:0",
            Sampling::S440 => "4:4:0",
            Sampling::S411 => "4:1:1",
        })
    }
}

/// Image file formats the engine reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JPEG (baseline, progressive; 8-bit gray or YCbCr).
    Jpeg,
    /// PNG (8-bit out; 16-bit in is reduced to 8).
    Png,
}

impl Format {
    /// Sniffs the format from the first bytes.
    pub fn detect(data: &[u8]) -> Option<Format> {
        if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Format::Jpeg)
        } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Format::Png)
        } else {
            None
        }
    }
}

/// Limits checked from the headers and the geometry, before any pixel is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest input in bytes.
    pub max_input_bytes: u64,
    /// Largest input in pixels (width × height in the header).
    pub max_pixels: u64,
    /// Largest output in pixels.
    pub max_output_pixels: u64,
    /// Most memory one job may hold at once, in bytes, as estimated from the headers and the
    /// geometry before anything is allocated (the input, and the largest of the decode,
    /// resample, orient, crop and encode stages: pixels, codec buffers, resampling tables).
    pub max_job_memory: u64,
    /// Most scans a JPEG may have (a progressive JPEG has about 10; thousands of scans make a
    /// small file cost minutes of decoding). Counted before decoding, and libjpeg-turbo's
    /// `TJPARAM_SCANLIMIT` is set to it.
    pub max_scans: u32,
}

impl Limits {
    /// The default [`Limits::max_job_memory`]: 512 MiB.
    pub const DEFAULT_JOB_MEMORY: u64 = 512 << 20;
    /// The default [`Limits::max_scans`]: 100.
    pub const DEFAULT_SCANS: u32 = 100;
}

impl Default for Limits {
    /// 64 MiB, 50 Mpx in (imgproxy's default), 50 Mpx out, 512 MiB a job, 100 JPEG scans.
    fn default() -> Self {
        Limits {
            max_input_bytes: 64 << 20,
            max_pixels: 50_000_000,
            max_output_pixels: 50_000_000,
            max_job_memory: Limits::DEFAULT_JOB_MEMORY,
            max_scans: Limits::DEFAULT_SCANS,
        }
    }
}

/// One resize: what `convert IN [-auto-orient] -resize GEOMETRY [-quality Q] … OUT` would do.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Output size, ImageMagick geometry.
    pub geometry: Geometry,
    /// `-thumbnail` instead of `-resize`: keeps only the ICC profile, LanczosSharp by default,
    /// never progressive.
    pub thumbnail: bool,
    /// JPEG quality 1–100; `None`: the input's estimate (as ImageMagick), else 92.
    pub quality: Option<u8>,
    /// Resampling filter; `None`: Lanczos3 when shrinking, Mitchell when enlarging the area.
    pub filter: Option<Filter>,
    /// Chroma subsampling; `None`: the input's own, else 4:4:4 at quality ≥ 90, else 4:2:0.
    pub sampling: Option<Sampling>,
    /// Progressive JPEG output.
    pub progressive: bool,
    /// Optimised Huffman tables (smaller files, a little slower).
    pub optimize_huffman: bool,
    /// Drop every metadata segment (EXIF, XMP, IPTC, comments and ICC).
    pub strip: bool,
    /// Apply the EXIF orientation to the pixels (and reset the tag to 1).
    pub auto_orient: bool,
    /// Output format; `None`: the input's.
    pub format: Option<Format>,
    /// Size limits.
    pub limits: Limits,
    /// The resampling engine ([`ResampleEngine::Cpu`] unless chosen).
    pub engine: ResampleEngine,
    /// Longest the job may take, from its start; checked between stages and inside the long
    /// loops (resample tiles, PNG rows), so a job ends shortly after it. `None`: no limit.
    pub timeout: Option<Duration>,
}

impl Job {
    /// A job with ImageMagick's defaults for `-resize geometry`.
    pub fn new(geometry: Geometry) -> Job {
        Job {
            geometry,
            thumbnail: false,
            quality: None,
            filter: None,
            sampling: None,
            progressive: false,
            optimize_huffman: true,
            strip: false,
            auto_orient: false,
            format: None,
            limits: Limits::default(),
            engine: ResampleEngine::Cpu,
            timeout: None,
        }
    }

    /// A job for a geometry string.
    pub fn parse(geometry: &str) -> Result<Job> {
        Ok(Job::new(Geometry::parse(geometry)?))
    }
}
