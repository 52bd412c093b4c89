//! The page server's greeting (little-endian): what a remora-lazy server sends first on every
//! stream, and after a region description in the fabric's private data.
//!
//! ```text
//!  0-3     4-5   6-7  8-15          16-19      20-23        24-            then
//! +------+-----+----+-------------+----------+------------+--------------+----------------+
//! |"RMLZ"| ver | 0  | length (u64)| segments | zero words | segments x16 | zero map words |
//! +------+-----+----+-------------+----------+------------+--------------+----------------+
//! ```
//! The length is the bytes served: the segments (address u64, length u64 each; ranges of the
//! source's own address space) concatenated, so their lengths add up to it. The zero map holds one
//! bit per [`ZERO_MAP_PAGE`] page of that length, set where the page is known to be zero, and
//! may be empty. Counts are bounded ([`MAX_SEGMENTS`], [`MAX_ZERO_WORDS`] and the source's
//! length) before anything is allocated. A stream reader reads [`HELLO_FIXED_LEN`] bytes, learns
//! the whole length from [`message_len`], then reads the rest.

use crate::view::{le_u16, le_u32, le_u64, set_le_u16, set_le_u32, set_le_u64};
use crate::{Error, Result};

/// The first four bytes.
pub const MAGIC: [u8; 4] = *b"RMLZ";
/// The version this crate reads and writes.
pub const VERSION: u16 = 1;
/// Length of the fixed part.
pub const HELLO_FIXED_LEN: usize = 24;
/// Length of one segment entry.
pub const SEGMENT_LEN: usize = 16;
/// Most segments a hello may carry.
pub const MAX_SEGMENTS: u32 = 1 << 16;
/// Most zero-map words a hello may carry (16 MiB: 512 GiB of 4 KB pages).
pub const MAX_ZERO_WORDS: u32 = 2 << 20;
/// Granularity of the zero map.
pub const ZERO_MAP_PAGE: u64 = 4096;

const FRAME: &str = "remora page server hello";

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: Range<usize> = 4..6;
    pub const RESERVED: Range<usize> = 6..8;
    pub const LEN: Range<usize> = 8..16;
    pub const SEGMENTS: Range<usize> = 16..20;
    pub const ZERO_WORDS: Range<usize> = 20..24;
}

/// Zero-map words that cover `len` bytes.
fn words_for(len: u64) -> u64 {
    len.div_ceil(ZERO_MAP_PAGE).div_ceil(64)
}

crate::view::view! {
    /// A read/write view of a page server hello at the start of a buffer.
    PageHelloPacket
}

/// The whole length of the hello whose fixed part starts `header`, after checking that part.
pub fn message_len(header: &[u8]) -> Result<usize> {
    let p = PageHelloPacket::new_unchecked(header);
    p.check_header()?;
    Ok(p.total_len())
}

impl<T: AsRef<[u8]>> PageHelloPacket<T> {
    /// Checks the fixed part: its length, magic and version, and the counts against their limits.
    pub fn check_header(&self) -> Result<()> {
        let have = self.buffer.as_ref().len();
        if have < HELLO_FIXED_LEN {
            return Err(Error::Truncated {
                need: HELLO_FIXED_LEN,
                have,
            });
        }
        if self.magic() != MAGIC {
            return Err(Error::BadMagic {
                frame: FRAME,
                magic: "RMLZ",
                found: self.magic(),
            });
        }
        if self.version() != VERSION {
            return Err(Error::UnsupportedVersion {
                frame: FRAME,
                found: self.version(),
                supported: VERSION,
            });
        }
        if self.segment_count() > MAX_SEGMENTS {
            return Err(Error::TooLarge {
                field: "segment count",
                value: self.segment_count().into(),
                max: MAX_SEGMENTS.into(),
            });
        }
        let max = words_for(self.source_len()).min(MAX_ZERO_WORDS.into());
        if u64::from(self.zero_words()) > max {
            return Err(Error::TooLarge {
                field: "zero map word count",
                value: self.zero_words().into(),
                max,
            });
        }
        Ok(())
    }

    /// Checks the fixed part and that the buffer holds the segments and the zero map.
    pub fn check_len(&self) -> Result<()> {
        self.check_header()?;
        let (need, have) = (self.total_len(), self.buffer.as_ref().len());
        if have < need {
            return Err(Error::Truncated { need, have });
        }
        Ok(())
    }

    /// The whole hello's length, from the counts.
    pub fn total_len(&self) -> usize {
        HELLO_FIXED_LEN
            + self.segment_count() as usize * SEGMENT_LEN
            + self.zero_words() as usize * 8
    }

