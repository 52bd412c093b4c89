//! The GPU engine (`gpu-wgpu`): the exact two-nearest-neighbour search of u8 descriptors in a
//! WGSL compute shader (`top2.wgsl`) on `remora-accel`'s wgpu backend, with Lowe's ratio test
//! fused into the same pass.
//!
//! Arithmetic: descriptors are packed 4 u8 per u32 (each row padded with zeros to whole
//! words) and multiplied with WGSL's `dot4U8Packed`, which naga lowers to SPIR-V `OpUDot`
//! where the device has `shaderIntegerDotProduct` (Vulkan 1.3; lavapipe has it) and to exact
//! shifts and adds elsewhere. The shader ranks train points by the key `‖t‖² − 2 q·t` (exact
//! in i32: below 2²⁷ in size at [`MAX_DIM`](crate::MAX_DIM)) and adds `‖q‖²` back, so the
//! distances are the CPU kernels' integers.
//!
//! Tiling: a workgroup of 256 invocations (16 × 16) takes 64 queries and walks the train set
//! in tiles of 64 points staged in workgroup memory, 16 words of each descriptor at a time;
//! each invocation holds a 4 × 4 block of dot products and a top-2 per query in registers. The
//! distance matrix never exists: only each query's (d1, i1, d2, i2) leaves the shader.
//!
//! Ties: each invocation sees its train points in increasing index order and keeps the first
//! of equal keys; the 16 partial results of a query are then merged in (distance, index)
//! order, so the lower index wins as in the CPU kernels (`top2.rs`).
//!
//! Large sets: no binding may pass the device's `max_binding` (128 MiB on lavapipe), so the
//! queries and the train set are cut into chunks of whole rows. Query chunks are independent
//! (one is read back while the next runs). Train chunks run one after another on the same
//! query chunk: each pass merges into the previous chunk's (d1, i1, d2, i2) on the device,
//! whose train indices are lower, and only the last pass applies the ratio test.
//!
//! What it does not: f32 descriptors, the cross-check's and maximum distance's bookkeeping
//! (done on the host after the search, as for the CPU kernels).
use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use remora_accel::gpu::{groups, wgpu, Gpu, GpuError, GpuInfo, Pooled, Readback};

use crate::accept::{accept, check, cross_check};
use crate::ratio::{ratio_squared, Dist2};
use crate::search::count;
use crate::top2::NONE;
use crate::{Error, Match, Neighbour, Neighbours, Options};

const WGSL: &str = include_str!("top2.wgsl");
/// Queries per workgroup (`top2.wgsl`).
const QUERIES_PER_GROUP: u32 = 64;
/// Bytes of one query's result: d1, i1, d2, i2.
const TOP_BYTES: u64 = 16;
/// Largest chunk whatever the device allows: word indices stay far below 2³² in the shader.
const CHUNK_CAP: u64 = 1 << 30;

fn gpu_err(e: GpuError) -> Error {
    Error::Gpu(e.to_string())
}

/// The GPU engine on one device. Cheap to clone.
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
}

/// The ratio test's verdict per query, when it was asked for.
type Verdicts = Option<Vec<bool>>;

/// Bookkeeping of one query chunk whose results are being read back.
struct InFlight {
    rows: Range<usize>,
    read: Readback,
}

impl GpuMatcher {
    /// The engine on `gpu` (e.g. from `Gpu::open(GpuPolicy::Any)`).
    pub fn new(gpu: Arc<Gpu>) -> GpuMatcher {
        GpuMatcher {
            gpu,
            max_chunk: None,
        }
    }

    /// The engine on the process' shared device (`Gpu::shared`: the policy in `REMORA_GPU`);
    /// [`Error::Gpu`] with the reason when there is none.
    pub fn shared() -> Result<GpuMatcher, Error> {
        Gpu::shared().map(GpuMatcher::new).map_err(gpu_err)
    }

    /// For tests: caps every buffer binding at `bytes` (at least one descriptor row per chunk),
    /// so that small inputs take the split-and-merge path that sets larger than the device's
    /// binding limit need.
    pub fn with_max_chunk_bytes(mut self, bytes: u64) -> GpuMatcher {
        self.max_chunk = Some(bytes);
        self
    }

