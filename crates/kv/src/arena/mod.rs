//! Item memory in one relocatable arena with slab classes, as memcached lays it out: the
//! groundwork of issue 17 (not yet the server's storage, which still keeps items in
//! `storage`'s heap allocations).
//!
//! What it does: every item (its header, key and value), the hash chains, the per-class LRU
//! lists, the free lists and the counters live in one [`Mapping`] (anonymous memory, a memfd or
//! a file on tmpfs/hugetlbfs), linked by offsets only, so the arena can be mapped at any address
//! by another process or host. Memory is cut into pages (1 MiB by default) handed to slab
//! classes on demand; a class's chunk size grows by the factor (`-f`) from 48 header bytes plus
//! the minimum space (`-n`) up to the page size. A class with no free chunk and no free page
//! evicts its LRU tail. Pages move between classes ([`Arena::move_page`], memcached's
//! `slab_reassign`). A graceful [`Arena::close`] marks the arena clean; opening a clean arena of
//! the same configuration restores every item (warm restart), anything else starts cold and
//! says why.
//!
//! What it does not (yet): concurrency (the caller holds one lock), memcached's chunked items
//! above half a page (an item here fits one chunk, up to the page size), and the wiring into
//! `remora kv serve`.
//!
//! ```
//! use remora_kv::arena::{Arena, ArenaConfig, Backing, Mapping};
//! let cfg = ArenaConfig::new(8 << 20);
//! let map = Mapping::new(Backing::Anonymous, cfg.memory).unwrap();
//! let (mut a, _) = Arena::open(map, &cfg).unwrap();
//! a.set(b"k", b"value", 7, 0, 1000).unwrap();
//! let it = a.get(b"k", 1000).unwrap();
//! assert_eq!((it.value, it.flags), (&b"value"[..], 7));
//! ```
mod layout;
mod memory;
#[cfg(test)]
mod tests;

use layout::*;
pub use memory::{Backing, Mapping};

/// How an arena is laid out (memcached's `-m`, `-f`, `-n`, `-I` and `-o hashpower`).
#[derive(Debug, Clone, PartialEq)]
pub struct ArenaConfig {
    /// Bytes of the whole arena (header, table and pages).
    pub memory: usize,
    /// Bytes per page (memcached's `slab_page_size`, 1 MiB).
    pub page_size: usize,
    /// Chunk size growth factor between classes (`-f`, 1.25).
    pub growth_factor: f64,
    /// Key + value bytes of the smallest chunk (`-n`, 48).
    pub min_space: usize,
    /// Largest item (header, key, value) (`-I`; at most the page size).
    pub item_max: usize,
    /// log2 of the hash buckets (`-o hashpower`, 16).
    pub hash_power: u32,
}

impl ArenaConfig {
    /// memcached's defaults for an arena of `memory` bytes.
    pub fn new(memory: usize) -> ArenaConfig {
        ArenaConfig {
            memory,
            page_size: 1 << 20,
            growth_factor: 1.25,
            min_space: 48,
            item_max: 1 << 20,
            hash_power: 16,
        }
    }

    /// The chunk size of every class, smallest first.
    pub fn classes(&self) -> Result<Vec<u32>, ArenaError> {
        let bad = |m: String| Err(ArenaError::Config(m));
        if !(self.growth_factor > 1.0 && self.growth_factor.is_finite()) {
            return bad(format!(
                "growth factor {} must be above 1",
                self.growth_factor
            ));
        }
        if self.page_size < 4096 || self.page_size > 1 << 30 {
            return bad(format!(
                "page size {} must be 4 KiB to 1 GiB",
                self.page_size
            ));
        }
        if self.item_max > self.page_size || self.item_max < ITEM_HEADER + 2 {
            return bad(format!(
                "item size limit {} must be {} to the page size {}",
                self.item_max,
                ITEM_HEADER + 2,
                self.page_size
            ));
        }
        let mut v = Vec::new();
        let mut size = (ITEM_HEADER + self.min_space.max(1)) as f64;
        loop {
            let s = (size as usize).next_multiple_of(8);
            if s as f64 > self.page_size as f64 / self.growth_factor || v.len() == MAX_CLASSES - 1 {
                break;
            }
            if v.last() != Some(&(s as u32)) {
                v.push(s as u32);
            }
            size = s as f64 * self.growth_factor;
        }
        v.push(self.page_size as u32);
        Ok(v)
    }
}