    /// The first four bytes.
    pub fn magic(&self) -> [u8; 4] {
        let mut m = [0; 4];
        m.copy_from_slice(&self.buffer.as_ref()[field::MAGIC]);
        m
    }

    /// Protocol version.
    pub fn version(&self) -> u16 {
        le_u16(&self.buffer.as_ref()[field::VERSION])
    }

    /// Total bytes served.
    pub fn source_len(&self) -> u64 {
        le_u64(&self.buffer.as_ref()[field::LEN])
    }

    /// Number of segments.
    pub fn segment_count(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::SEGMENTS])
    }

    /// Number of zero-map words.
    pub fn zero_words(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::ZERO_WORDS])
    }

    /// Segment `i` (panics past the buffer).
    pub fn segment(&self, i: usize) -> Segment {
        let at = HELLO_FIXED_LEN + i * SEGMENT_LEN;
        let b = &self.buffer.as_ref()[at..at + SEGMENT_LEN];
        Segment {
            va: le_u64(&b[..8]),
            len: le_u64(&b[8..]),
        }
    }

    /// Zero-map word `i` (panics past the buffer).
    pub fn zero_word(&self, i: usize) -> u64 {
        let at = self.zero_map_at() + i * 8;
        le_u64(&self.buffer.as_ref()[at..at + 8])
    }

    fn zero_map_at(&self) -> usize {
        HELLO_FIXED_LEN + self.segment_count() as usize * SEGMENT_LEN
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PageHelloPacket<T> {
    /// Writes [`MAGIC`], the version and the reserved zeros.
    pub fn set_magic_and_version(&mut self, version: u16) {
        let b = self.buffer.as_mut();
        b[field::MAGIC].copy_from_slice(&MAGIC);
        set_le_u16(&mut b[field::VERSION], version);
        b[field::RESERVED].fill(0);
    }

    /// Sets the bytes served.
    pub fn set_source_len(&mut self, v: u64) {
        set_le_u64(&mut self.buffer.as_mut()[field::LEN], v);
    }

    /// Sets the segment count.
    pub fn set_segment_count(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::SEGMENTS], v);
    }

    /// Sets the zero-map word count.
    pub fn set_zero_words(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::ZERO_WORDS], v);
    }

    /// Sets segment `i` (panics past the buffer).
    pub fn set_segment(&mut self, i: usize, s: Segment) {
        let at = HELLO_FIXED_LEN + i * SEGMENT_LEN;
        let b = &mut self.buffer.as_mut()[at..at + SEGMENT_LEN];
        set_le_u64(&mut b[..8], s.va);
        set_le_u64(&mut b[8..], s.len);
    }

    /// Sets zero-map word `i`; the segment count must be set first (panics past the buffer).
    pub fn set_zero_word(&mut self, i: usize, v: u64) {
        let at = self.zero_map_at() + i * 8;
        set_le_u64(&mut self.buffer.as_mut()[at..at + 8], v);
    }
}

/// A range of the source's own address space (for a process: a mapping; for a file: 0..len).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Address in the source (process virtual address, or file offset).
    pub va: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The decoded page server hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageHelloRepr {
    /// Total bytes served (the segments concatenated).
    pub len: u64,
    /// The segments, in the order they are concatenated.
    pub segments: Vec<Segment>,
    /// One bit per 4 KB page, set when the page is known to be zero (file holes); may be empty.
    pub zero_map: Vec<u64>,
}

impl PageHelloRepr {
    /// Parses a whole hello (see [`PageHelloPacket::check_len`]); refuses segments whose lengths
    /// do not add up to the length.
    pub fn parse<T: AsRef<[u8]>>(packet: &PageHelloPacket<T>) -> Result<PageHelloRepr> {
        packet.check_len()?;
        let len = packet.source_len();
        let segments: Vec<Segment> = (0..packet.segment_count() as usize)
            .map(|i| packet.segment(i))
            .collect();
        let sum = segments
            .iter()
            .try_fold(0u64, |sum, s| sum.checked_add(s.len))
            .ok_or(Error::Inconsistent("segments: their lengths overflow"))?;
        if sum != len {
            return Err(Error::Inconsistent(
                "segments: they do not add up to the length",
            ));
        }
        let zero_map = (0..packet.zero_words() as usize)
            .map(|i| packet.zero_word(i))
            .collect();
        Ok(PageHelloRepr {
            len,
            segments,
            zero_map,
        })
    }

    /// The hello's length.
    pub fn buffer_len(&self) -> usize {
        HELLO_FIXED_LEN + self.segments.len() * SEGMENT_LEN + self.zero_map.len() * 8
    }

