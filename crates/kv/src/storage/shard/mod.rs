//! One shard of the heap store: a hash table of slot indices, a slab of entries and an
//! intrusive LRU list, with eviction within the shard's byte budget and its counters. The
//! entries are in `entry.rs`, the item commands in `commands.rs`.

mod commands;
mod entry;

use std::collections::BTreeMap;

use hashbrown::HashTable;

use super::StoreCounters;
pub(crate) use commands::parse_counter;
use entry::Entry;

const NIL: u32 = u32::MAX;

/// Reads move an item to the LRU head at most this often (memcached's ITEM_UPDATE_INTERVAL):
/// relinking touches two neighbouring entries, which costs two cache misses per hit.
pub(super) const BUMP_INTERVAL: u32 = 60;

pub(super) use super::flush::Ctx;

/// A read-only view of an item handed to readers while the shard is locked.
#[derive(Debug, Clone, Copy)]
pub struct ItemRef<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value, without CRLF.
    pub value: &'a [u8],
    /// For a value of at least [`SHARE_MIN`](crate::out::SHARE_MIN) bytes, the item's key and value held for a reply
    /// (`value` is `shared.bytes()[key.len()..]`): a reply may keep a clone to send the value
    /// without copying it. `None` for smaller values, which replies copy.
    pub shared: Option<&'a super::Held>,
    /// Client flags.
    pub flags: u32,
    /// CAS unique.
    pub cas: u64,
    /// Expiry on the relative clock (0 = never), after any touch.
    pub exptime: u32,
    /// Last access before this read.
    pub last_access: u32,
    /// Whether it had been fetched before this read.
    pub fetched: bool,
    /// Marked stale (meta `X`).
    pub stale: bool,
    /// Meta recache token: `Some(true)` = this reader won (`W`), `Some(false)` = another
    /// reader already holds it (`Z`).
    pub win: Option<bool>,
}

pub(super) struct Shard {
    table: HashTable<u32>,
    slots: Vec<Option<Entry>>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    used: usize,
    limit: usize,
    total_items: u64,
    evictions: u64,
    reclaimed: u64,
    expired_unfetched: u64,
    evicted_unfetched: u64,
    /// Reads that found an expired item (`get_expired`) or a flushed one (`get_flushed`).
    get_expired: u64,
    get_flushed: u64,
    /// `-o track_sizes`: items per 32-byte size bucket, and whether items carry a CAS.
    sizes: Option<(BTreeMap<usize, u64>, bool)>,
    /// Told about each eviction (`watch evictions`).
    pub evict_hook: Option<std::sync::Arc<super::EvictHook>>,
}

/// memcached's `sizeof(item)` on 64-bit: the item header its histogram counts.
const MC_ITEM_HEADER: usize = 48;

impl Shard {
    /// `sizes`: track the size histogram, `Some(cas_enabled)`.
    pub fn new(limit: usize, sizes: Option<bool>) -> Shard {
        Shard {
            table: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            used: 0,
            limit,
            total_items: 0,
            evictions: 0,
            reclaimed: 0,
            expired_unfetched: 0,
            evicted_unfetched: 0,
            get_expired: 0,
            get_flushed: 0,
            sizes: sizes.map(|cas| (BTreeMap::new(), cas)),
            evict_hook: None,
        }
    }

    /// Counts slot `i` in (`add`) or out of the size histogram, bucketed as memcached does:
    /// its item size (header, key + NUL, value + CRLF, flags if non-zero, CAS if on) rounded
    /// up to 32 bytes.
    fn size_count(&mut self, i: u32, add: bool) {
        // memcached skips items whose CAS is below the one current when tracking began; with
        // CAS off (`-C`) every item has CAS 0, so its histogram stays empty: so does this one.
        let Some(true) = self.sizes.as_ref().map(|(_, c)| *c) else {
            return;
        };
        let cas = true;
        let e = self.entry(i);
        let ntotal = MC_ITEM_HEADER
            + e.key_len as usize
            + 1
            + (e.data.bytes().len() - e.key_len as usize)
            + 2
            + if e.flags != 0 { 4 } else { 0 }
            + if cas { 8 } else { 0 };
        let bucket = ntotal.div_ceil(32);
        if let Some((hist, _)) = self.sizes.as_mut() {
            let n = hist.entry(bucket).or_default();
            *n = if add { *n + 1 } else { n.saturating_sub(1) };
        }
    }

    /// The size histogram: (bucket, items), bucket = size / 32.
    pub fn sizes(&self) -> Vec<(usize, u64)> {
        self.sizes
            .as_ref()
            .map(|(h, _)| h.iter().map(|(&b, &n)| (b, n)).collect())
            .unwrap_or_default()
    }

    fn entry(&self, i: u32) -> &Entry {
        // Indices in the table and list always point at occupied slots.
        self.slots[i as usize].as_ref().expect("live slot")
    }

    fn entry_mut(&mut self, i: u32) -> &mut Entry {
        self.slots[i as usize].as_mut().expect("live slot")
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let slots = &self.slots;
        self.table
            .find(hash, |&i| {
                slots[i as usize]
                    .as_ref()
                    .is_some_and(|e| e.hash == hash && e.key() == key)
            })
            .copied()
    }

