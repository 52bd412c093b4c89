//! One shard: a hash table of slot indices, a slab of entries and an intrusive LRU list.

use std::collections::BTreeMap;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::out::SHARE_MIN;

use super::decide::{decide, Decision, Found, Value};
use super::{
    ArithOutcome, DeleteOutcome, ReadOpts, StoreCounters, StoreMode, StoreOutcome, ITEM_OVERHEAD,
};

const NIL: u32 = u32::MAX;

/// Reads move an item to the LRU head at most this often (memcached's ITEM_UPDATE_INTERVAL):
/// relinking touches two neighbouring entries, which costs two cache misses per hit.
pub(super) const BUMP_INTERVAL: u32 = 60;

pub(super) use super::flush::Ctx;

struct Entry {
    /// Key followed by value in one allocation: one cache miss reaches both.
    data: Data,
    key_len: u8,
    hash: u64,
    cas: u64,
    flags: u32,
    /// Relative-clock expiry, 0 = never.
    exptime: u32,
    /// Last access.
    time: u32,
    prev: u32,
    next: u32,
    fetched: bool,
    /// Invalidated by `md … I`: served with `X` until rewritten.
    stale: bool,
    /// A client holds the right to recache it (`W` was handed out).
    win_sent: bool,
}

impl Entry {
    fn key(&self) -> &[u8] {
        &self.data.bytes()[..self.key_len as usize]
    }

    fn value(&self) -> &[u8] {
        &self.data.bytes()[self.key_len as usize..]
    }

    fn charge(&self) -> usize {
        charge(
            self.key_len as usize,
            self.data.bytes().len() - self.key_len as usize,
        )
    }

    fn live(&self, ctx: &Ctx) -> bool {
        ctx.live_at(self.exptime, self.cas, self.time)
    }

    fn flushed(&self, ctx: &Ctx) -> bool {
        ctx.flushed_at(self.cas, self.time)
    }
}

/// An item's key and value. Large values are shared (reference-counted) so that replies can
/// send them by reference (see [`crate::out`]); small ones, which replies copy anyway, are a
/// plain allocation: 16 bytes smaller, which keeps more small items per cache line.
enum Data {
    Small(Box<[u8]>),
    Shared(Arc<[u8]>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Small(b) => b,
            Data::Shared(a) => a,
        }
    }

    fn shared(&self) -> Option<&Arc<[u8]>> {
        match self {
            Data::Small(_) => None,
            Data::Shared(a) => Some(a),
        }
    }
}

