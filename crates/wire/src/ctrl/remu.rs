//! The REMU link's setup messages (little-endian), carried as remora-fabric setup private data
//! between a detector module's transmitter (the emulator, "REMU") and a remora-daq receiver.
//!
//! ```text
//! hello:     0-3     4-5          6-25 (optional)
//!           +------+------------+-----------------------------+
//!           |"REMU"| module u16 | credit word: region (20)    |
//!           +------+------------+-----------------------------+
//! announce:  0-19                  20-23     24-27    28-31
//!           +---------------------+---------+--------+--------+
//!           | ring: region (20)   | modules | bunch  | stacks |
//!           +---------------------+---------+--------+--------+
//! ```
//! The transmitter's hello names its module and, when it follows ring credits, the word where
//! the receiver writes them ([`super::region`]); the receiver's announcement names its ring
//! region and layout. Whether the module exists and the layout is sound is the receiver's and the
//! transmitter's to check; this module only moves the fields. A hello is 6 or at least 26
//! bytes (bytes after the credit word are ignored), an announcement at least 32.

use super::region::{RegionPacket, RegionRepr, REGION_LEN};
use crate::view::{le_u16, le_u32, set_le_u16, set_le_u32};
use crate::{Error, Result};

/// The first bytes of a transmitter's hello.
pub const MAGIC: [u8; 4] = *b"REMU";
/// Length of a hello without a credit word.
pub const HELLO_LEN: usize = 6;
/// Length of a hello with a credit word.
pub const HELLO_CREDIT_LEN: usize = HELLO_LEN + REGION_LEN;
/// Length of an announcement.
pub const ANNOUNCE_LEN: usize = REGION_LEN + 12;

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const MODULE: Range<usize> = 4..6;
    pub const CREDIT: Range<usize> = 6..26;
    pub const RING: Range<usize> = 0..20;
    pub const MODULES: Range<usize> = 20..24;
    pub const BUNCH: Range<usize> = 24..28;
    pub const STACKS: Range<usize> = 28..32;
}

crate::view::view! {
    /// A read/write view of a transmitter's hello at the start of a buffer.
    RemuHelloPacket
}

impl<T: AsRef<[u8]>> RemuHelloPacket<T> {
    /// Checks the length (6, or at least 26 with a credit word) and the magic.
    pub fn check_len(&self) -> Result<()> {
        let have = self.buffer.as_ref().len();
        if have < HELLO_LEN || (have > HELLO_LEN && have < HELLO_CREDIT_LEN) {
            let need = if have < HELLO_LEN {
                HELLO_LEN
            } else {
                HELLO_CREDIT_LEN
            };
            return Err(Error::Truncated { need, have });
        }
        if self.magic() != MAGIC {
            return Err(Error::BadMagic {
                frame: "REMU hello",
                magic: "REMU",
                found: self.magic(),
            });
        }
        Ok(())
    }

    /// The first four bytes.
    pub fn magic(&self) -> [u8; 4] {
        let mut m = [0; 4];
        m.copy_from_slice(&self.buffer.as_ref()[field::MAGIC]);
        m
    }

    /// The module the transmitter sends.
    pub fn module(&self) -> u16 {
        le_u16(&self.buffer.as_ref()[field::MODULE])
    }

    /// True when the hello carries a credit word.
    pub fn has_credit(&self) -> bool {
        self.buffer.as_ref().len() >= HELLO_CREDIT_LEN
    }

