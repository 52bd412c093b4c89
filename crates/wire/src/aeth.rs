//! ACK Extended Transport Header (4 bytes): syndrome and message sequence number, on ACKs and on
//! READ Response First/Last/Only.
//!
//! ```text
//!  0                         1-3
//! +-+-----+---------+       +---------------+
//! |0| type| value   |       | MSN (24 bits) |
//! +-+-----+---------+       +---------------+
//! ```
//! Type 0 is an ACK (value = credit count), 1 an RNR NAK (value = timer code), 3 a NAK (value =
//! NAK code). Type 2, bit 7 and NAK codes above 4 are reserved and rejected.

use crate::bth::{get_u24, set_u24};
use crate::{Error, Result, AETH_LEN};

mod field {
    use core::ops::Range;
    pub const SYNDROME: usize = 0;
    pub const MSN: Range<usize> = 1..4;
}

/// Code of a NAK: why the responder refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// Syndrome 0x60: a PSN arrived out of sequence.
    PsnSequenceError,
    /// Syndrome 0x61: malformed or unsupported request.
    InvalidRequest,
    /// Syndrome 0x62: rkey, bounds or rights check failed.
    RemoteAccessError,
    /// Syndrome 0x63: the responder could not complete the request.
    RemoteOperationalError,
    /// Syndrome 0x64: invalid RD request.
    InvalidRdRequest,
}

impl NakCode {
    /// Every NAK code.
    pub const ALL: [NakCode; 5] = [
        NakCode::PsnSequenceError,
        NakCode::InvalidRequest,
        NakCode::RemoteAccessError,
        NakCode::RemoteOperationalError,
        NakCode::InvalidRdRequest,
    ];
}

/// The AETH syndrome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with an end-to-end credit count (5 bits; 31 = invalid credits).
    Ack {
        /// Credit count code.
        credits: u8,
    },
    /// Receiver not ready: retry after the encoded timer (5 bits).
    RnrNak {
        /// RNR timer code.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

const TYPE_ACK: u8 = 0x00;
const TYPE_RNR: u8 = 0x20;
const TYPE_NAK: u8 = 0x60;
const VALUE: u8 = 0x1F;

impl Syndrome {
    /// Decodes a syndrome byte; reserved values are an error.
    pub fn from_u8(b: u8) -> Result<Syndrome> {
        let v = b & VALUE;
        match b & !VALUE {
            TYPE_ACK => Ok(Syndrome::Ack { credits: v }),
            TYPE_RNR => Ok(Syndrome::RnrNak { timer: v }),
            TYPE_NAK => NakCode::ALL
                .get(usize::from(v))
                .map(|&c| Syndrome::Nak(c))
                .ok_or(Error::UnknownSyndrome(b)),
            _ => Err(Error::UnknownSyndrome(b)),
        }
    }

    /// Encodes the syndrome byte (credit and timer codes truncated to 5 bits).
    pub fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => TYPE_ACK | (credits & VALUE),
            Syndrome::RnrNak { timer } => TYPE_RNR | (timer & VALUE),
            Syndrome::Nak(code) => TYPE_NAK | code as u8,
        }
    }
}

crate::view::fixed_view! {
    /// A read/write view of an AETH at the start of a buffer.
    Packet, crate::AETH_LEN
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The raw syndrome byte.
    pub fn syndrome_raw(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }

    /// The message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        get_u24(&self.buffer.as_ref()[field::MSN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the raw syndrome byte.
    pub fn set_syndrome_raw(&mut self, v: u8) {
        self.buffer.as_mut()[field::SYNDROME] = v;
    }

    /// Sets the message sequence number (low 24 bits of `v`).
    pub fn set_msn(&mut self, v: u32) {
        set_u24(&mut self.buffer.as_mut()[field::MSN], v);
    }
}

/// The decoded fields of an AETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// What the responder reports.
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits): messages the responder has completed.
    pub msn: u32,
}

impl AethRepr {
    /// Parses an AETH; reserved syndromes are an error.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<AethRepr> {
        packet.check_len()?;
        Ok(AethRepr {
            syndrome: Syndrome::from_u8(packet.syndrome_raw())?,
            msn: packet.msn(),
        })
    }

    /// The header length, [`AETH_LEN`].
    pub fn buffer_len(&self) -> usize {
        AETH_LEN
    }

    /// Writes the AETH (MSN truncated to 24 bits). Panics if the buffer is shorter than
    /// [`AETH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_syndrome_raw(self.syndrome.to_u8());
        packet.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 4] = [0x62, 0x01, 0x02, 0x03];
    const REPR: AethRepr = AethRepr {
        syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
        msn: 0x01_0203,
    };

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.syndrome_raw(), 0x62);
        assert_eq!(p.msn(), 0x01_0203);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 4];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_syndrome_raw(0x62);
        p.set_msn(0x01_0203);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(
            AethRepr::parse(&Packet::new_unchecked(&BYTES[..])),
            Ok(REPR)
        );
    }

    #[test]
    fn emit() {
        let mut buf = [0xa5u8; 4];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn syndrome_table() {
        assert_eq!(Syndrome::from_u8(0x00), Ok(Syndrome::Ack { credits: 0 }));
        assert_eq!(Syndrome::from_u8(0x1F), Ok(Syndrome::Ack { credits: 31 }));
        assert_eq!(Syndrome::from_u8(0x20), Ok(Syndrome::RnrNak { timer: 0 }));
        assert_eq!(Syndrome::from_u8(0x3F), Ok(Syndrome::RnrNak { timer: 31 }));
        let naks = [0x60, 0x61, 0x62, 0x63, 0x64];
        for (b, code) in naks.into_iter().zip(NakCode::ALL) {
            assert_eq!(Syndrome::from_u8(b), Ok(Syndrome::Nak(code)));
            assert_eq!(Syndrome::Nak(code).to_u8(), b);
        }
    }

    #[test]
    fn every_syndrome_byte_round_trips_or_is_rejected() {
        for b in 0..=255u8 {
            let valid = b <= 0x3F || (0x60..=0x64).contains(&b);
            match Syndrome::from_u8(b) {
                Ok(s) => {
                    assert!(valid, "0x{b:02x} accepted");
                    assert_eq!(s.to_u8(), b);
                }
                Err(e) => {
                    assert!(!valid, "0x{b:02x} rejected");
                    assert_eq!(e, Error::UnknownSyndrome(b));
                }
            }
        }
    }
}
