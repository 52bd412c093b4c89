//! Per-prefix counters for `stats detail on|off|dump`: keys are grouped by the text before the
//! first delimiter (`:`, or `-D`), and the dump lists prefixes in memcached's order (its
//! 256-bucket table hashed with MurmurHash3, from the `murmur3` crate, newest first within a
//! bucket) so the bytes match.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

use crate::out::Put;

/// memcached's `PREFIX_HASH_SIZE`.
const BUCKETS: usize = 256;

#[derive(Debug, Default, Clone)]
struct Entry {
    prefix: Vec<u8>,
    get: u64,
    hit: u64,
    set: u64,
    del: u64,
}

/// Prefix statistics; recording is off until `stats detail on`.
#[derive(Debug)]
pub struct PrefixStats {
    delimiter: u8,
    enabled: AtomicBool,
    buckets: Mutex<Vec<Vec<Entry>>>,
}

impl Default for PrefixStats {
    /// memcached's default delimiter, `:`.
    fn default() -> Self {
        PrefixStats::new(b':')
    }
}

/// Which counter an operation bumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixOp {
    /// A key fetched by get/gets/gat/gats; `true` on a hit.
    Get(bool),
    /// A text storage command (whatever its outcome).
    Set,
    /// A text delete (whatever its outcome).
    Delete,
}

impl PrefixStats {
    /// Prefixes end at the first `delimiter` byte (memcached's `-D`).
    pub fn new(delimiter: u8) -> Self {
        PrefixStats {
            delimiter,
            enabled: AtomicBool::new(false),
            buckets: Mutex::new(vec![Vec::new(); BUCKETS]),
        }
    }

    /// `stats detail on|off`.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Relaxed);
    }

    /// Whether recording is on (`detail_enabled` in `stats settings`).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// Counts one operation on `key` when recording is on and the key has a prefix.
    pub fn record(&self, key: &[u8], op: PrefixOp) {
        if !self.enabled() {
            return;
        }
        let Some(len) = key.iter().position(|&b| b == self.delimiter) else {
            return;
        };
        let prefix = &key[..len];
        let mut b = self.lock();
        let bucket = &mut b[murmur3_32(prefix) as usize % BUCKETS];
        let i = match bucket.iter().position(|e| e.prefix == prefix) {
            Some(i) => i,
            None => {
                // memcached links a new prefix at the head of its bucket.
                bucket.insert(
                    0,
                    Entry {
                        prefix: prefix.to_vec(),
                        ..Entry::default()
                    },
                );
                0
            }
        };
        let e = &mut bucket[i];
        match op {
            PrefixOp::Get(hit) => {
                e.get += 1;
                e.hit += u64::from(hit);
            }
            PrefixOp::Set => e.set += 1,
            PrefixOp::Delete => e.del += 1,
        }
    }

    /// Forgets every prefix (`stats reset`).
    pub fn clear(&self) {
        self.lock().iter_mut().for_each(Vec::clear);
    }

    /// Appends the `stats detail dump` reply, `END` included.
    pub fn dump(&self, out: &mut impl Put) {
        for e in self.lock().iter().flatten() {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(&e.prefix);
            out.extend_from_slice(
                format!(
                    " get {} hit {} set {} del {}\r\n",
                    e.get, e.hit, e.set, e.del
                )
                .as_bytes(),
            );
        }
        out.extend_from_slice(b"END\r\n");
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<Entry>>> {
        // Counters stay usable even if a holder panicked.
        self.buckets.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// MurmurHash3 x86 32-bit with seed 0, memcached's default `hash_algorithm`.
fn murmur3_32(data: &[u8]) -> u32 {
    // Reading from a slice cannot fail.
    murmur3::murmur3_32(&mut std::io::Cursor::new(data), 0).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_reference_vectors() {
        assert_eq!(murmur3_32(b""), 0);
        assert_eq!(murmur3_32(b"hello"), 0x248b_fa47);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog"),
            0x2e4f_f723
        );
    }

    #[test]
    fn dump_follows_bucket_order_and_skips_keys_without_prefix() {
        let p = PrefixStats::default();
        p.record(b"a:1", PrefixOp::Set);
        assert!(!p.enabled());
        p.set_enabled(true);
        for k in [&b"a:1"[..], b"c:1", b"f:1", b"x:1", b"plain"] {
            p.record(k, PrefixOp::Get(k == b"a:1"));
        }
        p.record(b"a:2", PrefixOp::Delete);
        let mut out = Vec::new();
        p.dump(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "PREFIX x get 1 hit 0 set 0 del 0\r\nPREFIX f get 1 hit 0 set 0 del 0\r\n\
             PREFIX c get 1 hit 0 set 0 del 0\r\nPREFIX a get 1 hit 1 set 0 del 1\r\nEND\r\n"
        );
        p.clear();
        let mut out = Vec::new();
        p.dump(&mut out);
        assert_eq!(out, b"END\r\n");
    }
}
