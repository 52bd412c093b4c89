//! Sparse compression of kept frames: CSR of the pixels above a threshold.
//!
//! Row pointers (`u32`, rows + 1), column indices (`u16`) and values (`f32`): 6 bytes per kept
//! pixel. Decompression puts the kept values back exactly and fills the rest.
use crate::{DaqError, Result};

/// One frame in CSR form.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseFrame {
    /// Frame rows.
    pub rows: usize,
    /// Frame columns.
    pub cols: usize,
    /// Pixels strictly above this value were kept.
    pub threshold: f32,
    /// Row pointers: row `r` holds entries `row_ptr[r]..row_ptr[r + 1]`.
    pub row_ptr: Vec<u32>,
    /// Column of each entry.
    pub col: Vec<u16>,
    /// Value of each entry.
    pub values: Vec<f32>,
}

impl SparseFrame {
    /// Joins per-chunk results (per-row counts, columns, values) in row order.
    pub(crate) fn from_parts(
        rows: usize,
        cols: usize,
        threshold: f32,
        parts: Vec<(Vec<u32>, Vec<u16>, Vec<f32>)>,
    ) -> Self {
        let nnz: usize = parts.iter().map(|p| p.1.len()).sum();
        let mut row_ptr = Vec::with_capacity(rows + 1);
        let mut col = Vec::with_capacity(nnz);
        let mut values = Vec::with_capacity(nnz);
        row_ptr.push(0u32);
        let mut acc = 0u32;
        for (counts, c, v) in parts {
            for n in counts {
                acc += n;
                row_ptr.push(acc);
            }
            col.extend_from_slice(&c);
            values.extend_from_slice(&v);
        }
        Self {
            rows,
            cols,
            threshold,
            row_ptr,
            col,
            values,
        }
    }

    /// Builds a frame from its arrays, checking them (for frames read back from files or Python).
    pub fn from_arrays(
        rows: usize,
        cols: usize,
        threshold: f32,
        row_ptr: Vec<u32>,
        col: Vec<u16>,
        values: Vec<f32>,
    ) -> Result<Self> {
        if rows.checked_mul(cols).is_none_or(|n| n > 1 << 28) {
            return Err(DaqError::Config(format!(
                "frame {rows}x{cols} is too large"
            )));
        }
        DaqError::check_len("row pointers", rows + 1, row_ptr.len())?;
        DaqError::check_len("column indices", values.len(), col.len())?;
        let bad = |m: &str| Err(DaqError::Config(format!("malformed CSR frame: {m}")));
        if row_ptr[0] != 0 || row_ptr[rows] as usize != values.len() {
            return bad("row pointers must run from 0 to the number of values");
        }
        if row_ptr.windows(2).any(|w| w[0] > w[1]) {
            return bad("row pointers decrease");
        }
        // A max over all columns vectorises; `any` stops early but goes one element at a time.
        if col.iter().fold(0u16, |m, &c| m.max(c)) as usize >= cols && !col.is_empty() {
            return bad("column index out of range");
        }
        Ok(Self {
            rows,
            cols,
            threshold,
            row_ptr,
            col,
            values,
        })
    }

    /// Kept pixels.
    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    /// Bytes of the compressed form.
    pub fn bytes(&self) -> usize {
        self.row_ptr.len() * 4 + self.col.len() * 2 + self.values.len() * 4
    }

    /// The dense frame: kept values where they were, `fill` elsewhere. Entries that do not fit
    /// the frame (only possible after editing the public fields; [`SparseFrame::from_arrays`]
    /// refuses them) are skipped.
    pub fn decompress(&self, fill: f32) -> Vec<f32> {
        let mut out = vec![fill; self.rows * self.cols];
        for r in 0..self.rows {
            let (Some(&lo), Some(&hi)) = (self.row_ptr.get(r), self.row_ptr.get(r + 1)) else {
                break;
            };
            for k in lo as usize..hi as usize {
                let (Some(&c), Some(&v)) = (self.col.get(k), self.values.get(k)) else {
                    break;
                };
                if (c as usize) < self.cols {
                    out[r * self.cols + c as usize] = v;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{EngineKind, Registry};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip_is_exact_for_kept_pixels(
            rows in 1usize..20, cols in 1usize..40, seed in any::<u64>(), t in -1.0f32..3.0
        ) {
            let n = rows * cols;
            let frame: Vec<f32> = (0..n)
                .map(|i| {
                    let x = (i as u64).wrapping_mul(6364136223846793005).wrapping_add(seed);
                    match x % 11 { 0 => f32::NAN, 1 => f32::INFINITY, _ => ((x >> 20) % 1000) as f32 / 200.0 - 1.0 }
                })
                .collect();
            for kind in [EngineKind::CpuSimd, EngineKind::CpuScalar] {
                let e = Registry::create(kind, 2).unwrap();
                let s = e.compress(&frame, rows, cols, t).unwrap();
                let back = s.decompress(f32::NEG_INFINITY);
                for (a, b) in frame.iter().zip(&back) {
                    if *a > t { prop_assert_eq!(a.to_bits(), b.to_bits()); } else { prop_assert_eq!(*b, f32::NEG_INFINITY); }
                }
                let again = SparseFrame::from_arrays(rows, cols, t, s.row_ptr.clone(), s.col.clone(), s.values.clone()).unwrap();
                prop_assert_eq!(&again, &s);
            }
        }
    }

    #[test]
    fn malformed_arrays_are_errors() {
        assert!(SparseFrame::from_arrays(2, 4, 0.0, vec![0, 1], vec![0], vec![1.0]).is_err());
        assert!(SparseFrame::from_arrays(2, 4, 0.0, vec![0, 2, 1], vec![0], vec![1.0]).is_err());
        assert!(SparseFrame::from_arrays(1, 4, 0.0, vec![0, 1], vec![4], vec![1.0]).is_err());
        assert!(SparseFrame::from_arrays(1, 4, 0.0, vec![0, 1], vec![3], vec![1.0]).is_ok());
    }
}
