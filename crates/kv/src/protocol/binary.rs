//! The binary protocol: a 24-byte big-endian header, then extras, key and value.
//!
//! [`parse`] checks lengths against each other and against the item limit before slicing, so
//! it never panics on hostile headers.

use super::Limits;
use crate::out::Put;

/// Request magic.
pub const MAGIC_REQ: u8 = 0x80;
/// Response magic.
pub const MAGIC_RES: u8 = 0x81;
/// Header length.
pub const HEADER_LEN: usize = 24;

/// Opcodes.
#[allow(missing_docs)]
pub mod op {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Response status codes.
#[allow(missing_docs)]
pub mod status {
    pub const OK: u16 = 0x0000;
    pub const KEY_ENOENT: u16 = 0x0001;
    pub const KEY_EEXISTS: u16 = 0x0002;
    pub const E2BIG: u16 = 0x0003;
    pub const EINVAL: u16 = 0x0004;
    pub const NOT_STORED: u16 = 0x0005;
    pub const DELTA_BADVAL: u16 = 0x0006;
    pub const UNKNOWN_COMMAND: u16 = 0x0081;
    pub const ENOMEM: u16 = 0x0082;
}

/// The text memcached puts in error response bodies.
pub fn status_text(s: u16) -> &'static [u8] {
    match s {
        status::KEY_ENOENT => b"Not found",
        status::KEY_EEXISTS => b"Data exists for key.",
        status::E2BIG => b"Too large.",
        status::EINVAL => b"Invalid arguments",
        status::NOT_STORED => b"Not stored.",
        status::DELTA_BADVAL => b"Non-numeric server-side value for incr or decr",
        status::UNKNOWN_COMMAND => b"Unknown command",
        status::ENOMEM => b"Out of memory",
        _ => b"",
    }
}

/// A decoded request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Opcode.
    pub opcode: u8,
    /// Key length.
    pub key_len: u16,
    /// Extras length.
    pub extras_len: u8,
    /// Total body length.
    pub body_len: u32,
    /// Echoed back.
    pub opaque: u32,
    /// CAS operand.
    pub cas: u64,
}

impl Header {
    /// Decodes the first 24 bytes; `None` if too short or wrong magic.
    pub fn decode(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_LEN || b[0] != MAGIC_REQ {
            return None;
        }
        Some(Header {
            opcode: b[1],
            key_len: u16::from_be_bytes([b[2], b[3]]),
            extras_len: b[4],
            body_len: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            opaque: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            cas: u64::from_be_bytes(b[16..24].try_into().ok()?),
        })
    }
}

/// A whole request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// Header.
    pub header: Header,
    /// Extras.
    pub extras: &'a [u8],
    /// Key.
    pub key: &'a [u8],
    /// Value.
    pub value: &'a [u8],
}

/// Parser result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse<'a> {
    /// Need more bytes.
    Incomplete,
    /// A request and its length.
    Done(Request<'a>, usize),
    /// A storage request too large to buffer: answer E2BIG, consume the header, then discard
    /// `swallow` more bytes.
    TooLarge(Header, usize),
    /// Protocol violation: drop the connection.
    Close,
}

fn is_store(opcode: u8) -> bool {
    matches!(
        opcode,
        op::SET
            | op::ADD
            | op::REPLACE
            | op::APPEND
            | op::PREPEND
            | op::SETQ
            | op::ADDQ
            | op::REPLACEQ
            | op::APPENDQ
            | op::PREPENDQ
    )
}

/// Parses one request from the front of `buf`.
pub fn parse<'a>(buf: &'a [u8], lim: &Limits) -> Parse<'a> {
    if buf.is_empty() {
        return Parse::Incomplete;
    }
    if buf[0] != MAGIC_REQ {
        return Parse::Close;
    }
    if buf.len() < HEADER_LEN {
        return Parse::Incomplete;
    }
    let Some(h) = Header::decode(buf) else {
        return Parse::Close;
    };
    let body = h.body_len as usize;
    let kl = h.key_len as usize;
    let el = h.extras_len as usize;
    if kl + el > body {
        return Parse::Close;
    }
    if body > lim.item_max + 1024 {
        if is_store(h.opcode) {
            return Parse::TooLarge(h, body);
        }
        return Parse::Close;
    }
    let total = HEADER_LEN + body;
    if buf.len() < total {
        return Parse::Incomplete;
    }
    let b = &buf[HEADER_LEN..total];
    Parse::Done(
        Request {
            header: h,
            extras: &b[..el],
            key: &b[el..el + kl],
            value: &b[el + kl..],
        },
        total,
    )
}

