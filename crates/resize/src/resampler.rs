//! The engine contract: the trait every resampling engine implements and what they all share
//! (the argument checks, ImageMagick's LanczosSharp kernel, the GPU engine's name, which the
//! registry lists in every build), so that `gpu/` depends on this module and the shared types
//! only, never on the CPU modules that choose it (`registry.rs` does).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::options::Filter;

/// The GPU engine's name in results.
pub const GPU_ENGINE: &str = "gpu-wgpu";

/// Why an engine is being opened: asked for by name (any device `gpu::device()` gives, a
/// CPU-type one included), or tried by `auto` along the fallback list (the GPU engine on a
/// CPU-type device such as lavapipe declines, slower than the CPU engine after it).
pub(crate) use remora_accel::registry::Purpose;

/// An engine's constructor in the registry: the engine, or why this machine cannot run it.
pub(crate) type Open = remora_accel::registry::Open<Arc<dyn Resampler>, Error>;

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

/// The registry's check that an engine answers to the name it is registered under.
impl remora_accel::registry::Named for dyn Resampler {
    fn name(&self) -> &str {
        Resampler::name(self)
    }
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
