//! The separable resample behind one trait, [`Resampler`]: the CPU engine (fast_image_resize's
//! SIMD convolution on 8-bit pixels, `cpu-fir`) and, with the `gpu` feature, the GPU engine
//! ([`crate::gpu::GpuResampler`], `gpu-wgpu`); [`ResampleEngine`] picks one, [`resamplers`] lists every
//! engine this machine has (the cross-engine tests and `remora bench resize --engine all`).
//!
//! ```
//! use remora_resize::resample::{resamplers, Resampler};
//! use remora_resize::Filter;
//! let (engines, _missing) = resamplers();
//! let rgb = vec![100u8; 8 * 6 * 3];
//! for e in &engines {
//!     let out = e.resample(&rgb, (8, 6), 3, (4, 3), Filter::Lanczos3).unwrap();
//!     assert!(out.iter().all(|&v| v == 100), "{}", e.name());
//! }
//! ```

use std::sync::Arc;

use crate::budget::Stop;
use crate::error::{Error, Result};
use crate::options::{Filter, ResampleEngine};
use crate::orient::Pixels;
use fast_image_resize as fir;

/// The CPU engine's name in results.
pub const CPU_ENGINE: &str = "cpu-fir";

/// A resampling engine: the separable pass on interleaved 8-bit pixels.
pub trait Resampler: Send + Sync + std::fmt::Debug {
    /// Its name in results (`cpu-fir`, `gpu-wgpu`).
    fn name(&self) -> &'static str;

    /// Resamples `src` (`size` = width × height, `channels` 1 gray, 2 gray+alpha, 3 RGB,
    /// 4 RGBA, rows packed) to `to` with `filter`, as fast_image_resize does: vertical pass then
    /// horizontal, each only when its side changes, alpha premultiplied while resampling (not
    /// for [`Filter::Point`]), the intermediate rounded to 8 bits. An unchanged size gives a
    /// copy. Sizes must be at least 1×1 and `src` exactly `width · height · channels` bytes.
    fn resample(
        &self,
        src: &[u8],
        size: (u32, u32),
        channels: u8,
        to: (u32, u32),
        filter: Filter,
    ) -> Result<Vec<u8>> {
        check(src, size, channels, to)?;
        if size == to {
            return Ok(src.to_vec());
        }
        self.resize_checked(src, size, channels, to, filter)
    }

    /// The engine's own work for [`resample`](Self::resample), on arguments it checked and a
    /// size that changes.
    fn resize_checked(
        &self,
        src: &[u8],
        size: (u32, u32),
        channels: u8,
        to: (u32, u32),
        filter: Filter,
    ) -> Result<Vec<u8>>;
}

/// ImageMagick's LanczosSharp blur (`resize.c`): the Lanczos window narrowed slightly.
pub(crate) const LANCZOS_SHARP_BLUR: f64 = 0.981_250_564_426_935_6;

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let a = x * std::f64::consts::PI;
        a.sin() / a
    }
}

/// LanczosSharp's kernel (support `3 · LANCZOS_SHARP_BLUR`).
pub(crate) fn lanczos_sharp(x: f64) -> f64 {
    let x = x / LANCZOS_SHARP_BLUR;
    if x.abs() < 3.0 {
        sinc(x) * sinc(x / 3.0)
    } else {
        0.0
    }
}

/// fast_image_resize's algorithm for one of ImageMagick's filters.
pub(crate) fn algorithm(filter: Filter) -> Result<fir::ResizeAlg> {
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

/// Checks what every engine requires of its input.
pub(crate) fn check(
    src: &[u8],
    (w, h): (u32, u32),
    channels: u8,
    (tw, th): (u32, u32),
) -> Result<()> {
    if !(1..=4).contains(&channels) {
        return Err(Error::BadOption(format!(
            "{channels} channels per pixel (1 to 4 are handled)"
        )));
    }
    if w == 0 || h == 0 || tw == 0 || th == 0 {
        return Err(Error::BadOption(format!(
            "empty image: {w}x{h} to {tw}x{th}"
        )));
    }
    let want = u64::from(w) * u64::from(h) * u64::from(channels);
    if src.len() as u64 != want {
        return Err(Error::BadOption(format!(
            "{} bytes for {w}x{h} pixels of {channels} channels ({want} expected)",
            src.len()
        )));
    }
    Ok(())
}

/// The CPU engine: fast_image_resize (AVX2/SSE4.1/NEON chosen at run time), single-threaded.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuResampler;

impl Resampler for CpuResampler {
    fn name(&self) -> &'static str {
        CPU_ENGINE
    }

    fn resize_checked(
        &self,
        src: &[u8],
        size: (u32, u32),
        channels: u8,
        to: (u32, u32),
        filter: Filter,
    ) -> Result<Vec<u8>> {
        // In tiles when one call's tables would be large (a long, thin output).
        crate::tiling::resize(src, size, channels, to, filter, &Stop::never())
    }
}

