//! A connection's read buffer, shared by the epoll and io_uring loops: bytes received but not
//! yet parsed are `pending()`; new bytes land in `spare()`.

/// Buffers above this are shrunk back when idle so idle connections stay small.
pub(super) const KEEP: usize = 64 * 1024;

/// Read size per call.
pub(super) const READ_CHUNK: usize = 16 * 1024;

#[derive(Default)]
pub(super) struct ReadBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    /// Received bytes not yet consumed by the parser.
    pub(super) fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub(super) fn has_pending(&self) -> bool {
        self.start < self.end
    }

    /// The parser used the first `n` pending bytes.
    pub(super) fn consume(&mut self, n: usize) {
        self.start += n;
    }

    /// Where the next read goes.
    pub(super) fn spare(&mut self) -> &mut [u8] {
        &mut self.buf[self.end..]
    }

    /// A read put `n` bytes at the start of `spare()`.
    pub(super) fn filled(&mut self, n: usize) {
        self.end += n;
    }

    /// Makes room to read: compacts, then grows (the parser bounds what can be pending), and
    /// shrinks an emptied buffer back so idle connections stay small. Moves the buffer, so
    /// never call it while the kernel may be writing into `spare()`.
    pub(super) fn reserve(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > KEEP {
                self.buf.truncate(READ_CHUNK);
                self.buf.shrink_to_fit();
            }
        }
        if self.buf.len() - self.end >= READ_CHUNK / 2 {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < READ_CHUNK / 2 {
            let n = (self.buf.len() * 2).max(READ_CHUNK);
            self.buf.resize(n, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacts_grows_and_shrinks_back() {
        let mut b = ReadBuf::default();
        b.reserve();
        assert!(b.spare().len() >= READ_CHUNK / 2);
        // A request larger than a chunk, arriving in pieces, keeps its bytes in order.
        let mut sent = Vec::new();
        for i in 0..10u8 {
            b.reserve();
            let piece = vec![i; READ_CHUNK / 3];
            b.spare()[..piece.len()].copy_from_slice(&piece);
            b.filled(piece.len());
            sent.extend_from_slice(&piece);
        }
        assert_eq!(b.pending(), &sent[..]);
        b.consume(sent.len() - 5);
        b.reserve();
        assert_eq!(
            b.pending(),
            &sent[sent.len() - 5..],
            "compaction keeps the tail"
        );
        b.consume(5);
        assert!(!b.has_pending());
        b.reserve();
        assert!(b.buf.len() <= KEEP, "an emptied large buffer shrinks back");
    }
}