    fn unlink_lru(&mut self, i: u32) {
        let (p, n) = {
            let e = self.entry(i);
            (e.prev, e.next)
        };
        if p != NIL {
            self.entry_mut(p).next = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.entry_mut(n).prev = p;
        } else {
            self.tail = p;
        }
    }

    fn push_head(&mut self, i: u32) {
        let old = self.head;
        {
            let e = self.entry_mut(i);
            e.prev = NIL;
            e.next = old;
        }
        if old != NIL {
            self.entry_mut(old).prev = i;
        } else {
            self.tail = i;
        }
        self.head = i;
    }

    fn bump(&mut self, i: u32) {
        if self.head != i {
            self.unlink_lru(i);
            self.push_head(i);
        }
    }

    /// Removes slot `i` from table, list and slab.
    fn remove(&mut self, i: u32) -> Entry {
        self.size_count(i, false);
        let hash = self.entry(i).hash;
        if let Ok(o) = self.table.find_entry(hash, |&j| j == i) {
            o.remove();
        }
        self.unlink_lru(i);
        let e = self.slots[i as usize].take().expect("live slot");
        self.free.push(i);
        self.used -= e.charge();
        e
    }

    /// Finds a live item, dropping it if it is expired or flushed.
    fn lookup(&mut self, hash: u64, key: &[u8], ctx: &Ctx) -> Option<u32> {
        self.lookup_why(hash, key, ctx).ok()
    }

    /// [`Shard::lookup`], saying on a miss whether a dead item was dropped:
    /// `Err(Some(true))` flushed, `Err(Some(false))` expired, `Err(None)` absent.
    fn lookup_why(&mut self, hash: u64, key: &[u8], ctx: &Ctx) -> Result<u32, Option<bool>> {
        let i = self.find(hash, key).ok_or(None)?;
        if self.entry(i).live(ctx) {
            Ok(i)
        } else {
            let flushed = self.entry(i).flushed(ctx);
            let e = self.remove(i);
            if !e.fetched {
                self.expired_unfetched += 1;
            }
            self.reclaimed += 1;
            Err(Some(flushed))
        }
    }

    /// Makes room for `need` more bytes without evicting `keep`; false if it cannot (no-evict
    /// mode, or nothing else left to evict).
    fn make_room(&mut self, need: usize, ctx: &Ctx, no_evict: bool, keep: u32) -> bool {
        while self.used + need > self.limit {
            let t = self.tail;
            if t == NIL || t == keep {
                return false;
            }
            let live = self.entry(t).live(ctx);
            if live && no_evict {
                return false;
            }
            let e = self.remove(t);
            if live {
                if let Some(h) = &self.evict_hook {
                    h(&crate::logger::Evicted {
                        key: e.key(),
                        fetched: e.fetched,
                        ttl: if e.exptime == 0 {
                            -1
                        } else {
                            e.exptime as i64 - ctx.now as i64
                        },
                        last_access: ctx.now.saturating_sub(e.time),
                        size: e.value().len(),
                    });
                }
                self.evictions += 1;
                if !e.fetched {
                    self.evicted_unfetched += 1;
                }
            } else {
                self.reclaimed += 1;
            }
        }
        true
    }

    fn insert(&mut self, e: Entry) -> u32 {
        self.used += e.charge();
        let hash = e.hash;
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(e);
                i
            }
            None => {
                self.slots.push(Some(e));
                (self.slots.len() - 1) as u32
            }
        };
        let slots = &self.slots;
        self.table.insert_unique(hash, i, |&j| {
            slots[j as usize].as_ref().map_or(0, |e| e.hash)
        });
        self.push_head(i);
        self.total_items += 1;
        self.size_count(i, true);
        i
    }

    /// Changes the byte budget; a smaller one is enforced by evicting now.
    pub fn set_limit(&mut self, limit: usize, ctx: &Ctx) {
        self.limit = limit;
        self.make_room(0, ctx, false, NIL);
    }

    pub fn clear(&mut self) {
        self.table.clear();
        self.slots.clear();
        self.free.clear();
        self.head = NIL;
        self.tail = NIL;
        self.used = 0;
        if let Some((h, _)) = self.sizes.as_mut() {
            h.clear();
        }
    }

    /// `stats cachedump`: live items from most to least recently used as (key, value length,
    /// exptime), appended to `out` until it holds `limit`.
    pub fn dump(&self, ctx: &Ctx, limit: usize, out: &mut Vec<(Vec<u8>, usize, u32)>) {
        let mut i = self.head;
        while i != NIL && out.len() < limit {
            let e = self.entry(i);
            if e.live(ctx) {
                out.push((e.key().to_vec(), e.value().len(), e.exptime));
            }
            i = e.next;
        }
    }

    pub fn add_counters(&self, c: &mut StoreCounters) {
        c.curr_items += self.table.len() as u64;
        c.total_items += self.total_items;
        c.bytes += self.used as u64;
        c.evictions += self.evictions;
        c.reclaimed += self.reclaimed;
        c.expired_unfetched += self.expired_unfetched;
        c.evicted_unfetched += self.evicted_unfetched;
        c.get_expired += self.get_expired;
        c.get_flushed += self.get_flushed;
    }

    /// `stats reset`: zeroes the read counters memcached keeps per thread.
    pub fn reset_read_counters(&mut self) {
        self.get_expired = 0;
        self.get_flushed = 0;
    }
}
