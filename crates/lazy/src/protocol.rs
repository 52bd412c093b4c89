//! The page-server wire protocol (little endian), shared by every stream transport.
//!
//! On connect the server sends a [`Hello`] (the source's length, its segments and a map of pages
//! known to be zero). The client then sends 16-byte [`Request`]s; each `Read` is answered by one
//! 16-byte [`Reply`] header, followed by `len` data bytes when the status is `Data`. A `PushStart`
//! turns the connection into the bulk channel: the server streams `Data`/`Zero` replies in order
//! from the given offset, wrapping around once, and ends with `End`; the client may send
//! `PushRestart` at any time to move the stream (it then continues from there).
//!
//! Parsers never panic: lengths and counts are checked against [`MAX_CHUNK`], [`MAX_SEGMENTS`]
//! and the buffer before use.

/// `"RMLZ"` as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"RMLZ");
/// Protocol version.
pub const VERSION: u16 = 1;
/// Largest read or push chunk (bytes).
pub const MAX_CHUNK: u32 = 4 << 20;
/// Most segments a hello may carry.
pub const MAX_SEGMENTS: u32 = 1 << 16;
/// Most zero-map words a hello may carry (16 MiB: 512 GiB of 4 KB pages).
pub const MAX_ZERO_WORDS: u32 = 2 << 20;
/// Granularity of the zero map.
pub const ZERO_MAP_PAGE: u64 = 4096;
/// Size of a request or reply header.
pub const HEADER_LEN: usize = 16;

/// A range of the source's own address space (for a process: a mapping; for a file: 0..len).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Address in the source (process virtual address, or file offset).
    pub va: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The server's greeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Total bytes served (segments concatenated).
    pub len: u64,
    /// The segments, in the order they are concatenated.
    pub segments: Vec<Segment>,
    /// One bit per 4 KB page, set when the page is known to be zero (file holes); may be empty.
    pub zero_map: Vec<u64>,
}

/// Errors of the parsers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not enough bytes yet.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// Wrong magic or version.
    #[error("not a remora page server (magic {magic:#x}, version {version})")]
    BadMagic {
        /// Magic received.
        magic: u32,
        /// Version received.
        version: u16,
    },
    /// A field out of its allowed range.
    #[error("invalid field: {0}")]
    Invalid(&'static str),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

impl Hello {
    /// Fixed part: magic u32, version u16, reserved u16, len u64, nseg u32, zero-map words u32.
    pub const FIXED: usize = 24;

    /// Serialized size.
    pub fn buffer_len(&self) -> usize {
        Self::FIXED + self.segments.len() * 16 + self.zero_map.len() * 8
    }
    /// Serializes.
    pub fn emit(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.buffer_len());
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        b.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.zero_map.len() as u32).to_le_bytes());
        for s in &self.segments {
            b.extend_from_slice(&s.va.to_le_bytes());
            b.extend_from_slice(&s.len.to_le_bytes());
        }
        for w in &self.zero_map {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b
    }
    /// Parses the fixed part; returns the total size the hello occupies.
    pub fn total_len(b: &[u8]) -> Result<usize, WireError> {
        if b.len() < Self::FIXED {
            return Err(WireError::Truncated {
                need: Self::FIXED,
                have: b.len(),
            });
        }
        let (magic, version) = (u32_at(b, 0), u16_at(b, 4));
        if magic != MAGIC || version != VERSION {
            return Err(WireError::BadMagic { magic, version });
        }
        let len = u64_at(b, 8);
        let nseg = u32_at(b, 16);
        let words = u32_at(b, 20);
        if nseg > MAX_SEGMENTS {
            return Err(WireError::Invalid("too many segments"));
        }
        let max_words = len.div_ceil(ZERO_MAP_PAGE).div_ceil(64);
        if words > MAX_ZERO_WORDS || u64::from(words) > max_words {
            return Err(WireError::Invalid("zero map longer than the source"));
        }
        Ok(Self::FIXED + nseg as usize * 16 + words as usize * 8)
    }
    /// Parses a complete hello.
    pub fn parse(b: &[u8]) -> Result<Hello, WireError> {
        let total = Self::total_len(b)?;
        if b.len() < total {
            return Err(WireError::Truncated {
                need: total,
                have: b.len(),
            });
        }
        let len = u64_at(b, 8);
        let nseg = u32_at(b, 16) as usize;
        let words = u32_at(b, 20) as usize;
        let mut segments = Vec::with_capacity(nseg);
        let mut sum = 0u64;
        for i in 0..nseg {
            let at = Self::FIXED + i * 16;
            let s = Segment {
                va: u64_at(b, at),
                len: u64_at(b, at + 8),
            };
            sum = sum
                .checked_add(s.len)
                .ok_or(WireError::Invalid("segment lengths overflow"))?;
            segments.push(s);
        }
        if sum != len {
            return Err(WireError::Invalid("segments do not add up to the length"));
        }
        let zat = Self::FIXED + nseg * 16;
        let zero_map = (0..words).map(|i| u64_at(b, zat + i * 8)).collect();
        Ok(Hello {
            len,
            segments,
            zero_map,
        })
    }
    /// True if every 4 KB page of `[offset, offset+len)` is marked zero.
    pub fn is_zero(&self, offset: u64, len: u64) -> bool {
        if self.zero_map.is_empty() || len == 0 {
            return false;
        }
        let first = offset / ZERO_MAP_PAGE;
        let last = (offset + len - 1) / ZERO_MAP_PAGE;
        (first..=last).all(|p| {
            let w = (p / 64) as usize;
            w < self.zero_map.len() && self.zero_map[w] >> (p % 64) & 1 == 1
        })
    }
}

