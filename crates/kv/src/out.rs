//! A connection's queued replies: the text the handler writes, with stored values held by
//! reference instead of copied.
//!
//! A value of at least [`SHARE_MIN`] bytes is not copied: the queue keeps a handle to the item's
//! shared allocation (as memcached keeps an item reference in its iovecs) and the sender hands
//! it to the kernel as one `iovec`. A multiget of large values then costs its headers, and a
//! client that does not read holds references to items, not copies of them. Smaller values are
//! copied: a copy is cheaper than a reference count and keeps the send one contiguous buffer.
//!
//! Sending walks the queue from where the last (partial) write stopped: [`Out::io_slices`] gives
//! the unsent bytes, [`Out::advance`] records what left. Once everything left the queue empties
//! itself and drops its references.

use std::io::IoSlice;

use crate::storage::Held;

/// Values at least this long are queued by reference.
pub const SHARE_MIN: usize = 2048;
/// A queue's text buffer above this is shrunk back once sent, so idle connections stay small.
const KEEP: usize = 64 * 1024;

/// A value queued by reference: `data[start..]`, sent after the text written before it.
struct Shared {
    /// Text bytes before it.
    at: usize,
    data: Held,
    start: usize,
}

impl Shared {
    fn bytes(&self) -> &[u8] {
        &self.data.bytes()[self.start..]
    }
}

/// Queued reply bytes of one connection (or one UDP request).
#[derive(Default)]
pub struct Out {
    text: Vec<u8>,
    shared: Vec<Shared>,
    /// Bytes queued by reference, in total.
    shared_len: usize,
    /// Send cursor: text bytes sent, values wholly sent, bytes of the next value sent.
    sent_text: usize,
    sent_vals: usize,
    sent_in_val: usize,
    /// Bytes sent of everything queued.
    sent: usize,
}

/// A position in the queue to [`Out::truncate`] back to.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    text: usize,
    shared: usize,
    shared_len: usize,
}

impl Out {
    /// An empty queue.
    pub fn new() -> Out {
        Out::default()
    }

    /// Appends text.
    pub fn extend_from_slice(&mut self, b: &[u8]) {
        self.text.extend_from_slice(b);
    }

    /// Appends one byte of text.
    pub fn push(&mut self, b: u8) {
        self.text.push(b);
    }

    /// Makes room for `n` more bytes of text.
    pub fn reserve(&mut self, n: usize) {
        self.text.reserve(n);
    }

    /// Appends a stored value: `shared[start..]` by reference when the store shares it
    /// (values of [`SHARE_MIN`] bytes or more), else a copy of `value`.
    pub fn value(&mut self, value: &[u8], shared: Option<&Held>, start: usize) {
        match shared {
            Some(a) => self.share(a, start),
            None => self.text.extend_from_slice(value),
        }
    }

    /// Appends `data[start..]`: by reference when it is large, copied otherwise.
    pub fn share(&mut self, data: &Held, start: usize) {
        let Some(v) = data.bytes().get(start..) else {
            return;
        };
        if v.len() < SHARE_MIN {
            self.text.extend_from_slice(v);
            return;
        }
        self.shared_len += v.len();
        self.shared.push(Shared {
            at: self.text.len(),
            data: data.clone(),
            start,
        });
    }

    /// Bytes queued and not yet sent.
    pub fn len(&self) -> usize {
        self.text.len() + self.shared_len - self.sent
    }

    /// Nothing left to send.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The current end of the queue.
    pub fn mark(&self) -> Mark {
        Mark {
            text: self.text.len(),
            shared: self.shared.len(),
            shared_len: self.shared_len,
        }
    }

    /// Drops what was queued after `m` (nothing of it may have been sent).
    pub fn truncate(&mut self, m: Mark) {
        if m.text < self.sent_text || m.shared < self.sent_vals {
            return;
        }
        self.text.truncate(m.text);
        self.shared.truncate(m.shared);
        self.shared_len = m.shared_len;
    }

    /// The text queued after `m`, when no value was queued by reference since.
    pub fn text_since(&self, m: Mark) -> Option<&[u8]> {
        if self.shared.len() != m.shared {
            return None;
        }
        self.text.get(m.text.max(self.sent_text)..)
    }

    /// The unsent bytes, piece by piece, in order.
    pub fn pieces(&self) -> Pieces<'_> {
        Pieces {
            out: self,
            text: self.sent_text,
            val: self.sent_vals,
            off: self.sent_in_val,
        }
    }

    /// Fills `iov` with the first unsent pieces; returns how many.
    pub fn io_slices<'a>(&'a self, iov: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, p) in iov.iter_mut().zip(self.pieces()) {
            *slot = IoSlice::new(p);
            n += 1;
        }
        n
    }

    /// Records that the next `n` unsent bytes left; empties the queue once all did.
    pub fn advance(&mut self, n: usize) {
        let mut n = n.min(self.len());
        self.sent += n;
        while n > 0 {
            let end = self
                .shared
                .get(self.sent_vals)
                .map_or(self.text.len(), |s| s.at);
            if self.sent_text < end {
                let k = n.min(end - self.sent_text);
                self.sent_text += k;
                n -= k;
                continue;
            }
            let Some(s) = self.shared.get(self.sent_vals) else {
                break;
            };
            let left = s.bytes().len() - self.sent_in_val;
            let k = n.min(left);
            self.sent_in_val += k;
            n -= k;
            if k == left {
                self.sent_vals += 1;
                self.sent_in_val = 0;
            }
        }
        if self.is_empty() {
            self.clear();
        }
    }

    /// Empties the queue, dropping its references; a large text buffer is shrunk back.
    pub fn clear(&mut self) {
        self.text.clear();
        if self.text.capacity() > KEEP {
            self.text.shrink_to(KEEP);
        }
        self.shared.clear();
        self.shared_len = 0;
        self.sent_text = 0;
        self.sent_vals = 0;
        self.sent_in_val = 0;
        self.sent = 0;
    }

    /// The unsent bytes as one vector (tests, diagnostics).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for p in self.pieces() {
            v.extend_from_slice(p);
        }
        v
    }
}

