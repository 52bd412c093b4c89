//! Compute backends for remora.
//!
//! What it does: the CPU backend, i.e. a sized thread pool ([`CpuPool`]) that runs work split
//! into chunks with rayon, runtime SIMD feature detection ([`simd`]) so callers can dispatch to
//! kernels compiled for AVX2, cache-line-aligned frame buffers ([`AlignedBuf`]), and a
//! description of the backend that ran ([`BackendInfo`]).
//!
//! [`registry`]: engines by name in a fallback order, each opened or refused with the reason,
//! generic over the engine and error types of the crate that lists them (no `gpu` needed).
//!
//! With the `gpu` feature (on by default), [`gpu`]: device selection, pipelines, pooled buffers
//! and staged transfers for WGSL compute shaders through wgpu.
//!
//! What it does not: it holds no domain logic (the JUNGFRAU, matching and resampling kernels live
//! in `remora-daq`, `remora-match` and `remora-resize`, which consume this crate).
#![warn(missing_docs)]

mod buffer;
#[cfg(feature = "gpu")]
pub mod gpu;
mod pool;
pub mod registry;
pub mod simd;

pub use buffer::AlignedBuf;
pub use pool::{BackendInfo, CpuPool, PoolError};
