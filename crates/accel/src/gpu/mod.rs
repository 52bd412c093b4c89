//! The GPU backend: WGSL compute shaders through `wgpu` on Vulkan.
//!
//! What it does: picks a device at run time ([`Gpu::shared`], policy from `REMORA_GPU`), compiles
//! each pipeline once and caches it, hands out pooled storage buffers, uploads through wgpu's
//! staging belt and reads back through a ring of mapped staging buffers, and lets a caller keep
//! one submission in flight while it prepares the next ([`Readback`]): that is how engines
//! overlap transfer and compute (double buffering).
//!
//! What it does not: hold domain kernels (the JUNGFRAU, matching and resampling shaders live
//! in their crates) or fall back by itself; engines decide that, and [`GpuError`] says why no
//! device could be used.
//!
//! Why wgpu: one WGSL source runs on NVIDIA, AMD and Intel GPUs through their Vulkan drivers
//! and, bit-exactly for integer work, on Mesa's software Vulkan (lavapipe), which is how CI tests
//! these engines without a GPU.
//!
//! ```no_run
//! use remora_accel::gpu::{Gpu, GpuPolicy};
//! let gpu = Gpu::open(GpuPolicy::Any).unwrap();
//! println!("{}", gpu.info());
//! ```
mod buffers;
mod counters;
mod device;
mod mapped;

pub use buffers::{Pooled, ReadBytes, Readback};
pub use counters::GpuCounters;
pub use device::{Gpu, GpuError, GpuInfo, GpuPolicy};
pub use mapped::Upload;
pub use wgpu;

/// Workgroups needed for `items` items at `per_group` items each.
pub fn groups(items: u64, per_group: u32) -> u32 {
    u32::try_from(items.div_ceil(u64::from(per_group.max(1)))).unwrap_or(u32::MAX)
}
