//! The EXIF orientation tag (0x0112 in IFD0) in an APP1 `Exif\0\0` payload: read and reset.

/// Where the orientation value sits in the payload, and its value (1–8).
pub(crate) fn orientation(app1: &[u8]) -> Option<(usize, u16)> {
    let tiff = app1.strip_prefix(b"Exif\0\0")?;
    let base = 6;
    let le = match tiff.get(0..4)? {
        [b'I', b'I', 42, 0] => true,
        [b'M', b'M', 0, 42] => false,
        _ => return None,
    };
    let u16_at = |o: usize| -> Option<u16> {
        let b = tiff.get(o..o + 2)?;
        Some(if le {
            u16::from_le_bytes([b[0], b[1]])
        } else {
            u16::from_be_bytes([b[0], b[1]])
        })
    };
    let u32_at = |o: usize| -> Option<u32> {
        let b: [u8; 4] = tiff.get(o..o + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let ifd = usize::try_from(u32_at(4)?).ok()?;
    let count = usize::from(u16_at(ifd)?);
    for i in 0..count {
        let e = ifd.checked_add(2 + 12 * i)?;
        if u16_at(e)? == 0x0112 {
            // SHORT (type 3), count 1: the value sits in the first two bytes of the value field.
            if u16_at(e + 2)? != 3 {
                return None;
            }
            let v = u16_at(e + 8)?;
            return (1..=8).contains(&v).then_some((base + e + 8, v));
        }
    }
    None
}

/// A copy of the payload with the orientation set to 1 (top-left), if it has the tag.
pub(crate) fn reset_orientation(app1: &[u8]) -> Vec<u8> {
    let mut out = app1.to_vec();
    if let Some((at, _)) = orientation(app1) {
        let le = app1.get(6) == Some(&b'I');
        let one = if le {
            1u16.to_le_bytes()
        } else {
            1u16.to_be_bytes()
        };
        out[at..at + 2].copy_from_slice(&one);
    }
    out
}

/// An APP1 payload with only an orientation tag (for tests and callers that add one).
pub fn exif_with_orientation(orientation: u16) -> Vec<u8> {
    let mut p = b"Exif\0\0".to_vec();
    p.extend_from_slice(b"MM\0\x2a\0\0\0\x08"); // big-endian TIFF, IFD0 at 8
    p.extend_from_slice(&1u16.to_be_bytes()); // one entry
    p.extend_from_slice(&0x0112u16.to_be_bytes());
    p.extend_from_slice(&3u16.to_be_bytes()); // SHORT
    p.extend_from_slice(&1u32.to_be_bytes());
    p.extend_from_slice(&orientation.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&0u32.to_be_bytes()); // no next IFD
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_resets_orientation() {
        for o in 1..=8 {
            let p = exif_with_orientation(o);
            assert_eq!(orientation(&p).map(|v| v.1), Some(o));
            assert_eq!(orientation(&reset_orientation(&p)).map(|v| v.1), Some(1));
        }
    }

    #[test]
    fn truncated_exif_gives_none() {
        let p = exif_with_orientation(6);
        for n in 0..p.len() - 4 {
            let _ = orientation(&p[..n]);
        }
        assert_eq!(orientation(&p[..20]), None);
    }
}