impl ResampleEngine {
    /// The engine this choice runs on this machine: [`ResampleEngine::Gpu`] fails with [`Error::Gpu`]
    /// when no device opens; [`ResampleEngine::Auto`] is the GPU's only on a hardware GPU.
    pub fn resampler(self) -> Result<Arc<dyn Resampler>> {
        match self {
            ResampleEngine::Cpu => Ok(Arc::new(CpuResampler)),
            ResampleEngine::Gpu => gpu_resampler(false),
            ResampleEngine::Auto => {
                Ok(gpu_resampler(true).unwrap_or_else(|_| Arc::new(CpuResampler)))
            }
        }
    }
}

#[cfg(feature = "gpu")]
fn gpu_resampler(hardware_only: bool) -> Result<Arc<dyn Resampler>> {
    crate::gpu::resampler(crate::gpu::device(), hardware_only)
}

#[cfg(not(feature = "gpu"))]
fn gpu_resampler(_hardware_only: bool) -> Result<Arc<dyn Resampler>> {
    Err(Error::Gpu(
        "this build of remora-resize has no GPU engine (its `gpu` feature is off)".into(),
    ))
}

/// Every engine this machine has, the CPU's first, and for each one missing why (a GPU engine
/// on any device `gpu::device()` opens, a CPU-type one included).
pub fn resamplers() -> (Vec<Arc<dyn Resampler>>, Vec<String>) {
    let mut have: Vec<Arc<dyn Resampler>> = vec![Arc::new(CpuResampler)];
    let mut missing = Vec::new();
    match gpu_resampler(false) {
        Ok(g) => have.push(g),
        Err(e) => missing.push(e.to_string()),
    }
    (have, missing)
}

/// Resizes to `w`×`h` on the job's engine, and names the engine that ran (`None`: the size is
/// unchanged, the pixels are returned as they are). `Auto` falls back to the CPU when the GPU
/// fails. The CPU engine checks `stop` between its tiles.
pub(crate) fn resize(
    src: Pixels,
    w: u32,
    h: u32,
    filter: Option<Filter>,
    engine: ResampleEngine,
    stop: &Stop<'_>,
) -> Result<(Pixels, Option<&'static str>)> {
    let (w, h) = (w.max(1), h.max(1));
    if (src.width, src.height) == (w, h) {
        return Ok((src, None));
    }
    let data = run(
        &src.data,
        (src.width, src.height),
        src.channels,
        (w, h),
        filter.unwrap_or(Filter::Lanczos3),
        engine,
        stop,
    )?;
    let pixels = Pixels {
        data: data.0,
        width: w,
        height: h,
        channels: src.channels,
    };
    Ok((pixels, Some(data.1)))
}

/// One resample on `engine`, with the name of the engine that ran.
pub(crate) fn run(
    src: &[u8],
    size: (u32, u32),
    channels: u8,
    to: (u32, u32),
    filter: Filter,
    engine: ResampleEngine,
    stop: &Stop<'_>,
) -> Result<(Vec<u8>, &'static str)> {
    let cpu = |stop: &Stop<'_>| -> Result<Vec<u8>> {
        check(src, size, channels, to)?;
        if size == to {
            return Ok(src.to_vec());
        }
        crate::tiling::resize(src, size, channels, to, filter, stop)
    };
    if engine == ResampleEngine::Cpu {
        return Ok((cpu(stop)?, CPU_ENGINE));
    }
    let r = engine.resampler()?;
    if r.name() == CPU_ENGINE {
        return Ok((cpu(stop)?, CPU_ENGINE));
    }
    stop.check("resample")?;
    match r.resample(src, size, channels, to, filter) {
        Ok(v) => Ok((v, r.name())),
        Err(Error::Gpu(_)) if engine == ResampleEngine::Auto => Ok((cpu(stop)?, CPU_ENGINE)),
        Err(e) => Err(e),
    }
}

/// The bytes a resample of `size` to `to` holds besides its source and destination images:
/// the CPU engine's tables and intermediate image per tile; an engine that does not tile
/// (the GPU's) its whole tables and a copy of the source and destination.
pub(crate) fn working_bytes(
    size: (u32, u32),
    to: (u32, u32),
    channels: u8,
    filter: Filter,
    engine: ResampleEngine,
) -> u64 {
    if size == to {
        return 0;
    }
    let (_, cpu) = crate::tiling::plan(size, to, channels, filter);
    match engine {
        ResampleEngine::Cpu => cpu,
        ResampleEngine::Gpu | ResampleEngine::Auto => {
            let images = crate::budget::pixels(size.0, size.1, channels)
                + crate::budget::pixels(to.0, to.1, channels);
            cpu.max(crate::tiling::untiled_bytes(size, to, channels, filter) + images)
        }
    }
}
