//! MicMac keypoint files: Pastis `.dat` v0 and Digeo `.dat` v1.
//!
//! v0 (what Tapioca writes by default; no header, little-endian): `u32 n`, `u32 dim` (128),
//! then per point `f32 x, y, scale, angle` and `dim` u8 descriptor values (MicMac stores
//! `512 · d` of its unit-norm descriptor).
//!
//! v1 (`mm3d Digeo`), from MicMac's sources (`VersionedFileHeader.cpp`:
//! `VersionedFileHeader::read_raw` / `write`, and `DigeoPoint.cpp`: `DigeoPoint::read_v1`,
//! `writeDigeoFile_v1`): the byte `0xBA` (written as `put(-70)`), then the raw 12-byte struct
//! `{char isMSBF; 3 padding bytes; u32 magic; u32 version}`, where magic and version are in the
//! file's byte order (`isMSBF` 1: big-endian) and magic is 989008845 (`g_versioned_headers_list`,
//! "Digeo : points of interest"; it reads 3440636730 in the other byte order). Then `u32 n`,
//! `u32 dim` (128), and per point `f64 x, y, scale`, `i16 type`, `i16 nbAngles`, and per angle
//! `f64 angle` followed by `dim` f64 descriptor values. A point with several angles becomes one
//! keypoint per angle here (MicMac's `multipleToUniqueAngle`); a point with none is dropped.
//! Descriptor values are rounded from f64 to f32 (the matcher's float path), and the `type`
//! field is not kept (written back as 0, `DETECT_UNKNOWN`).
//! A header with version 0 is followed by a v0 body, as in MicMac's `readDigeoFile`.

use super::bytes::{Reader, Writer};
use super::{invalid, Descriptors, FormatError, Keypoints};
use crate::MAX_DIM;

/// The byte that opens a MicMac versioned file.
pub const VERSIONED_MARK: u8 = 0xBA;
/// Digeo's magic number, in the file's byte order.
pub const DIGEO_MAGIC: u32 = 989_008_845;

fn dim_of(d: u32) -> Result<usize, FormatError> {
    if d == 0 || d as usize > MAX_DIM {
        return Err(FormatError::Dimension(d as u64));
    }
    Ok(d as usize)
}

/// Whether `b` is exactly the size a v0 file with its header's `n` and `dim` has.
pub(crate) fn is_v0(b: &[u8]) -> bool {
    if b.len() < 8 {
        return false;
    }
    let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64;
    let dim = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as u64;
    (1..=MAX_DIM as u64).contains(&dim) && 8 + n * (16 + dim) == b.len() as u64
}

/// Whether `b` opens with Digeo's versioned header.
pub(crate) fn is_v1(b: &[u8]) -> bool {
    let mut r = Reader::new(b);
    header(&mut r).is_ok()
}

fn header(r: &mut Reader) -> Result<u32, FormatError> {
    versioned_header(r, DIGEO_MAGIC, "MicMac Digeo v1")
}

/// Reads a MicMac versioned header with `magic`; returns the version and sets the reader's
/// byte order.
pub(crate) fn versioned_header(
    r: &mut Reader,
    want: u32,
    format: &'static str,
) -> Result<u32, FormatError> {
    let bad = |detail: String| FormatError::Magic { format, detail };
    let mark = r.u8("versioned file mark")?;
    if mark != VERSIONED_MARK {
        return Err(bad(format!("first byte {mark:#04x}, not 0xba")));
    }
    let msbf = r.u8("byte order flag")?;
    if msbf > 1 {
        return Err(bad(format!("byte order flag {msbf}, not 0 or 1")));
    }
    r.take("header padding", 3)?;
    r.big_endian = msbf == 1;
    let magic = r.u32("magic number")?;
    if magic != want {
        return Err(bad(format!("magic number {magic}, not {want}")));
    }
    r.u32("version")
}

/// Parses a v0 file.
pub fn parse_v0(b: &[u8]) -> Result<Keypoints, FormatError> {
    parse_v0_body(&mut Reader::new(b))
}

fn parse_v0_body(r: &mut Reader) -> Result<Keypoints, FormatError> {
    let n = r.u32("point count")? as u64;
    let dim = dim_of(r.u32("descriptor dimension")?)?;
    r.need("points", n, 16 + dim as u64)?;
    let n = n as usize;
    let mut kp = Keypoints {
        xy: Vec::with_capacity(n),
        scale: Vec::with_capacity(n),
        angle: Vec::with_capacity(n),
        dim,
        descriptors: Descriptors::U8(Vec::new()),
    };
    let mut desc = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let x = r.f32("x")? as f64;
        let y = r.f32("y")? as f64;
        kp.xy.push([x, y]);
        kp.scale.push(r.f32("scale")? as f64);
        kp.angle.push(r.f32("angle")? as f64);
        desc.extend_from_slice(r.take("descriptor", dim)?);
    }
    r.finish(n as u64)?;
    kp.descriptors = Descriptors::U8(desc);
    Ok(kp)
}

