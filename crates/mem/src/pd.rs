//! Protection domain: the key table every remote access goes through.
//!
//! Keys look like verbs keys: `index << 8 | tag`. The 24-bit index finds the slot in O(1) on
//! the fast path; the 8-bit tag is random, so keys cannot be predicted from one another beyond
//! the index. A stale key of a deregistered region must not match a later region: freed
//! indexes rest in a quarantine of [`QUARANTINE`] before reuse (oldest first), and a slot never
//! repeats an rkey tag within [`TAG_WINDOW`] reuses, so a stale rkey can only revive after more
//! than `QUARANTINE * TAG_WINDOW` (131 072) deregistrations, and then by chance (the same kind
//! of limit real 8-bit verbs key tags have). lkey tags likewise never repeat within
//! [`LTAG_WINDOW`] reuses of a slot. Index 0 is never used, so key 0 is never valid.
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

/// Freed indexes wait until this many others are free before reuse.
pub const QUARANTINE: usize = 1024;
/// A slot's rkey tag is not repeated within this many reuses of the slot.
pub const TAG_WINDOW: usize = 128;

#[derive(Debug, Default)]
struct Slot {
    region: Option<Arc<Region>>,
}

/// A slot's lkey tag is not repeated within this many reuses of the slot.
pub const LTAG_WINDOW: usize = 64;

/// The last `N` tags drawn for one kind of key of a slot.
#[derive(Debug)]
struct TagWindow<const N: usize> {
    ring: [u8; N],
    filled: usize,
    pos: usize,
    recent: [u64; 4],
}

impl<const N: usize> Default for TagWindow<N> {
    fn default() -> Self {
        TagWindow {
            ring: [0; N],
            filled: 0,
            pos: 0,
            recent: [0; 4],
        }
    }
}

fn bit(t: u8) -> (usize, u64) {
    (t as usize / 64, 1 << (t % 64))
}

impl<const N: usize> TagWindow<N> {
    fn is_recent(&self, t: u8) -> bool {
        let (w, b) = bit(t);
        self.recent[w] & b != 0
    }

    /// Draws a tag uniformly (by `random`) among those not in the window and not `avoid`, and
    /// records it.
    fn draw(&mut self, random: u64, avoid: Option<u8>) -> u8 {
        // At most N (<= 128) tags are recent and one avoided, so over 100 are free.
        let free = (0..=255u8)
            .filter(|&t| !self.is_recent(t) && Some(t) != avoid)
            .count() as u64;
        let t = (0..=255u8)
            .filter(|&t| !self.is_recent(t) && Some(t) != avoid)
            .nth((random % free) as usize)
            .unwrap_or_default();
        if self.filled == N {
            let (w, b) = bit(self.ring[self.pos]);
            self.recent[w] &= !b;
        } else {
            self.filled += 1;
        }
        self.ring[self.pos] = t;
        self.pos = (self.pos + 1) % N;
        let (w, b) = bit(t);
        self.recent[w] |= b;
        t
    }
}

/// The recent rkey and lkey tags of a slot (kept apart from the slots so lookups touch only
/// the small `Slot`s).
#[derive(Debug, Default)]
struct TagHistory {
    rtags: TagWindow<TAG_WINDOW>,
    ltags: TagWindow<LTAG_WINDOW>,
}

impl TagHistory {
    /// Draws an rkey tag uniformly among those not in the slot's window, and records it.
    fn draw_rtag(&mut self, random: u64) -> u8 {
        self.rtags.draw(random, None)
    }

    /// Draws an lkey tag that differs from `rtag` (an lkey is never accepted as an rkey) and
    /// from the slot's last [`LTAG_WINDOW`] lkey tags, so a stale lkey does not revive on the
    /// next reuses of the slot either.
    fn draw_ltag(&mut self, random: u64, rtag: u8) -> u8 {
        self.ltags.draw(random, Some(rtag))
    }
}

#[derive(Debug)]
struct Table {
    slots: Vec<Slot>,
    history: Vec<TagHistory>,
    free: VecDeque<usize>,
    live: usize,
}