/// Arena errors.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    /// A configuration that cannot make an arena.
    #[error("arena configuration: {0}")]
    Config(String),
    /// The item (header, key and value) is larger than the item size limit.
    #[error("item of {0} bytes is over the item size limit")]
    TooLarge(usize),
    /// A key longer than 250 bytes or empty.
    #[error("key of {0} bytes (1 to 250 allowed)")]
    BadKey(usize),
    /// The item's class has no chunk, no free page and nothing to evict.
    #[error("out of memory for items of class {0}")]
    NoMemory(usize),
    /// The mapping failed.
    #[error("arena memory: {0}")]
    Io(#[from] std::io::Error),
}

/// How [`Arena::open`] found the memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// A clean arena of the same configuration: every item it held is served again.
    Restored {
        /// Items restored.
        items: u64,
    },
    /// Started empty; the reason when the memory held something else (an unclean stop, another
    /// configuration, not an arena).
    Cold(Option<String>),
}

/// A stored item, borrowed from the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item<'a> {
    /// The value.
    pub value: &'a [u8],
    /// Client flags.
    pub flags: u32,
    /// CAS.
    pub cas: u64,
    /// Expiry, absolute Unix seconds (0: never).
    pub exptime: u32,
    /// Slab class.
    pub class: usize,
}

/// One slab class' figures (memcached's `stats slabs` names in the comments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassStats {
    /// `chunk_size`.
    pub chunk_size: u32,
    /// `chunks_per_page`.
    pub chunks_per_page: u32,
    /// `total_pages`.
    pub pages: u32,
    /// `used_chunks` (linked items).
    pub used: u64,
    /// `free_chunks`.
    pub free: u64,
    /// Items evicted from this class (`stats items` `evicted`).
    pub evicted: u64,
}

/// Whole-arena figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaStats {
    /// Linked items.
    pub items: u64,
    /// Pages handed to classes, of `pages`.
    pub pages_used: u32,
    /// Pages in the arena.
    pub pages: u32,
    /// Items evicted to make room.
    pub evictions: u64,
    /// Expired items reclaimed.
    pub reclaimed: u64,
    /// Pages moved between classes.
    pub moves: u64,
}

/// The arena: one mapping, addressed by offsets.
#[derive(Debug)]
pub struct Arena {
    map: Mapping,
    geo: Geometry,
    classes: usize,
    seed: u32,
}

impl Arena {
    /// Opens `map` as an arena of `cfg`: restores a clean arena of the same configuration,
    /// else lays out an empty one (with the reason when the memory held another).
    pub fn open(map: Mapping, cfg: &ArenaConfig) -> Result<(Arena, Opened), ArenaError> {
        let sizes = cfg.classes()?;
        if map.view().len() != cfg.memory {
            return Err(ArenaError::Config(
                "mapping and configuration sizes differ".into(),
            ));
        }
        let geo = Geometry::new(cfg.memory, cfg.page_size, cfg.hash_power).ok_or_else(|| {
            ArenaError::Config(format!(
                "{} bytes hold no page of {} bytes after the header and 2^{} hash buckets",
                cfg.memory, cfg.page_size, cfg.hash_power
            ))
        })?;
        let mut a = Arena {
            map,
            geo,
            classes: sizes.len(),
            seed: 0,
        };
        let reason = if a.map.existed {
            a.mismatch(cfg, &sizes)
        } else {
            None
        };
        let opened = match (a.map.existed, reason) {
            (true, None) => {
                a.seed = u32_at(a.map.view(), H_SEED);
                Opened::Restored {
                    items: u64_at(a.map.view(), H_ITEMS),
                }
            }
            (existed, reason) => {
                a.init(cfg, &sizes);
                Opened::Cold(existed.then_some(reason).flatten())
            }
        };
        // Running: a crash from here on leaves the arena unclean, and the next start cold.
        put_u32(a.map.bytes(), H_CLEAN, 0);
        Ok((a, opened))
    }