    /// The credit word's region (panics unless [`has_credit`](Self::has_credit)).
    pub fn credit(&self) -> RegionPacket<&[u8]> {
        RegionPacket::new_unchecked(&self.buffer.as_ref()[field::CREDIT])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RemuHelloPacket<T> {
    /// Writes [`MAGIC`].
    pub fn set_magic(&mut self) {
        self.buffer.as_mut()[field::MAGIC].copy_from_slice(&MAGIC);
    }

    /// Sets the module.
    pub fn set_module(&mut self, v: u16) {
        set_le_u16(&mut self.buffer.as_mut()[field::MODULE], v);
    }

    /// The credit word's region, to write (panics on a buffer shorter than 26 bytes).
    pub fn credit_mut(&mut self) -> RegionPacket<&mut [u8]> {
        RegionPacket::new_unchecked(&mut self.buffer.as_mut()[field::CREDIT])
    }
}

/// The decoded transmitter's hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemuHelloRepr {
    /// The module it sends.
    pub module: u16,
    /// Where it wants ring credits written, if it follows them.
    pub credit: Option<RegionRepr>,
}

impl RemuHelloRepr {
    /// Parses a hello.
    pub fn parse<T: AsRef<[u8]>>(packet: &RemuHelloPacket<T>) -> Result<RemuHelloRepr> {
        packet.check_len()?;
        let credit = match packet.has_credit() {
            true => Some(RegionRepr::parse(&packet.credit())?),
            false => None,
        };
        Ok(RemuHelloRepr {
            module: packet.module(),
            credit,
        })
    }

    /// The hello's length: [`HELLO_LEN`] or [`HELLO_CREDIT_LEN`].
    pub fn buffer_len(&self) -> usize {
        match self.credit {
            Some(_) => HELLO_CREDIT_LEN,
            None => HELLO_LEN,
        }
    }

    /// Writes the hello. Panics if the buffer is shorter than [`buffer_len`](Self::buffer_len).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut RemuHelloPacket<T>) {
        packet.set_magic();
        packet.set_module(self.module);
        if let Some(c) = &self.credit {
            c.emit(&mut packet.credit_mut());
        }
    }

    /// The hello's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0; self.buffer_len()];
        self.emit(&mut RemuHelloPacket::new_unchecked(&mut b[..]));
        b
    }
}

crate::view::fixed_view! {
    /// A read/write view of a receiver's announcement at the start of a buffer.
    AnnouncePacket, ANNOUNCE_LEN
}

impl<T: AsRef<[u8]>> AnnouncePacket<T> {
    /// The ring's region.
    pub fn ring(&self) -> RegionPacket<&[u8]> {
        RegionPacket::new_unchecked(&self.buffer.as_ref()[field::RING])
    }

    /// Modules per frame slot.
    pub fn modules(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::MODULES])
    }

    /// Frames per stack.
    pub fn bunch(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::BUNCH])
    }

    /// Stack buffers in the ring.
    pub fn stacks(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::STACKS])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AnnouncePacket<T> {
    /// The ring's region, to write.
    pub fn ring_mut(&mut self) -> RegionPacket<&mut [u8]> {
        RegionPacket::new_unchecked(&mut self.buffer.as_mut()[field::RING])
    }

    /// Sets the modules per frame slot.
    pub fn set_modules(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::MODULES], v);
    }

    /// Sets the frames per stack.
    pub fn set_bunch(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::BUNCH], v);
    }

    /// Sets the stack buffers.
    pub fn set_stacks(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::STACKS], v);
    }
}

/// The decoded receiver's announcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AnnounceRepr {
    /// The ring's region.
    pub ring: RegionRepr,
    /// Modules per frame slot.
    pub modules: u32,
    /// Frames per stack.
    pub bunch: u32,
    /// Stack buffers in the ring.
    pub stacks: u32,
}

impl AnnounceRepr {
    /// Parses an announcement.
    pub fn parse<T: AsRef<[u8]>>(packet: &AnnouncePacket<T>) -> Result<AnnounceRepr> {
        packet.check_len()?;
        Ok(AnnounceRepr {
            ring: RegionRepr::parse(&packet.ring())?,
            modules: packet.modules(),
            bunch: packet.bunch(),
            stacks: packet.stacks(),
        })
    }

    /// The announcement's length, [`ANNOUNCE_LEN`].
    pub fn buffer_len(&self) -> usize {
        ANNOUNCE_LEN
    }

