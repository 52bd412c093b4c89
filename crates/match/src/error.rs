//! The one error type of the matcher's functions (file formats have their own).

/// What went wrong in a call to the matcher.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The descriptor dimension is 0 or larger than [`crate::MAX_DIM`].
    #[error("descriptor dimension {0} is not in 1..={max}", max = crate::MAX_DIM)]
    Dimension(usize),
    /// A descriptor slice's length is not a multiple of the dimension.
    #[error("{which} has {len} values, not a multiple of the dimension {dim}")]
    Length {
        /// "query" or "train".
        which: &'static str,
        /// The slice's length.
        len: usize,
        /// The dimension.
        dim: usize,
    },
    /// More points than fit a `u32` index.
    #[error("{which} has {n} points; at most {max} are supported", max = u32::MAX - 1)]
    TooMany {
        /// "query" or "train".
        which: &'static str,
        /// The number of points.
        n: usize,
    },
    /// The ratio is not in (0, 1].
    #[error("ratio {0} is not in (0, 1]")]
    Ratio(f32),
    /// The maximum distance is negative or not finite.
    #[error("max distance {0} is not a finite number >= 0")]
    MaxDistance(f32),
    /// An f32 descriptor holds NaN or an infinity.
    #[error("{which} descriptor {index} holds a value that is not finite")]
    NotFinite {
        /// "query" or "train".
        which: &'static str,
        /// The point's index.
        index: usize,
    },
    /// The kernel asked for does not run on this CPU.
    #[error("kernel {0:?} is not available on this CPU")]
    KernelUnavailable(crate::Kernel),
    /// No engine of that name (see [`Kernel`](crate::Kernel)'s `FromStr`).
    #[error("unknown engine {name:?} (known: {known})")]
    UnknownEngine {
        /// The name asked for.
        name: String,
        /// The known names.
        known: String,
    },
    /// The GPU engine cannot run: no device under the `REMORA_GPU` policy (the text is the
    /// backend's reason), a failure on the device, the crate built without its `gpu` feature, or
    /// f32 descriptors (the GPU engine matches u8 ones only).
    #[error("GPU engine: {0}")]
    Gpu(String),
    /// `threads` is `Some(0)` or the thread pool could not be built.
    #[error("thread pool: {0}")]
    Threads(String),
    /// Keypoint coordinates do not cover every index the matches name.
    #[error("{which} coordinates: {len} points, but a match names index {index}")]
    Coordinates {
        /// "query" or "train".
        which: &'static str,
        /// Number of coordinates given.
        len: usize,
        /// The offending index.
        index: u32,
    },
}