/// Request operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read `len` bytes at `offset` (the urgent path).
    Read,
    /// Start streaming the source from `offset` (the bulk path).
    PushStart,
    /// Move the stream to `offset`.
    PushRestart,
}

/// A client request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// What to do.
    pub op: Op,
    /// Bytes (reads only).
    pub len: u32,
    /// Offset into the concatenated source.
    pub offset: u64,
}

impl Request {
    /// Serializes into 16 bytes.
    pub fn emit(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = match self.op {
            Op::Read => 1,
            Op::PushStart => 2,
            Op::PushRestart => 3,
        };
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b
    }
    /// Parses 16 bytes.
    pub fn parse(b: &[u8]) -> Result<Request, WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                have: b.len(),
            });
        }
        let op = match b[0] {
            1 => Op::Read,
            2 => Op::PushStart,
            3 => Op::PushRestart,
            _ => return Err(WireError::Invalid("unknown op")),
        };
        let len = u32_at(b, 4);
        if len > MAX_CHUNK {
            return Err(WireError::Invalid("read longer than MAX_CHUNK"));
        }
        Ok(Request {
            op,
            len,
            offset: u64_at(b, 8),
        })
    }
}

/// Reply statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `len` data bytes follow.
    Data,
    /// The range is all zero; nothing follows.
    Zero,
    /// The range could not be served; `len` bytes of UTF-8 reason follow.
    Error,
    /// End of a push stream.
    End,
}

/// A reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Outcome.
    pub status: Status,
    /// Bytes of range (Zero) or bytes that follow (Data, Error).
    pub len: u32,
    /// Offset of the range.
    pub offset: u64,
}

impl Reply {
    /// Serializes into 16 bytes.
    pub fn emit(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = match self.status {
            Status::Data => 1,
            Status::Zero => 2,
            Status::Error => 3,
            Status::End => 4,
        };
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b
    }
    /// Parses 16 bytes.
    pub fn parse(b: &[u8]) -> Result<Reply, WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                have: b.len(),
            });
        }
        let status = match b[0] {
            1 => Status::Data,
            2 => Status::Zero,
            3 => Status::Error,
            4 => Status::End,
            _ => return Err(WireError::Invalid("unknown status")),
        };
        let len = u32_at(b, 4);
        if len > MAX_CHUNK {
            return Err(WireError::Invalid("reply longer than MAX_CHUNK"));
        }
        Ok(Reply {
            status,
            len,
            offset: u64_at(b, 8),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn golden_request() {
        let r = Request {
            op: Op::Read,
            len: 0x1000,
            offset: 0x0102030405060708,
        };
        assert_eq!(
            r.emit(),
            [1, 0, 0, 0, 0, 0x10, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]
        );
    }

    #[test]
    fn hello_zero_map() {
        let h = Hello {
            len: 3 * 4096 * 64,
            segments: vec![Segment {
                va: 0,
                len: 3 * 4096 * 64,
            }],
            zero_map: vec![0, 0b110, 0],
        };
        let p = Hello::parse(&h.emit()).unwrap();
        assert_eq!(p, h);
        assert!(p.is_zero(65 * 4096, 8192));
        assert!(!p.is_zero(64 * 4096, 8192));
        assert!(!p.is_zero(0, 4096));
    }

    #[test]
    fn rejects_a_huge_zero_map() {
        let mut b = Hello {
            len: u64::MAX,
            segments: vec![],
            zero_map: vec![],
        }
        .emit();
        b[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Hello::total_len(&b),
            Err(WireError::Invalid("zero map longer than the source"))
        );
    }

    #[test]
    fn rejects_hostile_hello() {
        let mut b = Hello {
            len: 4096,
            segments: vec![Segment { va: 0, len: 4096 }],
            zero_map: vec![],
        }
        .emit();
        b[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Hello::parse(&b).is_err());
        b[0] = 0;
        assert!(matches!(Hello::parse(&b), Err(WireError::BadMagic { .. })));
    }

    proptest! {
        #[test]
        fn request_roundtrip(op in 1u8..4, len in 0u32..=MAX_CHUNK, offset: u64) {
            let mut b = [0u8; 16];
            b[0] = op;
            b[4..8].copy_from_slice(&len.to_le_bytes());
            b[8..].copy_from_slice(&offset.to_le_bytes());
            let r = Request::parse(&b).unwrap();
            prop_assert_eq!(r.emit(), b);
        }
        #[test]
        fn reply_roundtrip(st in 1u8..5, len in 0u32..=MAX_CHUNK, offset: u64) {
            let mut b = [0u8; 16];
            b[0] = st;
            b[4..8].copy_from_slice(&len.to_le_bytes());
            b[8..].copy_from_slice(&offset.to_le_bytes());
            let r = Reply::parse(&b).unwrap();
            prop_assert_eq!(r.emit(), b);
        }
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Request::parse(&b);
            let _ = Reply::parse(&b);
            let _ = Hello::parse(&b);
        }
        #[test]
        fn hello_roundtrip(segs in proptest::collection::vec((any::<u64>(), 0u64..1 << 30), 0..20)) {
            let segments: Vec<Segment> = segs.iter().map(|&(va, len)| Segment { va, len }).collect();
            let len = segments.iter().map(|s| s.len).sum::<u64>();
            let words = len.div_ceil(ZERO_MAP_PAGE).div_ceil(64).min(10) as usize;
            let h = Hello { len, segments, zero_map: vec![0xa5a5; words] };
            prop_assert_eq!(Hello::parse(&h.emit()).unwrap(), h);
        }
    }
}
