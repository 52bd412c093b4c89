//! Chunk allocation: each class' free list, pages carved into chunks on demand (from the
//! global pool, or new ones below the page limit), the class an item fits, and memcached's
//! chunked items for values past `slab_chunk_max`; freeing puts chunks back. Eviction, when a
//! class has no free chunk, is in `lru.rs`.

use super::layout::*;
use super::{Arena, ArenaError, Item, Victim};

impl Arena {
    /// Frees an unlinked item's chunk, and a chunked item's chain with it (the header last,
    /// so it is at the head of its free list).
    pub(super) fn free_item(&mut self, off: u64) {
        for ch in self.chain(off) {
            let c = self.class_of(ch);
            self.free_chunk(c, ch);
        }
        let c = self.mem_class_of(off);
        self.bm()[off as usize + I_KIND] = 0;
        self.free_chunk(c, off);
    }

    pub(super) fn free_chunk(&mut self, c: usize, off: u64) {
        self.bm()[off as usize + I_STATE] = FREE;
        self.bm()[off as usize + I_CLASS] = c as u8;
        let head = self.field(c, C_FREE);
        self.put(off, I_NEXT, head);
        self.set_field(c, C_FREE, off);
        self.set_field(c, C_FREE_COUNT, self.field(c, C_FREE_COUNT) + 1);
    }

    /// Gives page `p` to class `c`, its chunks onto the free list.
    pub(super) fn carve(&mut self, p: usize, c: usize) {
        let geo = self.geo;
        self.bm()[geo.directory + p] = c as u8;
        let (size, per) = (self.field(c, C_SIZE), self.field(c, C_PER_PAGE));
        let base = (geo.first_page + p * geo.page_size) as u64;
        for k in (0..per).rev() {
            self.free_chunk(c, base + k * size);
        }
        self.set_field(c, C_PAGES, self.field(c, C_PAGES) + 1);
    }

    /// A page no class has, when `c` may take one: from the global pool, else a new one
    /// below the page limit (or `c`'s first), as memcached's `do_slabs_newslab`.
    fn free_page(&self, c: usize) -> Option<usize> {
        let b = self.b();
        let dir = &b[self.geo.directory..self.geo.directory + self.geo.pages];
        let used = u32_at(b, H_PAGES_USED) as usize;
        if let Some(p) = dir[..used].iter().position(|&d| d == NO_CLASS) {
            return Some(p);
        }
        let limit = u64::from(u32_at(b, H_PAGE_LIMIT));
        if self.malloced_pages() >= limit && self.field(c, C_PAGES) > 0 {
            return None;
        }
        // Pages whose memory went back to the system are reused before fresh ones.
        dir[..used]
            .iter()
            .position(|&d| d == RELEASED)
            .or((used < self.geo.pages).then_some(used))
    }

    /// A free chunk of class `c` from its free list or a new page, without evicting.
    pub(super) fn take_free(&mut self, c: usize) -> Option<u64> {
        if self.field(c, C_FREE) == 0 {
            let p = self.free_page(c)?;
            if p == u32_at(self.b(), H_PAGES_USED) as usize {
                put_u32(self.bm(), H_PAGES_USED, p as u32 + 1);
            }
            self.carve(p, c);
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

    /// Whether an item of this key and value length is within the item size limit.
    pub fn fits(&self, key: usize, value: usize) -> bool {
        self.item_size(key, value) <= u32_at(self.b(), H_ITEM_MAX) as usize
    }

    /// A chunk for an item of `key` and `value_len` bytes, not yet linked: the key is written,
    /// the value is for the caller to fill ([`value_mut`](Self::value_mut)) before
    /// [`link`](Self::link) (or [`release`](Self::release) to give it back). `victim` decides
    /// about LRU tail items when the class is full.
    pub fn alloc(
        &mut self,
        key: &[u8],
        value_len: usize,
        victim: &mut dyn FnMut(Item<'_>) -> Victim,
    ) -> Result<u64, ArenaError> {
        if key.is_empty() || key.len() > 250 {
            return Err(ArenaError::BadKey(key.len()));
        }
        let total = self.item_size(key.len(), value_len);
        if total > u32_at(self.b(), H_ITEM_MAX) as usize {
            return Err(ArenaError::TooLarge(total));
        }
        if total > u32_at(self.b(), H_CHUNK_MAX) as usize {
            return self.alloc_chunked(key, value_len, victim);
        }
        let c = self.class_for(total).ok_or(ArenaError::TooLarge(total))?;
        let off = self.chunk(c, victim)?;
        self.init_header(off, key, value_len, c, 0);
        Ok(off)
    }

    fn init_header(&mut self, off: u64, key: &[u8], value_len: usize, c: usize, kind: u8) {
        let (o, hdr) = (off as usize, self.hdr);
        let b = self.bm();
        put_u32(b, o + I_NBYTES, value_len as u32);
        b[o + I_NKEY] = key.len() as u8;
        b[o + I_CLASS] = c as u8;
        b[o + I_BITS] = 0;
        b[o + I_KIND] = kind;
        b[o + hdr..o + hdr + key.len()].copy_from_slice(key);
    }

    /// memcached's chunked item (`do_item_alloc` with `ITEM_CHUNKED`, `do_item_alloc_chunk`):
    /// a header from the class that fits it, linked later in the largest class' LRU, then
    /// chunks of the largest class, the last from the class that fits what is left. Each
    /// chunk may evict from its class' LRU; on failure everything taken goes back.
    fn alloc_chunked(
        &mut self,
        key: &[u8],
        value_len: usize,
        victim: &mut dyn FnMut(Item<'_>) -> Victim,
    ) -> Result<u64, ArenaError> {
        let cas = if self.cas_bytes { 8 } else { 0 };
        let htotal = (MC_ITEM_HEADER + key.len() + 1 + MC_CHUNK_HEADER + cas)
            .max(self.hdr + key.len() + V_BYTES);
        let largest = self.classes - 1;
        let hc = self.class_for(htotal).ok_or(ArenaError::TooLarge(htotal))?;
        let off = self.chunk(hc, victim)?;
        self.init_header(off, key, value_len, largest, CHUNKED);
        let at = self.vfield(off, V_HCLASS);
        self.bm()[at] = hc as u8;
        self.set_first_chunk(off, 0);
        let chunk_max = self.field(largest, C_SIZE) as usize;
        let (mut left, mut last) = (value_len, off);
        while left > 0 {
            let want = (left + self.hdr).min(chunk_max);
            let c = self.class_for(want).unwrap_or(largest);
            let ch = match self.chunk(c, victim) {
                Ok(ch) => ch,
                Err(e) => {
                    self.free_item(off);
                    return Err(e);
                }
            };
            let n = left.min(self.field(c, C_SIZE) as usize - self.hdr);
            let o = ch as usize;
            let b = self.bm();
            b[o + I_STATE] = CHUNK;
            b[o + I_CLASS] = c as u8;
            b[o + I_KIND] = 0;
            put_u32(b, o + I_NBYTES, n as u32);
            self.put(ch, I_HNEXT, 0);
            self.put(ch, I_PREV, last);
            if last == off {
                self.set_first_chunk(off, ch);
            } else {
                self.put(last, I_HNEXT, ch);
            }
            last = ch;
            left -= n;
        }
        Ok(off)
    }

    /// Gives back an allocated chunk that was not linked.
    pub fn release(&mut self, off: u64) {
        self.free_item(off);
    }
}
