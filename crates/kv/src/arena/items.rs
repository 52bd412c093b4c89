//! Items: the hash chains, allocation, linking, and pins (values sent by reference). The
//! sub-LRUs and eviction are in `lru.rs`.

use std::sync::Arc;

use super::layout::*;
use super::{Arena, ArenaError, Item, Pin, Victim};

impl Arena {
    pub(super) fn at(&self, off: u64, f: usize) -> u64 {
        u64_at(self.b(), off as usize + f)
    }

    pub(super) fn put(&mut self, off: u64, f: usize, v: u64) {
        put_u64(self.bm(), off as usize + f, v);
    }

    pub(super) fn key_of(&self, off: u64) -> &[u8] {
        let o = off as usize;
        let n = self.b()[o + I_NKEY] as usize;
        &self.b()[o + ITEM_HEADER..o + ITEM_HEADER + n]
    }

    pub(super) fn class_of(&self, off: u64) -> usize {
        self.b()[off as usize + I_CLASS] as usize
    }

    pub(super) fn state_of(&self, off: u64) -> u8 {
        self.b()[off as usize + I_STATE]
    }

    /// Whether the item at `off` is a chunked item's header.
    pub(super) fn is_chunked(&self, off: u64) -> bool {
        self.b()[off as usize + I_KIND] == CHUNKED
    }

    /// Where a chunked header's value-area field `f` lies.
    fn vfield(&self, off: u64, f: usize) -> usize {
        off as usize + ITEM_HEADER + self.b()[off as usize + I_NKEY] as usize + f
    }

    /// A chunked header's first chunk.
    pub(super) fn first_chunk(&self, off: u64) -> u64 {
        u64_at(self.b(), self.vfield(off, V_FIRST))
    }

    pub(super) fn set_first_chunk(&mut self, off: u64, ch: u64) {
        let at = self.vfield(off, V_FIRST);
        put_u64(self.bm(), at, ch);
    }

    /// The class whose chunk holds the item at `off` (a chunked item's LRU class is another).
    pub(super) fn mem_class_of(&self, off: u64) -> usize {
        if self.is_chunked(off) {
            self.b()[self.vfield(off, V_HCLASS)] as usize
        } else {
            self.class_of(off)
        }
    }

    /// The chunks of a chunked item's chain, in order (empty for a whole item).
    pub(super) fn chain(&self, off: u64) -> Vec<u64> {
        let mut v = Vec::new();
        if self.is_chunked(off) {
            let mut ch = self.first_chunk(off);
            while ch != 0 {
                v.push(ch);
                ch = self.at(ch, I_HNEXT);
            }
        }
        v
    }

    /// The data of chunk `ch`.
    fn chunk_data(&self, ch: u64) -> &[u8] {
        let o = ch as usize + ITEM_HEADER;
        &self.b()[o..o + u32_at(self.b(), ch as usize + I_NBYTES) as usize]
    }

    /// The header a chain chunk belongs to (following the back links).
    pub(super) fn head_of(&self, mut ch: u64) -> u64 {
        while self.state_of(ch) == CHUNK {
            ch = self.at(ch, I_PREV);
        }
        ch
    }

    /// Bytes a relocation copies: the header, key and value (or a chunked item's chain
    /// fields, or a chunk's data).
    pub(super) fn used_len(&self, off: u64) -> usize {
        let o = off as usize;
        let n = u32_at(self.b(), o + I_NBYTES) as usize;
        if self.state_of(off) == CHUNK {
            return ITEM_HEADER + n;
        }
        let v = if self.is_chunked(off) { V_BYTES } else { n };
        ITEM_HEADER + self.b()[o + I_NKEY] as usize + v
    }

