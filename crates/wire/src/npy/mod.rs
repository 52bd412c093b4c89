//! NumPy `.npy` arrays: the header, read and written once for every remora crate that loads or
//! saves arrays (`remora-match`'s descriptor and match files, `remora-daq`'s frame sources).
//!
//! Layout (NumPy's `numpy/lib/format.py`):
//!
//! ```text
//!  0-5       6      7      8-9 (1.0) or 8-11 (2.0, 3.0)    then                          then
//! +---------+------+------+-----------------------------+------------------------------+------+
//! | \x93NUMPY| major| minor| header length (u16 or u32)  | {'descr': '<u2', 'fortran_   | data |
//! |         |      |      | little-endian               | order': False, 'shape': (2, 3), }  \n |
//! +---------+------+------+-----------------------------+------------------------------+------+
//! ```
//!
//! The header is a Python dict literal with exactly the keys `descr` (the dtype), `fortran_order`
//! and `shape` (a tuple of sizes, any rank: `()`, `(n,)`, `(a, b, ...)`), padded with spaces and a
//! newline so that the data starts at a multiple of [`ALIGN`] bytes. Version 1.0 has a `u16`
//! header length, 2.0 a `u32`, and 3.0 is 2.0 with UTF-8 header text.
//!
//! [`Header::parse`] reads the header (the dict properly: keys in any order, either quote, the
//! spacing of any writer, Python 2's `3L`); [`Header::data`] (or [`parse`]) gives the data bytes,
//! checked to be exactly the shape's product times the item size, overflow-checked so that a
//! hostile shape is an error and never a panic or an allocation. [`encode_header`] and
//! [`encode`] write what NumPy writes: version 1.0 (2.0 when the header outgrows a `u16`), the
//! spare spaces NumPy leaves for the first axis to grow, 64-byte alignment.
//!
//! Like the rest of the crate it does no I/O and never panics on input: the caller reads the
//! file (or its first [`header_len`] bytes) and interprets the values; what a dtype or a shape
//! means to the caller (a `2-D` descriptor array, detector frames) stays the caller's check.
//! Values are little-endian: big-endian (`>`) and other dtypes are refused by name
//! ([`NpyError::UnsupportedDtype`]).
//!
//! ```
//! use remora_wire::npy::{self, Dtype, Header};
//!
//! let data: Vec<u8> = (0u16..6).flat_map(u16::to_le_bytes).collect();
//! let file = npy::encode(Dtype::U2, &[2, 3], &data)?;
//! assert_eq!(file.len(), 128 + 12);
//!
//! let (header, body) = npy::parse(&file)?;
//! assert_eq!((header.descr, header.fortran_order), (Dtype::U2, false));
//! assert_eq!(header.shape, [2, 3]);
//! assert_eq!((header.data_offset, body), (128, &data[..]));
//! header.check_c_order()?;
//! # Ok::<(), npy::NpyError>(())
//! ```

use core::fmt::Write as _;

/// The first six bytes of every `.npy` file.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// NumPy aligns the data to this many bytes from the start of the file.
pub const ALIGN: usize = 64;
/// Bytes before the header text in version 1.0 (magic, version, `u16` length).
const PREFIX_V1: usize = 10;
/// Bytes before the header text in versions 2.0 and 3.0 (a `u32` length).
const PREFIX_V2: usize = 12;
/// NumPy's `GROWTH_AXIS_MAX_DIGITS`: spare spaces let the growing axis reach this many digits.
const GROWTH_DIGITS: usize = 21;

mod literal;

use literal::{parse_dict, quote};

