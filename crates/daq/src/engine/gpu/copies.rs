//! The device copies the engine keeps (tables, assembly map, integration matrix) and the bands
//! they are cut into: apart from `resident`, which makes and caches them, because the dispatch
//! lists (`steps`) and the frame slots (`slot`) bind them, and `resident` caches slots too.
use std::ops::Range;

use remora_accel::gpu::Pooled;

/// `total` items cut into consecutive ranges of at most `per`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bands {
    total: usize,
    per: usize,
}

impl Bands {
    pub(crate) fn new(total: usize, per: usize) -> Self {
        Self {
            total,
            per: per.max(1),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.total.div_ceil(self.per)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        (0..self.len()).map(|k| k * self.per..((k + 1) * self.per).min(self.total))
    }
}

/// Pedestals and gains per band: three planes of the band's pixels in each buffer.
pub(crate) struct DeviceTables {
    pub(super) key: (usize, usize),
    pub(crate) revision: u64,
    pub(crate) bands: Bands,
    pub(crate) ped: Vec<Pooled>,
    pub(crate) gain: Vec<Pooled>,
}

/// The assembly map's per-pixel entries, in image bands.
pub(crate) struct DeviceMap {
    pub(super) key: (usize, usize, u64),
    pub(crate) bands: Bands,
    pub(crate) src: Vec<Pooled>,
}

/// A run of whole bins of the matrix with its entries (row pointers rebased to the chunk).
pub(crate) struct MatrixChunk {
    pub(crate) bins: Range<usize>,
    pub(crate) indptr: Pooled,
    pub(crate) indices: Pooled,
    pub(crate) coef: Pooled,
    pub(crate) ncoef: Pooled,
}

/// The integration matrix in chunks of whole bins.
pub(crate) struct DeviceMatrix {
    pub(super) key: (usize, usize, u64),
    pub(crate) chunks: Vec<MatrixChunk>,
}