/// Appends one response.
#[allow(clippy::too_many_arguments)]
pub fn put_response(
    out: &mut impl Put,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    out.reserve(HEADER_LEN + extras.len() + key.len() + value.len());
    put_response_head(out, opcode, status, opaque, cas, extras, key, value.len());
    out.extend_from_slice(value);
}

/// Appends a response up to its value, which (`value_len` bytes) the caller appends.
#[allow(clippy::too_many_arguments)]
pub fn put_response_head(
    out: &mut impl Put,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value_len: usize,
) {
    let body = extras.len() + key.len() + value_len;
    out.push(MAGIC_RES);
    out.push(opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.push(0);
    out.extend_from_slice(&status.to_be_bytes());
    out.extend_from_slice(&(body as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut v = vec![MAGIC_REQ, opcode];
        v.extend_from_slice(&(key.len() as u16).to_be_bytes());
        v.push(extras.len() as u8);
        v.extend_from_slice(&[0, 0, 0]);
        v.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
        v.extend_from_slice(&7u32.to_be_bytes());
        v.extend_from_slice(&9u64.to_be_bytes());
        v.extend_from_slice(extras);
        v.extend_from_slice(key);
        v.extend_from_slice(value);
        v
    }

    #[test]
    fn parse_set() {
        let b = req(op::SET, &[0, 0, 0, 1, 0, 0, 0, 0], b"key", b"val");
        let lim = Limits::default();
        for cut in 0..b.len() {
            assert_eq!(parse(&b[..cut], &lim), Parse::Incomplete);
        }
        let Parse::Done(r, n) = parse(&b, &lim) else {
            panic!("not parsed")
        };
        assert_eq!(n, b.len());
        assert_eq!(r.key, b"key");
        assert_eq!(r.value, b"val");
        assert_eq!(r.header.opaque, 7);
        assert_eq!(r.header.cas, 9);
    }

    #[test]
    fn hostile_lengths() {
        let lim = Limits::default();
        let mut b = req(op::GET, &[], b"k", b"");
        b[3] = 200; // key longer than body
        assert_eq!(parse(&b, &lim), Parse::Close);
        let mut b = req(op::GET, &[], b"k", b"");
        b[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse(&b, &lim), Parse::Close);
        let mut b = req(op::SET, &[0; 8], b"k", b"");
        b[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(parse(&b, &lim), Parse::TooLarge(_, _)));
        assert_eq!(parse(b"\x00garbage", &lim), Parse::Close);
    }

    proptest::proptest! {
        /// Fuzz-style invariants: never panics; slices lie inside the consumed bytes.
        #[test]
        fn parse_invariants(buf in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), magic: bool) {
            let mut buf = buf;
            if magic && !buf.is_empty() {
                buf[0] = MAGIC_REQ;
            }
            let lim = Limits { item_max: 100, max_line: 2048, max_get_line: 4096, ..Limits::default() };
            if let Parse::Done(r, n) = parse(&buf, &lim) {
                proptest::prop_assert!(n >= HEADER_LEN && n <= buf.len());
                proptest::prop_assert_eq!(r.extras.len() + r.key.len() + r.value.len(), n - HEADER_LEN);
            }
        }
    }

    #[test]
    fn golden_response() {
        let mut o = vec![];
        put_response(&mut o, op::GET, status::OK, 5, 1, &[0, 0, 0, 2], b"", b"v");
        assert_eq!(
            o,
            [
                0x81, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
                2, b'v'
            ]
        );
    }
}
