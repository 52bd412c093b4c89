//! Wire protocols, pure and sans-IO: byte buffers in, typed requests out; typed replies in,
//! bytes out. Protocol errors are requests of their own ([`text::Command::Fail`]) that the
//! handler answers with memcached's error string, never Rust errors.
//!
//! - [`text`]: the classic ASCII commands (`get set cas incr stats …`).
//! - [`meta`]: the meta commands (`mg ms md ma mn me`), parsed from the same text lines.
//! - [`binary`]: the binary protocol (24-byte headers).
//! - [`request`]: the requests both text parsers produce ([`text::Command`] and the meta
//!   commands inside it), so that [`text`] uses [`meta`]'s parser and not the reverse.
//! - [`reply`]: the exact reply and error strings.
//! - [`udp`]: the 8-byte UDP frame header.

pub mod binary;
pub mod meta;
pub mod reply;
pub mod request;
pub mod text;
pub mod udp;
pub mod watch;

/// Longest key memcached accepts.
pub const KEY_MAX: usize = 250;

/// Limits the parsers enforce.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest value length accepted into the read buffer; larger stores are refused and their
    /// data swallowed.
    pub item_max: usize,
    /// Longest command line (memcached: 2048) before a non-get line closes the connection.
    pub max_line: usize,
    /// Longest `get`/`gets` line (multigets may be long).
    pub max_get_line: usize,
    /// Bytes the store adds to key and value per item (its header): a value fits when
    /// key + value + this is at most `item_max`. The store's figure, handed in so that the
    /// parsers need not know the store.
    pub item_overhead: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            item_max: 1024 * 1024,
            max_line: 2048,
            max_get_line: 1024 * 1024,
            // The store's `ITEM_OVERHEAD` (a test keeps them equal); the server passes the
            // store's own figure through `Cache::limits`.
            item_overhead: 96,
        }
    }
}

/// A key is valid if it is 1..=250 bytes without control characters or spaces.
pub fn key_ok(k: &[u8]) -> bool {
    !k.is_empty() && k.len() <= KEY_MAX && k.iter().all(|&b| b > b' ' && b != 0x7f)
}

/// memcached's `safe_strtoul`-style unsigned parse: optional `+`, decimal digits, no overflow.
pub fn parse_u64(t: &[u8]) -> Option<u64> {
    let t = t.strip_prefix(b"+").unwrap_or(t);
    if t.is_empty() || t.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in t {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((b - b'0') as u64)?;
    }
    Some(v)
}

/// Signed parse in the same style.
pub fn parse_i64(t: &[u8]) -> Option<i64> {
    if let Some(r) = t.strip_prefix(b"-") {
        let v = parse_u64(r)?;
        if r.starts_with(b"+") {
            return None;
        }
        if v <= i64::MAX as u64 + 1 {
            Some((v as i128).wrapping_neg() as i64)
        } else {
            None
        }
    } else {
        let v = parse_u64(t)?;
        i64::try_from(v).ok()
    }
}

/// Parses 32-bit client flags.
pub fn parse_u32(t: &[u8]) -> Option<u32> {
    parse_u64(t).and_then(|v| u32::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"x"), None);
        assert_eq!(parse_u32(b"4294967296"), None);
    }

    #[test]
    fn keys() {
        assert!(key_ok(b"a"));
        assert!(!key_ok(b""));
        assert!(!key_ok(&[b'a'; 251]));
        assert!(key_ok(&[b'a'; 250]));
        assert!(!key_ok(b"a\x01"));
    }

    #[test]
    fn the_default_overhead_is_the_stores() {
        assert_eq!(
            Limits::default().item_overhead,
            crate::storage::ITEM_OVERHEAD
        );
    }
}
