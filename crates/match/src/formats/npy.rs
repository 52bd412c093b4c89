//! NumPy `.npy` arrays: 2-D, C order, dtypes `|u1`, `<f4`, `<f8`, `<i4`, `<i8`, `<u4`.
//!
//! The header (magic, version 1.0, 2.0 or 3.0, the `{'descr': ..., 'fortran_order': ...,
//! 'shape': ...}` dict, 64-byte alignment) is [`remora_wire::npy`]'s, as are its checks of the
//! data length; this module holds the 2-D arrays and their typed values. Writers here emit
//! version 1.0 with the spare spaces NumPy adds after the dict.

use remora_wire::npy::{self, Dtype};

use super::{invalid, Descriptors, FormatError, Keypoints};
use crate::Match;

/// The first six bytes of every `.npy` file.
pub const MAGIC: &[u8] = npy::MAGIC;
const NAME: &str = "npy";

/// The values of an array.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    /// `|u1`
    U8(Vec<u8>),
    /// `<f4`
    F32(Vec<f32>),
    /// `<f8`
    F64(Vec<f64>),
    /// `<i4`
    I32(Vec<i32>),
    /// `<i8`
    I64(Vec<i64>),
    /// `<u4`
    U32(Vec<u32>),
}

impl NpyData {
    fn dtype(&self) -> Dtype {
        match self {
            NpyData::U8(_) => Dtype::U1,
            NpyData::F32(_) => Dtype::F4,
            NpyData::F64(_) => Dtype::F8,
            NpyData::I32(_) => Dtype::I4,
            NpyData::I64(_) => Dtype::I8,
            NpyData::U32(_) => Dtype::U4,
        }
    }

    fn len(&self) -> usize {
        match self {
            NpyData::U8(v) => v.len(),
            NpyData::F32(v) => v.len(),
            NpyData::F64(v) => v.len(),
            NpyData::I32(v) => v.len(),
            NpyData::I64(v) => v.len(),
            NpyData::U32(v) => v.len(),
        }
    }

    /// Every value as i64, where all are integers.
    fn integers(&self) -> Option<Vec<i64>> {
        match self {
            NpyData::U8(v) => Some(v.iter().map(|&x| x as i64).collect()),
            NpyData::I32(v) => Some(v.iter().map(|&x| x as i64).collect()),
            NpyData::I64(v) => Some(v.clone()),
            NpyData::U32(v) => Some(v.iter().map(|&x| x as i64).collect()),
            NpyData::F32(_) | NpyData::F64(_) => None,
        }
    }
}

/// A 2-D C-order array.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    /// First dimension.
    pub rows: usize,
    /// Second dimension.
    pub cols: usize,
    /// `rows × cols` values, row after row.
    pub data: NpyData,
}

/// The reasons of [`remora_wire::npy`] as this crate's [`FormatError`].
fn format_error(e: npy::NpyError) -> FormatError {
    match e {
        npy::NpyError::NotNpy => FormatError::Magic {
            format: NAME,
            detail: "no \\x93NUMPY magic".into(),
        },
        npy::NpyError::UnsupportedVersion { major, minor } => FormatError::Magic {
            format: NAME,
            detail: format!("version {major}.{minor} is not 1.0, 2.0 or 3.0"),
        },
        npy::NpyError::Truncated { need, have } => FormatError::Truncated {
            what: "npy header",
            need: need as u64,
            at: 0,
            len: have,
        },
        npy::NpyError::UnsupportedDtype(d) => unsupported_dtype(&d),
        e => invalid(NAME, e.to_string()),
    }
}

fn unsupported_dtype(descr: &str) -> FormatError {
    invalid(
        NAME,
        format!("dtype {descr:?} not supported (|u1, <f4, <f8, <i4, <i8, <u4)"),
    )
}