    /// Why the mapped bytes are not a clean arena of `cfg` (None: they are).
    fn mismatch(&self, cfg: &ArenaConfig, sizes: &[u32]) -> Option<String> {
        let b = self.map.view();
        if u64_at(b, H_MAGIC) != MAGIC || u32_at(b, H_VERSION) != 1 {
            return Some("the memory file is not a remora kv arena".into());
        }
        if u32_at(b, H_CLEAN) != 1 {
            return Some("the previous server did not stop cleanly (killed?)".into());
        }
        let same = u64_at(b, H_MEMORY) == cfg.memory as u64
            && u32_at(b, H_PAGE_SIZE) as usize == cfg.page_size
            && u32_at(b, H_HASH_POWER) == cfg.hash_power
            && u64_at(b, H_FACTOR) == cfg.growth_factor.to_bits()
            && u32_at(b, H_MIN_SPACE) as usize == cfg.min_space
            && u32_at(b, H_ITEM_MAX) as usize == cfg.item_max
            && u32_at(b, H_CLASSES) as usize == sizes.len()
            && u32_at(b, H_PAGES) as usize == self.geo.pages;
        (!same).then(|| {
            "the arena was made with other settings (-m, -f, -n, -I or hashpower)".to_string()
        })
    }

    fn init(&mut self, cfg: &ArenaConfig, sizes: &[u32]) {
        let geo = self.geo;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.subsec_nanos() ^ d.as_secs() as u32);
        let b = self.map.bytes();
        b[..geo.first_page].fill(0);
        b[geo.directory..geo.directory + geo.pages].fill(NO_CLASS);
        put_u64(b, H_MAGIC, MAGIC);
        put_u32(b, H_VERSION, 1);
        put_u32(b, H_PAGE_SIZE, cfg.page_size as u32);
        put_u32(b, H_PAGES, geo.pages as u32);
        put_u32(b, H_CLASSES, sizes.len() as u32);
        put_u32(b, H_HASH_POWER, cfg.hash_power);
        put_u64(b, H_FACTOR, cfg.growth_factor.to_bits());
        put_u32(b, H_MIN_SPACE, cfg.min_space as u32);
        put_u32(b, H_ITEM_MAX, cfg.item_max as u32);
        put_u32(b, H_SEED, seed);
        put_u64(b, H_CAS, 1);
        put_u64(b, H_MEMORY, cfg.memory as u64);
        for (c, &s) in sizes.iter().enumerate() {
            put_u32(b, class_field(c, C_SIZE), s);
            put_u32(
                b,
                class_field(c, C_PER_PAGE),
                (cfg.page_size / s as usize) as u32,
            );
        }
        self.seed = seed;
    }

    /// Marks the arena clean and writes a file-backed one out: the next [`open`](Self::open)
    /// with the same configuration restores every item (memcached's SIGUSR1 stop with `-e`).
    pub fn close(mut self) -> std::io::Result<()> {
        put_u32(self.map.bytes(), H_CLEAN, 1);
        self.map.sync()
    }

    fn b(&self) -> &[u8] {
        self.map.view()
    }

    fn bm(&mut self) -> &mut [u8] {
        self.map.bytes()
    }

    fn field(&self, c: usize, f: usize) -> u64 {
        match f {
            C_FREE | C_HEAD | C_TAIL | C_USED | C_FREE_COUNT | C_EVICTED => {
                u64_at(self.b(), class_field(c, f))
            }
            _ => u64::from(u32_at(self.b(), class_field(c, f))),
        }
    }

    fn set_field(&mut self, c: usize, f: usize, v: u64) {
        let at = class_field(c, f);
        match f {
            C_FREE | C_HEAD | C_TAIL | C_USED | C_FREE_COUNT | C_EVICTED => {
                put_u64(self.bm(), at, v)
            }
            _ => put_u32(self.bm(), at, v as u32),
        }
    }

    fn add_header(&mut self, at: usize, d: i64) {
        let v = u64_at(self.b(), at).wrapping_add_signed(d);
        put_u64(self.bm(), at, v);
    }

    fn bucket(&self, key: &[u8]) -> usize {
        let h = murmur3::murmur3_x64_128(&mut std::io::Cursor::new(key), self.seed).unwrap_or(0);
        HEADER_BYTES + (h as usize & (self.geo.buckets - 1)) * 8
    }

    fn at(&self, off: u64, f: usize) -> u64 {
        u64_at(self.b(), off as usize + f)
    }

    fn put(&mut self, off: u64, f: usize, v: u64) {
        put_u64(self.bm(), off as usize + f, v);
    }

    fn key_of(&self, off: u64) -> &[u8] {
        let o = off as usize;
        let n = self.b()[o + I_NKEY] as usize;
        &self.b()[o + ITEM_HEADER..o + ITEM_HEADER + n]
    }

    fn class_of(&self, off: u64) -> usize {
        self.b()[off as usize + I_CLASS] as usize
    }

    /// The linked item of `key`.
    fn find(&self, key: &[u8]) -> Option<u64> {
        let mut off = u64_at(self.b(), self.bucket(key));
        while off != 0 {
            if self.key_of(off) == key {
                return Some(off);
            }
            off = self.at(off, I_HNEXT);
        }
        None
    }

    fn lru_remove(&mut self, c: usize, off: u64) {
        let (prev, next) = (self.at(off, I_PREV), self.at(off, I_NEXT));
        if prev == 0 {
            self.set_field(c, C_HEAD, next);
        } else {
            self.put(prev, I_NEXT, next);
        }
        if next == 0 {
            self.set_field(c, C_TAIL, prev);
        } else {
            self.put(next, I_PREV, prev);
        }
    }

    fn lru_push(&mut self, c: usize, off: u64) {
        let head = self.field(c, C_HEAD);
        self.put(off, I_PREV, 0);
        self.put(off, I_NEXT, head);
        if head == 0 {
            self.set_field(c, C_TAIL, off);
        } else {
            self.put(head, I_PREV, off);
        }
        self.set_field(c, C_HEAD, off);
    }

    /// Takes a linked item out of its chain and LRU and frees its chunk.
    fn unlink(&mut self, off: u64) {
        let key = self.key_of(off).to_vec();
        let bucket = self.bucket(&key);
        let mut prev = 0u64;
        let mut cur = u64_at(self.b(), bucket);
        while cur != 0 && cur != off {
            prev = cur;
            cur = self.at(cur, I_HNEXT);
        }
        let next = self.at(off, I_HNEXT);
        if prev == 0 {
            put_u64(self.bm(), bucket, next);
        } else {
            self.put(prev, I_HNEXT, next);
        }
        let c = self.class_of(off);
        self.lru_remove(c, off);
        self.free_chunk(c, off);
        self.set_field(c, C_USED, self.field(c, C_USED) - 1);
        self.add_header(H_ITEMS, -1);
    }

    fn free_chunk(&mut self, c: usize, off: u64) {
        self.bm()[off as usize + I_STATE] = 0;
        self.bm()[off as usize + I_CLASS] = c as u8;
        let head = self.field(c, C_FREE);
        self.put(off, I_NEXT, head);
        self.set_field(c, C_FREE, off);
        self.set_field(c, C_FREE_COUNT, self.field(c, C_FREE_COUNT) + 1);
    }

    /// Gives page `p` to class `c`, its chunks onto the free list.
    fn carve(&mut self, p: usize, c: usize) {
        let geo = self.geo;
        self.bm()[geo.directory + p] = c as u8;
        let (size, per) = (self.field(c, C_SIZE), self.field(c, C_PER_PAGE));
        let base = (geo.first_page + p * geo.page_size) as u64;
        for k in (0..per).rev() {
            self.free_chunk(c, base + k * size);
        }
        self.set_field(c, C_PAGES, self.field(c, C_PAGES) + 1);
    }

    /// A free chunk of class `c`: from its free list, a new page, or its LRU tail evicted.
    fn alloc(&mut self, c: usize) -> Option<u64> {
        if self.field(c, C_FREE) == 0 {
            let used = u32_at(self.b(), H_PAGES_USED) as usize;
            if used < self.geo.pages {
                put_u32(self.bm(), H_PAGES_USED, used as u32 + 1);
                self.carve(used, c);
            } else {
                let tail = self.field(c, C_TAIL);
                if tail == 0 {
                    return None;
                }
                self.unlink(tail);
                self.set_field(c, C_EVICTED, self.field(c, C_EVICTED) + 1);
                self.add_header(H_EVICTIONS, 1);
            }
        }
        let off = self.field(c, C_FREE);
        self.set_field(c, C_FREE, self.at(off, I_NEXT));
        self.set_field(c, C_FREE_COUNT, self.field(c, C_FREE_COUNT) - 1);
        Some(off)
    }

    /// The class whose chunks hold `total` bytes.
    fn class_for(&self, total: usize) -> Option<usize> {
        (0..self.classes).find(|&c| self.field(c, C_SIZE) as usize >= total)
    }

    fn expired(&self, off: u64, now: u32) -> bool {
        let e = u32_at(self.b(), off as usize + I_EXP);
        e != 0 && e <= now
    }

    /// The item of `key` (expired items are reclaimed, never returned); a hit moves it to the
    /// head of its class' LRU.
    pub fn get(&mut self, key: &[u8], now: u32) -> Option<Item<'_>> {
        let off = self.find(key)?;
        if self.expired(off, now) {
            self.unlink(off);
            self.add_header(H_RECLAIMED, 1);
            return None;
        }
        let c = self.class_of(off);
        self.lru_remove(c, off);
        self.lru_push(c, off);
        Some(self.view(off))
    }

    fn view(&self, off: u64) -> Item<'_> {
        let b = self.b();
        let o = off as usize;
        let nkey = b[o + I_NKEY] as usize;
        let nbytes = u32_at(b, o + I_NBYTES) as usize;
        let start = o + ITEM_HEADER + nkey;
        Item {
            value: &b[start..start + nbytes],
            flags: u32_at(b, o + I_FLAGS),
            cas: u64_at(b, o + I_CAS),
            exptime: u32_at(b, o + I_EXP),
            class: b[o + I_CLASS] as usize,
        }
    }

    /// Stores `value` under `key`, replacing what was there; returns the new CAS. The old item
    /// stays until the new one has its chunk, so a failure loses nothing.
    pub fn set(
        &mut self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: u32,
        now: u32,
    ) -> Result<u64, ArenaError> {
        if key.is_empty() || key.len() > 250 {
            return Err(ArenaError::BadKey(key.len()));
        }
        let total = ITEM_HEADER + key.len() + value.len();
        let item_max = u32_at(self.b(), H_ITEM_MAX) as usize;
        if total > item_max {
            return Err(ArenaError::TooLarge(total));
        }
        let c = self.class_for(total).ok_or(ArenaError::TooLarge(total))?;
        if let Some(old) = self.find(key).filter(|&o| self.expired(o, now)) {
            self.unlink(old);
            self.add_header(H_RECLAIMED, 1);
        }
        let off = self.alloc(c).ok_or(ArenaError::NoMemory(c))?;
        // The allocation may have evicted the old item itself; look again.
        if let Some(old) = self.find(key) {
            self.unlink(old);
        }
        let cas = u64_at(self.b(), H_CAS);
        put_u64(self.bm(), H_CAS, cas + 1);
        let o = off as usize;
        let b = self.bm();
        put_u64(b, o + I_CAS, cas);
        put_u32(b, o + I_EXP, exptime);
        put_u32(b, o + I_FLAGS, flags);
        put_u32(b, o + I_NBYTES, value.len() as u32);
        b[o + I_NKEY] = key.len() as u8;
        b[o + I_CLASS] = c as u8;
        b[o + I_STATE] = 1;
        b[o + ITEM_HEADER..o + ITEM_HEADER + key.len()].copy_from_slice(key);
        b[o + ITEM_HEADER + key.len()..o + total].copy_from_slice(value);
        let bucket = self.bucket(key);
        let head = u64_at(self.b(), bucket);
        self.put(off, I_HNEXT, head);
        put_u64(self.bm(), bucket, off);
        self.lru_push(c, off);
        self.set_field(c, C_USED, self.field(c, C_USED) + 1);
        self.add_header(H_ITEMS, 1);
        Ok(cas)
    }

    /// Removes `key`; whether it was there.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        match self.find(key) {
            Some(off) => {
                self.unlink(off);
                true
            }
            None => false,
        }
    }

    /// Sets a live item's expiry; whether it was there.
    pub fn touch(&mut self, key: &[u8], exptime: u32, now: u32) -> bool {
        match self
            .get(key, now)
            .is_some()
            .then(|| self.find(key))
            .flatten()
        {
            Some(off) => {
                put_u32(self.bm(), off as usize + I_EXP, exptime);
                true
            }
            None => false,
        }
    }

    /// Drops every item (the pages stay with their classes).
    pub fn flush(&mut self) {
        let mut all = Vec::new();
        self.crawl(|off, _| all.push(off));
        for off in all {
            self.unlink(off);
        }
    }

    /// Calls `f` with every linked item (page order: memcached's LRU crawler and `lru_crawler
    /// metadump` walk the same way).
    fn crawl<'s>(&'s self, mut f: impl FnMut(u64, Item<'s>)) {
        let geo = self.geo;
        let used = u32_at(self.b(), H_PAGES_USED) as usize;
        for p in 0..used {
            let c = self.b()[geo.directory + p];
            if c == NO_CLASS {
                continue;
            }
            let (size, per) = (
                self.field(c as usize, C_SIZE),
                self.field(c as usize, C_PER_PAGE),
            );
            let base = (geo.first_page + p * geo.page_size) as u64;
            for k in 0..per {
                let off = base + k * size;
                if self.b()[off as usize + I_STATE] == 1 {
                    f(off, self.view(off));
                }
            }
        }
    }

    /// Every live item's key and figures, for `lru_crawler metadump` (key, exptime, CAS,
    /// flags, class, value size).
    pub fn metadump(&self) -> Vec<(Vec<u8>, Item<'_>)> {
        let mut v = Vec::new();
        self.crawl(|off, it| v.push((self.key_of(off).to_vec(), it)));
        v
    }

    /// Reclaims every expired item (the LRU crawler's pass); returns how many.
    pub fn reclaim_expired(&mut self, now: u32) -> u64 {
        let mut dead = Vec::new();
        self.crawl(|off, it| {
            if it.exptime != 0 && it.exptime <= now {
                dead.push(off)
            }
        });
        for &off in &dead {
            self.unlink(off);
        }
        self.add_header(H_RECLAIMED, dead.len() as i64);
        dead.len() as u64
    }

    /// Moves one page from class `from` to class `to` (memcached's `slabs reassign`): the
    /// page's items are evicted. Returns how many.
    pub fn move_page(&mut self, from: usize, to: usize) -> Result<u64, ArenaError> {
        if from >= self.classes || to >= self.classes || from == to {
            return Err(ArenaError::Config(format!(
                "cannot move a page from class {from} to class {to} ({} classes)",
                self.classes
            )));
        }
        let geo = self.geo;
        let used = u32_at(self.b(), H_PAGES_USED) as usize;
        let Some(p) = (0..used).find(|&p| self.b()[geo.directory + p] == from as u8) else {
            return Err(ArenaError::Config(format!(
                "class {from} has no page to move"
            )));
        };
        let (size, per) = (self.field(from, C_SIZE), self.field(from, C_PER_PAGE));
        let base = (geo.first_page + p * geo.page_size) as u64;
        let end = base + per * size;
        let mut evicted = 0;
        for k in 0..per {
            let off = base + k * size;
            if self.b()[off as usize + I_STATE] == 1 {
                self.unlink(off);
                evicted += 1;
            }
        }
        // Take the page's chunks off the class' free list.
        let mut keep = Vec::new();
        let mut cur = self.field(from, C_FREE);
        while cur != 0 {
            if !(base..end).contains(&cur) {
                keep.push(cur);
            }
            cur = self.at(cur, I_NEXT);
        }
        self.set_field(from, C_FREE, 0);
        self.set_field(from, C_FREE_COUNT, 0);
        for &off in keep.iter().rev() {
            self.free_chunk(from, off);
        }
        self.set_field(from, C_PAGES, self.field(from, C_PAGES) - 1);
        self.set_field(from, C_EVICTED, self.field(from, C_EVICTED) + evicted);
        self.add_header(H_EVICTIONS, evicted as i64);
        self.add_header(H_MOVES, 1);
        self.carve(p, to);
        Ok(evicted)
    }

    /// Each class' figures, smallest chunks first.
    pub fn class_stats(&self) -> Vec<ClassStats> {
        (0..self.classes)
            .map(|c| ClassStats {
                chunk_size: self.field(c, C_SIZE) as u32,
                chunks_per_page: self.field(c, C_PER_PAGE) as u32,
                pages: self.field(c, C_PAGES) as u32,
                used: self.field(c, C_USED),
                free: self.field(c, C_FREE_COUNT),
                evicted: self.field(c, C_EVICTED),
            })
            .collect()
    }

    /// Whole-arena figures.
    pub fn stats(&self) -> ArenaStats {
        let b = self.b();
        ArenaStats {
            items: u64_at(b, H_ITEMS),
            pages_used: u32_at(b, H_PAGES_USED),
            pages: u32_at(b, H_PAGES),
            evictions: u64_at(b, H_EVICTIONS),
            reclaimed: u64_at(b, H_RECLAIMED),
            moves: u64_at(b, H_MOVES),
        }
    }

    /// The memory, to share the arena (descriptor) or find its file.
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    #[cfg(test)]
    fn mapping_bytes(&mut self) -> &mut [u8] {
        self.map.bytes()
    }

    /// Checks every structure against the others (hash chains, LRU lists, free lists, counts);
    /// the reason on the first inconsistency. For tests and `debug` checks.
    pub fn check(&self) -> Result<(), String> {
        let mut linked = std::collections::HashSet::new();
        self.crawl(|off, _| {
            linked.insert(off);
        });
        if linked.len() as u64 != self.stats().items {
            return Err(format!(
                "{} linked chunks, {} items counted",
                linked.len(),
                self.stats().items
            ));
        }
        let mut chained = 0;
        for k in 0..self.geo.buckets {
            let mut off = u64_at(self.b(), HEADER_BYTES + k * 8);
            while off != 0 {
                if !linked.contains(&off) {
                    return Err(format!(
                        "hash chain reaches a chunk that is not linked: {off}"
                    ));
                }
                if self.bucket(self.key_of(off)) != HEADER_BYTES + k * 8 {
                    return Err("an item hangs in the wrong bucket".into());
                }
                chained += 1;
                off = self.at(off, I_HNEXT);
            }
        }
        if chained != linked.len() {
            return Err(format!(
                "{chained} items in chains, {} linked",
                linked.len()
            ));
        }
        for c in 0..self.classes {
            let (mut n, mut prev, mut off) = (0u64, 0u64, self.field(c, C_HEAD));
            while off != 0 {
                if self.at(off, I_PREV) != prev || self.class_of(off) != c {
                    return Err(format!("class {c}: LRU links broken at {off}"));
                }
                n += 1;
                prev = off;
                off = self.at(off, I_NEXT);
            }
            if prev != self.field(c, C_TAIL) || n != self.field(c, C_USED) {
                return Err(format!(
                    "class {c}: LRU of {n} items, {} counted",
                    self.field(c, C_USED)
                ));
            }
            let (mut free, mut off) = (0u64, self.field(c, C_FREE));
            while off != 0 {
                if self.b()[off as usize + I_STATE] != 0 || linked.contains(&off) {
                    return Err(format!("class {c}: a free chunk is in use"));
                }
                free += 1;
                off = self.at(off, I_NEXT);
            }
            if free != self.field(c, C_FREE_COUNT) {
                return Err(format!(
                    "class {c}: {free} free chunks, {} counted",
                    self.field(c, C_FREE_COUNT)
                ));
            }
            let total = self.field(c, C_PAGES) * self.field(c, C_PER_PAGE);
            if free + self.field(c, C_USED) != total {
                return Err(format!(
                    "class {c}: chunks lost ({free} free + used != {total})"
                ));
            }
        }
        Ok(())
    }
}
