//! The separable resample behind one trait, [`Resampler`]: the CPU engine (fast_image_resize's
//! SIMD convolution on 8-bit pixels, `cpu-fir`) and, with the `gpu` feature, the GPU engine
//! (`gpu::GpuResampler`, `gpu-wgpu`); [`ResampleEngine`] picks one from the engine registry (the
//! one module that names `gpu/`, which stays a leaf), [`resamplers`] lists every engine this
//! machine has (the cross-engine tests and `remora bench resize --engine all`).
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
pub use crate::cpu::{CpuResampler, CPU_ENGINE};
use crate::error::{Error, Result};
use crate::options::{Filter, ResampleEngine};
use crate::orient::Pixels;
use crate::registry::ENGINES;
use crate::resampler::check;
pub use crate::resampler::Resampler;

/// Every engine this machine has, the CPU's first, and for each one missing why (a GPU engine
/// on any device `gpu::device()` opens, a CPU-type one included).
pub fn resamplers() -> (Vec<Arc<dyn Resampler>>, Vec<String>) {
    let (mut have, mut missing) = (Vec::new(), Vec::new());
    for (_, engine) in ENGINES.list() {
        match engine {
            Ok(e) => have.push(e),
            Err(e) => missing.push(e.to_string()),
        }
    }
    // The registry lists the GPU first (`auto` tries it first); the CPU, the reference the
    // others are compared with, comes first here.
    have.sort_by_key(|e| e.name() != CPU_ENGINE);
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
