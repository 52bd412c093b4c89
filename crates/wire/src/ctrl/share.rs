//! The shm page server's share announcement (24 bytes, little-endian), appended after the page
//! hello in the setup private data: which of the descriptors the listener hands over holds the
//! served bytes, and what it is.
//!
//! ```text
//!  0-3     4-7    8-11  12-15   16-23
//! +-------+------+-----+-------+--------------+
//! | RSH2  | kind | 0   | index | length (u64) |
//! +-------+------+-----+-------+--------------+
//! ```
//!
//! `kind` 1: a read-only descriptor of the source (a file or a memfd); 2: a pidfd of the process
//! whose memory, at the page hello's segments, is the source.

use crate::view::{le_u32, le_u64, set_le_u32, set_le_u64};
use crate::{Error, Result};

/// Length of a share announcement.
pub const SHARE_LEN: usize = 24;
/// The announcement's first four bytes.
pub const SHARE_MAGIC: &[u8; 4] = b"RSH2";

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const KIND: Range<usize> = 4..8;
    pub const ZERO: Range<usize> = 8..12;
    pub const INDEX: Range<usize> = 12..16;
    pub const LEN: Range<usize> = 16..24;
}

crate::view::fixed_view! {
    /// A read/write view of a share announcement at the start of a buffer.
    SharePacket, SHARE_LEN
}

impl<T: AsRef<[u8]>> SharePacket<T> {
    /// The first four bytes (`RSH2` in an announcement).
    pub fn magic(&self) -> [u8; 4] {
        let mut m = [0; 4];
        m.copy_from_slice(&self.buffer.as_ref()[field::MAGIC]);
        m
    }

    /// The kind code (1 descriptor, 2 process).
    pub fn kind(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::KIND])
    }

    /// Position of the descriptor among those the listener hands over.
    pub fn index(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::INDEX])
    }

    /// Bytes the source holds.
    pub fn len(&self) -> u64 {
        le_u64(&self.buffer.as_ref()[field::LEN])
    }

    /// True when the source is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SharePacket<T> {
    /// Writes the magic and clears the reserved word.
    pub fn set_magic(&mut self) {
        let b = self.buffer.as_mut();
        b[field::MAGIC].copy_from_slice(SHARE_MAGIC);
        b[field::ZERO].fill(0);
    }

    /// Sets the kind code.
    pub fn set_kind(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::KIND], v);
    }

    /// Sets the descriptor's position.
    pub fn set_index(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::INDEX], v);
    }

    /// Sets the source's length.
    pub fn set_len(&mut self, v: u64) {
        set_le_u64(&mut self.buffer.as_mut()[field::LEN], v);
    }
}

/// What the handed-over descriptor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShareKind {
    /// A read-only descriptor of the source (file or memfd).
    Fd = 1,
    /// A pidfd of the process whose memory is the source.
    Process = 2,
}

/// The decoded fields of a share announcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShareRepr {
    /// What the descriptor is.
    pub kind: ShareKind,
    /// Its position among the descriptors the listener hands over.
    pub index: u32,
    /// Bytes the source holds.
    pub len: u64,
}

impl ShareRepr {
    /// Parses an announcement: [`Error::BadMagic`] when the bytes are not one (an older server,
    /// or another transport), [`Error::UnknownCode`] for a kind this side does not know.
    pub fn parse<T: AsRef<[u8]>>(packet: &SharePacket<T>) -> Result<ShareRepr> {
        packet.check_len()?;
        if &packet.magic() != SHARE_MAGIC {
            return Err(Error::BadMagic {
                frame: "share announcement",
                magic: "RSH2",
                found: packet.magic(),
            });
        }
        let kind = match packet.kind() {
            1 => ShareKind::Fd,
            2 => ShareKind::Process,
            k => {
                return Err(Error::UnknownCode {
                    field: "share kind",
                    code: k.min(255) as u8,
                })
            }
        };
        Ok(ShareRepr {
            kind,
            index: packet.index(),
            len: packet.len(),
        })
    }

    /// The announcement's length, [`SHARE_LEN`].
    pub fn buffer_len(&self) -> usize {
        SHARE_LEN
    }

    /// Writes the announcement. Panics if the buffer is shorter than [`SHARE_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut SharePacket<T>) {
        packet.set_magic();
        packet.set_kind(self.kind as u32);
        packet.set_index(self.index);
        packet.set_len(self.len);
    }

    /// The announcement's bytes.
    pub fn to_bytes(&self) -> [u8; SHARE_LEN] {
        let mut b = [0; SHARE_LEN];
        self.emit(&mut SharePacket::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As `remora_lazy`'s `shmmap::Share::emit` wrote it before this codec existed (a memfd
    /// handed over third, 0x1234_5000 bytes).
    static BYTES: [u8; SHARE_LEN] = [
        b'R', b'S', b'H', b'2', 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0x00, 0x50, 0x34, 0x12, 0, 0,
        0, 0,
    ];
    const REPR: ShareRepr = ShareRepr {
        kind: ShareKind::Fd,
        index: 2,
        len: 0x1234_5000,
    };

    #[test]
    fn parse_and_emit() {
        let p = SharePacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!((p.kind(), p.index(), p.len()), (1, 2, 0x1234_5000));
        assert_eq!(ShareRepr::parse(&p), Ok(REPR));
        let mut buf = [0xa5u8; SHARE_LEN];
        REPR.emit(&mut SharePacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(REPR.to_bytes(), BYTES);
        let pid = ShareRepr {
            kind: ShareKind::Process,
            ..REPR
        };
        assert_eq!(
            ShareRepr::parse(&SharePacket::new_unchecked(&pid.to_bytes()[..])),
            Ok(pid)
        );
    }

    #[test]
    fn not_an_announcement_or_an_unknown_kind_is_refused() {
        assert_eq!(
            ShareRepr::parse(&SharePacket::new_unchecked(&BYTES[..23])),
            Err(Error::Truncated { need: 24, have: 23 })
        );
        let mut b = BYTES;
        b[0] = b'X';
        assert!(matches!(
            ShareRepr::parse(&SharePacket::new_unchecked(&b[..])),
            Err(Error::BadMagic { .. })
        ));
        let mut b = BYTES;
        b[4] = 7;
        assert_eq!(
            ShareRepr::parse(&SharePacket::new_unchecked(&b[..])),
            Err(Error::UnknownCode {
                field: "share kind",
                code: 7
            })
        );
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..2000 {
            let b: Vec<u8> = (0..n % 40)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = SharePacket::new_checked(&b[..]).and_then(|p| ShareRepr::parse(&p));
        }
    }
}