/// Why `.npy` bytes were rejected.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum NpyError {
    /// The bytes do not start with [`MAGIC`].
    #[error("not a .npy file (no \\x93NUMPY magic)")]
    NotNpy,
    /// The format version is not 1.0, 2.0 or 3.0.
    #[error(".npy format version {major}.{minor} is not supported (1.0, 2.0 and 3.0 are)")]
    UnsupportedVersion {
        /// Major version byte.
        major: u8,
        /// Minor version byte.
        minor: u8,
    },
    /// The bytes end inside the header.
    #[error("truncated header: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the header needs from the start of the file.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The header is not the dict NumPy writes (syntax, keys or value types).
    #[error("bad .npy header: {0}")]
    BadHeader(String),
    /// The dtype is not one of [`Dtype`]: big-endian, structured, strings, ...
    #[error("dtype '{0}' is not supported; expected one of {list}{hint}", list = Dtype::LIST, hint = dtype_hint(.0))]
    UnsupportedDtype(String),
    /// The header says `fortran_order: True` where C order is required ([`Header::check_c_order`]).
    #[error("array must be in C order, not Fortran order (fortran_order True): save it with numpy.ascontiguousarray")]
    FortranOrder,
    /// The data is not exactly the shape's product times the item size.
    #[error("data is {have} bytes, shape {shape} of '{descr}' needs {need}", shape = shape_repr(.shape), need = need_repr(.need))]
    DataLen {
        /// The dtype.
        descr: Dtype,
        /// The shape.
        shape: Vec<usize>,
        /// Bytes after the header.
        have: usize,
        /// Bytes the shape needs; `None` when that exceeds `usize::MAX`.
        need: Option<usize>,
    },
}

fn dtype_hint(descr: &str) -> &'static str {
    if descr.starts_with('>') {
        " (big-endian: convert with arr.astype(arr.dtype.newbyteorder('<')))"
    } else {
        ""
    }
}

fn need_repr(need: &Option<usize>) -> String {
    match need {
        Some(n) => n.to_string(),
        None => format!("more than {} (usize::MAX)", usize::MAX),
    }
}

/// A shape as Python writes a tuple: `()`, `(3,)`, `(2, 3)`.
pub fn shape_repr(shape: &[usize]) -> String {
    let mut s = String::from("(");
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "{d}");
    }
    if shape.len() == 1 {
        s.push(',');
    }
    s.push(')');
    s
}

/// The element types this crate reads and writes: NumPy's little-endian (or byte-order-free)
/// numbers and booleans. The names are NumPy's `dtype.str`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// `|b1`: numpy.bool, one byte 0 or 1.
    Bool,
    /// `|u1`: uint8.
    U1,
    /// `|i1`: int8.
    I1,
    /// `<u2`: uint16.
    U2,
    /// `<i2`: int16.
    I2,
    /// `<u4`: uint32.
    U4,
    /// `<i4`: int32.
    I4,
    /// `<u8`: uint64.
    U8,
    /// `<i8`: int64.
    I8,
    /// `<f4`: float32.
    F4,
    /// `<f8`: float64.
    F8,
}

impl Dtype {
    /// Every dtype, in the order of [`Dtype::LIST`].
    pub const ALL: [Dtype; 11] = [
        Dtype::Bool,
        Dtype::U1,
        Dtype::I1,
        Dtype::U2,
        Dtype::I2,
        Dtype::U4,
        Dtype::I4,
        Dtype::U8,
        Dtype::I8,
        Dtype::F4,
        Dtype::F8,
    ];
    /// Every dtype's name, for messages.
    pub const LIST: &'static str = "|b1, |u1, |i1, <u2, <i2, <u4, <i4, <u8, <i8, <f4, <f8";

    /// NumPy's name, as it writes it in a header (`dtype.str`).
    pub fn descr(self) -> &'static str {
        match self {
            Dtype::Bool => "|b1",
            Dtype::U1 => "|u1",
            Dtype::I1 => "|i1",
            Dtype::U2 => "<u2",
            Dtype::I2 => "<i2",
            Dtype::U4 => "<u4",
            Dtype::I4 => "<i4",
            Dtype::U8 => "<u8",
            Dtype::I8 => "<i8",
            Dtype::F4 => "<f4",
            Dtype::F8 => "<f8",
        }
    }

    /// Bytes per element.
    pub fn itemsize(self) -> usize {
        match self {
            Dtype::Bool | Dtype::U1 | Dtype::I1 => 1,
            Dtype::U2 | Dtype::I2 => 2,
            Dtype::U4 | Dtype::I4 | Dtype::F4 => 4,
            Dtype::U8 | Dtype::I8 | Dtype::F8 => 8,
        }
    }

    /// The dtype of a header's `descr` string. One-byte types have no byte order, so `u1`,
    /// `<u1` and `|u1` are all [`Dtype::U1`]; wider ones must say `<`. Anything else (`>u2`,
    /// `<f2`, `<U10`, ...) is [`NpyError::UnsupportedDtype`] naming it.
    pub fn from_descr(descr: &str) -> Result<Dtype, NpyError> {
        let unsupported = || NpyError::UnsupportedDtype(quote(descr.as_bytes()));
        let (order, code) = match descr.as_bytes().first() {
            Some(c @ (b'<' | b'>' | b'|' | b'=')) => (Some(*c), &descr[1..]),
            _ => (None, descr),
        };
        let t = Dtype::ALL
            .into_iter()
            .find(|t| &t.descr()[1..] == code)
            .ok_or_else(unsupported)?;
        let ok = match order {
            None => t.itemsize() == 1,
            Some(b'<') => true,
            Some(_) => t.itemsize() == 1,
        };
        if ok {
            Ok(t)
        } else {
            Err(unsupported())
        }
    }
}

