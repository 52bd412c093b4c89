//! Compute backends for remora: a CPU backend (thread pool, SIMD kernels, aligned buffers);
//! the CUDA backend comes later behind the `cuda` feature.
#![warn(missing_docs)]
