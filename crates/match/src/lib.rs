//! Exact descriptor matching for photogrammetry (MicMac's `mm3d Ann`, OpenCV's
//! `BFMatcher::knnMatch(k = 2)` + Lowe's ratio test), and the keypoint and match file formats
//! those tools read and write.
//!
//! What it does:
//! - [`knn2_u8`] / [`knn2_f32`]: the exact two nearest neighbours (squared Euclidean distance) of
//!   every query descriptor among the train (reference) descriptors. u8 descriptors use exact
//!   integer arithmetic, so every [`Kernel`] (portable, AVX2, AVX-512) gives bit-identical
//!   results; f32 descriptors use one fixed summation order, so results do not depend on the
//!   number of threads. Both sets are tiled for the caches, the distance matrix is never stored,
//!   and query blocks run on all cores (rayon).
//! - [`match_u8`] / [`match_f32`]: the accepted [`Match`]es: Lowe's ratio test `d1 < ratio · d2`
//!   (strict, exact), optional cross-check (mutual best) and absolute maximum distance.
//! - `GpuMatcher` (feature `gpu`, on by default; [`Kernel::Gpu`]): the same exact search of u8
//!   descriptors in a WGSL compute shader on any Vulkan GPU (or Mesa's lavapipe), with the
//!   ratio test fused into the pass; identical results to the CPU kernels.
//! - [`neighbour_filter`]: MicMac-style 2-D neighbourhood consistency of the accepted matches.
//! - [`formats`]: MicMac Pastis `.dat` v0, Digeo `.dat` v1, `.result` v0/v1, Lowe `.key`, `.npy`.
//!
//! Ties are broken by the lower index everywhere (best and second best neighbour, cross-check,
//! neighbour filter), so results are deterministic.
//!
//! What it does not: approximate search (kd-trees), f32 descriptors on the GPU, I/O policy
//! (the CLI and the Python package decide paths and progress).
//!
//! Panics: none on user input; bad arguments and malformed files are [`Error`]s and
//! [`formats::FormatError`]s.
//!
//! ```
//! use remora_match::{match_u8, Options};
//! let train = [0u8, 0, 10, 10, 200, 200]; // three 2-D descriptors
//! let query = [1u8, 1];
//! let m = match_u8(&query, &train, 2, &Options::default()).unwrap();
//! assert_eq!((m[0].query, m[0].train), (0, 0));
//! assert_eq!(m[0].distance, 2f32.sqrt());
//! ```
#![warn(missing_docs)]

mod accept;
mod engine;
mod error;
mod filter;
pub mod formats;
#[cfg(feature = "gpu")]
mod gpu;
mod kernel;
mod options;
mod ratio;
mod registry;
mod search;
mod top2;

pub use error::Error;
pub use filter::{neighbour_filter, NeighbourFilter};
#[cfg(feature = "gpu")]
pub use gpu::GpuMatcher;
pub use kernel::Kernel;
pub use options::{Match, Neighbour, Neighbours, Options, MAX_DIM};
pub use search::{knn2_f32, knn2_u8, match_f32, match_u8};
