//! From neighbours to accepted matches: ratio test, maximum distance, cross-check.
//!
//! Order: the ratio test and the maximum distance look at each query's own neighbours; the
//! cross-check then asks, for the train point of each surviving match, which query is nearest
//! to it among all queries (ties to the lower query index) and keeps the match when that is
//! the match's query. Only the train points that survived the first two tests are searched
//! back, so the cross-check costs at most one more search of that size.

use crate::ratio::{passes_ratio, within, Dist2};
use crate::search::{count, knn2_f32_run, knn2_u8_run, with_threads};
use crate::{knn2_f32, Error, Match, Neighbours, Options};

/// Checks the ratio and the maximum distance.
pub(crate) fn check(opts: &Options) -> Result<(), Error> {
    if let Some(r) = opts.ratio {
        if !(r > 0.0 && r <= 1.0) {
            return Err(Error::Ratio(r));
        }
    }
    if let Some(m) = opts.max_distance {
        if !(m.is_finite() && m >= 0.0) {
            return Err(Error::MaxDistance(m));
        }
    }
    Ok(())
}

/// The matches of `nb` that pass the ratio test and the maximum distance. `passed`, when
/// given, is the ratio test's verdict per query, already evaluated (by the GPU engine, with the
/// same exact rule).
pub(crate) fn accept<D: Copy>(
    nb: &[Neighbours<D>],
    passed: Option<&[bool]>,
    opts: &Options,
    dist: impl Fn(D) -> Dist2,
) -> Vec<Match> {
    let mut out = Vec::new();
    for (q, n) in nb.iter().enumerate() {
        let Some(best) = n.best else { continue };
        let d1 = dist(best.dist2);
        let d2 = n.second.map(|s| dist(s.dist2));
        let ratio_ok = match (opts.ratio, d2, passed) {
            (None, _, _) => true,
            (Some(_), _, Some(p)) => p[q],
            (Some(r), Some(d2), None) => passes_ratio(d1, d2, r),
            // One train point: no second neighbour, no evidence of distinctiveness.
            (Some(_), None, None) => false,
        };
        if ratio_ok && opts.max_distance.is_none_or(|m| within(d1, m)) {
            out.push(Match {
                query: q as u32,
                train: best.index,
                distance: d1.plain(),
                second: d2.map(Dist2::plain),
            });
        }
    }
    out
}

/// Keeps the matches whose train point's nearest query (from `back`, indexed like `trains`) is
/// the match's query.
fn keep_mutual<D: Copy>(matches: &mut Vec<Match>, trains: &[u32], back: &[Neighbours<D>]) {
    matches.retain(|m| {
        let best = trains
            .binary_search(&m.train)
            .ok()
            .and_then(|i| back[i].best);
        best.is_some_and(|b| b.index == m.query)
    });
}

fn distinct_trains(matches: &[Match]) -> Vec<u32> {
    let mut t: Vec<u32> = matches.iter().map(|m| m.train).collect();
    t.sort_unstable();
    t.dedup();
    t
}

/// With `opts.cross_check`, keeps the matches whose train point has the match's query as its
/// nearest query: the surviving train points are searched back among the queries with
/// `search(back_queries, query, n_back)`.
pub(crate) fn cross_check<T: Copy, D: Copy>(
    mut out: Vec<Match>,
    query: &[T],
    train: &[T],
    dim: usize,
    opts: &Options,
    search: impl FnOnce(&[T], &[T], usize) -> Result<Vec<Neighbours<D>>, Error>,
) -> Result<Vec<Match>, Error> {
    if opts.cross_check && !out.is_empty() {
        let trains = distinct_trains(&out);
        let back_q: Vec<T> = trains
            .iter()
            .flat_map(|&t| &train[t as usize * dim..][..dim])
            .copied()
            .collect();
        let back = search(&back_q, query, trains.len())?;
        keep_mutual(&mut out, &trains, &back);
    }
    Ok(out)
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
    let nq = count("query", query.len(), dim)?;
    count("train", train.len(), dim)?;
    match opts.kernel.resolve()? {
        #[cfg(feature = "gpu")]
        crate::Kernel::Gpu => crate::gpu::GpuMatcher::shared()?.match_u8(query, train, dim, opts),
        kernel => {
            let run = |q: &[u8], t: &[u8], n: usize| {
                with_threads(opts.threads, || knn2_u8_run(kernel, q, t, dim, n))
            };
            let out = accept(&run(query, train, nq)?, None, opts, Dist2::Int);
            cross_check(out, query, train, dim, opts, run)
        }
    }
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
