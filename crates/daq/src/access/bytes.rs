//! Byte counts as people write and read them (`8G`, `1.5 GiB`): apart from `budget` (which
//! re-exports them) because the frame buffer's size in `flow` takes them too, below `budget`.
use std::fmt;

/// `8G`, `512M`, `2GiB`, `1073741824`: bytes, suffixes in powers of 1024 (what
/// `--memory-budget` and `[receiver] buffer` take).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("{s:?}: the suffix is one of K, M, G, T")),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of bytes (8G, 512M, 1073741824)"))?;
    let b = n * (1u64 << shift) as f64;
    if !(b.is_finite() && b >= 1.0 && b < u64::MAX as f64) {
        return Err(format!("{s:?}: at least 1 byte"));
    }
    Ok(b as u64)
}

/// Bytes for people: `1.5 GiB`.
#[derive(Debug, Clone, Copy)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        match self.0 {
            n if n >= 1 << 40 => write!(f, "{:.1} TiB", b / (1u64 << 40) as f64),
            n if n >= 1 << 30 => write!(f, "{:.1} GiB", b / (1u64 << 30) as f64),
            n if n >= 1 << 20 => write!(f, "{:.1} MiB", b / (1u64 << 20) as f64),
            n => write!(f, "{} KiB", n.div_ceil(1024)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_take_suffixes_in_powers_of_1024() {
        assert_eq!(parse_bytes("1073741824"), Ok(1 << 30));
        assert_eq!(parse_bytes("8G"), Ok(8 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5k"), Ok(1536));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("3X").is_err());
    }

    #[test]
    fn bytes_read_like_people_write_them() {
        assert_eq!(Bytes(3 << 30).to_string(), "3.0 GiB");
        assert_eq!(Bytes(1536 << 20).to_string(), "1.5 GiB");
        assert_eq!(Bytes(100).to_string(), "1 KiB");
    }
}
