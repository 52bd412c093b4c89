//! The GPU engine (`gpu-wgpu`): the exact two-nearest-neighbour search of u8 descriptors in
//! WGSL compute shaders (`top2.wgsl`, expanded by `shader.rs`) on `remora-accel`'s wgpu
//! backend, with Lowe's ratio test fused into the same submission. A leaf: it implements the
//! crate's engine trait (`engine.rs`) and `registry.rs` lists it, so no CPU module names it.
//!
//! Arithmetic: descriptors are packed 4 u8 per u32 (each row padded with zeros to a whole
//! stage of [`KC`](shader::KC) words) and multiplied with WGSL's `dot4U8Packed`, which naga
//! lowers to SPIR-V `OpUDot` where the device has `shaderIntegerDotProduct` (Vulkan 1.3: NVIDIA's
//! driver maps it to `dp4a`; lavapipe has it too) and to exact shifts and adds elsewhere. The
//! shader ranks train points by the key `‖t‖² − 2 q·t` (exact in i32: below 2²⁷ in size at
//! [`MAX_DIM`](crate::MAX_DIM)) and adds `‖q‖²` back, so the distances are the CPU kernels'
//! integers.
//!
//! Tiling (`search`): a workgroup of 256 invocations takes 128 queries and one split of the train
//! set, walked in tiles of 128 points staged through workgroup memory 8 words of every row at a
//! time; each invocation holds an 8 × 8 block of dot products in registers (64 `dot4U8Packed`
//! per 4 loads of 16 bytes from workgroup memory) and a top-2 for each of its 8 queries. The
//! train set is cut into splits of whole tiles so that even a few thousand queries give the
//! device thousands of workgroups; a second pass (`merge`, same submission) merges each query's
//! split results and applies the ratio test. The distance matrix never exists: only each
//! query's (d1, i1, d2, i2) and verdict leave the device.
//!
//! Ties: each invocation sees its train points in increasing index order and keeps the first
//! of equal keys; partial results (invocations, splits, train chunks) are merged in
//! (distance, index) order, so the lower index wins as in the CPU kernels (`top2.rs`).
//!
//! Steady state: one submission per call (uploads ride on it), and after the first call of a
//! given size no buffer, bind group or pipeline is created: the buffers and both bind groups
//! are kept in a workspace shared by the matcher's clones, grown when a call needs more
//! (`Gpu::counters` shows it).
//!
//! Large sets: no binding may pass the device's `max_binding` (128 MiB on lavapipe), so the
//! queries and the train set are cut into chunks of whole rows. Query chunks are independent
//! (one is read back while the next runs). Train chunks run one after another on the same
//! query chunk: each merge pass merges into the previous chunk's (d1, i1, d2, i2) on the
//! device, whose train indices are lower, and only the last one applies the ratio test.
//!
//! What it does not: f32 descriptors, the cross-check's and maximum distance's bookkeeping
//! (done on the host after the search, as for the CPU kernels), subgroup operations (the
//! shared device is opened without optional features).
mod shader;
mod workspace;

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

pub use remora_accel::gpu::GpuCounters;
use remora_accel::gpu::{groups, Gpu, GpuError, GpuInfo, Readback};

use crate::engine::{count, Engine, MatchEngine, Purpose, Searched};
use crate::ratio::ratio_squared;
use crate::top2::NONE;
use crate::{Error, Match, Neighbour, Neighbours, Options};
use shader::{BLOCK, KC, MERGE_GROUP};
use workspace::{Sizes, Workspace};

/// Bytes of one query's result: d1, i1, d2, i2.
const TOP_BYTES: u64 = 16;
/// Largest chunk whatever the device allows: word indices stay far below 2³² in the shader.
const CHUNK_CAP: u64 = 1 << 30;
/// Workgroups a search pass aims at (query blocks × train splits): several waves on the
/// largest GPUs (132 SMs), so that the last wave's imbalance stays small.
const TARGET_GROUPS: usize = 2048;
/// `‖t‖²` of a padding train point: its key is never below a real one's.
const PAD_NORM: u32 = i32::MAX as u32;

fn gpu_err(e: GpuError) -> Error {
    Error::Gpu(e.to_string())
}

/// The GPU engine on one device. Cheap to clone; clones share one workspace (device buffers
/// and bind groups kept between calls), so concurrent calls on clones take turns.
///
/// ```no_run
/// use remora_match::GpuMatcher;
/// let gpu = GpuMatcher::shared().unwrap(); // the device REMORA_GPU allows
/// let n = gpu.knn2_u8(&[0, 0], &[3, 4, 1, 1], 2).unwrap();
/// assert_eq!(n[0].best.unwrap().index, 1);
/// ```
#[derive(Debug, Clone)]
pub struct GpuMatcher {
    gpu: Arc<Gpu>,
    max_chunk: Option<u64>,
    work: Arc<Mutex<Option<Workspace>>>,
}

