//! Lowe's `.key` keypoint text (his SIFT demo, Bundler, VisualSFM, SIFT++).
//!
//! A header `N D`, then per keypoint `row column scale orientation` (note: y first) and `D`
//! integers 0–255. Lowe's program wraps descriptors 20 values per line, each preceded by a
//! space; readers here accept any whitespace. Non-integer descriptor values (some tools write
//! floats) load as f32 descriptors.

use super::{invalid, Descriptors, FormatError, Keypoints};
use crate::MAX_DIM;

const NAME: &str = "Lowe .key";

/// Whether the first line is `N D` with a supported `D`.
pub(crate) fn looks_like(b: &[u8]) -> bool {
    let line = b.split(|&c| c == b'\n').next().unwrap_or(&[]);
    let Ok(line) = std::str::from_utf8(line) else {
        return false;
    };
    let f: Vec<&str> = line.split_whitespace().collect();
    f.len() == 2
        && f[0].parse::<u64>().is_ok()
        && f[1]
            .parse::<usize>()
            .is_ok_and(|d| (1..=MAX_DIM).contains(&d))
}

/// Parses a `.key` file.
pub fn parse(b: &[u8]) -> Result<Keypoints, FormatError> {
    let text = std::str::from_utf8(b).map_err(|e| invalid(NAME, format!("not text: {e}")))?;
    let mut tok = text.split_ascii_whitespace();
    let mut next = |what: &str| {
        tok.next()
            .ok_or_else(|| invalid(NAME, format!("file ends before {what}")))
    };
    let n: u64 = next("the point count")?
        .parse()
        .map_err(|_| invalid(NAME, "the point count is not a number"))?;
    let dim: u64 = next("the dimension")?
        .parse()
        .map_err(|_| invalid(NAME, "the dimension is not a number"))?;
    if dim == 0 || dim > MAX_DIM as u64 {
        return Err(FormatError::Dimension(dim));
    }
    // Each value takes at least two bytes (a digit and a separator): refuse counts the file
    // cannot hold before allocating for them.
    let need = n.saturating_mul(4 + dim).saturating_mul(2);
    if need > b.len() as u64 + 1 {
        return Err(FormatError::Truncated {
            what: "keypoints",
            need,
            at: 0,
            len: b.len(),
        });
    }
    let (n, dim) = (n as usize, dim as usize);
    let mut kp = Keypoints {
        xy: Vec::with_capacity(n),
        scale: Vec::with_capacity(n),
        angle: Vec::with_capacity(n),
        dim,
        descriptors: Descriptors::U8(Vec::with_capacity(n * dim)),
    };
    for i in 0..n {
        let mut f = [0f64; 4];
        for (v, what) in f.iter_mut().zip(["row", "column", "scale", "orientation"]) {
            let s = next(what)?;
            *v = s.parse().map_err(|_| {
                invalid(NAME, format!("keypoint {i}: {what} {s:?} is not a number"))
            })?;
        }
        kp.xy.push([f[1], f[0]]);
        kp.scale.push(f[2]);
        kp.angle.push(f[3]);
        for _ in 0..dim {
            let s = next("a descriptor value")?;
            push_value(&mut kp.descriptors, s)
                .map_err(|_| invalid(NAME, format!("keypoint {i}: descriptor value {s:?}")))?;
        }
    }
    if let Ok(s) = next("") {
        return Err(invalid(
            NAME,
            format!("unexpected {s:?} after the last keypoint"),
        ));
    }
    Ok(kp)
}

/// Appends a value, switching to f32 at the first one that is not a u8.
fn push_value(d: &mut Descriptors, s: &str) -> Result<(), ()> {
    if let Descriptors::U8(v) = d {
        if let Ok(x) = s.parse::<u8>() {
            v.push(x);
            return Ok(());
        }
        *d = Descriptors::F32(v.iter().map(|&x| x as f32).collect());
    }
    let x: f32 = s.parse().map_err(|_| ())?;
    if !x.is_finite() {
        return Err(());
    }
    match d {
        Descriptors::F32(v) => v.push(x),
        Descriptors::U8(_) => unreachable!("switched to f32 above"),
    }
    Ok(())
}

/// Encodes a `.key` file the way Lowe's program writes it (u8 descriptors only).
///
/// ```
/// use remora_match::formats::{lowe, Descriptors, Keypoints};
/// let kp = Keypoints { xy: vec![[10.0, 20.5]], scale: vec![1.5], angle: vec![-0.25],
///                      dim: 2, descriptors: Descriptors::U8(vec![7, 255]) };
/// assert_eq!(lowe::encode(&kp).unwrap(), "1 2\n20.50 10.00 1.50 -0.250\n 7 255\n");
/// ```
pub fn encode(kp: &Keypoints) -> Result<String, FormatError> {
    kp.check()?;
    let Descriptors::U8(d) = &kp.descriptors else {
        return Err(FormatError::Unsupported {
            format: NAME,
            detail: "descriptors must be u8".into(),
        });
    };
    let mut s = format!("{} {}\n", kp.len(), kp.dim);
    for i in 0..kp.len() {
        s += &format!(
            "{:.2} {:.2} {:.2} {:.3}",
            kp.xy[i][1], kp.xy[i][0], kp.scale[i], kp.angle[i]
        );
        for (j, v) in d[i * kp.dim..(i + 1) * kp.dim].iter().enumerate() {
            if j % 20 == 0 {
                s.push('\n');
            }
            s += &format!(" {v}");
        }
        s.push('\n');
    }
    Ok(s)
}
