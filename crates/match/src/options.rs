//! The matcher's inputs (options) and outputs (neighbours, matches) as plain data.

use crate::Kernel;

/// Largest descriptor dimension accepted. With it the squared distance of two u8 descriptors
/// (at most `1024 · 255²` < 2²⁷) and the kernels' `‖t‖² − 2 q·t` stay exact in `i32`.
pub const MAX_DIM: usize = 1024;

/// How to search and which matches to accept.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Lowe's ratio test on plain distances: accept when `d1 < ratio · d2` (strictly, computed
    /// exactly on the squared distances). `None` disables it. Default 0.6 (MicMac's).
    /// With the test on, a query whose train set has a single point (no second neighbour) is
    /// rejected.
    pub ratio: Option<f32>,
    /// Keep a match only when the query is also the train point's nearest query (mutual best,
    /// ties to the lower query index), as OpenCV's and COLMAP's cross-check do.
    pub cross_check: bool,
    /// Keep a match only when its plain distance `d1 <= max_distance`.
    pub max_distance: Option<f32>,
    /// Number of threads; `None` uses rayon's global pool (all cores).
    pub threads: Option<usize>,
    /// Which kernel computes u8 distances; [`Kernel::Auto`] takes the fastest this CPU runs.
    pub kernel: Kernel,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ratio: Some(0.6),
            cross_check: false,
            max_distance: None,
            threads: None,
            kernel: Kernel::Auto,
        }
    }
}

/// One neighbour of a query: a train index and its squared distance (`u32` for u8
/// descriptors, exact; `f32` for f32 descriptors).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbour<D> {
    /// Index of the train point.
    pub index: u32,
    /// Squared Euclidean distance.
    pub dist2: D,
}

/// The two nearest train points of one query; `None` where the train set is too small.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbours<D> {
    /// The nearest train point (lowest index among equal distances).
    pub best: Option<Neighbour<D>>,
    /// The second nearest (lowest index among equal distances, other than `best`).
    pub second: Option<Neighbour<D>>,
}

/// An accepted match, OpenCV's `DMatch` with plain (not squared) distances.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Match {
    /// Index of the query point.
    pub query: u32,
    /// Index of its nearest train point.
    pub train: u32,
    /// Plain Euclidean distance to it.
    pub distance: f32,
    /// Plain distance to the second nearest train point, when there is one.
    pub second: Option<f32>,
}