    /// The device in use.
    pub fn info(&self) -> &GpuInfo {
        self.gpu.info()
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
    /// search's pass, the maximum distance and the cross-check (its search back on this
    /// device) after it. `opts.kernel` and `opts.threads` are not used.
    pub fn match_u8(
        &self,
        query: &[u8],
        train: &[u8],
        dim: usize,
        opts: &Options,
    ) -> Result<Vec<Match>, Error> {
        check(opts)?;
        let (nb, passed) = self.search(query, train, dim, opts.ratio)?;
        let out = accept(&nb, passed.as_deref(), opts, Dist2::Int);
        cross_check(out, query, train, dim, opts, |q, t, _| {
            self.knn2_u8(q, t, dim)
        })
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
    ) -> Result<(Vec<Neighbours<u32>>, Verdicts), Error> {
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
        let pipe = g.pipeline("match-top2", WGSL, "main").map_err(gpu_err)?;
        let words = dim.div_ceil(4);
        let row = words as u64 * 4;
        let limit = self.chunk_limit();
        // Query chunks bound the descriptors and the 16-byte results; train chunks the
        // descriptors (the 4-byte norms are never larger).
        let q_rows = (limit / row.max(TOP_BYTES)).max(1) as usize;
        let t_rows = (limit / row).max(1) as usize;
        let t_chunks = ranges(nt, t_rows);
        let resident = match t_chunks.len() {
            1 => Some(self.upload_rows("match train", train, dim, 0..nt)?),
            _ => None,
        };
        let (m2, shift) = ratio.map_or((0, 0), ratio_squared);
        let mut nb = Vec::with_capacity(nq);
        let mut passed = ratio.map(|_| Vec::with_capacity(nq));
        let mut pending: Option<InFlight> = None;
        for rows in ranges(nq, q_rows) {
            let n = rows.len() as u64;
            let (qd, qn) = self.upload_rows("match query", query, dim, rows.clone())?;
            let top = g.storage("match top2", n * TOP_BYTES).map_err(gpu_err)?;
            let pass = g.storage("match ratio", n * 4).map_err(gpu_err)?;
            let mut read = None;
            for (c, tr) in t_chunks.iter().enumerate() {
                let last = c + 1 == t_chunks.len();
                let owned;
                let (td, tn) = match &resident {
                    Some(t) => t,
                    None => {
                        owned = self.upload_rows("match train", train, dim, tr.clone())?;
                        &owned
                    }
                };
                let params = [
                    n as u32,
                    tr.len() as u32,
                    words as u32,
                    tr.start as u32,
                    g.row_stride(),
                    u32::from(c > 0),
                    u32::from(last && ratio.is_some()),
                    shift,
                    m2 as u32,
                    (m2 >> 32) as u32,
                    0,
                    0,
                ];
                let pb = g
                    .buffer(
                        "match params",
                        48,
                        wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    )
                    .map_err(gpu_err)?;
                let bytes: Vec<u8> = params.iter().flat_map(|w| w.to_le_bytes()).collect();
                g.write(&pb, 0, &bytes);
                let bind = g.bind(
                    &pipe,
                    &[
                        qd.as_entire_binding(),
                        td.as_entire_binding(),
                        qn.as_entire_binding(),
                        tn.as_entire_binding(),
                        top.as_entire_binding(),
                        pass.as_entire_binding(),
                        pb.as_entire_binding(),
                    ],
                );
                let mut enc = g.encoder();
                g.dispatch(&mut enc, &pipe, &bind, groups(n, QUERIES_PER_GROUP));
                if last {
                    let mut reads = vec![(&*top, 0, n * TOP_BYTES)];
                    if ratio.is_some() {
                        reads.push((&*pass, 0, n * 4));
                    }
                    read = Some(g.submit_read(enc, &reads).map_err(gpu_err)?);
                } else {
                    // The next train chunk's pass reads this one's result: same queue, in order.
                    g.queue().submit([enc.finish()]);
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

    /// Rows `rows` of `v` packed 4 u8 per u32 (zero-padded to whole words) and their squared
    /// norms, on the device.
    fn upload_rows(
        &self,
        what: &'static str,
        v: &[u8],
        dim: usize,
        rows: Range<usize>,
    ) -> Result<(Pooled, Pooled), Error> {
        let v = &v[rows.start * dim..rows.end * dim];
        let packed = pack(v, dim);
        let buf = self
            .gpu
            .storage(what, packed.len() as u64)
            .map_err(gpu_err)?;
        self.gpu.write(&buf, 0, &packed);
        let norms: Vec<u32> = v
            .chunks_exact(dim)
            .map(|r| r.iter().map(|&x| u32::from(x) * u32::from(x)).sum())
            .collect();
        let nb = self.gpu.upload("match norms", &norms).map_err(gpu_err)?;
        Ok((buf, nb))
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

/// `0..n` in pieces of at most `step`.
fn ranges(n: usize, step: usize) -> Vec<Range<usize>> {
    (0..n).step_by(step).map(|s| s..(s + step).min(n)).collect()
}

/// Rows of `dim` bytes padded with zeros to whole u32 words (zeros add nothing to a dot
/// product or a norm).
fn pack(v: &[u8], dim: usize) -> Cow<'_, [u8]> {
    let padded = dim.div_ceil(4) * 4;
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
    fn rows_are_padded_to_whole_words() {
        assert_eq!(&*pack(&[1, 2, 3, 4, 5, 6], 3), &[1, 2, 3, 0, 4, 5, 6, 0]);
        assert!(matches!(pack(&[1, 2, 3, 4], 4), Cow::Borrowed(_)));
        assert_eq!(ranges(5, 2), vec![0..2, 2..4, 4..5]);
        assert_eq!(ranges(4, 4), vec![0..4]);
    }
}
