//! A region description (20 bytes, little-endian): what a peer needs to address a registered
//! region remotely. Peers exchange it in the setup hello's private data, and the REMU hello and
//! announcement carry one.
//!
//! ```text
//!  0-7                   8-15                  16-19
//! +---------------------+---------------------+-------+
//! | address (u64)       | length (u64)        | R_Key |
//! +---------------------+---------------------+-------+
//! ```

use crate::view::{le_u32, le_u64, set_le_u32, set_le_u64};
use crate::Result;

/// Length of a region description.
pub const REGION_LEN: usize = 20;

mod field {
    use core::ops::Range;
    pub const ADDR: Range<usize> = 0..8;
    pub const LEN: Range<usize> = 8..16;
    pub const RKEY: Range<usize> = 16..20;
}

crate::view::fixed_view! {
    /// A read/write view of a region description at the start of a buffer.
    RegionPacket, REGION_LEN
}

impl<T: AsRef<[u8]>> RegionPacket<T> {
    /// Virtual address of the region's first byte.
    pub fn addr(&self) -> u64 {
        le_u64(&self.buffer.as_ref()[field::ADDR])
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> u64 {
        le_u64(&self.buffer.as_ref()[field::LEN])
    }

    /// True when the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::RKEY])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RegionPacket<T> {
    /// Sets the address.
    pub fn set_addr(&mut self, v: u64) {
        set_le_u64(&mut self.buffer.as_mut()[field::ADDR], v);
    }

    /// Sets the length.
    pub fn set_len(&mut self, v: u64) {
        set_le_u64(&mut self.buffer.as_mut()[field::LEN], v);
    }

    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::RKEY], v);
    }
}

/// The decoded fields of a region description.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct RegionRepr {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RegionRepr {
    /// Parses a region description.
    pub fn parse<T: AsRef<[u8]>>(packet: &RegionPacket<T>) -> Result<RegionRepr> {
        packet.check_len()?;
        Ok(RegionRepr {
            addr: packet.addr(),
            len: packet.len(),
            rkey: packet.rkey(),
        })
    }

    /// The description's length, [`REGION_LEN`].
    pub fn buffer_len(&self) -> usize {
        REGION_LEN
    }

    /// Writes the description. Panics if the buffer is shorter than [`REGION_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut RegionPacket<T>) {
        packet.set_addr(self.addr);
        packet.set_len(self.len);
        packet.set_rkey(self.rkey);
    }

    /// The description's bytes.
    pub fn to_bytes(&self) -> [u8; REGION_LEN] {
        let mut b = [0; REGION_LEN];
        self.emit(&mut RegionPacket::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    /// As `remora_fabric::RegionInfo::encode` wrote it before this codec existed.
    static BYTES: [u8; REGION_LEN] = [
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa,
        0x99, 0x04, 0x03, 0x02, 0x01,
    ];
    const REPR: RegionRepr = RegionRepr {
        addr: 0x1122_3344_5566_7788,
        len: 0x99aa_bbcc_ddee_ff00,
        rkey: 0x0102_0304,
    };

    #[test]
    fn deconstruct() {
        let p = RegionPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.addr(), 0x1122_3344_5566_7788);
        assert_eq!(p.len(), 0x99aa_bbcc_ddee_ff00);
        assert_eq!(p.rkey(), 0x0102_0304);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; REGION_LEN];
        let mut p = RegionPacket::new_unchecked(&mut buf[..]);
        p.set_addr(0x1122_3344_5566_7788);
        p.set_len(0x99aa_bbcc_ddee_ff00);
        p.set_rkey(0x0102_0304);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse_and_emit() {
        let p = RegionPacket::new_unchecked(&BYTES[..]);
        assert_eq!(RegionRepr::parse(&p), Ok(REPR));
        let mut buf = [0xa5u8; REGION_LEN];
        REPR.emit(&mut RegionPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(REPR.to_bytes(), BYTES);
    }

    #[test]
    fn short_buffer() {
        assert_eq!(
            RegionRepr::parse(&RegionPacket::new_unchecked(&BYTES[..19])),
            Err(Error::Truncated { need: 20, have: 19 })
        );
    }
}
