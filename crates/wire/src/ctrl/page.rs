//! The page server's request and reply headers (16 bytes each, little-endian): what a
//! remora-lazy client asks over a stream and what the server answers. The server's greeting is
//! [`super::page_hello`].
//!
//! ```text
//!  0       1-3     4-7          8-15
//! +------+-------+------------+---------------+
//! | code | 0 x3  | len (u32)  | offset (u64)  |
//! +------+-------+------------+---------------+
//! ```
//! A request's code is a [`RequestOp`], a reply's a [`ReplyStatus`]; `len` is at most
//! [`MAX_CHUNK`] in both. Reserved bytes are written as zero and ignored on receive.

use crate::view::{le_u32, le_u64, set_le_u32, set_le_u64};
use crate::{Error, Result};

/// Length of a request or reply header.
pub const HEADER_LEN: usize = 16;
/// Largest read or push chunk (bytes).
pub const MAX_CHUNK: u32 = 4 << 20;

mod field {
    use core::ops::Range;
    pub const CODE: usize = 0;
    pub const RESERVED: Range<usize> = 1..4;
    pub const LEN: Range<usize> = 4..8;
    pub const OFFSET: Range<usize> = 8..16;
}

crate::view::fixed_view! {
    /// A read/write view of a request or reply header at the start of a buffer.
    PageHeaderPacket, HEADER_LEN
}

impl<T: AsRef<[u8]>> PageHeaderPacket<T> {
    /// The op (request) or status (reply) code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Bytes asked for, or bytes of the range answered.
    pub fn len(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::LEN])
    }

    /// True when `len` is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offset into the served source.
    pub fn offset(&self) -> u64 {
        le_u64(&self.buffer.as_ref()[field::OFFSET])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PageHeaderPacket<T> {
    /// Sets the code and zeroes the reserved bytes after it.
    pub fn set_code(&mut self, v: u8) {
        let b = self.buffer.as_mut();
        b[field::CODE] = v;
        b[field::RESERVED].fill(0);
    }

    /// Sets the length.
    pub fn set_len(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::LEN], v);
    }

    /// Sets the offset.
    pub fn set_offset(&mut self, v: u64) {
        set_le_u64(&mut self.buffer.as_mut()[field::OFFSET], v);
    }
}

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestOp {
    /// Read `len` bytes at `offset` (the urgent path).
    Read = 1,
    /// Start streaming the source from `offset` in chunks of `len` (the bulk path).
    PushStart = 2,
    /// Move the stream to `offset`.
    PushRestart = 3,
}

/// How a reply answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyStatus {
    /// `len` data bytes follow.
    Data = 1,
    /// The range is all zero; nothing follows.
    Zero = 2,
    /// The range could not be served; `len` bytes of UTF-8 reason follow.
    Error = 3,
    /// End of a push stream.
    End = 4,
}

/// Reads the code and the length every header has, refusing a length over [`MAX_CHUNK`].
fn fields<T: AsRef<[u8]>>(p: &PageHeaderPacket<T>, what: &'static str) -> Result<(u8, u32, u64)> {
    p.check_len()?;
    if p.len() > MAX_CHUNK {
        return Err(Error::TooLarge {
            field: what,
            value: p.len().into(),
            max: MAX_CHUNK.into(),
        });
    }
    Ok((p.code(), p.len(), p.offset()))
}

/// A client request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestRepr {
    /// What to do.
    pub op: RequestOp,
    /// Bytes (a read) or chunk size (a push).
    pub len: u32,
    /// Offset into the served source.
    pub offset: u64,
}

impl RequestRepr {
    /// Parses a request; refuses an unknown op and a length over [`MAX_CHUNK`].
    pub fn parse<T: AsRef<[u8]>>(packet: &PageHeaderPacket<T>) -> Result<RequestRepr> {
        let (code, len, offset) = fields(packet, "request length")?;
        let op = match code {
            1 => RequestOp::Read,
            2 => RequestOp::PushStart,
            3 => RequestOp::PushRestart,
            code => {
                return Err(Error::UnknownCode {
                    field: "page request op",
                    code,
                })
            }
        };
        Ok(RequestRepr { op, len, offset })
    }

    /// The header's length, [`HEADER_LEN`].
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the request. Panics if the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut PageHeaderPacket<T>) {
        packet.set_code(self.op as u8);
        packet.set_len(self.len);
        packet.set_offset(self.offset);
    }

    /// The request's bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0; HEADER_LEN];
        self.emit(&mut PageHeaderPacket::new_unchecked(&mut b[..]));
        b
    }
}