/// Bookkeeping of one query chunk whose results are being read back.
struct InFlight {
    rows: Range<usize>,
    read: Readback,
}

/// How one call cuts its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    /// u32 words per descriptor row (a multiple of `KC`).
    words: usize,
    /// Queries per query chunk.
    q_rows: usize,
    /// Train points per train chunk.
    t_rows: usize,
    /// Train tiles (of `BLOCK` points) per split.
    split_tiles: usize,
    /// Most splits of a train chunk.
    splits: usize,
}

impl Plan {
    fn new(nq: usize, nt: usize, dim: usize, limit: u64) -> Plan {
        let words = dim.div_ceil(4).next_multiple_of(KC);
        let row = words as u64 * 4;
        // Query chunks bound the descriptors and the 16-byte results; train chunks the
        // descriptors (the 4-byte norms are never larger).
        let q_rows = ((limit / row.max(TOP_BYTES)).max(1) as usize).min(nq);
        let t_rows = ((limit / row).max(1) as usize).min(nt);
        let tiles = t_rows.div_ceil(BLOCK as usize);
        let qblocks = q_rows.div_ceil(BLOCK as usize);
        // The split results of a query chunk are one binding too.
        let fit = (limit / (q_rows as u64 * TOP_BYTES)).max(1) as usize;
        let want = TARGET_GROUPS.div_ceil(qblocks).clamp(1, tiles).min(fit);
        let split_tiles = tiles.div_ceil(want);
        Plan {
            words,
            q_rows,
            t_rows,
            split_tiles,
            splits: tiles.div_ceil(split_tiles),
        }
    }

    /// Splits of a train chunk of `n` points.
    fn splits_of(&self, n: usize) -> usize {
        n.div_ceil(BLOCK as usize).div_ceil(self.split_tiles)
    }

    /// Buffer sizes the plan needs.
    fn sizes(&self) -> Sizes {
        let (q, t) = (self.q_rows as u64, self.t_rows as u64);
        let row = self.words as u64 * 4;
        Sizes {
            qd: q * row,
            qn: q * 4,
            td: t * row,
            tn: t.next_multiple_of(u64::from(BLOCK)) * 4,
            part: q * self.splits as u64 * TOP_BYTES,
            top: q * TOP_BYTES,
            passed: q * 4,
        }
    }
}

impl GpuMatcher {
    /// The engine on `gpu` (e.g. from `Gpu::open(GpuPolicy::Any)`).
    pub fn new(gpu: Arc<Gpu>) -> GpuMatcher {
        GpuMatcher {
            gpu,
            max_chunk: None,
            work: Arc::default(),
        }
    }

    /// The engine on the process' shared device (`Gpu::shared`: the policy in `REMORA_GPU`),
    /// one for the process (so its workspace outlives a call); [`Error::Gpu`] with the reason
    /// when there is none.
    pub fn shared() -> Result<GpuMatcher, Error> {
        static SHARED: OnceLock<Result<GpuMatcher, Error>> = OnceLock::new();
        SHARED
            .get_or_init(|| Gpu::shared().map(GpuMatcher::new).map_err(gpu_err))
            .clone()
    }

    /// For tests: caps every buffer binding at `bytes` (at least one descriptor row per chunk),
    /// so that small inputs take the split-and-merge path that sets larger than the device's
    /// binding limit need. The result has a workspace of its own.
    pub fn with_max_chunk_bytes(mut self, bytes: u64) -> GpuMatcher {
        self.max_chunk = Some(bytes);
        self.work = Arc::default();
        self
    }

    /// The device in use.
    pub fn info(&self) -> &GpuInfo {
        self.gpu.info()
    }

    /// What the device has been asked to do so far (submissions, objects created, bytes each
    /// way), for all of its users; subtract two snapshots with `GpuCounters::since`.
    pub fn counters(&self) -> GpuCounters {
        self.gpu.counters()
    }

    /// The two nearest train points of every query, as [`crate::knn2_u8`] gives them (same
    /// indices and squared distances).
    pub fn knn2_u8(
        &self,
        query: &[u8],
        train: &[u8],
        dim: usize,
    ) -> Result<Vec<Neighbours<u32>>, Error> {
        Ok(self.search(query, train, dim, None)?.0)
    }

