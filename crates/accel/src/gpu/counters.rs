//! What a device has been asked to do: objects created, submissions, bytes each way.
//!
//! Engines promise a steady state (one submission per frame, nothing created after warm-up,
//! no more bytes over the bus than the frame and the results asked for); these counters are
//! how tests and benchmarks hold them to it. Every object and transfer that goes through
//! [`Gpu`](super::Gpu)'s helpers is counted; work recorded directly on the wgpu device is not.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) buffers: AtomicU64,
    pub(super) bind_groups: AtomicU64,
    pub(super) pipelines: AtomicU64,
    pub(super) submissions: AtomicU64,
    pub(super) h2d_bytes: AtomicU64,
    pub(super) d2h_bytes: AtomicU64,
}

impl Counters {
    pub(super) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    pub(super) fn snapshot(&self) -> GpuCounters {
        GpuCounters {
            buffers: self.buffers.load(Relaxed),
            bind_groups: self.bind_groups.load(Relaxed),
            pipelines: self.pipelines.load(Relaxed),
            submissions: self.submissions.load(Relaxed),
            h2d_bytes: self.h2d_bytes.load(Relaxed),
            d2h_bytes: self.d2h_bytes.load(Relaxed),
        }
    }
}

/// Totals since the device was opened; subtract two snapshots with [`since`](Self::since).
///
/// ```no_run
/// use remora_accel::gpu::{Gpu, GpuPolicy};
/// let gpu = Gpu::open(GpuPolicy::Any).unwrap();
/// let before = gpu.counters();
/// // ... work ...
/// let d = gpu.counters().since(&before);
/// assert_eq!(d.objects(), 0, "nothing created in the steady state");
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuCounters {
    /// Device buffers created (pool misses; a pooled buffer reused is not counted).
    pub buffers: u64,
    /// Bind groups created.
    pub bind_groups: u64,
    /// Compute pipelines compiled.
    pub pipelines: u64,
    /// Queue submissions.
    pub submissions: u64,
    /// Bytes written from the host into device buffers.
    pub h2d_bytes: u64,
    /// Bytes copied from device buffers back to the host.
    pub d2h_bytes: u64,
}

impl GpuCounters {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &GpuCounters) -> GpuCounters {
        GpuCounters {
            buffers: self.buffers - earlier.buffers,
            bind_groups: self.bind_groups - earlier.bind_groups,
            pipelines: self.pipelines - earlier.pipelines,
            submissions: self.submissions - earlier.submissions,
            h2d_bytes: self.h2d_bytes - earlier.h2d_bytes,
            d2h_bytes: self.d2h_bytes - earlier.d2h_bytes,
        }
    }

    /// Objects created: buffers, bind groups and pipelines.
    pub fn objects(&self) -> u64 {
        self.buffers + self.bind_groups + self.pipelines
    }
}
