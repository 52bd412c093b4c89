//! Protection domain: the key table every remote access goes through.
//!
//! Keys look like verbs keys: `index << 8 | tag`. The 24-bit index finds the slot in O(1) on
//! the fast path; the 8-bit tag is random and differs from the slot's previous tags, so a stale
//! key of a deregistered region never matches the region that reuses its slot, and keys cannot
//! be predicted from one another beyond the index. Index 0 is never used, so key 0 is never
//! valid. Freed indexes are reused oldest first.
//!
//! Pinning is per range, not counted (that is `mlock`'s semantics): two pinned regions over
//! overlapping external memory share locks, and dropping one unlocks the shared pages.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use crate::access::Access;
use crate::buffer::Buffer;
use crate::error::{AccessError, Error, Result};
use crate::region::{Mode, Region};

/// Largest key index (24 bits).
const MAX_INDEX: usize = (1 << 24) - 1;

/// A checked access: the region and the byte range inside it.
#[derive(Debug, Clone)]
pub struct RemoteAccess {
    /// The region accessed (kept alive for the access even if deregistered meanwhile).
    pub region: Arc<Region>,
    /// Offset of the first byte from the region's start.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

#[derive(Debug, Default)]
struct Slot {
    region: Option<Arc<Region>>,
    /// Reserved while a registration is building its region outside the lock.
    reserved: bool,
    rtag: u8,
    ltag: u8,
}

#[derive(Debug)]
struct Table {
    slots: Vec<Slot>,
    free: VecDeque<usize>,
    live: usize,
}

/// A protection domain: registers buffers as regions and checks every access against them.
/// `Send + Sync`; lookups take a read lock and clone an `Arc`.
#[derive(Debug)]
pub struct Pd {
    table: RwLock<Table>,
    hasher: RandomState,
    counter: AtomicU64,
}

impl Default for Pd {
    fn default() -> Self {
        Pd::new()
    }
}

impl Pd {
    /// An empty protection domain.
    pub fn new() -> Pd {
        Pd {
            table: RwLock::new(Table {
                // Slot 0 stays empty so that key 0 is never valid.
                slots: vec![Slot::default()],
                free: VecDeque::new(),
                live: 0,
            }),
            hasher: RandomState::new(),
            counter: AtomicU64::new(0),
        }
    }

    /// A random tag (SipHash of a counter under a per-process random key).
    fn random_tag(&self) -> u8 {
        let mut h = self.hasher.build_hasher();
        h.write_u64(self.counter.fetch_add(1, Ordering::Relaxed));
        h.finish() as u8
    }

    /// A random tag that differs from both `a` and `b`.
    fn tag_other_than(&self, a: u8, b: u8) -> u8 {
        loop {
            let t = self.random_tag();
            if t != a && t != b {
                return t;
            }
        }
    }

    /// Registers `buf` with rights `access` in `mode`, giving it fresh keys. Pinned regions
    /// are locked here (the table stays usable meanwhile); on-demand regions read their
    /// residency from the kernel.
    pub fn register(&self, buf: Buffer, access: Access, mode: Mode) -> Result<Arc<Region>> {
        let (idx, lkey, rkey) = {
            let mut t = self.table.write().unwrap_or_else(PoisonError::into_inner);
            let idx = match t.free.pop_front() {
                Some(i) => i,
                None if t.slots.len() <= MAX_INDEX => {
                    t.slots.push(Slot::default());
                    t.slots.len() - 1
                }
                None => return Err(Error::KeysExhausted),
            };
            let (old_r, old_l) = (t.slots[idx].rtag, t.slots[idx].ltag);
            // New tags differ from the slot's last ones (stale keys stay dead) and from each
            // other (an lkey is never accepted as an rkey).
            let rtag = self.tag_other_than(old_r, old_l);
            let ltag = self.tag_other_than(old_l, rtag);
            let slot = &mut t.slots[idx];
            slot.reserved = true;
            slot.rtag = rtag;
            slot.ltag = ltag;
            let base = (idx as u32) << 8;
            (idx, base | ltag as u32, base | rkey_tag(rtag))
        };
        let built = Region::new(buf, access, mode, lkey, rkey);
        let mut t = self.table.write().unwrap_or_else(PoisonError::into_inner);
        t.slots[idx].reserved = false;
        match built {
            Ok(region) => {
                let region = Arc::new(region);
                t.slots[idx].region = Some(region.clone());
                t.live += 1;
                tracing::debug!(lkey, rkey, len = region.len(), ?mode, %access, "registered region");
                Ok(region)
            }
            Err(e) => {
                t.free.push_back(idx);
                Err(e)
            }
        }
    }

