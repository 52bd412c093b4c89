//! The device buffers and bind groups of the GPU engine, kept between calls.
//!
//! A call needs the same seven storage buffers, two parameter blocks and two bind groups
//! whatever its inputs; only their sizes change. The workspace holds them (taken from the
//! device's pool once, never returned while in use) and is rebuilt, larger, only when a call
//! needs more than it has: a steady stream of calls of one size creates nothing.
use std::sync::Arc;

use remora_accel::gpu::{wgpu, Gpu, Pooled};

use super::{gpu_err, shader};
use crate::Error;

/// Bytes of each storage buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Sizes {
    pub qd: u64,
    pub qn: u64,
    pub td: u64,
    pub tn: u64,
    pub part: u64,
    pub top: u64,
    pub passed: u64,
}

impl Sizes {
    fn fields(&self) -> [u64; 7] {
        [
            self.qd,
            self.qn,
            self.td,
            self.tn,
            self.part,
            self.top,
            self.passed,
        ]
    }

    /// Whether every buffer of `self` is at least as large as `need`'s.
    fn covers(&self, need: &Sizes) -> bool {
        self.fields()
            .iter()
            .zip(need.fields())
            .all(|(h, n)| *h >= n)
    }

    /// The larger of each.
    fn max(&self, o: &Sizes) -> Sizes {
        Sizes {
            qd: self.qd.max(o.qd),
            qn: self.qn.max(o.qn),
            td: self.td.max(o.td),
            tn: self.tn.max(o.tn),
            part: self.part.max(o.part),
            top: self.top.max(o.top),
            passed: self.passed.max(o.passed),
        }
    }
}

/// Buffers (see `top2.wgsl` for their bindings), pipelines and bind groups of the engine.
#[derive(Debug)]
pub(super) struct Workspace {
    sizes: Sizes,
    pub qd: Pooled,
    pub qn: Pooled,
    pub td: Pooled,
    pub tn: Pooled,
    /// The split results: only the bind groups use it, held so that it stays out of the pool.
    #[allow(dead_code)]
    pub part: Pooled,
    pub top: Pooled,
    pub passed: Pooled,
    /// `search`'s parameters (binding 7).
    pub sp: Pooled,
    /// `merge`'s parameters (binding 8).
    pub mp: Pooled,
    pub search: Arc<wgpu::ComputePipeline>,
    pub merge: Arc<wgpu::ComputePipeline>,
    pub search_bind: wgpu::BindGroup,
    pub merge_bind: wgpu::BindGroup,
}

impl Workspace {
    /// The workspace in `slot`, replaced by one large enough for `need` (and for what the old
    /// one held) when it is not.
    pub fn ensure<'a>(
        slot: &'a mut Option<Workspace>,
        g: &Gpu,
        need: Sizes,
    ) -> Result<&'a Workspace, Error> {
        let grown = match slot.take() {
            Some(w) if w.sizes.covers(&need) => w,
            Some(w) => {
                let sizes = w.sizes.max(&need);
                drop(w); // its buffers go back to the pool first
                Workspace::new(g, sizes)?
            }
            None => Workspace::new(g, need)?,
        };
        Ok(slot.insert(grown))
    }

    fn new(g: &Gpu, sizes: Sizes) -> Result<Workspace, Error> {
        let src = shader::source();
        let search = g.pipeline("match-top2", src, "search").map_err(gpu_err)?;
        let merge = g.pipeline("match-top2", src, "merge").map_err(gpu_err)?;
        let st = |what, bytes: u64| g.storage(what, bytes.max(16)).map_err(gpu_err);
        let params = |what| {
            use wgpu::BufferUsages as U;
            g.buffer(what, 32, U::UNIFORM | U::COPY_DST)
                .map_err(gpu_err)
        };
        let (qd, qn) = (
            st("match query", sizes.qd)?,
            st("match query norms", sizes.qn)?,
        );
        let (td, tn) = (
            st("match train", sizes.td)?,
            st("match train norms", sizes.tn)?,
        );
        let part = st("match splits", sizes.part)?;
        let (top, passed) = (
            st("match top2", sizes.top)?,
            st("match ratio", sizes.passed)?,
        );
        let (sp, mp) = (
            params("match search params")?,
            params("match merge params")?,
        );
        let search_bind = g.bind_at(
            &search,
            &[
                (0, qd.as_entire_binding()),
                (1, td.as_entire_binding()),
                (2, tn.as_entire_binding()),
                (3, part.as_entire_binding()),
                (7, sp.as_entire_binding()),
            ],
        );
        let merge_bind = g.bind_at(
            &merge,
            &[
                (3, part.as_entire_binding()),
                (4, qn.as_entire_binding()),
                (5, top.as_entire_binding()),
                (6, passed.as_entire_binding()),
                (8, mp.as_entire_binding()),
            ],
        );
        Ok(Workspace {
            sizes,
            qd,
            qn,
            td,
            tn,
            part,
            top,
            passed,
            sp,
            mp,
            search,
            merge,
            search_bind,
            merge_bind,
        })
    }
}
