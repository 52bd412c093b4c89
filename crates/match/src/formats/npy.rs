//! NumPy `.npy` arrays: 2-D, C order, dtypes `|u1`, `<f4`, `<f8`, `<i4`, `<i8`, `<u4`.
//!
//! Layout (NumPy's `format.py`): the magic `\x93NUMPY`, major and minor version bytes, the
//! header length (`u16` little-endian in 1.0, `u32` in 2.0 and 3.0), then a Python dict literal
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (n, d), }` padded with spaces and a
//! newline so that the data starts at a multiple of 64 bytes. Writers here emit version 1.0
//! with the spare spaces NumPy adds after the dict.

use super::{invalid, Descriptors, FormatError, Keypoints};
use crate::Match;

/// The first six bytes of every `.npy` file.
pub const MAGIC: &[u8] = b"\x93NUMPY";
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
    fn descr(&self) -> &'static str {
        match self {
            NpyData::U8(_) => "|u1",
            NpyData::F32(_) => "<f4",
            NpyData::F64(_) => "<f8",
            NpyData::I32(_) => "<i4",
            NpyData::I64(_) => "<i8",
            NpyData::U32(_) => "<u4",
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

fn field<'h>(header: &'h str, key: &str) -> Result<&'h str, FormatError> {
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")));
    let rest = at
        .map(|i| &header[i + key.len() + 2..])
        .ok_or_else(|| invalid(NAME, format!("header has no {key:?}")))?;
    let rest = rest.trim_start();
    rest.strip_prefix(':')
        .map(str::trim_start)
        .ok_or_else(|| invalid(NAME, format!("header: no ':' after {key:?}")))
}

/// Parses an `.npy` file.
pub fn parse(b: &[u8]) -> Result<NpyArray, FormatError> {
    if !b.starts_with(MAGIC) || b.len() < 10 {
        return Err(FormatError::Magic {
            format: NAME,
            detail: "no \\x93NUMPY magic".into(),
        });
    }
    let (hlen, start): (usize, usize) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => {
            return Err(FormatError::Magic {
                format: NAME,
                detail: format!("version {v}.{} is not 1, 2 or 3", b[7]),
            })
        }
    };
    let header = b
        .get(start..start.saturating_add(hlen))
        .ok_or(FormatError::Truncated {
            what: "npy header",
            need: hlen as u64,
            at: start,
            len: b.len(),
        })?;
    let header = std::str::from_utf8(header).map_err(|_| invalid(NAME, "header is not text"))?;
    let descr = field(header, "descr")?;
    let quote = descr
        .chars()
        .next()
        .filter(|c| *c == '\'' || *c == '"')
        .ok_or_else(|| invalid(NAME, "descr is not a string"))?;
    let descr = descr[1..].split(quote).next().unwrap_or("");
    let fortran = field(header, "fortran_order")?;
    if fortran.starts_with("True") {
        return Err(invalid(
            NAME,
            "fortran_order True: save the array in C order (np.ascontiguousarray)",
        ));
    }
    if !fortran.starts_with("False") {
        return Err(invalid(NAME, "fortran_order is neither True nor False"));
    }
    let shape = field(header, "shape")?;
    let shape = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| invalid(NAME, "shape is not a tuple"))?;
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .map_err(|_| invalid(NAME, format!("shape entry {s:?} is not a size")))
        })
        .collect::<Result<_, _>>()?;
    let [rows, cols] = dims[..] else {
        return Err(invalid(
            NAME,
            format!("array has {} dimensions; 2 expected", dims.len()),
        ));
    };
    let size = match descr {
        "|u1" | "<u1" | "u1" => 1,
        "<f4" | "<i4" | "<u4" => 4,
        "<f8" | "<i8" => 8,
        d => {
            return Err(invalid(
                NAME,
                format!("dtype {d:?} not supported (|u1, <f4, <f8, <i4, <i8, <u4)"),
            ))
        }
    };
    let body = &b[start + hlen..];
    let want = rows.checked_mul(cols).and_then(|n| n.checked_mul(size));
    if want != Some(body.len()) {
        return Err(invalid(NAME, format!("shape ({rows}, {cols}) of {size}-byte values needs {want:?} bytes, the file has {}", body.len())));
    }
    fn words<const N: usize, T>(body: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
        body.chunks_exact(N)
            .map(|c| f(c.try_into().unwrap_or([0; N])))
            .collect()
    }
    let data = match descr {
        "<f4" => NpyData::F32(words(body, f32::from_le_bytes)),
        "<i4" => NpyData::I32(words(body, i32::from_le_bytes)),
        "<u4" => NpyData::U32(words(body, u32::from_le_bytes)),
        "<f8" => NpyData::F64(words(body, f64::from_le_bytes)),
        "<i8" => NpyData::I64(words(body, i64::from_le_bytes)),
        _ => NpyData::U8(body.to_vec()),
    };
    Ok(NpyArray { rows, cols, data })
}

impl NpyArray {
    /// Encodes as `.npy` version 1.0.
    pub fn encode(&self) -> Vec<u8> {
        let mut h = format!(
            "{{'descr': '{}', 'fortran_order': False, 'shape': ({}, {}), }}",
            self.data.descr(),
            self.rows,
            self.cols
        );
        // NumPy leaves room for the first dimension to grow to 21 digits.
        h += &" ".repeat(21usize.saturating_sub(self.rows.to_string().len()));
        let pad = 64 - (MAGIC.len() + 4 + h.len() + 1) % 64;
        h += &" ".repeat(pad);
        h.push('\n');
        let mut out = Vec::with_capacity(10 + h.len() + self.data.len() * 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(h.len() as u16).to_le_bytes());
        out.extend_from_slice(h.as_bytes());
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