    /// Removes the region with remote key `rkey`; later accesses with its keys fail. The
    /// memory is released when the last `Arc<Region>` (e.g. of an access in flight) drops.
    pub fn deregister(&self, rkey: u32) -> Result<()> {
        let region = {
            let mut t = self.table.write().unwrap_or_else(PoisonError::into_inner);
            let idx = (rkey >> 8) as usize;
            let hit = t
                .slots
                .get(idx)
                .and_then(|s| s.region.as_ref())
                .is_some_and(|r| r.rkey() == rkey);
            if !hit {
                return Err(Error::UnknownKey(rkey));
            }
            let region = t.slots[idx].region.take();
            t.free.push_back(idx);
            t.live -= 1;
            region
        };
        // Unlock/unmap (if this was the last reference) outside the lock.
        drop(region);
        Ok(())
    }

    /// The region whose key at index `key >> 8` satisfies `pick`.
    #[inline]
    fn lookup(&self, key: u32, pick: impl Fn(&Region) -> u32) -> Option<Arc<Region>> {
        let t = self.table.read().unwrap_or_else(PoisonError::into_inner);
        t.slots
            .get((key >> 8) as usize)
            .and_then(|s| s.region.as_ref())
            .filter(|r| pick(r) == key)
            .cloned()
    }

    /// The region with this remote key.
    pub fn by_rkey(&self, rkey: u32) -> Option<Arc<Region>> {
        self.lookup(rkey, Region::rkey)
    }

    /// The region with this local key.
    pub fn by_lkey(&self, lkey: u32) -> Option<Arc<Region>> {
        self.lookup(lkey, Region::lkey)
    }

    /// The check every remote access goes through: `rkey` names a registered region, the
    /// region's rights contain `need`, and `[va, va+len)` lies inside it (checked arithmetic,
    /// so hostile values near `u64::MAX` are refused, never wrapped).
    ///
    /// Zero-length accesses are allowed with any `va`: the key and rights are still checked;
    /// the returned offset is `va - base` clamped to `[0, len]` so it is always usable.
    pub fn check_remote(
        &self,
        rkey: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> std::result::Result<RemoteAccess, AccessError> {
        let region = self.by_rkey(rkey).ok_or(AccessError::UnknownKey(rkey))?;
        check(region, va, len, need)
    }

    /// The same check for the local side's scatter/gather entries, by local key (e.g. `need`
    /// = [`Access::LOCAL_WRITE`] for the target of a READ; `Access::NONE` to send from it).
    pub fn check_local(
        &self,
        lkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> std::result::Result<RemoteAccess, AccessError> {
        let region = self.by_lkey(lkey).ok_or(AccessError::UnknownKey(lkey))?;
        check(region, addr, len, need)
    }

    /// Number of registered regions.
    pub fn len(&self) -> usize {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .live
    }

    /// True if no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The rkey tag: the random tag as is (a hook should the two key kinds need telling apart).
#[inline]
fn rkey_tag(tag: u8) -> u32 {
    tag as u32
}

/// Rights, then bounds.
#[inline]
fn check(
    region: Arc<Region>,
    va: u64,
    len: u64,
    need: Access,
) -> std::result::Result<RemoteAccess, AccessError> {
    let have = region.access();
    if !have.contains(need) {
        return Err(AccessError::Denied { need, have });
    }
    let base = region.addr();
    let size = region.len() as u64;
    if len == 0 {
        let offset = va.saturating_sub(base).min(size) as usize;
        return Ok(RemoteAccess {
            region,
            offset,
            len: 0,
        });
    }
    if !region.contains(va, len) {
        return Err(AccessError::OutOfBounds {
            va,
            len,
            base,
            size,
        });
    }
    Ok(RemoteAccess {
        offset: (va - base) as usize,
        len: len as usize,
        region,
    })
}