/// A protection domain: registers buffers as regions and checks every access against them.
/// `Send + Sync`; lookups take a read lock and clone an `Arc`.
pub struct Pd {
    table: RwLock<Table>,
    hasher: RandomState,
    counter: AtomicU64,
}

impl std::fmt::Debug for Pd {
    // A summary: the table of a busy domain is too long to print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("regions", &self.len()).finish()
    }
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
                history: vec![TagHistory::default()],
                free: VecDeque::new(),
                live: 0,
            }),
            hasher: RandomState::new(),
            counter: AtomicU64::new(0),
        }
    }

    /// A random number (SipHash of a counter under a per-process random key).
    fn random(&self) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write_u64(self.counter.fetch_add(1, Ordering::Relaxed));
        h.finish()
    }

    /// Registers `buf` with rights `access` in `mode`, giving it fresh keys. Pinned regions
    /// are locked here (the table stays usable meanwhile); on-demand regions read their
    /// residency from the kernel.
    pub fn register(&self, buf: Buffer, access: Access, mode: Mode) -> Result<Arc<Region>> {
        let (idx, lkey, rkey) = {
            let mut t = self.table.write().unwrap_or_else(PoisonError::into_inner);
            let full = t.slots.len() > MAX_INDEX;
            let reuse = t.free.len() > QUARANTINE || full;
            let idx = if let Some(i) = reuse.then(|| t.free.pop_front()).flatten() {
                i
            } else if !full {
                t.slots.push(Slot::default());
                t.history.push(TagHistory::default());
                t.slots.len() - 1
            } else {
                return Err(Error::KeysExhausted);
            };
            // The index is out of the free list and its slot empty until the region is
            // installed below, so no other registration can take it meanwhile.
            let h = &mut t.history[idx];
            let rtag = h.draw_rtag(self.random());
            let ltag = h.draw_ltag(self.random(), rtag);
            let base = (idx as u32) << 8;
            (idx, base | ltag as u32, base | rtag as u32)
        };
        let built = Region::new(buf, access, mode, lkey, rkey);
        let mut t = self.table.write().unwrap_or_else(PoisonError::into_inner);
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

    /// Every registered region (a snapshot).
    pub fn regions(&self) -> Vec<Arc<Region>> {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .slots
            .iter()
            .filter_map(|s| s.region.clone())
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtags_never_repeat_within_the_window() {
        let mut h = TagHistory::default();
        let pd = Pd::new();
        let tags: Vec<u8> = (0..5000).map(|_| h.draw_rtag(pd.random())).collect();
        for w in tags.windows(TAG_WINDOW) {
            let mut seen = [false; 256];
            for &t in w {
                assert!(
                    !seen[t as usize],
                    "tag {t} repeated within {TAG_WINDOW} draws"
                );
                seen[t as usize] = true;
            }
        }
        // Still random: many different tags, not a fixed cycle.
        let distinct = tags.iter().collect::<std::collections::HashSet<_>>().len();
        assert!(distinct > 200);
        assert_ne!(tags[..TAG_WINDOW * 2], tags[TAG_WINDOW * 2..TAG_WINDOW * 4]);
    }

    #[test]
    fn ltags_differ_from_the_rtag_and_never_repeat_within_their_window() {
        let mut h = TagHistory::default();
        let pd = Pd::new();
        let mut tags = Vec::new();
        for r in [0u64, 1, 0x0101, u64::MAX, 0x4242_4242]
            .into_iter()
            .chain((0..3000).map(|_| pd.random()))
        {
            let rtag = h.draw_rtag(pd.random());
            let l = h.draw_ltag(r, rtag);
            assert_ne!(l, rtag);
            tags.push(l);
        }
        for w in tags.windows(LTAG_WINDOW) {
            let distinct = w.iter().collect::<std::collections::HashSet<_>>().len();
            assert_eq!(
                distinct, LTAG_WINDOW,
                "an lkey tag repeated within its window"
            );
        }
    }
}
