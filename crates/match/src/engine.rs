//! The engine contract: the trait every u8 search backend implements (the CPU kernels, the GPU
//! engine) and what they all share, so that `gpu/` depends on this module and the shared types
//! only, never on the CPU modules that choose it (`registry.rs` does).
//!
//! An engine does the search ([`MatchEngine::search_u8`]); the host work after it (the ratio
//! test unless the engine evaluated it, the maximum distance, the cross-check with its search
//! back on the same engine) is [`MatchEngine::match_u8`]'s default, the same for every engine,
//! so that every engine gives the same matches.

use std::sync::Arc;

use crate::accept::{accept, check, cross_check};
use crate::ratio::Dist2;
use crate::{Error, Match, Neighbours, Options, MAX_DIM};

/// The two nearest train points of every query and, when the engine evaluated Lowe's ratio test
/// itself, its verdict per query.
pub(crate) type Searched = (Vec<Neighbours<u32>>, Option<Vec<bool>>);

/// An engine, opened (cheap to clone).
pub(crate) type Engine = Arc<dyn MatchEngine>;

/// Why an engine is being opened: asked for by name (any device `REMORA_GPU`'s policy admits),
/// or tried by `auto` along the fallback list (the GPU engine on a CPU-type device such as
/// lavapipe declines, slower than the CPU kernels after it).
pub(crate) use remora_accel::registry::Purpose;

/// An engine's constructor in the registry: the engine, or why this machine cannot run it.
pub(crate) type Open = remora_accel::registry::Open<Engine, Error>;

/// A backend for the exact two-nearest-neighbour search of u8 descriptors.
pub(crate) trait MatchEngine: Send + Sync + std::fmt::Debug {
    /// The registry's name (`gpu-wgpu`, `avx512`, `avx2`, `portable`), as
    /// [`Kernel::name`](crate::Kernel::name) spells it.
    fn name(&self) -> &'static str;

    /// Where it runs, for reports: `cpu`, or the GPU as `GpuInfo` prints it.
    fn device(&self) -> String;

    /// The two nearest train points of every query (as [`crate::knn2_u8`] gives them) and,
    /// with `ratio`, the ratio test's verdict per query when the engine evaluates it (`None`:
    /// [`accept`] does, on the host). Checks its arguments; `threads` as in [`Options`]
    /// (an engine without a thread pool ignores it).
    fn search_u8(
        &self,
        query: &[u8],
        train: &[u8],
        dim: usize,
        ratio: Option<f32>,
        threads: Option<usize>,
    ) -> Result<Searched, Error>;

    /// The two nearest train points of every query.
    fn knn2_u8(
        &self,
        query: &[u8],
        train: &[u8],
        dim: usize,
        threads: Option<usize>,
    ) -> Result<Vec<Neighbours<u32>>, Error> {
        Ok(self.search_u8(query, train, dim, None, threads)?.0)
    }

    /// The accepted matches (as [`crate::match_u8`] gives them): the search, then the ratio
    /// test (unless the engine evaluated it), the maximum distance and the cross-check (its
    /// search back on this engine).
    fn match_u8(
        &self,
        query: &[u8],
        train: &[u8],
        dim: usize,
        opts: &Options,
    ) -> Result<Vec<Match>, Error> {
        check(opts)?;
        let (nb, passed) = self.search_u8(query, train, dim, opts.ratio, opts.threads)?;
        let out = accept(&nb, passed.as_deref(), opts, Dist2::Int);
        cross_check(out, query, train, dim, opts, |q, t, _| {
            self.knn2_u8(q, t, dim, opts.threads)
        })
    }
}

/// The registry's check that an engine answers to the name it is registered under.
impl remora_accel::registry::Named for dyn MatchEngine {
    fn name(&self) -> &str {
        MatchEngine::name(self)
    }
}

/// Checks a descriptor slice against `dim`; returns the number of points. Every engine and
/// every entry point applies it first.
pub(crate) fn count(which: &'static str, v: usize, dim: usize) -> Result<usize, Error> {
    if dim == 0 || dim > MAX_DIM {
        return Err(Error::Dimension(dim));
    }
    if !v.is_multiple_of(dim) {
        return Err(Error::Length { which, len: v, dim });
    }
    let n = v / dim;
    if n >= u32::MAX as usize {
        return Err(Error::TooMany { which, n });
    }
    Ok(n)
}