/// The unsent pieces of an [`Out`]: text runs and shared values, in order.
pub struct Pieces<'a> {
    out: &'a Out,
    text: usize,
    val: usize,
    off: usize,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let out = self.out;
        loop {
            let next = out.shared.get(self.val);
            let end = next.map_or(out.text.len(), |s| s.at);
            if self.text < end {
                let p = &out.text[self.text..end];
                self.text = end;
                return Some(p);
            }
            let s = next?;
            let p = &s.bytes()[self.off..];
            self.val += 1;
            self.off = 0;
            if !p.is_empty() {
                return Some(p);
            }
        }
    }
}

/// Something replies can be written into: a connection's [`Out`] or a plain vector (the
/// method names are `Vec`'s, so protocol code reads the same for both).
pub trait Put {
    /// Appends bytes.
    fn extend_from_slice(&mut self, b: &[u8]);
    /// Appends one byte.
    fn push(&mut self, b: u8);
    /// Makes room for `n` more bytes.
    fn reserve(&mut self, n: usize);
}

impl Put for Vec<u8> {
    fn extend_from_slice(&mut self, b: &[u8]) {
        Vec::extend_from_slice(self, b);
    }
    fn push(&mut self, b: u8) {
        Vec::push(self, b);
    }
    fn reserve(&mut self, n: usize) {
        Vec::reserve(self, n);
    }
}

impl Put for Out {
    fn extend_from_slice(&mut self, b: &[u8]) {
        Out::extend_from_slice(self, b);
    }
    fn push(&mut self, b: u8) {
        Out::push(self, b);
    }
    fn reserve(&mut self, n: usize) {
        Out::reserve(self, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn held(a: &Arc<[u8]>) -> Held {
        Held::Heap(a.clone())
    }

    fn big(c: u8) -> Arc<[u8]> {
        let mut v = vec![b'k'];
        v.extend(std::iter::repeat_n(c, SHARE_MIN + 10));
        Arc::from(v)
    }

    #[test]
    fn large_values_are_shared_small_ones_copied() {
        let mut o = Out::new();
        o.extend_from_slice(b"A");
        let v = big(b'x');
        o.share(&held(&v), 1);
        o.share(&Held::Heap(Arc::from(&b"kyz"[..])), 1);
        o.extend_from_slice(b"B");
        assert_eq!(Arc::strong_count(&v), 2, "queued by reference");
        let mut want = b"A".to_vec();
        want.extend(std::iter::repeat_n(b'x', SHARE_MIN + 10));
        want.extend_from_slice(b"yzB");
        assert_eq!(o.to_vec(), want);
        assert_eq!(o.len(), want.len());
        assert_eq!(o.pieces().count(), 3);
    }

    #[test]
    fn partial_sends_resume_where_they_stopped() {
        let (a, b) = (big(b'a'), big(b'b'));
        let mut o = Out::new();
        o.extend_from_slice(b"h1");
        o.share(&held(&a), 1);
        o.share(&held(&b), 1);
        o.extend_from_slice(b"t");
        let want = o.to_vec();
        let mut got = Vec::new();
        // Uneven steps cross every boundary (text/value, value/value, value/text).
        for step in [1, 3, 2000, 100, 5000, 7].iter().cycle() {
            if o.is_empty() {
                break;
            }
            let mut iov = [IoSlice::new(&[]); 8];
            let n = o.io_slices(&mut iov);
            let sent = (*step).min(o.len());
            let mut take = sent;
            for s in &iov[..n] {
                let k = take.min(s.len());
                got.extend_from_slice(&s[..k]);
                take -= k;
            }
            o.advance(sent);
        }
        assert_eq!(got, want);
        assert_eq!(Arc::strong_count(&a), 1, "references dropped once sent");
        assert_eq!(o.len(), 0);
    }

    #[test]
    fn truncate_drops_text_and_references() {
        let v = big(b'v');
        let mut o = Out::new();
        o.extend_from_slice(b"keep");
        let m = o.mark();
        o.share(&held(&v), 1);
        o.extend_from_slice(b"drop");
        o.truncate(m);
        assert_eq!(o.to_vec(), b"keep");
        assert_eq!(Arc::strong_count(&v), 1);
        o.share(&held(&v), 99_999);
        assert_eq!(o.to_vec(), b"keep", "an out-of-range start queues nothing");
    }
}