/// Parses a v1 file (either byte order).
pub fn parse_v1(b: &[u8]) -> Result<Keypoints, FormatError> {
    let mut r = Reader::new(b);
    match header(&mut r)? {
        0 => {
            r.big_endian = false;
            parse_v0_body(&mut r)
        }
        1 => parse_v1_body(&mut r),
        v => Err(FormatError::Magic {
            format: "MicMac Digeo v1",
            detail: format!("version {v}, not 0 or 1"),
        }),
    }
}

fn parse_v1_body(r: &mut Reader) -> Result<Keypoints, FormatError> {
    let n = r.u32("point count")? as u64;
    let dim = dim_of(r.u32("descriptor dimension")?)?;
    // Every point has at least its 28 fixed bytes.
    r.need("points", n, 28)?;
    let mut kp = Keypoints {
        xy: Vec::new(),
        scale: Vec::new(),
        angle: Vec::new(),
        dim,
        descriptors: Descriptors::F32(Vec::new()),
    };
    let mut desc: Vec<f32> = Vec::new();
    for i in 0..n {
        let (x, y, scale) = (r.f64("x")?, r.f64("y")?, r.f64("scale")?);
        let _kind = r.i16("type")?;
        let angles = r.i16("angle count")?;
        if angles < 0 {
            return Err(invalid(
                "MicMac Digeo v1",
                format!("point {i} has {angles} angles"),
            ));
        }
        r.need(
            "angles and descriptors",
            angles as u64,
            8 * (1 + dim as u64),
        )?;
        for _ in 0..angles {
            kp.xy.push([x, y]);
            kp.scale.push(scale);
            kp.angle.push(r.f64("angle")?);
            for _ in 0..dim {
                desc.push(r.f64("descriptor")? as f32);
            }
        }
    }
    r.finish(n)?;
    kp.descriptors = Descriptors::F32(desc);
    Ok(kp)
}

/// Encodes a v0 file (u8 descriptors only; positions rounded to f32).
pub fn encode_v0(kp: &Keypoints) -> Result<Vec<u8>, FormatError> {
    kp.check()?;
    let Descriptors::U8(d) = &kp.descriptors else {
        return Err(FormatError::Unsupported {
            format: "MicMac v0",
            detail: "its descriptors are u8, these are f32".into(),
        });
    };
    let n = u32::try_from(kp.len()).map_err(|_| FormatError::Unsupported {
        format: "MicMac v0",
        detail: "too many points".into(),
    })?;
    let mut w = Writer::new(false);
    w.u32(n);
    w.u32(kp.dim as u32);
    for i in 0..kp.len() {
        for v in [kp.xy[i][0], kp.xy[i][1], kp.scale[i], kp.angle[i]] {
            w.f32(v as f32);
        }
        w.buf.extend_from_slice(&d[i * kp.dim..(i + 1) * kp.dim]);
    }
    Ok(w.buf)
}

/// Encodes a Digeo v1 file, one angle per point, type 0 (`DETECT_UNKNOWN`), in the chosen
/// byte order.
pub fn encode_v1(kp: &Keypoints, big_endian: bool) -> Result<Vec<u8>, FormatError> {
    kp.check()?;
    let n = u32::try_from(kp.len()).map_err(|_| FormatError::Unsupported {
        format: "MicMac v1",
        detail: "too many points".into(),
    })?;
    let mut w = versioned_writer(DIGEO_MAGIC, big_endian);
    w.u32(n);
    w.u32(kp.dim as u32);
    for i in 0..kp.len() {
        w.f64(kp.xy[i][0]);
        w.f64(kp.xy[i][1]);
        w.f64(kp.scale[i]);
        w.i16(0);
        w.i16(1);
        w.f64(kp.angle[i]);
        let range = i * kp.dim..(i + 1) * kp.dim;
        match &kp.descriptors {
            Descriptors::U8(d) => d[range].iter().for_each(|&x| w.f64(x as f64)),
            Descriptors::F32(d) => d[range].iter().for_each(|&x| w.f64(x as f64)),
        }
    }
    Ok(w.buf)
}

/// A writer that starts with a MicMac versioned header (`magic`, version 1).
pub(crate) fn versioned_writer(magic: u32, big_endian: bool) -> Writer {
    let mut w = Writer::new(big_endian);
    w.buf
        .extend_from_slice(&[VERSIONED_MARK, big_endian as u8, 0, 0, 0]);
    w.u32(magic);
    w.u32(1);
    w
}
