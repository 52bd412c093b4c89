//! RDMA Extended Transport Header (16 bytes): the remote address, key and length of a WRITE or
//! READ. Present on WRITE First/Only (with or without immediate) and READ Request.
//!
//! ```text
//!  0-7                      8-11        12-15
//! +------------------------+-----------+----------------+
//! | virtual address (u64)  | R_Key     | DMA length     |
//! +------------------------+-----------+----------------+
//! ```
//! The DMA length is the length of the whole message, not of this packet.

use crate::{Result, RETH_LEN};

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const RKEY: Range<usize> = 8..12;
    pub const LEN: Range<usize> = 12..16;
}

crate::view::fixed_view! {
    /// A read/write view of a RETH at the start of a buffer.
    Packet, crate::RETH_LEN
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        let mut b = [0; 8];
        b.copy_from_slice(&self.buffer.as_ref()[field::VA]);
        u64::from_be_bytes(b)
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        let mut b = [0; 4];
        b.copy_from_slice(&self.buffer.as_ref()[field::RKEY]);
        u32::from_be_bytes(b)
    }

    /// DMA length of the whole message.
    pub fn dma_len(&self) -> u32 {
        let mut b = [0; 4];
        b.copy_from_slice(&self.buffer.as_ref()[field::LEN]);
        u32::from_be_bytes(b)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the remote virtual address.
    pub fn set_va(&mut self, v: u64) {
        self.buffer.as_mut()[field::VA].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        self.buffer.as_mut()[field::LEN].copy_from_slice(&v.to_be_bytes());
    }
}

/// The decoded fields of a RETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole message in bytes.
    pub len: u32,
}

impl RethRepr {
    /// Parses a RETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<RethRepr> {
        packet.check_len()?;
        Ok(RethRepr {
            va: packet.va(),
            rkey: packet.rkey(),
            len: packet.dma_len(),
        })
    }

    /// The header length, [`RETH_LEN`].
    pub fn buffer_len(&self) -> usize {
        RETH_LEN
    }

    /// Writes the RETH. Panics if the buffer is shorter than [`RETH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_dma_len(self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    static BYTES: [u8; 16] = [
        0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x10, 0x00,
        0x00,
    ];
    const REPR: RethRepr = RethRepr {
        va: 0x7f12_3456_789a,
        rkey: 0xdead_beef,
        len: 0x10_0000,
    };

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.va(), 0x7f12_3456_789a);
        assert_eq!(p.rkey(), 0xdead_beef);
        assert_eq!(p.dma_len(), 1 << 20);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 16];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_va(0x7f12_3456_789a);
        p.set_rkey(0xdead_beef);
        p.set_dma_len(1 << 20);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(
            RethRepr::parse(&Packet::new_unchecked(&BYTES[..])),
            Ok(REPR)
        );
    }

    #[test]
    fn emit() {
        let mut buf = [0xa5u8; 16];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffer() {
        assert_eq!(
            RethRepr::parse(&Packet::new_unchecked(&BYTES[..15])),
            Err(Error::Truncated { need: 16, have: 15 })
        );
    }
}