    /// The accepted matches, as [`crate::match_u8`] gives them; the ratio test runs in the
    /// search's submission, the maximum distance and the cross-check (its search back on this
    /// device) after it. `opts.kernel` and `opts.threads` are not used.
    pub fn match_u8(
        &self,
        query: &[u8],
        train: &[u8],
        dim: usize,
        opts: &Options,
    ) -> Result<Vec<Match>, Error> {
        MatchEngine::match_u8(self, query, train, dim, opts)
    }

    /// Largest bytes per binding.
    fn chunk_limit(&self) -> u64 {
        let i = self.gpu.info();
        let device = i.max_binding.min(i.max_buffer).min(CHUNK_CAP);
        self.max_chunk.map_or(device, |m| m.min(device))
    }

    /// Neighbours of every query and, with `ratio`, the ratio test's verdict per query.
    fn search(
        &self,
        query: &[u8],
        train: &[u8],
        dim: usize,
        ratio: Option<f32>,
    ) -> Result<Searched, Error> {
        let nq = count("query", query.len(), dim)?;
        let nt = count("train", train.len(), dim)?;
        if nq == 0 || nt == 0 {
            let none = Neighbours {
                best: None,
                second: None,
            };
            return Ok((vec![none; nq], ratio.map(|_| vec![false; nq])));
        }
        let g = &*self.gpu;
        let plan = Plan::new(nq, nt, dim, self.chunk_limit());
        let mut slot = self.work.lock().unwrap_or_else(|p| p.into_inner());
        let ws = Workspace::ensure(&mut slot, g, plan.sizes())?;
        let t_chunks = ranges(nt, plan.t_rows);
        if t_chunks.len() == 1 {
            self.upload_train(ws, train, dim, plan.words, 0..nt);
        }
        let (m2, shift) = ratio.map_or((0, 0), ratio_squared);
        let mut nb = Vec::with_capacity(nq);
        let mut passed = ratio.map(|_| Vec::with_capacity(nq));
        let mut pending: Option<InFlight> = None;
        for rows in ranges(nq, plan.q_rows) {
            let n = rows.len();
            let q = &query[rows.start * dim..rows.end * dim];
            g.write(&ws.qd, 0, &pack(q, dim, plan.words));
            let norms: Vec<u32> = q.chunks_exact(dim).map(norm).collect();
            g.write(&ws.qn, 0, &bytes_of(&norms));
            let qblocks = n.div_ceil(BLOCK as usize);
            let mut read = None;
            for (c, tr) in t_chunks.iter().enumerate() {
                let last = c + 1 == t_chunks.len();
                if t_chunks.len() > 1 {
                    self.upload_train(ws, train, dim, plan.words, tr.clone());
                }
                let splits = plan.splits_of(tr.len());
                let search = [
                    n as u32,
                    tr.len() as u32,
                    plan.words as u32,
                    tr.start as u32,
                    g.row_stride(),
                    qblocks as u32,
                    plan.split_tiles as u32,
                    splits as u32,
                ];
                let merge = [
                    n as u32,
                    splits as u32,
                    u32::from(c > 0),
                    u32::from(last && ratio.is_some()),
                    shift,
                    m2 as u32,
                    (m2 >> 32) as u32,
                    g.row_stride(),
                ];
                g.write(&ws.sp, 0, &bytes_of(&search));
                g.write(&ws.mp, 0, &bytes_of(&merge));
                let mut enc = g.encoder();
                let n = n as u64;
                let search_groups = (qblocks * splits) as u64;
                g.dispatch(
                    &mut enc,
                    &ws.search,
                    &ws.search_bind,
                    groups(search_groups, 1),
                );
                g.dispatch(&mut enc, &ws.merge, &ws.merge_bind, groups(n, MERGE_GROUP));
                if last {
                    let mut reads = vec![(&*ws.top, 0, n * TOP_BYTES)];
                    if ratio.is_some() {
                        reads.push((&*ws.passed, 0, n * 4));
                    }
                    read = Some(g.submit_read(enc, &reads).map_err(gpu_err)?);
                } else {
                    // The next train chunk's merge reads this one's result: same queue, in order.
                    g.submit(enc);
                }
            }
            let read = read.expect("the last train chunk submits the readback");
            // This chunk runs while the previous one's results are taken apart.
            if let Some(f) = pending.replace(InFlight { rows, read }) {
                self.collect(f, &mut nb, passed.as_mut())?;
            }
        }
        if let Some(f) = pending {
            self.collect(f, &mut nb, passed.as_mut())?;
        }
        Ok((nb, passed))
    }

    /// Train rows `rows`, packed, and their squared norms (padded to whole tiles) into the
    /// workspace.
    fn upload_train(
        &self,
        ws: &Workspace,
        train: &[u8],
        dim: usize,
        words: usize,
        rows: Range<usize>,
    ) {
        let t = &train[rows.start * dim..rows.end * dim];
        self.gpu.write(&ws.td, 0, &pack(t, dim, words));
        let mut norms: Vec<u32> = t.chunks_exact(dim).map(norm).collect();
        norms.resize(rows.len().next_multiple_of(BLOCK as usize), PAD_NORM);
        self.gpu.write(&ws.tn, 0, &bytes_of(&norms));
    }