impl core::fmt::Display for Dtype {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.descr())
    }
}

/// A parsed `.npy` header.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The element type.
    pub descr: Dtype,
    /// Whether the data is in Fortran (column-major) order rather than C (row-major).
    pub fortran_order: bool,
    /// The dimensions; empty for a 0-d array (one element).
    pub shape: Vec<usize>,
    /// Where the data starts: magic, version, length and header text. NumPy makes it a
    /// multiple of [`ALIGN`]; other writers may not, and it is not checked.
    pub data_offset: usize,
}

impl Header {
    /// Parses the header at the start of `file` (which may hold just the first
    /// [`header_len`] bytes, or the whole file).
    pub fn parse(file: &[u8]) -> Result<Header, NpyError> {
        let data_offset = header_len(file)?;
        let prefix = if file[6] == 1 { PREFIX_V1 } else { PREFIX_V2 };
        let text = file.get(prefix..data_offset).ok_or(NpyError::Truncated {
            need: data_offset,
            have: file.len(),
        })?;
        let (descr, fortran_order, shape) = parse_dict(text)?;
        Ok(Header {
            descr,
            fortran_order,
            shape,
            data_offset,
        })
    }

    /// Number of elements (1 for a 0-d array); `None` when the product overflows `usize`.
    pub fn count(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// Bytes of data the shape and dtype need; `None` when that overflows `usize`.
    pub fn data_len(&self) -> Option<usize> {
        self.count()?.checked_mul(self.descr.itemsize())
    }

    /// The data bytes of `file` (the whole file this header was parsed from), checked to be
    /// exactly [`data_len`](Self::data_len) bytes: [`NpyError::DataLen`] otherwise, short or
    /// long.
    pub fn data<'a>(&self, file: &'a [u8]) -> Result<&'a [u8], NpyError> {
        let body = file.get(self.data_offset..).ok_or(NpyError::Truncated {
            need: self.data_offset,
            have: file.len(),
        })?;
        let need = self.data_len();
        if need == Some(body.len()) {
            Ok(body)
        } else {
            Err(NpyError::DataLen {
                descr: self.descr,
                shape: self.shape.clone(),
                have: body.len(),
                need,
            })
        }
    }

    /// [`NpyError::FortranOrder`] unless the data is in C order.
    pub fn check_c_order(&self) -> Result<(), NpyError> {
        if self.fortran_order {
            Err(NpyError::FortranOrder)
        } else {
            Ok(())
        }
    }
}

/// The header and the data bytes of a whole `.npy` file ([`Header::parse`], then
/// [`Header::data`]). Either order is accepted: see [`Header::check_c_order`].
pub fn parse(file: &[u8]) -> Result<(Header, &[u8]), NpyError> {
    let h = Header::parse(file)?;
    let data = h.data(file)?;
    Ok((h, data))
}

