//! The stream transports' frame (32 bytes, little-endian): every message of remora-fabric's tcp
//! and shm queue pairs starts with one.
//!
//! ```text
//!  0      1      2-3     4-7    8-15       16-19   20-23   24-31
//! +------+------+-------+------+----------+-------+-------+----------+
//! | kind | code | 0 u16 | len  | va (u64) | rkey  | imm   | aux (u64)|
//! +------+------+-------+------+----------+-------+-------+----------+
//! ```
//! The meaning of `kind` and `code`, and which of the other fields a kind uses, is the fabric's
//! (`crates/fabric/src/stream/frame.rs`): this module only moves the fields. Every byte pattern is
//! a frame, so parsing fails only on a short buffer. Reserved bytes are written as zero and
//! ignored on receive.

use crate::view::{le_u32, le_u64, set_le_u32, set_le_u64};
use crate::Result;

/// Length of a stream frame.
pub const FRAME_LEN: usize = 32;

mod field {
    use core::ops::Range;
    pub const KIND: usize = 0;
    pub const CODE: usize = 1;
    pub const RESERVED: Range<usize> = 2..4;
    pub const LEN: Range<usize> = 4..8;
    pub const VA: Range<usize> = 8..16;
    pub const RKEY: Range<usize> = 16..20;
    pub const IMM: Range<usize> = 20..24;
    pub const AUX: Range<usize> = 24..32;
}

crate::view::fixed_view! {
    /// A read/write view of a stream frame at the start of a buffer.
    FramePacket, FRAME_LEN
}

impl<T: AsRef<[u8]>> FramePacket<T> {
    /// What the frame is.
    pub fn kind(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }

    /// A kind-specific code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Length (of a DATA frame: its payload bytes).
    pub fn len(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::LEN])
    }

    /// True when `len` is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A virtual address.
    pub fn va(&self) -> u64 {
        le_u64(&self.buffer.as_ref()[field::VA])
    }

    /// A remote key.
    pub fn rkey(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::RKEY])
    }

    /// A 32-bit word (of a DATA frame: the header bytes that follow).
    pub fn imm(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::IMM])
    }

    /// A 64-bit word (an address or a length).
    pub fn aux(&self) -> u64 {
        le_u64(&self.buffer.as_ref()[field::AUX])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FramePacket<T> {
    /// Sets the kind.
    pub fn set_kind(&mut self, v: u8) {
        self.buffer.as_mut()[field::KIND] = v;
    }

    /// Sets the code.
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }

    /// Zeroes the reserved bytes.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }

    /// Sets the length.
    pub fn set_len(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::LEN], v);
    }

    /// Sets the address.
    pub fn set_va(&mut self, v: u64) {
        set_le_u64(&mut self.buffer.as_mut()[field::VA], v);
    }

    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::RKEY], v);
    }

    /// Sets the 32-bit word.
    pub fn set_imm(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::IMM], v);
    }

    /// Sets the 64-bit word.
    pub fn set_aux(&mut self, v: u64) {
        set_le_u64(&mut self.buffer.as_mut()[field::AUX], v);
    }
}

/// The decoded fields of a stream frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FrameRepr {
    /// What the frame is.
    pub kind: u8,
    /// A kind-specific code.
    pub code: u8,
    /// Length.
    pub len: u32,
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// 32-bit word.
    pub imm: u32,
    /// 64-bit word.
    pub aux: u64,
}

impl FrameRepr {
    /// Parses a frame; fails only on a buffer shorter than [`FRAME_LEN`].
    pub fn parse<T: AsRef<[u8]>>(packet: &FramePacket<T>) -> Result<FrameRepr> {
        packet.check_len()?;
        Ok(FrameRepr {
            kind: packet.kind(),
            code: packet.code(),
            len: packet.len(),
            va: packet.va(),
            rkey: packet.rkey(),
            imm: packet.imm(),
            aux: packet.aux(),
        })
    }

    /// The frame's length, [`FRAME_LEN`].
    pub fn buffer_len(&self) -> usize {
        FRAME_LEN
    }

    /// Writes the frame. Panics if the buffer is shorter than [`FRAME_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut FramePacket<T>) {
        packet.set_kind(self.kind);
        packet.set_code(self.code);
        packet.clear_reserved();
        packet.set_len(self.len);
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_imm(self.imm);
        packet.set_aux(self.aux);
    }

    /// The frame's bytes.
    pub fn to_bytes(&self) -> [u8; FRAME_LEN] {
        let mut b = [0; FRAME_LEN];
        self.emit(&mut FramePacket::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    /// A DATA frame with `BYREF`, as remora-fabric's `Frame::encode` wrote it before this codec.
    static DATA: [u8; FRAME_LEN] = [
        0x01, 0x01, 0x00, 0x00, 0x04, 0x03, 0x02, 0x01, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22,
        0x11, 0xef, 0xbe, 0xad, 0xde, 0x1c, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
        0x07, 0x08,
    ];
    const DATA_REPR: FrameRepr = FrameRepr {
        kind: 1,
        code: 1,
        len: 0x0102_0304,
        va: 0x1122_3344_5566_7788,
        rkey: 0xdead_beef,
        imm: 28,
        aux: 0x0807_0605_0403_0201,
    };
    /// A GRANT frame (kind 10, rights 3), same provenance.
    static GRANT: [u8; FRAME_LEN] = [
        0x0a, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0, 0, 0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0x10, 0, 0, 0, 0, 0,
    ];
    const GRANT_REPR: FrameRepr = FrameRepr {
        kind: 10,
        code: 3,
        len: 0,
        va: 0x7f00_0000_0000,
        rkey: 0x42,
        imm: 0,
        aux: 1 << 20,
    };

    #[test]
    fn deconstruct() {
        let p = FramePacket::new_checked(&DATA[..]).unwrap();
        assert_eq!((p.kind(), p.code(), p.len()), (1, 1, 0x0102_0304));
        assert_eq!((p.va(), p.rkey()), (0x1122_3344_5566_7788, 0xdead_beef));
        assert_eq!((p.imm(), p.aux()), (28, 0x0807_0605_0403_0201));
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; FRAME_LEN];
        let mut p = FramePacket::new_unchecked(&mut buf[..]);
        p.set_kind(1);
        p.set_code(1);
        p.clear_reserved();
        p.set_len(0x0102_0304);
        p.set_va(0x1122_3344_5566_7788);
        p.set_rkey(0xdead_beef);
        p.set_imm(28);
        p.set_aux(0x0807_0605_0403_0201);
        assert_eq!(buf, DATA);
    }

    #[test]
    fn parse_and_emit_golden_frames() {
        for (bytes, repr) in [(&DATA, DATA_REPR), (&GRANT, GRANT_REPR)] {
            assert_eq!(
                FrameRepr::parse(&FramePacket::new_unchecked(&bytes[..])),
                Ok(repr)
            );
            let mut buf = [0xa5u8; FRAME_LEN];
            repr.emit(&mut FramePacket::new_unchecked(&mut buf[..]));
            assert_eq!(&buf, bytes);
            assert_eq!(&repr.to_bytes(), bytes);
        }
    }

    #[test]
    fn reserved_bytes_are_ignored() {
        let mut b = DATA;
        b[2] = 0xff;
        assert_eq!(
            FrameRepr::parse(&FramePacket::new_unchecked(&b[..])),
            Ok(DATA_REPR)
        );
    }

    #[test]
    fn short_buffer() {
        assert_eq!(
            FrameRepr::parse(&FramePacket::new_unchecked(&DATA[..31])),
            Err(Error::Truncated { need: 32, have: 31 })
        );
    }
}
