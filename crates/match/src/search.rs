//! The entry points and the CPU engine: argument checks, the engine lookup (`registry.rs`),
//! and the CPU kernels' exact two-nearest-neighbour search with its cache tiling and threads.
//!
//! Queries are cut into chunks of a few dozen (one rayon task each, so all cores work and the
//! chunk's queries stay in L1/L2); within a chunk the train set is walked in blocks of about
//! 256 KiB of packed data (kept in L2 while every micro-row of the chunk scans it). Each
//! query's state is its [`Top2`], so the distance matrix is never stored, and every query sees
//! the train points in increasing index order, which makes ties go to the lower index whatever
//! the kernel, tiling or thread count.

use rayon::prelude::*;

use crate::accept::{accept, check, cross_check};
use crate::engine::{count, MatchEngine, Searched};
use crate::kernel::{dist_f32, PreparedU8, KEY_MAX};
use crate::ratio::Dist2;
use crate::top2::{Top2, NONE};
use crate::{Error, Kernel, Match, Neighbour, Neighbours, Options};

/// Queries per rayon task (rounded to whole micro-rows).
const CHUNK: usize = 48;

fn check_finite(which: &'static str, v: &[f32], dim: usize) -> Result<(), Error> {
    match v
        .chunks_exact(dim)
        .position(|d| d.iter().any(|x| !x.is_finite()))
    {
        Some(index) => Err(Error::NotFinite { which, index }),
        None => Ok(()),
    }
}

/// Runs `f` on a pool of `threads` threads, or on rayon's global pool.
pub(crate) fn with_threads<T: Send>(
    threads: Option<usize>,
    f: impl FnOnce() -> T + Send,
) -> Result<T, Error> {
    match threads {
        None => Ok(f()),
        Some(0) => Err(Error::Threads("threads must be at least 1".into())),
        Some(n) => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map_err(|e| Error::Threads(e.to_string()))?;
            Ok(pool.install(f))
        }
    }
}

fn neighbours<D: Copy>(t: &Top2<D>, map: impl Fn(D) -> D) -> Neighbours<D> {
    let one = |i: u32, d: D| {
        (i != NONE).then(|| Neighbour {
            index: i,
            dist2: map(d),
        })
    };
    Neighbours {
        best: one(t.i1, t.d1),
        second: one(t.i2, t.d2),
    }
}

/// The two nearest train points (squared Euclidean distance, exact) of every query.
///
/// `query` and `train` hold `dim` values per point, one point after the other. The result has
/// one entry per query, in order; `best` is `None` only when `train` is empty, `second` when it
/// has fewer than two points. Uses `opts.kernel` and `opts.threads` (the GPU engine ignores
/// the threads); the other options only concern [`crate::match_u8`].
///
/// ```
/// use remora_match::{knn2_u8, Options};
/// let n = knn2_u8(&[0, 0], &[3, 4, 1, 1, 1, 1], 2, &Options::default()).unwrap();
/// let (b, s) = (n[0].best.unwrap(), n[0].second.unwrap());
/// assert_eq!((b.index, b.dist2, s.index, s.dist2), (1, 2, 2, 2));
/// ```
pub fn knn2_u8(
    query: &[u8],
    train: &[u8],
    dim: usize,
    opts: &Options,
) -> Result<Vec<Neighbours<u32>>, Error> {
    count("query", query.len(), dim)?;
    count("train", train.len(), dim)?;
    opts.kernel
        .engine()?
        .knn2_u8(query, train, dim, opts.threads)
}

/// A CPU kernel as an engine: the tiled search on rayon's pool, or on a pool of `threads`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuEngine(pub Kernel);

impl MatchEngine for CpuEngine {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn device(&self) -> String {
        "cpu".into()
    }

    fn search_u8(
        &self,
        query: &[u8],
        train: &[u8],
        dim: usize,
        _ratio: Option<f32>,
        threads: Option<usize>,
    ) -> Result<Searched, Error> {
        let nq = count("query", query.len(), dim)?;
        count("train", train.len(), dim)?;
        let nb = with_threads(threads, || knn2_u8_run(self.0, query, train, dim, nq))?;
        Ok((nb, None))
    }
}

pub(crate) fn knn2_u8_run(
    kernel: Kernel,
    query: &[u8],
    train: &[u8],
    dim: usize,
    nq: usize,
) -> Vec<Neighbours<u32>> {
    if nq == 0 {
        return Vec::new();
    }
    let prep = PreparedU8::new(kernel, query, train, dim);
    let (mr, tiles, per_block) = (prep.mr(), prep.tiles(), prep.tiles_per_block());
    let chunk = CHUNK.div_ceil(mr) * mr;
    let mut tops = vec![Top2::new(KEY_MAX); nq.div_ceil(mr) * mr];
    tops.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(c, tops)| {
            for b0 in (0..tiles).step_by(per_block) {
                let block = b0..(b0 + per_block).min(tiles);
                for (r, row) in tops.chunks_exact_mut(mr).enumerate() {
                    prep.scan(c * chunk + r * mr, block.clone(), row);
                }
            }
        });
    tops.truncate(nq);
    tops.iter()
        .enumerate()
        .map(|(q, t)| neighbours(t, |k| k + prep.offset(q)))
        .map(to_u32)
        .collect()
}

