//! Items: their header fields, the hash chains, linking and unlinking, and the plain
//! get/set/delete calls. Allocation is in `alloc.rs`, pins (values sent by reference) in
//! `pins.rs`, the sub-LRUs and eviction in `lru.rs`.

use super::layout::*;
use super::{Arena, ArenaError, Item, Victim};

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
        &self.b()[o + self.hdr..o + self.hdr + n]
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
    pub(super) fn vfield(&self, off: u64, f: usize) -> usize {
        off as usize + self.hdr + self.b()[off as usize + I_NKEY] as usize + f
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
        let o = ch as usize + self.hdr;
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
            return self.hdr + n;
        }
        let v = if self.is_chunked(off) { V_BYTES } else { n };
        self.hdr + self.b()[o + I_NKEY] as usize + v
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
            let o = ch as usize + self.hdr;
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
        let start = o + self.hdr;
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
        self.open_item(off);
        put_u32(self.bm(), off as usize + I_EXP, exptime);
        self.seal_item(off);
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
        self.open_item(off);
        put_u64(self.bm(), off as usize + I_CAS, cas);
        self.seal_item(off);
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
        mc.max(self.hdr + key + value)
    }

    /// Takes a linked item out of its chain and LRU; its chunk is freed now, or once the last
    /// [`Pin`] on it is gone.
    pub fn unlink(&mut self, off: u64) {
        let bucket = self.bucket(self.key_of(off));
        self.open_bucket(bucket);
        self.unlink_in(bucket, off);
        self.close_bucket(bucket);
    }

    /// [`unlink`](Self::unlink) with `bucket` (the key's) open to remote readers.
    fn unlink_in(&mut self, bucket: usize, off: u64) {
        // From here on, through free and reuse, the chunk reads as changing.
        self.open_item(off);
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

    /// The value bytes of an allocated, not yet linked item.
    pub fn value_mut(&mut self, off: u64) -> &mut [u8] {
        assert!(
            !self.is_chunked(off),
            "a chunked value is written by write_value"
        );
        let o = off as usize;
        let nkey = self.b()[o + I_NKEY] as usize;
        let nbytes = u32_at(self.b(), o + I_NBYTES) as usize;
        let start = o + self.hdr + nkey;
        &mut self.bm()[start..start + nbytes]
    }

    /// The value bytes of a linked item, to rewrite in place (incr/decr); never a pinned one.
    /// The item reads as changing to remote readers until [`set_cas`](Self::set_cas) gives it
    /// its new CAS.
    pub fn value_mut_linked(&mut self, off: u64) -> &mut [u8] {
        debug_assert!(!self.pinned(off), "a pinned item is never written");
        self.open_item(off);
        self.value_mut(off)
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

    /// Links an allocated item, replacing any item of its key, at the head of the sub-LRU
    /// new items go to (hot; temp for a short TTL with `temporary_ttl`; cold when flat).
    pub fn link(&mut self, off: u64, cas: u64, flags: u32, exptime: u32, time: u32, bits: u8) {
        let bucket = self.bucket(self.key_of(off));
        self.open_bucket(bucket);
        if let Some(old) = self.find(self.key_of(off)) {
            self.unlink_in(bucket, old);
        }
        self.open_item(off);
        let o = off as usize;
        let b = self.bm();
        put_u64(b, o + I_CAS, cas);
        put_u32(b, o + I_EXP, exptime);
        put_u32(b, o + I_FLAGS, flags);
        put_u32(b, o + I_TIME, time);
        b[o + I_BITS] = bits;
        b[o + I_STATE] = LINKED;
        let head = u64_at(self.b(), bucket);
        self.put(off, I_HNEXT, head);
        self.seal_item(off);
        put_u64(self.bm(), bucket, off);
        self.close_bucket(bucket);
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