/// Parses an `.npy` file.
pub fn parse(b: &[u8]) -> Result<NpyArray, FormatError> {
    let h = npy::Header::parse(b).map_err(format_error)?;
    h.check_c_order().map_err(format_error)?;
    let [rows, cols] = h.shape[..] else {
        return Err(invalid(
            NAME,
            format!("array has {} dimensions; 2 expected", h.shape.len()),
        ));
    };
    if !matches!(
        h.descr,
        Dtype::U1 | Dtype::F4 | Dtype::F8 | Dtype::I4 | Dtype::I8 | Dtype::U4
    ) {
        return Err(unsupported_dtype(h.descr.descr()));
    }
    let body = h.data(b).map_err(format_error)?;
    fn words<const N: usize, T>(body: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
        body.chunks_exact(N)
            .map(|c| f(c.try_into().unwrap_or([0; N])))
            .collect()
    }
    let data = match h.descr {
        Dtype::F4 => NpyData::F32(words(body, f32::from_le_bytes)),
        Dtype::I4 => NpyData::I32(words(body, i32::from_le_bytes)),
        Dtype::U4 => NpyData::U32(words(body, u32::from_le_bytes)),
        Dtype::F8 => NpyData::F64(words(body, f64::from_le_bytes)),
        Dtype::I8 => NpyData::I64(words(body, i64::from_le_bytes)),
        _ => NpyData::U8(body.to_vec()),
    };
    Ok(NpyArray { rows, cols, data })
}

impl NpyArray {
    /// Encodes as `.npy` version 1.0, as NumPy writes it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = npy::encode_header(self.data.dtype(), false, &[self.rows, self.cols]);
        out.reserve(self.data.len() * self.data.dtype().itemsize());
        match &self.data {
            NpyData::U8(v) => out.extend_from_slice(v),
            NpyData::F32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            NpyData::F64(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            NpyData::I32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            NpyData::I64(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            NpyData::U32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        }
        out
    }

    /// The descriptors of keypoints as an `n × dim` array (u8 or f32).
    pub fn from_descriptors(kp: &Keypoints) -> Result<NpyArray, FormatError> {
        kp.check()?;
        let data = match &kp.descriptors {
            Descriptors::U8(v) => NpyData::U8(v.clone()),
            Descriptors::F32(v) => NpyData::F32(v.clone()),
        };
        Ok(NpyArray {
            rows: kp.len(),
            cols: kp.dim,
            data,
        })
    }

    /// Keypoints from an `n × dim` descriptor array (positions, scales, angles 0). u8 and f32
    /// stay as they are, f64 becomes f32, integer arrays must hold values 0–255.
    pub fn into_keypoints(self) -> Result<Keypoints, FormatError> {
        let (n, dim) = (self.rows, self.cols);
        if dim == 0 || dim > crate::MAX_DIM {
            return Err(FormatError::Dimension(dim as u64));
        }
        let descriptors = match self.data {
            NpyData::U8(v) => Descriptors::U8(v),
            NpyData::F32(v) => Descriptors::F32(v),
            NpyData::F64(v) => Descriptors::F32(v.iter().map(|&x| x as f32).collect()),
            other => {
                let v = other.integers().unwrap_or_default();
                if v.iter().any(|&x| !(0..=255).contains(&x)) {
                    return Err(invalid(NAME, "integer descriptors must lie in 0..=255"));
                }
                Descriptors::U8(v.iter().map(|&x| x as u8).collect())
            }
        };
        Ok(Keypoints {
            xy: vec![[0.0; 2]; n],
            scale: vec![0.0; n],
            angle: vec![0.0; n],
            dim,
            descriptors,
        })
    }

    /// Matches as an `n × 2` int64 array of `[query, train]` rows (OpenCV's `queryIdx`,
    /// `trainIdx`).
    pub fn from_matches(matches: &[Match]) -> NpyArray {
        let v = matches
            .iter()
            .flat_map(|m| [m.query as i64, m.train as i64])
            .collect();
        NpyArray {
            rows: matches.len(),
            cols: 2,
            data: NpyData::I64(v),
        }
    }

    /// `[query, train]` rows from an `n × 2` integer array.
    pub fn index_pairs(&self) -> Result<Vec<[u32; 2]>, FormatError> {
        if self.cols != 2 {
            return Err(invalid(
                NAME,
                format!("match array has {} columns, not 2", self.cols),
            ));
        }
        let v = self
            .data
            .integers()
            .ok_or_else(|| invalid(NAME, "match array is not of an integer type"))?;
        v.chunks_exact(2)
            .map(|p| match (u32::try_from(p[0]), u32::try_from(p[1])) {
                (Ok(a), Ok(b)) => Ok([a, b]),
                _ => Err(invalid(NAME, format!("index pair {p:?} out of range"))),
            })
            .collect()
    }
}
