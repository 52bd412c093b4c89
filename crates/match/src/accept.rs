//! From neighbours to accepted matches: ratio test, maximum distance, cross-check. Host work
//! every engine shares (through `MatchEngine::match_u8`), so it names no engine.
//!
//! Order: the ratio test and the maximum distance look at each query's own neighbours; the
//! cross-check then asks, for the train point of each surviving match, which query is nearest
//! to it among all queries (ties to the lower query index) and keeps the match when that is
//! the match's query. Only the train points that survived the first two tests are searched
//! back, so the cross-check costs at most one more search of that size.

use crate::ratio::{passes_ratio, within, Dist2};
use crate::{Error, Match, Neighbours, Options};

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