/// The length of the header (magic to the end of the dict's padding: the data offset) from the
/// first 10 bytes (version 1.0) or 12 (2.0, 3.0): checks the magic and the version, so that a
/// reader can read the header before it reads the rest.
pub fn header_len(prefix: &[u8]) -> Result<usize, NpyError> {
    let magic_len = MAGIC.len().min(prefix.len());
    if prefix.is_empty() || prefix[..magic_len] != MAGIC[..magic_len] {
        return Err(NpyError::NotNpy);
    }
    let truncated = |need| NpyError::Truncated {
        need,
        have: prefix.len(),
    };
    let (&major, &minor) = match (prefix.get(6), prefix.get(7)) {
        (Some(major), Some(minor)) => (major, minor),
        _ => return Err(truncated(PREFIX_V1)),
    };
    let text_len = match (major, minor) {
        (1, 0) => match prefix.get(8..PREFIX_V1) {
            Some(b) => u16::from_le_bytes([b[0], b[1]]) as usize,
            None => return Err(truncated(PREFIX_V1)),
        },
        (2 | 3, 0) => match prefix.get(8..PREFIX_V2) {
            Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
            None => return Err(truncated(PREFIX_V2)),
        },
        _ => return Err(NpyError::UnsupportedVersion { major, minor }),
    };
    let prefix_len = if major == 1 { PREFIX_V1 } else { PREFIX_V2 };
    Ok(prefix_len.saturating_add(text_len))
}

/// The header NumPy writes for an array of `descr` and `shape`: version 1.0, or 2.0 when the
/// header text exceeds 65535 bytes; the dict with its keys sorted, then spaces so that the
/// growing axis (the first, or the last in Fortran order) can reach 21 digits in place, then
/// spaces and a newline up to a multiple of [`ALIGN`] bytes. Its length is the data offset.
///
/// Panics if the header text would exceed 4 GiB (a shape of hundreds of millions of
/// dimensions): a programming error, as for the crate's `emit`.
pub fn encode_header(descr: Dtype, fortran_order: bool, shape: &[usize]) -> Vec<u8> {
    let order = if fortran_order { "True" } else { "False" };
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': {order}, 'shape': {}, }}",
        descr.descr(),
        shape_repr(shape)
    );
    let growing = if fortran_order {
        shape.last()
    } else {
        shape.first()
    };
    if let Some(d) = growing {
        let digits = d.to_string().len();
        dict.extend(core::iter::repeat_n(
            ' ',
            GROWTH_DIGITS.saturating_sub(digits),
        ));
    }
    // The text with its padding and newline, for a prefix of `prefix` bytes.
    let padded = |prefix: usize| {
        let with_newline = dict.len() + 1;
        with_newline + ALIGN - (prefix + with_newline) % ALIGN
    };
    let mut out = MAGIC.to_vec();
    let text_len = padded(PREFIX_V1);
    if let Ok(len) = u16::try_from(text_len) {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&len.to_le_bytes());
    } else {
        let len = u32::try_from(padded(PREFIX_V2)).expect(".npy header text over 4 GiB");
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&len.to_le_bytes());
    }
    let data_offset = out.len() + padded(out.len());
    out.reserve_exact(data_offset - out.len());
    out.extend_from_slice(dict.as_bytes());
    out.resize(data_offset - 1, b' ');
    out.push(b'\n');
    out
}

