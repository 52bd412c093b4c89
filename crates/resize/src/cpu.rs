//! The CPU engine, `cpu-fir` (fast_image_resize through [`crate::tiling`]): apart from
//! `resample.rs` so that the registry can list it while `resample.rs` lists the registry.

use crate::budget::Stop;
use crate::error::Result;
use crate::options::Filter;
use crate::resampler::Resampler;

/// The CPU engine's name in results.
pub const CPU_ENGINE: &str = "cpu-fir";

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