/// `parts` in order followed by `pad` spaces, in one allocation written once (building a `Vec`
/// and converting it to an `Arc` would copy a large value twice). The first part is the key.
fn joined(parts: &[&[u8]], pad: usize) -> Data {
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

fn charge(key: usize, value: usize) -> usize {
    key + value + ITEM_OVERHEAD
}

/// A read-only view of an item handed to readers while the shard is locked.
#[derive(Debug, Clone, Copy)]
pub struct ItemRef<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value, without CRLF.
    pub value: &'a [u8],
    /// For a value of at least [`SHARE_MIN`] bytes, the item's key and value held for a reply
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

    pub fn get<R>(
        &mut self,
        hash: u64,
        key: &[u8],
        ctx: &Ctx,
        opts: ReadOpts,
        exptime_abs: u32,
        f: impl FnOnce(ItemRef<'_>) -> R,
    ) -> Option<R> {
        let i = match self.lookup_why(hash, key, ctx) {
            Ok(i) => i,
            Err(dead) => {
                match dead {
                    Some(true) => self.get_flushed += 1,
                    Some(false) => self.get_expired += 1,
                    None => {}
                }
                return None;
            }
        };
        if !opts.no_bump && ctx.now.saturating_sub(self.entry(i).time) >= BUMP_INTERVAL {
            self.bump(i);
        }
        let e = self.entry_mut(i);
        if opts.touch.is_some() {
            e.exptime = exptime_abs;
        }
        let mut win = None;
        if opts.meta {
            let low_ttl = opts
                .recache
                .is_some_and(|r| e.exptime != 0 && (e.exptime as i64 - ctx.now as i64) < r);
            if (e.stale || low_ttl || opts.claim) && !e.win_sent {
                e.win_sent = true;
                win = Some(true);
            } else if e.win_sent {
                win = Some(false);
            }
        }
        let held = e.data.shared().map(|a| super::Held::Heap(a.clone()));
        let view = ItemRef {
            key: e.key(),
            value: e.value(),
            shared: held.as_ref(),
            flags: e.flags,
            cas: e.cas,
            exptime: e.exptime,
            last_access: e.time,
            fetched: e.fetched,
            stale: e.stale,
            win,
        };
        let r = f(view);
        if !opts.no_bump {
            e.fetched = true;
            e.time = ctx.now;
        }
        Some(r)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &mut self,
        hash: u64,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime_abs: u32,
        data: &[u8],
        ctx: &Ctx,
        new_cas: &dyn Fn() -> u64,
        item_max: usize,
        no_evict: bool,
    ) -> StoreOutcome {
        let old = self.lookup(hash, key, ctx);
        let found = old.map(|i| {
            let e = self.entry(i);
            Found {
                cas: e.cas,
                flags: e.flags,
                exptime: e.exptime,
                win_sent: e.win_sent,
            }
        });
        let (flags, exptime, made, stale_of) = match decide(mode, found, flags, exptime_abs) {
            Decision::Refuse { outcome, bump } => {
                if let (true, Some(i)) = (bump, old) {
                    self.bump(i);
                }
                return outcome;
            }
            Decision::Write {
                flags,
                exptime,
                value,
                stale,
            } => (flags, exptime, value, stale),
        };
        let value = match (made, old) {
            (Value::Append | Value::Prepend, Some(i)) => {
                let e = self.entry(i);
                if charge(key.len(), e.value().len() + data.len()) > item_max {
                    return StoreOutcome::TooLarge;
                }
                if made == Value::Append {
                    joined(&[key, e.value(), data], 0)
                } else {
                    joined(&[key, data, e.value()], 0)
                }
            }
            _ => joined(&[key, data], 0),
        };
        let need = charge(key.len(), value.bytes().len() - key.len());
        if let Some(i) = old {
            // Overwrite in place: no table or slab churn.
            self.bump(i);
            let old_charge = self.entry(i).charge();
            if need > old_charge && !self.make_room(need - old_charge, ctx, no_evict, i) {
                return StoreOutcome::NoMemory;
            }
            let cas = new_cas();
            self.size_count(i, false);
            let e = self.entry_mut(i);
            e.data = value;
            e.cas = cas;
            e.flags = flags;
            e.exptime = exptime;
            e.time = ctx.now;
            e.fetched = false;
            e.stale = stale_of.is_some();
            e.win_sent = stale_of.unwrap_or(false);
            self.used = self.used + need - old_charge;
            self.total_items += 1;
            self.size_count(i, true);
            return StoreOutcome::Stored(cas);
        }
        let fetched = false;
        if !self.make_room(need, ctx, no_evict, NIL) {
            return StoreOutcome::NoMemory;
        }
        let cas = new_cas();
        self.insert(Entry {
            data: value,
            key_len: key.len() as u8,
            hash,
            cas,
            flags,
            exptime,
            time: ctx.now,
            prev: NIL,
            next: NIL,
            fetched,
            stale: false,
            win_sent: false,
        });
        StoreOutcome::Stored(cas)
    }

    /// Marks an item stale (meta delete with `I`), optionally with a new expiry.
    pub fn invalidate(
        &mut self,
        hash: u64,
        key: &[u8],
        ctx: &Ctx,
        cas: Option<u64>,
        exptime_abs: Option<u32>,
        new_cas: &dyn Fn() -> u64,
    ) -> DeleteOutcome {
        let Some(i) = self.lookup(hash, key, ctx) else {
            return DeleteOutcome::NotFound;
        };
        let e = self.entry_mut(i);
        if cas.is_some_and(|c| c != 0 && c != e.cas) {
            return DeleteOutcome::Exists;
        }
        // Like memcached, invalidation counts as a modification: the CAS moves on.
        e.cas = new_cas();
        e.stale = true;
        e.win_sent = false;
        if let Some(x) = exptime_abs {
            e.exptime = x;
        }
        DeleteOutcome::Deleted
    }

    pub fn delete(&mut self, hash: u64, key: &[u8], ctx: &Ctx, cas: Option<u64>) -> DeleteOutcome {
        match self.lookup(hash, key, ctx) {
            None => DeleteOutcome::NotFound,
            Some(i) => {
                if let Some(c) = cas {
                    if c != 0 && self.entry(i).cas != c {
                        return DeleteOutcome::Exists;
                    }
                }
                self.remove(i);
                DeleteOutcome::Deleted
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn arith(
        &mut self,
        hash: u64,
        key: &[u8],
        incr: bool,
        delta: u64,
        ctx: &Ctx,
        cas: Option<u64>,
        new_cas: &dyn Fn() -> u64,
    ) -> ArithOutcome {
        let Some(i) = self.lookup(hash, key, ctx) else {
            return ArithOutcome::NotFound;
        };
        if let Some(c) = cas {
            if c != 0 && self.entry(i).cas != c {
                return ArithOutcome::Exists;
            }
        }
        let Some(cur) = parse_counter(self.entry(i).value()) else {
            return ArithOutcome::NonNumeric;
        };
        let v = if incr {
            cur.wrapping_add(delta)
        } else {
            cur.saturating_sub(delta)
        };
        let text = v.to_string();
        let old_len = self.entry(i).data.bytes().len();
        self.bump(i);
        self.size_count(i, false);
        let e = self.entry_mut(i);
        // Like memcached, a shorter number is written in place and padded with spaces.
        let pad = old_len.saturating_sub(e.key_len as usize + text.len());
        e.data = joined(&[e.key(), text.as_bytes()], pad);
        let new_cas = new_cas();
        e.cas = new_cas;
        e.time = ctx.now;
        let new_len = e.data.bytes().len();
        self.used = self.used + new_len - old_len;
        self.size_count(i, true);
        ArithOutcome::Value(v, new_cas)
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

/// Parses a stored counter: leading decimal digits, then optional spaces (memcached pads
/// shrunken decr results). Anything else is non-numeric.
pub(crate) fn parse_counter(v: &[u8]) -> Option<u64> {
    let end = v.iter().position(|&b| b == b' ').unwrap_or(v.len());
    let (digits, rest) = v.split_at(end);
    if digits.is_empty() || rest.iter().any(|&b| b != b' ') {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}