/// A whole C-order `.npy` file: [`encode_header`] and `data`, which must be exactly the shape's
/// product times the item size ([`NpyError::DataLen`] otherwise).
pub fn encode(descr: Dtype, shape: &[usize], data: &[u8]) -> Result<Vec<u8>, NpyError> {
    let need = shape
        .iter()
        .try_fold(descr.itemsize(), |n, &d| n.checked_mul(d));
    if need != Some(data.len()) {
        return Err(NpyError::DataLen {
            descr,
            shape: shape.to_vec(),
            have: data.len(),
            need,
        });
    }
    let mut out = encode_header(descr, false, shape);
    out.extend_from_slice(data);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `np.save(f, np.arange(6, dtype='<u2').reshape(2, 3))`, NumPy 2.4.6 (1.x writes the same).
    static ARANGE_U2: &[u8] = b"\x93NUMPY\x01\x00v\x00{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3), }                                                          \n\x00\x00\x01\x00\x02\x00\x03\x00\x04\x00\x05\x00";
    /// `np.save(f, np.zeros((), '<f8'))`: a 0-d array, no growth spaces.
    static SCALAR_F8: &[u8] = b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (), }                                                              \n\x00\x00\x00\x00\x00\x00\x00\x00";
    /// `np.save(f, np.arange(3, dtype='<i4'))`: 1-d, `(3,)`.
    static ARANGE_I4: &[u8] = b"\x93NUMPY\x01\x00v\x00{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }                                                            \n\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00";
    /// `np.lib.format.write_array(f, np.arange(6, dtype='<u2').reshape(2, 3), version=(2, 0))`.
    static ARANGE_U2_V2: &[u8] = b"\x93NUMPY\x02\x00t\x00\x00\x00{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3), }                                                        \n\x00\x00\x01\x00\x02\x00\x03\x00\x04\x00\x05\x00";

    fn u2_bytes(n: u16) -> Vec<u8> {
        (0..n).flat_map(u16::to_le_bytes).collect()
    }

    /// A version 1.0 file with `dict` as its header text, unpadded.
    fn with_text(dict: &str, data: &[u8]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        b.extend_from_slice(dict.as_bytes());
        b.extend_from_slice(data);
        b
    }

    fn header_of(dict: &str) -> Result<Header, NpyError> {
        Header::parse(&with_text(dict, &[]))
    }

    #[test]
    fn golden_numpy_files_parse() {
        let (h, data) = parse(ARANGE_U2).unwrap();
        assert_eq!(
            h,
            Header {
                descr: Dtype::U2,
                fortran_order: false,
                shape: vec![2, 3],
                data_offset: 128,
            }
        );
        assert_eq!(data, u2_bytes(6));
        assert_eq!((h.count(), h.data_len()), (Some(6), Some(12)));

        let (h, data) = parse(SCALAR_F8).unwrap();
        assert_eq!(
            (h.descr, &h.shape[..], h.count()),
            (Dtype::F8, &[][..], Some(1))
        );
        assert_eq!(data, [0; 8]);

        let (h, data) = parse(ARANGE_I4).unwrap();
        assert_eq!((h.descr, &h.shape[..]), (Dtype::I4, &[3][..]));
        assert_eq!(data, [0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]);

        let (h, data) = parse(ARANGE_U2_V2).unwrap();
        assert_eq!(
            (h.descr, &h.shape[..], h.data_offset),
            (Dtype::U2, &[2, 3][..], 128)
        );
        assert_eq!(data, u2_bytes(6));
        // Version 3.0 is 2.0 with UTF-8 text.
        let mut v3 = ARANGE_U2_V2.to_vec();
        v3[6] = 3;
        assert_eq!(parse(&v3).unwrap().0, h);
    }

    #[test]
    fn encoder_writes_what_numpy_writes() {
        assert_eq!(encode(Dtype::U2, &[2, 3], &u2_bytes(6)).unwrap(), ARANGE_U2);
        assert_eq!(encode(Dtype::F8, &[], &[0; 8]).unwrap(), SCALAR_F8);
        let i4: Vec<u8> = (0i32..3).flat_map(i32::to_le_bytes).collect();
        assert_eq!(encode(Dtype::I4, &[3], &i4).unwrap(), ARANGE_I4);
        assert_eq!(encode_header(Dtype::U2, false, &[2, 3]), &ARANGE_U2[..128]);
        // `np.save(f, np.asfortranarray(np.arange(6, dtype='<u2').reshape(2, 3)))`.
        let fortran = encode_header(Dtype::U2, true, &[2, 3]);
        assert_eq!(
            fortran,
            &b"\x93NUMPY\x01\x00v\x00{'descr': '<u2', 'fortran_order': True, 'shape': (2, 3), }                                                           \n"[..]
        );
    }

    #[test]
    fn large_headers_fall_back_to_version_2() {
        let shape = vec![1; 30_000];
        let b = encode_header(Dtype::U1, false, &shape);
        assert_eq!(&b[..8], b"\x93NUMPY\x02\x00");
        assert_eq!(b.len() % ALIGN, 0);
        assert_eq!(header_len(&b[..12]), Ok(b.len()));
        let h = Header::parse(&b).unwrap();
        assert_eq!((h.shape, h.data_offset), (shape, b.len()));
        // The largest version 1.0 header is 65535 bytes of text.
        let v1 = encode_header(Dtype::U1, false, &[1; 21_000]);
        assert_eq!((v1[6], v1.len() % ALIGN), (1, 0));
        assert!(v1.len() - PREFIX_V1 <= 65535);
    }

    #[test]
    fn round_trip_every_dtype_and_order() {
        for descr in Dtype::ALL {
            for fortran in [false, true] {
                for shape in [&[][..], &[0], &[5], &[2, 3], &[4, 1, 2, 3]] {
                    let mut b = encode_header(descr, fortran, shape);
                    assert_eq!(b.len() % ALIGN, 0);
                    let n: usize = shape.iter().product();
                    b.extend((0..n * descr.itemsize()).map(|i| i as u8));
                    let (h, data) = parse(&b).unwrap();
                    assert_eq!((h.descr, h.fortran_order), (descr, fortran));
                    assert_eq!((&h.shape[..], data.len()), (shape, n * descr.itemsize()));
                    assert_eq!(h.check_c_order().is_ok(), !fortran);
                }
            }
            assert_eq!(Dtype::from_descr(descr.descr()), Ok(descr));
            assert_eq!(descr.to_string(), descr.descr());
        }
    }

    #[test]
    fn any_key_order_quotes_and_spacing() {
        for dict in [
            "{'shape': (2, 3), 'fortran_order': False, 'descr': '<u2'}",
            "{\"descr\":\"<u2\",\"fortran_order\":False,\"shape\":(2,3)}\n",
            "  { 'descr' : '<u2' ,\n 'fortran_order' : False , 'shape' : ( 2 , 3 , ) , }   \n",
            "{'descr': '<u2', 'fortran_order': False, 'shape': (2L, 3L), }",
            "{'descr': '<u2', 'fortran_order': False, 'shape': ((2), 3)}",
        ] {
            let h = header_of(dict).unwrap_or_else(|e| panic!("{dict}: {e}"));
            assert_eq!(
                (h.descr, h.fortran_order, &h.shape[..]),
                (Dtype::U2, false, &[2, 3][..])
            );
            assert_eq!(h.data_offset, PREFIX_V1 + dict.len());
        }
        // One-byte types need no byte order.
        for d in ["|u1", "<u1", "u1", ">u1", "=u1"] {
            assert_eq!(Dtype::from_descr(d), Ok(Dtype::U1), "{d}");
        }
    }

    #[test]
    fn rejections_say_why() {
        let msg = |dict: &str| header_of(dict).unwrap_err().to_string();
        let e = msg("{'descr': '>u2', 'fortran_order': False, 'shape': (2, 3), }");
        assert!(
            e.starts_with("dtype '>u2' is not supported; expected one of |b1"),
            "{e}"
        );
        assert!(e.contains("big-endian"), "{e}");
        for (descr, quoted) in [
            ("'<f2'", "'<f2'"),
            ("'uint16'", "'uint16'"),
            ("'|u2'", "'|u2'"),
            ("'<U10'", "'<U10'"),
            (
                "[('a', '<i4'), ('b', '<f8')]",
                "'[('a', '<i4'), ('b', '<f8')]'",
            ),
        ] {
            let e = msg(&format!(
                "{{'descr': {descr}, 'fortran_order': False, 'shape': (1,)}}"
            ));
            assert!(
                e.starts_with(&format!("dtype {quoted} is not supported")),
                "{e}"
            );
        }
        for (dict, want) in [
            ("{'descr': '<u2', 'shape': (1,)}", "no 'fortran_order' key"),
            ("{'descr': '<u2', 'fortran_order': False}", "no 'shape' key"),
            ("{'fortran_order': False, 'shape': (1,)}", "no 'descr' key"),
            (
                "{'descr': '<u2', 'fortran_order': False, 'shape': (1,), 'x': 1}",
                "unexpected key 'x'",
            ),
            (
                "{'descr': '<u2', 'descr': '<u2', 'fortran_order': False, 'shape': (1,)}",
                "'descr' appears twice",
            ),
            ("{'descr': '<u2', 'fortran_order': 0, 'shape': (1,)}", "not True or False"),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': [1]}", "a list, not a tuple"),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (4)}", "an integer, not a tuple"),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (-1,)}", "-1 is negative"),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (1.5,)}", "expected an integer"),
            (
                "{'descr': '<u2', 'fortran_order': False, 'shape': (18446744073709551616,)}",
                "too large",
            ),
            (
                "{'descr': '<u2', 'fortran_order': False, 'shape': (1000000000000000000000000000000000000000000,)}",
                "too large",
            ),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': ('a',)}", "a string, not a size"),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (1,)} x", "after the dict"),
            ("{'descr': '<u2' 'fortran_order': False}", "expected ',' or '}'"),
            ("{'descr' '<u2'}", "expected ':'"),
            ("{'descr': '<u2}", "unterminated string"),
            ("{'descr': numpy.uint16}", "unexpected name 'numpy'"),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (1,)", "unexpected end"),
            ("['descr', '<u2']", "a list, not a dict"),
            ("{1: 2}", "an integer, not a string"),
            ("", "unexpected end"),
        ] {
            let e = msg(dict);
            assert!(e.starts_with("bad .npy header: ") && e.contains(want), "{dict}: {e}");
        }
        let deep = format!("{}{}", "(".repeat(100), ")".repeat(100));
        assert!(msg(&deep).contains("nested deeper than 16"));
        assert_eq!(
            header_of("{'descr': '<u2', 'fortran_order': True, 'shape': (1,)}")
                .unwrap()
                .check_c_order()
                .unwrap_err()
                .to_string(),
            "array must be in C order, not Fortran order (fortran_order True): save it with numpy.ascontiguousarray"
        );
    }

    #[test]
    fn magic_version_and_truncation() {
        assert_eq!(parse(b""), Err(NpyError::NotNpy));
        assert_eq!(parse(b"PK\x03\x04 a zip file"), Err(NpyError::NotNpy));
        assert_eq!(parse(b"\x93NUMPX\x01\x00"), Err(NpyError::NotNpy));
        assert_eq!(
            NpyError::NotNpy.to_string(),
            "not a .npy file (no \\x93NUMPY magic)"
        );
        assert_eq!(
            parse(b"\x93NUMPY\x04\x00\x00\x00"),
            Err(NpyError::UnsupportedVersion { major: 4, minor: 0 })
        );
        assert_eq!(
            parse(b"\x93NUMPY\x01\x01\x00\x00"),
            Err(NpyError::UnsupportedVersion { major: 1, minor: 1 })
        );
        assert_eq!(
            parse(b"\x93NUMPY\x01\x00\xff\xff{"),
            Err(NpyError::Truncated {
                need: 65545,
                have: 11
            })
        );
        assert_eq!(
            NpyError::Truncated {
                need: 128,
                have: 20
            }
            .to_string(),
            "truncated header: need 128 bytes, have 20"
        );
        assert_eq!(header_len(&ARANGE_U2[..10]), Ok(128));
        assert_eq!(header_len(&ARANGE_U2_V2[..12]), Ok(128));
        assert_eq!(
            header_len(&ARANGE_U2_V2[..10]),
            Err(NpyError::Truncated { need: 12, have: 10 })
        );
        // Every proper prefix of a file is an error, never a panic; from the data offset on, a
        // data length error.
        for golden in [ARANGE_U2, SCALAR_F8, ARANGE_I4, ARANGE_U2_V2] {
            for n in 0..golden.len() {
                let e = parse(&golden[..n]).unwrap_err();
                let offset = 128;
                match e {
                    NpyError::NotNpy => assert_eq!(n, 0),
                    NpyError::Truncated { have, .. } => assert!(have == n && n < offset),
                    NpyError::DataLen { have, .. } => assert_eq!(have, n - offset),
                    e => panic!("prefix {n}: {e}"),
                }
            }
        }
    }

    #[test]
    fn data_length_is_checked_exactly() {
        let mut long = ARANGE_U2.to_vec();
        long.push(0);
        let e = parse(&long).unwrap_err();
        assert_eq!(
            e.to_string(),
            "data is 13 bytes, shape (2, 3) of '<u2' needs 12"
        );
        let e = parse(&ARANGE_U2[..ARANGE_U2.len() - 2]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "data is 10 bytes, shape (2, 3) of '<u2' needs 12"
        );
        // A header parsed from a prefix gives the data of the whole file.
        let h = Header::parse(&ARANGE_U2[..128]).unwrap();
        assert_eq!(h.data(ARANGE_U2), Ok(&u2_bytes(6)[..]));
        assert_eq!(
            h.data(&ARANGE_U2[..100]),
            Err(NpyError::Truncated {
                need: 128,
                have: 100
            })
        );
        assert!(matches!(
            encode(Dtype::U2, &[2, 3], &[0; 11]),
            Err(NpyError::DataLen {
                have: 11,
                need: Some(12),
                ..
            })
        ));
    }

    #[test]
    fn hostile_shapes_are_errors_without_allocation() {
        let big = 1usize << 62;
        for (descr, shape) in [
            ("<u2", format!("({big}, {big})")),
            ("<f8", format!("({big}, 4)")),
            ("|u1", format!("({}, 2)", usize::MAX)),
            ("|u1", format!("({big}, 0, {big}, {big})")),
        ] {
            let b = with_text(
                &format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"),
                &[0; 16],
            );
            let h = Header::parse(&b).unwrap();
            let e = h.data(&b).unwrap_err();
            if h.shape.contains(&0) {
                assert_eq!(h.data_len(), Some(0));
                assert!(matches!(e, NpyError::DataLen { need: Some(0), .. }));
            } else {
                assert_eq!(h.data_len(), None);
                assert!(matches!(e, NpyError::DataLen { need: None, .. }));
                assert!(e.to_string().contains("needs more than"), "{e}");
            }
        }
        assert!(encode(Dtype::U2, &[big, big], &[]).is_err());
    }

    #[test]
    fn shape_repr_is_pythons() {
        assert_eq!(shape_repr(&[]), "()");
        assert_eq!(shape_repr(&[7]), "(7,)");
        assert_eq!(shape_repr(&[2, 512, 1024]), "(2, 512, 1024)");
    }

    fn dtype() -> impl Strategy<Value = Dtype> {
        (0..Dtype::ALL.len()).prop_map(|i| Dtype::ALL[i])
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = header_len(&b);
            let _ = parse(&b);
            if let Ok(h) = Header::parse(&b) {
                let _ = h.data(&b);
            }
        }

        #[test]
        fn random_header_text_never_panics(
            version in 1u8..=3,
            text in proptest::collection::vec(
                prop::sample::select(b"{}()[],:'\" \n\\-0123456789LTrueFalsNondscrhpt_<|>uif".to_vec()),
                0..120,
            ),
            data in proptest::collection::vec(any::<u8>(), 0..24),
        ) {
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&[version, 0]);
            if version == 1 {
                b.extend_from_slice(&(text.len() as u16).to_le_bytes());
            } else {
                b.extend_from_slice(&(text.len() as u32).to_le_bytes());
            }
            b.extend_from_slice(&text);
            b.extend_from_slice(&data);
            let _ = parse(&b);
        }

        #[test]
        fn damaged_files_never_panic(
            at in proptest::collection::vec((0usize..140, any::<u8>()), 1..6),
        ) {
            let mut b = ARANGE_U2.to_vec();
            for (i, v) in at {
                b[i] = v;
            }
            let _ = parse(&b);
        }

        #[test]
        fn headers_round_trip(
            descr in dtype(),
            fortran in any::<bool>(),
            shape in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let b = encode_header(descr, fortran, &shape);
            prop_assert_eq!(b.len() % ALIGN, 0);
            prop_assert_eq!(b[b.len() - 1], b'\n');
            let h = Header::parse(&b).unwrap();
            prop_assert_eq!(h, Header { descr, fortran_order: fortran, shape, data_offset: b.len() });
        }

        #[test]
        fn files_round_trip(
            descr in dtype(),
            shape in proptest::collection::vec(0usize..5, 0..4),
        ) {
            let n: usize = shape.iter().product::<usize>() * descr.itemsize();
            let data: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let b = encode(descr, &shape, &data).unwrap();
            let (h, body) = parse(&b).unwrap();
            prop_assert_eq!((h.descr, h.fortran_order, &h.shape), (descr, false, &shape));
            prop_assert_eq!(body, &data[..]);
        }
    }
}