    /// Writes the announcement. Panics if the buffer is shorter than [`ANNOUNCE_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut AnnouncePacket<T>) {
        self.ring.emit(&mut packet.ring_mut());
        packet.set_modules(self.modules);
        packet.set_bunch(self.bunch);
        packet.set_stacks(self.stacks);
    }

    /// The announcement's bytes.
    pub fn to_bytes(&self) -> [u8; ANNOUNCE_LEN] {
        let mut b = [0; ANNOUNCE_LEN];
        self.emit(&mut AnnouncePacket::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // As remora-daq's `link::Hello::encode` / `Announce::encode` wrote them before this codec.
    static HELLO_PLAIN: [u8; 6] = *b"REMU\x02\x01";
    static HELLO_CREDIT: [u8; 26] = [
        0x52, 0x45, 0x4d, 0x55, 0x03, 0x00, 0x00, 0x10, 0x00, 0x00, 0xff, 0x7f, 0x00, 0x00, 0x08,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x03, 0x02, 0x01,
    ];
    /// A 2-module ring of 3 stacks of 4 frames (0x1800000 bytes) at 0x7f1234560000, rkey 0xcafe.
    static ANNOUNCE: [u8; 32] = [
        0x00, 0x00, 0x56, 0x34, 0x12, 0x7f, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00,
        0x00, 0xfe, 0xca, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x03, 0x00,
        0x00, 0x00,
    ];
    const CREDIT: RegionRepr = RegionRepr {
        addr: 0x7fff_0000_1000,
        len: 8,
        rkey: 0x0102_0304,
    };
    const ANNOUNCE_REPR: AnnounceRepr = AnnounceRepr {
        ring: RegionRepr {
            addr: 0x7f12_3456_0000,
            len: 0x180_0000,
            rkey: 0xcafe,
        },
        modules: 2,
        bunch: 4,
        stacks: 3,
    };

    fn hello(b: &[u8]) -> Result<RemuHelloRepr> {
        RemuHelloRepr::parse(&RemuHelloPacket::new_unchecked(b))
    }

    #[test]
    fn golden_hellos() {
        let plain = RemuHelloRepr {
            module: 0x0102,
            credit: None,
        };
        let credit = RemuHelloRepr {
            module: 3,
            credit: Some(CREDIT),
        };
        assert_eq!(hello(&HELLO_PLAIN), Ok(plain));
        assert_eq!(hello(&HELLO_CREDIT), Ok(credit));
        assert_eq!(plain.to_bytes(), HELLO_PLAIN);
        let mut buf = [0xa5u8; 26];
        credit.emit(&mut RemuHelloPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, HELLO_CREDIT);
        let p = RemuHelloPacket::new_checked(&HELLO_CREDIT[..]).unwrap();
        assert_eq!(
            (p.module(), p.has_credit(), p.credit().rkey()),
            (3, true, 0x0102_0304)
        );
    }

    #[test]
    fn strange_hellos_are_refused() {
        assert!(matches!(
            hello(b"REMX\x00\x00"),
            Err(Error::BadMagic { .. })
        ));
        assert_eq!(hello(b"REM"), Err(Error::Truncated { need: 6, have: 3 }));
        assert_eq!(
            hello(&HELLO_CREDIT[..20]),
            Err(Error::Truncated { need: 26, have: 20 })
        );
        let mut longer = HELLO_CREDIT.to_vec();
        longer.push(0xee);
        assert_eq!(hello(&longer).map(|h| h.credit), Ok(Some(CREDIT)));
    }

    #[test]
    fn golden_announcement() {
        let p = AnnouncePacket::new_checked(&ANNOUNCE[..]).unwrap();
        assert_eq!((p.modules(), p.bunch(), p.stacks()), (2, 4, 3));
        assert_eq!(p.ring().len(), 0x180_0000);
        assert_eq!(AnnounceRepr::parse(&p), Ok(ANNOUNCE_REPR));
        let mut buf = [0xa5u8; 32];
        ANNOUNCE_REPR.emit(&mut AnnouncePacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, ANNOUNCE);
        assert_eq!(ANNOUNCE_REPR.to_bytes(), ANNOUNCE);
        assert_eq!(
            AnnounceRepr::parse(&AnnouncePacket::new_unchecked(&ANNOUNCE[..24])),
            Err(Error::Truncated { need: 32, have: 24 })
        );
    }
}
