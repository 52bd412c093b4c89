//! Immediate Data header (4 bytes): an opaque 32-bit value a WRITE or SEND with immediate hands to
//! the responder's completion. Carried big-endian, as verbs' `imm_data` is.

use crate::Result;

mod field {
    use core::ops::Range;
    pub const IMM: Range<usize> = 0..4;
}

crate::view::fixed_view! {
    /// A read/write view of an ImmDt header at the start of a buffer.
    Packet, crate::IMMDT_LEN
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The immediate value.
    pub fn imm(&self) -> u32 {
        let mut b = [0; 4];
        b.copy_from_slice(&self.buffer.as_ref()[field::IMM]);
        u32::from_be_bytes(b)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the immediate value.
    pub fn set_imm(&mut self, v: u32) {
        self.buffer.as_mut()[field::IMM].copy_from_slice(&v.to_be_bytes());
    }
}

/// Parses the immediate value.
pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<u32> {
    packet.check_len()?;
    Ok(packet.imm())
}

/// Writes the immediate value. Panics if the buffer is shorter than [`IMMDT_LEN`](crate::IMMDT_LEN).
pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(imm: u32, packet: &mut Packet<T>) {
    packet.set_imm(imm);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    static BYTES: [u8; 4] = [0x12, 0x34, 0x56, 0x78];

    #[test]
    fn deconstruct_and_parse() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.imm(), 0x1234_5678);
        assert_eq!(parse(&p), Ok(0x1234_5678));
    }

    #[test]
    fn construct_and_emit() {
        let mut buf = [0xa5u8; 4];
        Packet::new_unchecked(&mut buf[..]).set_imm(0x1234_5678);
        assert_eq!(buf, BYTES);
        let mut buf = [0xa5u8; 4];
        emit(0x1234_5678, &mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffer() {
        assert_eq!(
            parse(&Packet::new_unchecked(&BYTES[..3])),
            Err(Error::Truncated { need: 4, have: 3 })
        );
    }
}
