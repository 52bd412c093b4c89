//! Compute backends for remora.
//!
//! What it does: the CPU backend, i.e. a sized thread pool ([`CpuPool`]) that runs work split
//! into chunks with rayon, runtime SIMD feature detection ([`simd`]) so callers can dispatch to
//! kernels compiled for AVX2, cache-line-aligned frame buffers ([`AlignedBuf`]), and a
//! description of the backend that ran ([`BackendInfo`]).
//!
//! What it does not: it holds no domain logic (the JUNGFRAU kernels live in `remora-daq`, which
//! consumes this crate) and it has no GPU backend yet: the `cuda` feature is reserved for it.
#![warn(missing_docs)]

mod buffer;
mod pool;
pub mod simd;

pub use buffer::AlignedBuf;
pub use pool::{BackendInfo, CpuPool, PoolError};
