//! A heap shard's entry: key and value in one allocation (shared when large, so replies send
//! it by reference), its LRU links, and what memcached keeps per item.

use std::sync::Arc;

use crate::out::SHARE_MIN;
use crate::storage::ITEM_OVERHEAD;

use super::Ctx;

pub(super) struct Entry {
    /// Key followed by value in one allocation: one cache miss reaches both.
    pub(super) data: Data,
    pub(super) key_len: u8,
    pub(super) hash: u64,
    pub(super) cas: u64,
    pub(super) flags: u32,
    /// Relative-clock expiry, 0 = never.
    pub(super) exptime: u32,
    /// Last access.
    pub(super) time: u32,
    pub(super) prev: u32,
    pub(super) next: u32,
    pub(super) fetched: bool,
    /// Invalidated by `md … I`: served with `X` until rewritten.
    pub(super) stale: bool,
    /// A client holds the right to recache it (`W` was handed out).
    pub(super) win_sent: bool,
}

impl Entry {
    pub(super) fn key(&self) -> &[u8] {
        &self.data.bytes()[..self.key_len as usize]
    }

    pub(super) fn value(&self) -> &[u8] {
        &self.data.bytes()[self.key_len as usize..]
    }

    pub(super) fn charge(&self) -> usize {
        charge(
            self.key_len as usize,
            self.data.bytes().len() - self.key_len as usize,
        )
    }

    pub(super) fn live(&self, ctx: &Ctx) -> bool {
        ctx.live_at(self.exptime, self.cas, self.time)
    }

    pub(super) fn flushed(&self, ctx: &Ctx) -> bool {
        ctx.flushed_at(self.cas, self.time)
    }
}

/// An item's key and value. Large values are shared (reference-counted) so that replies can
/// send them by reference (see [`crate::out`]); small ones, which replies copy anyway, are a
/// plain allocation: 16 bytes smaller, which keeps more small items per cache line.
pub(super) enum Data {
    Small(Box<[u8]>),
    Shared(Arc<[u8]>),
}

impl Data {
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Data::Small(b) => b,
            Data::Shared(a) => a,
        }
    }

    pub(super) fn shared(&self) -> Option<&Arc<[u8]>> {
        match self {
            Data::Small(_) => None,
            Data::Shared(a) => Some(a),
        }
    }
}

/// `parts` in order followed by `pad` spaces, in one allocation written once (building a `Vec`
/// and converting it to an `Arc` would copy a large value twice). The first part is the key.
pub(super) fn joined(parts: &[&[u8]], pad: usize) -> Data {
    let len = parts.iter().map(|p| p.len()).sum::<usize>() + pad;
    let key = parts.first().map_or(0, |k| k.len());
    if len - key < SHARE_MIN {
        let mut v = Vec::with_capacity(len);
        for p in parts {
            v.extend_from_slice(p);
        }
        v.resize(len, b' ');
        return Data::Small(v.into_boxed_slice());
    }
    let mut a = Arc::<[u8]>::new_uninit_slice(len);
    let Some(dst) = Arc::get_mut(&mut a) else {
        // A fresh Arc has one owner; kept total rather than unwrapped.
        return Data::Small(Box::default());
    };
    let dst = dst.as_mut_ptr().cast::<u8>();
    let mut at = 0;
    for p in parts {
        // SAFETY: `at + p.len() <= len`, and the source is a live slice that cannot overlap a
        // fresh allocation.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), dst.add(at), p.len()) };
        at += p.len();
    }
    // SAFETY: the last `pad` bytes of the allocation, `at + pad == len`.
    unsafe { std::ptr::write_bytes(dst.add(at), b' ', pad) };
    // SAFETY: every one of the `len` bytes was written above.
    Data::Shared(unsafe { a.assume_init() })
}

pub(super) fn charge(key: usize, value: usize) -> usize {
    key + value + ITEM_OVERHEAD
}
