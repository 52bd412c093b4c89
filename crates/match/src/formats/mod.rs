//! Keypoint and match files of MicMac, Lowe's SIFT (Bundler, VisualSFM) and NumPy.
//!
//! Keypoints (positions, scales, angles and descriptors) load into one [`Keypoints`] type:
//! - [`micmac`]: MicMac Pastis `.dat` v0 (u8 descriptors) and Digeo `.dat` v1 (f64 descriptors,
//!   several angles per point, either byte order).
//! - [`lowe`]: Lowe's `.key` text.
//! - [`npy`]: `.npy` arrays (descriptors `n × dim`, or match index pairs).
//!
//! Matches: [`result`] writes and reads MicMac `.result` v0 (text, [`printf::format_g`]
//! numbers) and v1 (binary).
//!
//! Panic and allocation rules: every reader works on a byte slice, checks each length before it
//! reads, and compares the counts a header claims against the bytes present before it allocates
//! anything of that size; malformed input is a [`FormatError`], never a panic.

pub(crate) mod bytes;
pub mod lowe;
pub mod micmac;
pub mod npy;
pub mod printf;
pub mod result;

use std::path::Path;

/// What is wrong with a file.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The file ends before the data its header announces.
    #[error("truncated: {what} needs {need} bytes at offset {at}, the file has {len}")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes needed from `at`.
        need: u64,
        /// Offset of the field.
        at: usize,
        /// File length.
        len: usize,
    },
    /// A magic number or version is not the expected one.
    #[error("not a {format} file: {detail}")]
    Magic {
        /// The format expected.
        format: &'static str,
        /// What was found instead.
        detail: String,
    },
    /// The descriptor dimension is 0, too large, or not the one expected.
    #[error("descriptor dimension {0} is not supported (1..={max})", max = crate::MAX_DIM)]
    Dimension(u64),
    /// Bytes remain after the last point the header announces.
    #[error("{extra} bytes after the last of the {n} points the header announces")]
    Trailing {
        /// Points announced.
        n: u64,
        /// Bytes left over.
        extra: usize,
    },
    /// A value is not valid where it stands (text formats, npy headers, negative counts).
    #[error("{format}: {detail}")]
    Invalid {
        /// The format being read.
        format: &'static str,
        /// What and where.
        detail: String,
    },
    /// The data cannot be written in this format (e.g. f32 descriptors in a u8 format).
    #[error("cannot write {format}: {detail}")]
    Unsupported {
        /// The format being written.
        format: &'static str,
        /// Why.
        detail: String,
    },
    /// The format of a file could not be recognised.
    #[error("unrecognised keypoint file format")]
    Unknown,
}

pub(crate) fn invalid(format: &'static str, detail: impl Into<String>) -> FormatError {
    FormatError::Invalid {
        format,
        detail: detail.into(),
    }
}

/// Descriptor values: u8 (SIFT as usually stored) or f32 (real-valued, e.g. Digeo v1).
#[derive(Debug, Clone, PartialEq)]
pub enum Descriptors {
    /// One byte per value.
    U8(Vec<u8>),
    /// One f32 per value.
    F32(Vec<f32>),
}

impl Descriptors {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Descriptors::U8(v) => v.len(),
            Descriptors::F32(v) => v.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Keypoints of one image: per point a position, scale and angle, and a descriptor of `dim`
/// values; all vectors have one entry per point (`descriptors` `dim` per point).
#[derive(Debug, Clone, PartialEq)]
pub struct Keypoints {
    /// Positions `[x, y]` (column, row) in pixels.
    pub xy: Vec<[f64; 2]>,
    /// Scales (0 where the format has none).
    pub scale: Vec<f64>,
    /// Orientations in radians (0 where the format has none).
    pub angle: Vec<f64>,
    /// Values per descriptor.
    pub dim: usize,
    /// The descriptors, one after the other.
    pub descriptors: Descriptors,
}

impl Keypoints {
    /// Number of points.
    pub fn len(&self) -> usize {
        self.xy.len()
    }

    /// Whether there are no points.
    pub fn is_empty(&self) -> bool {
        self.xy.is_empty()
    }

    /// Checks that all vectors agree with each other and `dim` is supported.
    pub fn check(&self) -> Result<(), FormatError> {
        if self.dim == 0 || self.dim > crate::MAX_DIM {
            return Err(FormatError::Dimension(self.dim as u64));
        }
        let n = self.xy.len();
        if self.scale.len() != n || self.angle.len() != n || self.descriptors.len() != n * self.dim
        {
            return Err(invalid(
                "keypoints",
                format!(
                    "{n} positions, {} scales, {} angles, {} descriptor values of dimension {}",
                    self.scale.len(),
                    self.angle.len(),
                    self.descriptors.len(),
                    self.dim
                ),
            ));
        }
        Ok(())
    }
}

/// A keypoint file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// MicMac Pastis `.dat` v0 (Tapioca's default): u8 descriptors, little-endian.
    MicmacV0,
    /// MicMac Digeo `.dat` v1: versioned header, f64 descriptors.
    MicmacV1,
    /// Lowe's `.key` text (Bundler, VisualSFM, SIFT++).
    LoweKey,
    /// NumPy `.npy`: an `n × dim` descriptor array (positions unknown, set to 0).
    Npy,
}

/// Recognises a keypoint file from its content, then its extension (`path` may be empty).
pub fn detect(path: &Path, bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(npy::MAGIC) {
        return Some(Format::Npy);
    }
    if micmac::is_v1(bytes) {
        return Some(Format::MicmacV1);
    }
    if micmac::is_v0(bytes) {
        return Some(Format::MicmacV0);
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    if ext == "key" || lowe::looks_like(bytes) {
        return Some(Format::LoweKey);
    }
    None
}

/// Parses keypoints from bytes in `format`.
pub fn parse(bytes: &[u8], format: Format) -> Result<Keypoints, FormatError> {
    match format {
        Format::MicmacV0 => micmac::parse_v0(bytes),
        Format::MicmacV1 => micmac::parse_v1(bytes),
        Format::LoweKey => lowe::parse(bytes),
        Format::Npy => npy::parse(bytes)?.into_keypoints(),
    }
}

/// Encodes keypoints in `format` (Digeo v1 in little-endian).
pub fn encode(kp: &Keypoints, format: Format) -> Result<Vec<u8>, FormatError> {
    match format {
        Format::MicmacV0 => micmac::encode_v0(kp),
        Format::MicmacV1 => micmac::encode_v1(kp, false),
        Format::LoweKey => lowe::encode(kp).map(String::into_bytes),
        Format::Npy => npy::NpyArray::from_descriptors(kp).map(|a| a.encode()),
    }
}

/// Reads a keypoint file; `format` `None` detects it (see [`detect`]).
pub fn load(path: &Path, format: Option<Format>) -> Result<Keypoints, FormatError> {
    let bytes = std::fs::read(path).map_err(|source| FormatError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let format = match format {
        Some(f) => f,
        None => detect(path, &bytes).ok_or(FormatError::Unknown)?,
    };
    parse(&bytes, format)
}

/// Writes a keypoint file in `format`.
pub fn save(path: &Path, kp: &Keypoints, format: Format) -> Result<(), FormatError> {
    let bytes = encode(kp, format)?;
    std::fs::write(path, bytes).map_err(|source| FormatError::Io {
        path: path.display().to_string(),
        source,
    })
}