    /// Waits for one query chunk and appends its neighbours and verdicts.
    fn collect(
        &self,
        f: InFlight,
        nb: &mut Vec<Neighbours<u32>>,
        passed: Option<&mut Vec<bool>>,
    ) -> Result<(), Error> {
        let out = f.read.wait(&self.gpu).map_err(gpu_err)?;
        let words = out[0].words();
        let one = |d: u32, i: u32| (i != NONE).then_some(Neighbour { index: i, dist2: d });
        nb.extend(words.chunks_exact(4).map(|w| Neighbours {
            best: one(w[0], w[1]),
            second: one(w[2], w[3]),
        }));
        if let Some(p) = passed {
            p.extend(out[1].words().iter().map(|&w| w != 0));
        }
        debug_assert_eq!(nb.len(), f.rows.end);
        Ok(())
    }
}

/// The registry's constructor: the engine on the shared device, or why there is none; `auto`
/// passes over a CPU-type device (lavapipe), slower than the CPU kernels.
pub(crate) fn open(purpose: Purpose) -> Result<Engine, Error> {
    let g = GpuMatcher::shared()?;
    if purpose == Purpose::Auto && g.info().kind == "cpu" {
        return Err(Error::Gpu(format!(
            "{} is a CPU-type device, slower than the CPU kernels; ask for gpu-wgpu to use it",
            g.info().name
        )));
    }
    Ok(Arc::new(g))
}

impl MatchEngine for GpuMatcher {
    fn name(&self) -> &'static str {
        "gpu-wgpu"
    }

    fn device(&self) -> String {
        self.info().to_string()
    }

    fn search_u8(
        &self,
        query: &[u8],
        train: &[u8],
        dim: usize,
        ratio: Option<f32>,
        _threads: Option<usize>,
    ) -> Result<Searched, Error> {
        self.search(query, train, dim, ratio)
    }
}

/// `Σ x²` of one descriptor.
fn norm(r: &[u8]) -> u32 {
    r.iter().map(|&x| u32::from(x) * u32::from(x)).sum()
}

/// The bytes of u32 words (little-endian, as the device reads them).
fn bytes_of(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `0..n` in pieces of at most `step`.
fn ranges(n: usize, step: usize) -> Vec<Range<usize>> {
    (0..n).step_by(step).map(|s| s..(s + step).min(n)).collect()
}

/// Rows of `dim` bytes padded with zeros to `words` u32 words (zeros add nothing to a dot
/// product or a norm).
fn pack(v: &[u8], dim: usize, words: usize) -> Cow<'_, [u8]> {
    let padded = words * 4;
    if padded == dim {
        return Cow::Borrowed(v);
    }
    let mut out = vec![0u8; v.len() / dim * padded];
    for (o, r) in out.chunks_exact_mut(padded).zip(v.chunks_exact(dim)) {
        o[..dim].copy_from_slice(r);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_padded_to_whole_stages() {
        assert_eq!(
            &*pack(&[1, 2, 3, 4, 5, 6], 3, 2),
            &[1, 2, 3, 0, 0, 0, 0, 0, 4, 5, 6, 0, 0, 0, 0, 0]
        );
        assert!(matches!(pack(&[7; 64], 32, 8), Cow::Borrowed(_)));
        assert_eq!(ranges(5, 2), vec![0..2, 2..4, 4..5]);
        assert_eq!(ranges(4, 4), vec![0..4]);
    }

    #[test]
    fn the_plan_cuts_the_train_set_into_splits_of_whole_tiles() {
        // SIFT at the bench's size: one chunk each, 228 query blocks x 9 splits of 41 tiles.
        let p = Plan::new(29_091, 47_055, 128, 1 << 30);
        assert_eq!((p.words, p.q_rows, p.t_rows), (32, 29_091, 47_055));
        assert_eq!((p.splits, p.split_tiles), (9, 41));
        assert_eq!(p.splits_of(47_055), 9);
        // A small set: never more splits than tiles.
        let p = Plan::new(10, 130, 3, 1 << 30);
        assert_eq!((p.words, p.splits, p.split_tiles), (8, 2, 1));
        // A tiny binding limit: the split results must fit it too.
        let p = Plan::new(37, 90, 1, 64);
        assert_eq!((p.q_rows, p.t_rows, p.splits), (2, 2, 1));
        assert!(p.sizes().part <= 64);
    }
}
