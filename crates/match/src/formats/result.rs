//! MicMac `.result` match files: one pair of positions per match, image 1 first.
//!
//! From MicMac's sources (the `PointMatch` file functions: `writePointMatch_v0`,
//! `readPointMatch_v1`, `writeMatchesFile`):
//! - v0, text: per match `x1 y1 x2 y2` and a newline, written with `ostream <<` (six
//!   significant digits, `%g`; see [`super::printf`]).
//! - v1 (`-newFormat`), binary: MicMac's versioned header (`0xBA`, `isMSBF`, 3 padding bytes,
//!   magic 1452550588 "Matched pair of points", version 1; see [`super::micmac`]), then
//!   `u32 n` and `n × 4` f64 `x1 y1 x2 y2`, in the byte order the header names.

use super::bytes::Reader;
use super::micmac::{versioned_header, versioned_writer};
use super::printf::format_g;
use super::{invalid, FormatError};
use crate::{Error, Match};

/// Magic number of MicMac's binary match files, in the file's byte order.
pub const RESULT_MAGIC: u32 = 1_452_550_588;

/// Positions of matched points, `[x1, y1, x2, y2]`, image 1 (the train set, MicMac's first
/// file) first, from matches and the two sets' positions.
pub fn pairs(
    matches: &[Match],
    train_xy: &[[f64; 2]],
    query_xy: &[[f64; 2]],
) -> Result<Vec<[f64; 4]>, Error> {
    matches
        .iter()
        .map(|m| {
            let t = train_xy.get(m.train as usize).ok_or(Error::Coordinates {
                which: "train",
                len: train_xy.len(),
                index: m.train,
            })?;
            let q = query_xy.get(m.query as usize).ok_or(Error::Coordinates {
                which: "query",
                len: query_xy.len(),
                index: m.query,
            })?;
            Ok([t[0], t[1], q[0], q[1]])
        })
        .collect()
}

/// Encodes the text v0 format.
///
/// ```
/// use remora_match::formats::result::encode_v0;
/// assert_eq!(encode_v0(&[[1234.5678, 0.5, 1e-5, 2.0]]), "1234.57 0.5 1e-05 2\n");
/// ```
pub fn encode_v0(pairs: &[[f64; 4]]) -> String {
    let mut s = String::new();
    for p in pairs {
        let f: Vec<String> = p.iter().map(|&x| format_g(x)).collect();
        s.push_str(&f.join(" "));
        s.push('\n');
    }
    s
}

/// Parses the text v0 format (any whitespace between numbers, four per line, blank lines
/// ignored).
pub fn parse_v0(text: &[u8]) -> Result<Vec<[f64; 4]>, FormatError> {
    let text = std::str::from_utf8(text)
        .map_err(|e| invalid("MicMac .result", format!("not text: {e}")))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        if f.len() != 4 {
            return Err(invalid(
                "MicMac .result",
                format!("line {}: {} numbers, not 4", i + 1, f.len()),
            ));
        }
        let mut p = [0f64; 4];
        for (v, s) in p.iter_mut().zip(&f) {
            *v = s.parse().map_err(|_| {
                invalid(
                    "MicMac .result",
                    format!("line {}: {s:?} is not a number", i + 1),
                )
            })?;
        }
        out.push(p);
    }
    Ok(out)
}

/// Encodes the binary v1 format in the chosen byte order.
pub fn encode_v1(pairs: &[[f64; 4]], big_endian: bool) -> Result<Vec<u8>, FormatError> {
    let n = u32::try_from(pairs.len()).map_err(|_| FormatError::Unsupported {
        format: "MicMac .result v1",
        detail: "too many matches".into(),
    })?;
    let mut w = versioned_writer(RESULT_MAGIC, big_endian);
    w.u32(n);
    for p in pairs {
        p.iter().for_each(|&x| w.f64(x));
    }
    Ok(w.buf)
}

/// Parses the binary v1 format (either byte order).
pub fn parse_v1(bytes: &[u8]) -> Result<Vec<[f64; 4]>, FormatError> {
    let mut r = Reader::new(bytes);
    let version = versioned_header(&mut r, RESULT_MAGIC, "MicMac .result v1")?;
    if version != 1 {
        return Err(FormatError::Magic {
            format: "MicMac .result v1",
            detail: format!("version {version}, not 1"),
        });
    }
    let n = r.u32("match count")? as u64;
    r.need("matches", n, 32)?;
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        out.push([r.f64("x1")?, r.f64("y1")?, r.f64("x2")?, r.f64("y2")?]);
    }
    r.finish(n)?;
    Ok(out)
}

/// Parses either version: binary when the file opens with MicMac's versioned-file byte.
pub fn parse(bytes: &[u8]) -> Result<Vec<[f64; 4]>, FormatError> {
    if bytes.first() == Some(&super::micmac::VERSIONED_MARK) {
        parse_v1(bytes)
    } else {
        parse_v0(bytes)
    }
}