    /// The value of the item at `off`, copied when it is chunked.
    pub fn value_bytes(&self, off: u64) -> std::borrow::Cow<'_, [u8]> {
        if !self.is_chunked(off) {
            return self.item(off).value.into();
        }
        let mut v = Vec::with_capacity(u32_at(self.b(), off as usize + I_NBYTES) as usize);
        for ch in self.chain(off) {
            v.extend_from_slice(self.chunk_data(ch));
        }
        v.into()
    }

    /// Writes the whole value of an allocated, not yet linked item.
    pub fn write_value(&mut self, off: u64, data: &[u8]) {
        if !self.is_chunked(off) {
            self.value_mut(off).copy_from_slice(data);
            return;
        }
        let mut at = 0;
        for ch in self.chain(off) {
            let o = ch as usize + ITEM_HEADER;
            let n = u32_at(self.b(), ch as usize + I_NBYTES) as usize;
            self.bm()[o..o + n].copy_from_slice(&data[at..at + n]);
            at += n;
        }
        debug_assert_eq!(at, data.len());
    }

    /// The offset of `key`'s linked item, live or not.
    pub fn find(&self, key: &[u8]) -> Option<u64> {
        let mut off = u64_at(self.b(), self.bucket(key));
        while off != 0 {
            if self.key_of(off) == key {
                return Some(off);
            }
            off = self.at(off, I_HNEXT);
        }
        None
    }

    /// The item at `off` (from [`find`](Self::find) or [`alloc`](Self::alloc)).
    pub fn item(&self, off: u64) -> Item<'_> {
        let b = self.b();
        let o = off as usize;
        let nkey = b[o + I_NKEY] as usize;
        let nbytes = u32_at(b, o + I_NBYTES) as usize;
        let start = o + ITEM_HEADER;
        let chunked = b[o + I_KIND] == CHUNKED;
        let vlen = if chunked { 0 } else { nbytes };
        Item {
            key: &b[start..start + nkey],
            value: &b[start + nkey..start + nkey + vlen],
            value_len: nbytes,
            chunked,
            flags: u32_at(b, o + I_FLAGS),
            cas: u64_at(b, o + I_CAS),
            exptime: u32_at(b, o + I_EXP),
            time: u32_at(b, o + I_TIME),
            bits: b[o + I_BITS],
            class: b[o + I_CLASS] as usize,
        }
    }

    /// Sets an item's expiry.
    pub fn set_exptime(&mut self, off: u64, exptime: u32) {
        put_u32(self.bm(), off as usize + I_EXP, exptime);
    }

    /// Sets an item's last access.
    pub fn set_time(&mut self, off: u64, time: u32) {
        put_u32(self.bm(), off as usize + I_TIME, time);
    }

    /// Sets an item's bits ([`super::bits`]).
    pub fn set_bits(&mut self, off: u64, bits: u8) {
        self.bm()[off as usize + I_BITS] = bits;
    }

    /// Sets an item's CAS.
    pub fn set_cas(&mut self, off: u64, cas: u64) {
        put_u64(self.bm(), off as usize + I_CAS, cas);
    }

    /// The next CAS value (kept in the arena, so a restored one goes on from where it was).
    pub fn next_cas(&mut self) -> u64 {
        let cas = u64_at(self.b(), H_CAS);
        put_u64(self.bm(), H_CAS, cas + 1);
        cas
    }

    /// The CAS the next store would get.
    pub fn peek_cas(&self) -> u64 {
        u64_at(self.b(), H_CAS)
    }

    /// The bytes memcached counts for the item at `off`.
    pub(super) fn size_of(&self, off: u64) -> u64 {
        let o = off as usize;
        let nkey = self.b()[o + I_NKEY] as usize;
        let nbytes = u32_at(self.b(), o + I_NBYTES) as usize;
        self.item_size(nkey, nbytes) as u64
    }

    pub(super) fn item_size(&self, key: usize, value: usize) -> usize {
        let mc = MC_ITEM_HEADER + key + 1 + value + 2 + if self.cas_bytes { 8 } else { 0 };
        mc.max(ITEM_HEADER + key + value)
    }

    /// Takes a linked item out of its chain and LRU; its chunk is freed now, or once the last
    /// [`Pin`] on it is gone.
    pub fn unlink(&mut self, off: u64) {
        let bucket = self.bucket(self.key_of(off));
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
        self.lru_remove(off);
        self.set_field(c, C_USED, self.field(c, C_USED) - 1);
        self.add_header(H_ITEMS, -1);
        let size = self.size_of(off);
        self.add_header(H_BYTES, -(size as i64));
        self.set_field(
            c,
            C_REQUESTED,
            self.field(c, C_REQUESTED).wrapping_sub(size),
        );
        match self.pins.remove(&off).and_then(|w| w.upgrade()) {
            Some(pin) => {
                self.bm()[off as usize + I_STATE] = HELD;
                self.held.push((off, pin));
            }
            None => self.free_item(off),
        }
    }

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

    pub(super) fn pinned(&self, off: u64) -> bool {
        self.pins.get(&off).is_some_and(|w| w.strong_count() > 0)
    }

    /// Pins a linked item: its key and value stay readable through the [`Pin`], without the
    /// arena's lock, until the pin (and every clone) is dropped.
    pub fn pin(&mut self, off: u64) -> Arc<Pin> {
        if let Some(p) = self.pins.get(&off).and_then(|w| w.upgrade()) {
            return p;
        }
        let o = off as usize;
        let nkey = self.b()[o + I_NKEY] as usize;
        let nbytes = u32_at(self.b(), o + I_NBYTES) as usize;
        if self.is_chunked(off) {
            // Copied: nothing in the arena is held, so no page waits on this reply.
            let mut copy = self.key_of(off).to_vec();
            copy.extend_from_slice(&self.value_bytes(off));
            return Arc::new(Pin {
                map: self.map.clone(),
                start: 0,
                len: 0,
                copy: Some(copy.into()),
            });
        }
        let pin = Arc::new(Pin {
            map: self.map.clone(),
            start: o + ITEM_HEADER,
            len: nkey + nbytes,
            copy: None,
        });
        if self.pins.len() > 64 && self.pins.len() > 2 * self.held.len() {
            self.pins.retain(|_, w| w.strong_count() > 0);
        }
        self.pins.insert(off, Arc::downgrade(&pin));
        pin
    }

    /// Frees the unlinked chunks no reply holds any more.
    pub fn reap(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        for (off, pin) in held {
            if Arc::strong_count(&pin) == 1 {
                self.free_item(off);
            } else {
                self.held.push((off, pin));
            }
        }
    }

    /// A restored arena's `HELD` chunks (pinned when it closed) go back to their free lists.
    pub(super) fn free_held_chunks(&mut self) {
        let mut held = Vec::new();
        self.chunks(|off, state| {
            if state == HELD {
                held.push(off)
            }
        });
        for off in held {
            self.free_item(off);
        }
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
        let o = off as usize;
        let b = self.bm();
        put_u32(b, o + I_NBYTES, value_len as u32);
        b[o + I_NKEY] = key.len() as u8;
        b[o + I_CLASS] = c as u8;
        b[o + I_BITS] = 0;
        b[o + I_KIND] = kind;
        b[o + ITEM_HEADER..o + ITEM_HEADER + key.len()].copy_from_slice(key);
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
            .max(ITEM_HEADER + key.len() + V_BYTES);
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
            let want = (left + ITEM_HEADER).min(chunk_max);
            let c = self.class_for(want).unwrap_or(largest);
            let ch = match self.chunk(c, victim) {
                Ok(ch) => ch,
                Err(e) => {
                    self.free_item(off);
                    return Err(e);
                }
            };
            let n = left.min(self.field(c, C_SIZE) as usize - ITEM_HEADER);
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

    /// The value bytes of an allocated, not yet linked item.
    pub fn value_mut(&mut self, off: u64) -> &mut [u8] {
        assert!(
            !self.is_chunked(off),
            "a chunked value is written by write_value"
        );
        let o = off as usize;
        let nkey = self.b()[o + I_NKEY] as usize;
        let nbytes = u32_at(self.b(), o + I_NBYTES) as usize;
        let start = o + ITEM_HEADER + nkey;
        &mut self.bm()[start..start + nbytes]
    }

    /// The value bytes of a linked item, to rewrite in place (incr/decr); never a pinned one.
    pub fn value_mut_linked(&mut self, off: u64) -> &mut [u8] {
        debug_assert!(!self.pinned(off), "a pinned item is never written");
        self.value_mut(off)
    }

    /// Whether a reply holds the item at `off`.
    pub fn is_pinned(&self, off: u64) -> bool {
        self.pinned(off)
    }

    /// Counts the linked item at `off` as a dead item taken back (`reclaimed`, and
    /// `expired_unfetched` if never read), before the caller unlinks it.
    pub fn count_dead(&mut self, off: u64) {
        let c = self.class_of(off);
        let unfetched = self.b()[off as usize + I_BITS] & FETCHED == 0;
        self.count(c, C_RECLAIMED, 1);
        self.count(c, C_EXPIRED_UNFETCHED, u64::from(unfetched));
        self.add_header(H_RECLAIMED, 1);
    }

    /// Walks class `c`'s sub-LRUs (hot, warm, cold, temp), each from its head, while `f`
    /// says go on.
    pub fn lru(&self, c: usize, mut f: impl FnMut(Item<'_>) -> bool) {
        if c >= self.classes {
            return;
        }
        for l in [HOT, WARM, COLD, TEMP] {
            let mut off = self.lf(c, l, L_HEAD);
            while off != 0 {
                if !f(self.item(off)) {
                    return;
                }
                off = self.at(off, I_NEXT);
            }
        }
    }

    /// The tail of class `c`'s cold LRU (the next to be evicted; its age is memcached's
    /// `age`).
    pub fn lru_tail(&self, c: usize) -> Option<Item<'_>> {
        let off = (c < self.classes).then(|| self.lf(c, COLD, L_TAIL))?;
        (off != 0).then(|| self.item(off))
    }

    /// Gives back an allocated chunk that was not linked.
    pub fn release(&mut self, off: u64) {
        self.free_item(off);
    }

    /// Links an allocated item, replacing any item of its key, at the head of the sub-LRU
    /// new items go to (hot; temp for a short TTL with `temporary_ttl`; cold when flat).
    pub fn link(&mut self, off: u64, cas: u64, flags: u32, exptime: u32, time: u32, bits: u8) {
        if let Some(old) = self.find(self.key_of(off)) {
            self.unlink(old);
        }
        let o = off as usize;
        let b = self.bm();
        put_u64(b, o + I_CAS, cas);
        put_u32(b, o + I_EXP, exptime);
        put_u32(b, o + I_FLAGS, flags);
        put_u32(b, o + I_TIME, time);
        b[o + I_BITS] = bits;
        b[o + I_STATE] = LINKED;
        let bucket = self.bucket(self.key_of(off));
        let head = u64_at(self.b(), bucket);
        self.put(off, I_HNEXT, head);
        put_u64(self.bm(), bucket, off);
        let c = self.class_of(off);
        let l = self.new_item_lru(exptime, time);
        self.lru_push(c, l, off);
        self.set_field(c, C_USED, self.field(c, C_USED) + 1);
        self.add_header(H_ITEMS, 1);
        let size = self.size_of(off);
        self.add_header(H_BYTES, size as i64);
        self.count(c, C_REQUESTED, size);
        self.grow_on_link();
    }

    fn expired(&self, off: u64, now: u32) -> bool {
        let e = u32_at(self.b(), off as usize + I_EXP);
        e != 0 && e <= now
    }

    /// The item of `key` (expired items are reclaimed, never returned). A hit counts as a
    /// read when segmented ([`hit`](Self::hit)); flat, it moves the item to the head of its
    /// list.
    pub fn get(&mut self, key: &[u8], now: u32) -> Option<Item<'_>> {
        let off = self.find(key)?;
        if self.expired(off, now) {
            self.count_dead(off);
            self.unlink(off);
            return None;
        }
        if self.lru.segmented {
            self.hit(off, now);
        } else {
            self.bump(off, now);
        }
        Some(self.item(off))
    }

    /// Stores `value` under `key`, replacing what was there, evicting LRU tails as needed;
    /// returns the new CAS. The old item stays until the new one has its chunk, so a failure
    /// loses nothing.
    pub fn set(
        &mut self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: u32,
        now: u32,
    ) -> Result<u64, ArenaError> {
        let mut victim = |it: Item<'_>| {
            if it.exptime != 0 && it.exptime <= now {
                Victim::Reclaim
            } else {
                Victim::Evict
            }
        };
        let off = self.alloc(key, value.len(), &mut victim)?;
        self.write_value(off, value);
        let cas = self.next_cas();
        self.link(off, cas, flags, exptime, now, 0);
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
        if self.get(key, now).is_none() {
            return false;
        }
        match self.find(key) {
            Some(off) => {
                self.set_exptime(off, exptime);
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
}
