//! Pins: values sent by reference. A reply pins a large item and hands its bytes to the
//! kernel after the store's lock is released; an unlinked item a pin still holds stays `HELD`
//! until the last pin is gone (memcached's item reference count).

use std::sync::Arc;

use super::layout::*;
use super::{Arena, Pin};

impl Arena {
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
            start: o + self.hdr,
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

    /// Whether a reply holds the item at `off`.
    pub fn is_pinned(&self, off: u64) -> bool {
        self.pinned(off)
    }
}