    /// Writes the hello. Panics if the buffer is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut PageHelloPacket<T>) {
        packet.set_magic_and_version(VERSION);
        packet.set_source_len(self.len);
        packet.set_segment_count(self.segments.len() as u32);
        packet.set_zero_words(self.zero_map.len() as u32);
        for (i, s) in self.segments.iter().enumerate() {
            packet.set_segment(i, *s);
        }
        for (i, w) in self.zero_map.iter().enumerate() {
            packet.set_zero_word(i, *w);
        }
    }

    /// The hello's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0; self.buffer_len()];
        self.emit(&mut PageHelloPacket::new_unchecked(&mut b[..]));
        b
    }

    /// True if every page of `[offset, offset + len)` is marked zero in the zero map.
    pub fn is_zero(&self, offset: u64, len: u64) -> bool {
        if self.zero_map.is_empty() || len == 0 {
            return false;
        }
        let first = offset / ZERO_MAP_PAGE;
        let Some(last) = offset.checked_add(len - 1).map(|e| e / ZERO_MAP_PAGE) else {
            return false;
        };
        (first..=last).all(|p| {
            let w = (p / 64) as usize;
            w < self.zero_map.len() && self.zero_map[w] >> (p % 64) & 1 == 1
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two segments (0x2000 bytes at 0x7f0000001000, 0x1000 at 0x400000) and a zero map
    /// marking pages 0 and 2, as remora-lazy's `Hello::emit` wrote it before this codec existed.
    static HELLO: [u8; 64] = [
        0x52, 0x4d, 0x4c, 0x5a, 0x01, 0x00, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x7f,
        0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
    ];

    fn repr() -> PageHelloRepr {
        PageHelloRepr {
            len: 0x3000,
            segments: vec![
                Segment {
                    va: 0x7f00_0000_1000,
                    len: 0x2000,
                },
                Segment {
                    va: 0x40_0000,
                    len: 0x1000,
                },
            ],
            zero_map: vec![0b101],
        }
    }

    #[test]
    fn deconstruct() {
        let p = PageHelloPacket::new_checked(&HELLO[..]).unwrap();
        assert_eq!((p.magic(), p.version(), p.source_len()), (MAGIC, 1, 0x3000));
        assert_eq!((p.segment_count(), p.zero_words()), (2, 1));
        assert_eq!(p.segment(1), repr().segments[1]);
        assert_eq!(p.zero_word(0), 0b101);
        assert_eq!(message_len(&HELLO[..HELLO_FIXED_LEN]), Ok(64));
    }

    #[test]
    fn parse_and_emit() {
        let p = PageHelloPacket::new_checked(&HELLO[..]).unwrap();
        assert_eq!(PageHelloRepr::parse(&p), Ok(repr()));
        let mut buf = [0xa5u8; 64];
        repr().emit(&mut PageHelloPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, HELLO);
        assert_eq!(repr().to_bytes(), HELLO);
    }

    #[test]
    fn zero_map_queries() {
        let h = PageHelloRepr {
            len: 3 * 4096 * 64,
            segments: vec![Segment {
                va: 0,
                len: 3 * 4096 * 64,
            }],
            zero_map: vec![0, 0b110, 0],
        };
        assert!(h.is_zero(65 * 4096, 8192));
        assert!(!h.is_zero(64 * 4096, 8192));
        assert!(!h.is_zero(0, 4096));
        assert!(!h.is_zero(u64::MAX, 2), "an overflowing range is not zero");
    }

    #[test]
    fn hostile_counts_are_refused_before_reading() {
        let mut b = HELLO;
        b[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(message_len(&b), Err(Error::TooLarge { .. })));
        let mut b = HELLO;
        b[20..24].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(
            message_len(&b),
            Err(Error::TooLarge {
                field: "zero map word count",
                value: 2,
                max: 1
            })
        );
        let mut b = HELLO;
        b[8] = 1;
        let p = PageHelloPacket::new_checked(&b[..]).unwrap();
        assert!(matches!(
            PageHelloRepr::parse(&p),
            Err(Error::Inconsistent(_))
        ));
        let mut b = HELLO;
        b[0] = 0;
        assert!(matches!(message_len(&b), Err(Error::BadMagic { .. })));
        b = HELLO;
        b[4] = 2;
        assert!(matches!(
            message_len(&b),
            Err(Error::UnsupportedVersion { found: 2, .. })
        ));
        assert_eq!(
            PageHelloPacket::new_checked(&HELLO[..63]).err(),
            Some(Error::Truncated { need: 64, have: 63 })
        );
    }
}