/// A reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplyRepr {
    /// Outcome.
    pub status: ReplyStatus,
    /// Bytes of the range (`Zero`) or bytes that follow (`Data`, `Error`).
    pub len: u32,
    /// Offset of the range.
    pub offset: u64,
}

impl ReplyRepr {
    /// Parses a reply header; refuses an unknown status and a length over [`MAX_CHUNK`].
    pub fn parse<T: AsRef<[u8]>>(packet: &PageHeaderPacket<T>) -> Result<ReplyRepr> {
        let (code, len, offset) = fields(packet, "reply length")?;
        let status = match code {
            1 => ReplyStatus::Data,
            2 => ReplyStatus::Zero,
            3 => ReplyStatus::Error,
            4 => ReplyStatus::End,
            code => {
                return Err(Error::UnknownCode {
                    field: "page reply status",
                    code,
                })
            }
        };
        Ok(ReplyRepr {
            status,
            len,
            offset,
        })
    }

    /// The header's length, [`HEADER_LEN`].
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the reply header. Panics if the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut PageHeaderPacket<T>) {
        packet.set_code(self.status as u8);
        packet.set_len(self.len);
        packet.set_offset(self.offset);
    }

    /// The reply header's bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0; HEADER_LEN];
        self.emit(&mut PageHeaderPacket::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // As remora-lazy's `Request::emit` / `Reply::emit` wrote them before this codec existed.
    static READ: [u8; 16] = [1, 0, 0, 0, 0, 0x10, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1];
    static RESTART: [u8; 16] = [3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0];
    static ERROR: [u8; 16] = [
        3, 0, 0, 0, 5, 0, 0, 0, 0xf0, 0xe0, 0xd0, 0xc0, 0xb0, 0xa0, 0, 0,
    ];
    static END: [u8; 16] = [4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

    fn packet(b: &[u8]) -> PageHeaderPacket<&[u8]> {
        PageHeaderPacket::new_unchecked(b)
    }

    #[test]
    fn deconstruct_and_construct() {
        let p = PageHeaderPacket::new_checked(&READ[..]).unwrap();
        assert_eq!(
            (p.code(), p.len(), p.offset()),
            (1, 0x1000, 0x0102_0304_0506_0708)
        );
        let mut buf = [0xa5u8; 16];
        let mut p = PageHeaderPacket::new_unchecked(&mut buf[..]);
        p.set_code(1);
        p.set_len(0x1000);
        p.set_offset(0x0102_0304_0506_0708);
        assert_eq!(buf, READ);
    }

    #[test]
    fn golden_requests() {
        let read = RequestRepr {
            op: RequestOp::Read,
            len: 0x1000,
            offset: 0x0102_0304_0506_0708,
        };
        let restart = RequestRepr {
            op: RequestOp::PushRestart,
            len: 0,
            offset: 0x10_0000,
        };
        for (bytes, r) in [(&READ, read), (&RESTART, restart)] {
            assert_eq!(RequestRepr::parse(&packet(bytes)), Ok(r));
            let mut buf = [0xa5u8; 16];
            r.emit(&mut PageHeaderPacket::new_unchecked(&mut buf[..]));
            assert_eq!(&buf, bytes);
        }
    }

    #[test]
    fn golden_replies() {
        let error = ReplyRepr {
            status: ReplyStatus::Error,
            len: 5,
            offset: 0xa0b0_c0d0_e0f0,
        };
        let end = ReplyRepr {
            status: ReplyStatus::End,
            len: 0,
            offset: 0,
        };
        for (bytes, r) in [(&ERROR, error), (&END, end)] {
            assert_eq!(ReplyRepr::parse(&packet(bytes)), Ok(r));
            assert_eq!(&r.to_bytes(), bytes);
        }
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut b = READ;
        b[0] = 4;
        assert_eq!(
            RequestRepr::parse(&packet(&b)),
            Err(Error::UnknownCode {
                field: "page request op",
                code: 4
            })
        );
        b[0] = 0;
        assert!(ReplyRepr::parse(&packet(&b)).is_err());
        let mut b = READ;
        b[4..8].copy_from_slice(&(MAX_CHUNK + 1).to_le_bytes());
        assert!(matches!(
            RequestRepr::parse(&packet(&b)),
            Err(Error::TooLarge { .. })
        ));
        assert_eq!(
            ReplyRepr::parse(&packet(&END[..15])),
            Err(Error::Truncated { need: 16, have: 15 })
        );
    }
}
