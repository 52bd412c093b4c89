//! Tiles: an image whose buffers would pass the device's largest storage binding is resampled
//! in tiles of output rows (bands), and of columns only when one band row is too wide. Each
//! tile uploads the source rows and columns its output needs (the filter window's overlap with
//! its neighbours included), so tiles are independent and their pixels the same as one pass's.

use std::ops::Range;

use super::weights::Axis;

/// One tile: output rows × columns and the source rows × columns they read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tile {
    pub rows: Range<u32>,
    pub cols: Range<u32>,
    pub src_rows: Range<u32>,
    pub src_cols: Range<u32>,
}

/// The source indices output indices `out.start .. i` read, grown one output at a time.
#[derive(Debug, Clone)]
struct Span {
    lo: u32,
    hi: u32,
}

impl Span {
    fn new() -> Span {
        Span {
            lo: u32::MAX,
            hi: 0,
        }
    }

    /// Adds output index `i` (its own index when the axis is not resampled).
    fn add(&mut self, axis: Option<&Axis>, i: u32) {
        let (start, taps) = match axis {
            Some(a) => (a.bounds[i as usize][0], a.bounds[i as usize][1]),
            None => (i, 1),
        };
        if taps > 0 {
            self.lo = self.lo.min(start);
            self.hi = self.hi.max(start + taps);
        }
    }

    fn range(&self) -> Range<u32> {
        if self.lo >= self.hi {
            0..0
        } else {
            self.lo..self.hi
        }
    }

    fn len(&self) -> u64 {
        u64::from(self.hi.saturating_sub(self.lo))
    }
}

/// What one tile binds, in bytes: the source region, the intermediate (vertical pass output),
/// the output, and each axis' weights.
struct Need<'a> {
    h: Option<&'a Axis>,
    v: Option<&'a Axis>,
    channels: u64,
    limit: u64,
}

impl Need<'_> {
    fn fits(&self, rows: u64, cols: u64, src_rows: u64, src_cols: u64) -> bool {
        let c = self.channels;
        let weights =
            |a: Option<&Axis>, n: u64| a.map_or(0, |a| (n * a.window as u64 * 4).max(n * 8));
        let temp = if self.v.is_some() && self.h.is_some() {
            rows * src_cols * c
        } else {
            0
        };
        [
            src_rows * src_cols * c,
            temp,
            rows * cols * c,
            weights(self.h, cols),
            weights(self.v, rows),
        ]
        .into_iter()
        .all(|b| b <= self.limit)
    }
}

/// Tiles covering a `to` output from a `size` source, no buffer above `limit` bytes; `None`
/// when a single output pixel's source window does not fit.
pub(super) fn tiles(
    h: Option<&Axis>,
    v: Option<&Axis>,
    to: (u32, u32),
    channels: u8,
    limit: u64,
) -> Option<Vec<Tile>> {
    let need = Need {
        h,
        v,
        channels: u64::from(channels),
        limit,
    };
    let (tw, th) = to;
    // Columns: as wide as one output row allows with the tallest source window.
    let taps = v.map_or(1, |a| u64::from(a.max_taps().max(1)));
    let mut col_bands = Vec::new();
    let mut i0 = 0;
    while i0 < tw {
        let mut span = Span::new();
        span.add(h, i0);
        if !need.fits(1, 1, taps, span.len()) {
            return None;
        }
        let mut i1 = i0 + 1;
        while i1 < tw {
            let mut grown = span.clone();
            grown.add(h, i1);
            if !need.fits(1, u64::from(i1 + 1 - i0), taps, grown.len()) {
                break;
            }
            span = grown;
            i1 += 1;
        }
        col_bands.push((i0..i1, span.range()));
        i0 = i1;
    }
    // Rows: as many as fit with each band's source columns.
    let mut out = Vec::new();
    for (cols, src_cols) in col_bands {
        let (n_cols, n_src_cols) = (
            u64::from(cols.end - cols.start),
            u64::from(src_cols.end - src_cols.start),
        );
        let mut j0 = 0;
        while j0 < th {
            let mut span = Span::new();
            span.add(v, j0);
            if !need.fits(1, n_cols, span.len(), n_src_cols) {
                return None;
            }
            let mut j1 = j0 + 1;
            while j1 < th {
                let mut grown = span.clone();
                grown.add(v, j1);
                if !need.fits(u64::from(j1 + 1 - j0), n_cols, grown.len(), n_src_cols) {
                    break;
                }
                span = grown;
                j1 += 1;
            }
            out.push(Tile {
                rows: j0..j1,
                cols: cols.clone(),
                src_rows: span.range(),
                src_cols: src_cols.clone(),
            });
            j0 = j1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::weights::{axis, Dir};
    use super::*;
    use crate::options::Filter;

    #[test]
    fn one_tile_when_everything_fits() {
        let h = axis(100, 30, Filter::Lanczos3, Dir::Horizontal);
        let v = axis(80, 24, Filter::Lanczos3, Dir::Vertical);
        let t = tiles(Some(&h), Some(&v), (30, 24), 3, 1 << 20).unwrap();
        assert_eq!(
            t,
            [Tile {
                rows: 0..24,
                cols: 0..30,
                src_rows: 0..80,
                src_cols: 0..100
            }]
        );
    }

    #[test]
    fn bands_overlap_by_the_filter_window_and_cover_every_output_once() {
        let h = axis(100, 30, Filter::Lanczos3, Dir::Horizontal);
        let v = axis(80, 24, Filter::Lanczos3, Dir::Vertical);
        let limit = 100 * 3 * 20;
        let t = tiles(Some(&h), Some(&v), (30, 24), 3, limit).unwrap();
        assert!(t.len() > 2, "{t:?}");
        let mut next = 0;
        for tile in &t {
            assert_eq!((tile.cols.clone(), tile.src_cols.clone()), (0..30, 0..100));
            assert_eq!(tile.rows.start, next);
            next = tile.rows.end;
            let rows = u64::from(tile.src_rows.end - tile.src_rows.start);
            assert!(rows * 300 <= limit);
            for j in tile.rows.clone() {
                let b = v.bounds[j as usize];
                assert!(tile.src_rows.start <= b[0] && b[0] + b[1] <= tile.src_rows.end);
            }
        }
        assert_eq!(next, 24);
        // Neighbouring bands share source rows (the window's overlap).
        assert!(t[1].src_rows.start < t[0].src_rows.end);
    }

    #[test]
    fn columns_split_when_one_row_is_too_wide_and_a_too_small_limit_is_refused() {
        let h = axis(1000, 900, Filter::Triangle, Dir::Horizontal);
        let t = tiles(Some(&h), None, (900, 3), 4, 400).unwrap();
        assert!(t.iter().any(|t| t.cols != (0..900)), "{t:?}");
        let covered: u64 = t
            .iter()
            .map(|t| u64::from(t.cols.end - t.cols.start) * u64::from(t.rows.end - t.rows.start))
            .sum();
        assert_eq!(covered, 900 * 3);
        assert!(tiles(Some(&h), None, (900, 3), 4, 8).is_none());
    }
}