fn to_u32(n: Neighbours<i32>) -> Neighbours<u32> {
    let f = |x: Option<Neighbour<i32>>| {
        x.map(|x| Neighbour {
            index: x.index,
            dist2: x.dist2 as u32,
        })
    };
    Neighbours {
        best: f(n.best),
        second: f(n.second),
    }
}

/// [`knn2_u8`] for f32 descriptors (NaN and infinities are errors).
///
/// Each pair's squared distance is summed in one fixed order, so the result does not depend on
/// the number of threads. `opts.kernel` picks the AVX2 build of the same code or the portable
/// one; both give identical results (no fused multiply-add).
///
/// ```
/// use remora_match::{knn2_f32, Options};
/// let n = knn2_f32(&[0.5], &[0.0, 2.0, 1.0], 1, &Options::default()).unwrap();
/// assert_eq!(n[0].best.unwrap().index, 0); // 0.25 vs 0.25: the lower index wins
/// assert_eq!(n[0].second.unwrap().index, 2);
/// ```
pub fn knn2_f32(
    query: &[f32],
    train: &[f32],
    dim: usize,
    opts: &Options,
) -> Result<Vec<Neighbours<f32>>, Error> {
    let nq = count("query", query.len(), dim)?;
    count("train", train.len(), dim)?;
    check_finite("query", query, dim)?;
    check_finite("train", train, dim)?;
    let kernel = opts.kernel.resolve_cpu()?;
    with_threads(opts.threads, || knn2_f32_run(kernel, query, train, dim, nq))
}

pub(crate) fn knn2_f32_run(
    kernel: Kernel,
    query: &[f32],
    train: &[f32],
    dim: usize,
    nq: usize,
) -> Vec<Neighbours<f32>> {
    let block = ((128 << 10) / (4 * dim)).max(1) * dim;
    let mut tops = vec![Top2::new(f32::INFINITY); nq];
    let avx2 = matches!(kernel, Kernel::Avx2 | Kernel::Avx512);
    tops.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, tops)| {
            let q0 = c * CHUNK * dim;
            let qs = &query[q0..q0 + tops.len() * dim];
            for (b, tb) in train.chunks(block).enumerate() {
                let j0 = b * (block / dim);
                scan_f32(avx2, qs, tb, dim, j0, tops);
            }
        });
    tops.iter().map(|t| neighbours(t, |d| d)).collect()
}

fn scan_f32(avx2: bool, qs: &[f32], tb: &[f32], dim: usize, j0: usize, tops: &mut [Top2<f32>]) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is only set for kernels that `Kernel::resolve` found available, and
        // both need AVX2.
        return unsafe { scan_f32_avx2(qs, tb, dim, j0, tops) };
    }
    let _ = avx2;
    scan_f32_body(qs, tb, dim, j0, tops)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scan_f32_avx2(qs: &[f32], tb: &[f32], dim: usize, j0: usize, tops: &mut [Top2<f32>]) {
    scan_f32_body(qs, tb, dim, j0, tops)
}

#[inline(always)]
fn scan_f32_body(qs: &[f32], tb: &[f32], dim: usize, j0: usize, tops: &mut [Top2<f32>]) {
    for (q, top) in qs.chunks_exact(dim).zip(tops.iter_mut()) {
        for (j, t) in tb.chunks_exact(dim).enumerate() {
            top.push(dist_f32(q, t), (j0 + j) as u32);
        }
    }
}

/// Matches u8 descriptors: each query's nearest train point, kept when it passes the tests of
/// `opts` (see [`Options`]). Sorted by query index; at most one match per query. Every
/// [`Kernel`](crate::Kernel), the GPU's included, gives the same matches.
///
/// ```
/// use remora_match::{match_u8, Options};
/// let train = [0u8, 0, 100, 100];
/// let opts = Options { ratio: Some(0.5), ..Options::default() };
/// // d1 = 1, d2 = √19601 ≈ 140: accepted.
/// assert_eq!(match_u8(&[1, 0], &train, 2, &opts).unwrap().len(), 1);
/// // Half-way between both: rejected.
/// assert!(match_u8(&[50, 50], &train, 2, &opts).unwrap().is_empty());
/// ```
pub fn match_u8(
    query: &[u8],
    train: &[u8],
    dim: usize,
    opts: &Options,
) -> Result<Vec<Match>, Error> {
    check(opts)?;
    count("query", query.len(), dim)?;
    count("train", train.len(), dim)?;
    opts.kernel.engine()?.match_u8(query, train, dim, opts)
}

/// [`match_u8`] for f32 descriptors (e.g. MicMac Digeo v1 files).
///
/// ```
/// use remora_match::{match_f32, Options};
/// let m = match_f32(&[0.1, 0.0], &[0.0, 0.0, 1.0, 1.0], 2, &Options::default()).unwrap();
/// assert_eq!((m[0].query, m[0].train), (0, 0));
/// ```
pub fn match_f32(
    query: &[f32],
    train: &[f32],
    dim: usize,
    opts: &Options,
) -> Result<Vec<Match>, Error> {
    check(opts)?;
    let nb = knn2_f32(query, train, dim, opts)?;
    let out = accept(&nb, None, opts, Dist2::Float);
    let kernel = opts.kernel.resolve_cpu()?;
    cross_check(out, query, train, dim, opts, |q, t, n| {
        with_threads(opts.threads, || knn2_f32_run(kernel, q, t, dim, n))
    })
}
