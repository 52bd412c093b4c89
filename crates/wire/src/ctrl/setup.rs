//! The connection-setup hello of remora-fabric (48 bytes, little-endian, then the private data):
//! what each side of a queue pair sends over the out-of-band TCP exchange.
//!
//! ```text
//!  0-3     4     5      6     7   8-11  12-15  16-19      20-21     22-27  28-43       44-47     48-
//! +------+-----+-----+------+---+-----+------+----------+---------+------+-----------+---------+---------+
//! |"RMRA"| ver |tport|qptype| 0 | MTU | QPN  |first PSN | udp port|  0   | rendezvous|priv len | private |
//! +------+-----+-----+------+---+-----+------+----------+---------+------+-----------+---------+---------+
//! ```
//! The version is [`VERSION`]; the transport code is the fabric's (1 udp, 2 shm, 3 tcp) and is
//! not checked here; the queue pair type is 0 for RC and 1 for UC. QPN and PSN are 24-bit: the
//! high byte is written as given and ignored on receive, as are the reserved bytes. The rendezvous
//! is the shm transport's (zeros otherwise). The private data (at most [`MAX_PRIVATE`] bytes) is
//! the application's. A stream reader reads [`HEADER_LEN`] bytes, learns the whole length from
//! [`message_len`], then reads the rest.

use crate::view::{le_u16, le_u32, set_le_u16, set_le_u32};
use crate::{Error, Psn, Result, Service};

/// The first four bytes.
pub const MAGIC: [u8; 4] = *b"RMRA";
/// The version this crate reads and writes (3: udp queue pairs end the setup with a READY byte).
pub const VERSION: u8 = 3;
/// Length of the fixed part, before the private data.
pub const HEADER_LEN: usize = 48;
/// Largest private data either side may send.
pub const MAX_PRIVATE: usize = 64 << 10;
/// Length of the shm rendezvous.
pub const RENDEZVOUS_LEN: usize = 16;

const FRAME: &str = "remora fabric setup hello";

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const TRANSPORT: usize = 5;
    pub const QP_TYPE: usize = 6;
    pub const RESERVED_A: usize = 7;
    pub const MTU: Range<usize> = 8..12;
    pub const QPN: Range<usize> = 12..16;
    pub const PSN: Range<usize> = 16..20;
    pub const UDP_PORT: Range<usize> = 20..22;
    pub const RESERVED_B: Range<usize> = 22..28;
    pub const RENDEZVOUS: Range<usize> = 28..44;
    pub const PRIVATE_LEN: Range<usize> = 44..48;
}

crate::view::view! {
    /// A read/write view of a setup hello (fixed part and private data) at the start of a buffer.
    SetupPacket
}

/// The whole length of the hello whose fixed part starts `header`, after checking that part.
pub fn message_len(header: &[u8]) -> Result<usize> {
    let p = SetupPacket::new_unchecked(header);
    p.check_header()?;
    Ok(p.total_len())
}

impl<T: AsRef<[u8]>> SetupPacket<T> {
    /// Checks the fixed part: its length, the magic, the version and the private length bound.
    pub fn check_header(&self) -> Result<()> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(Error::Truncated {
                need: HEADER_LEN,
                have,
            });
        }
        if self.magic() != MAGIC {
            return Err(Error::BadMagic {
                frame: FRAME,
                magic: "RMRA",
                found: self.magic(),
            });
        }
        if self.version() != VERSION {
            return Err(Error::UnsupportedVersion {
                frame: FRAME,
                found: self.version().into(),
                supported: VERSION.into(),
            });
        }
        if self.private_len() as usize > MAX_PRIVATE {
            return Err(Error::TooLarge {
                field: "private data length",
                value: self.private_len().into(),
                max: MAX_PRIVATE as u64,
            });
        }
        Ok(())
    }

    /// Checks the fixed part and that the buffer holds the private data it announces.
    pub fn check_len(&self) -> Result<()> {
        self.check_header()?;
        let (need, have) = (self.total_len(), self.buffer.as_ref().len());
        if have < need {
            return Err(Error::Truncated { need, have });
        }
        Ok(())
    }

    /// [`HEADER_LEN`] plus the private length.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.private_len() as usize
    }

    /// The first four bytes.
    pub fn magic(&self) -> [u8; 4] {
        let mut m = [0; 4];
        m.copy_from_slice(&self.buffer.as_ref()[field::MAGIC]);
        m
    }

    /// Setup version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// Transport code.
    pub fn transport(&self) -> u8 {
        self.buffer.as_ref()[field::TRANSPORT]
    }

    /// Queue pair type code (0 RC, 1 UC).
    pub fn qp_type(&self) -> u8 {
        self.buffer.as_ref()[field::QP_TYPE]
    }

    /// Path MTU the sender offers.
    pub fn mtu(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::MTU])
    }

    /// The sender's queue pair number, as written (32 bits).
    pub fn qpn(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::QPN])
    }

    /// The sender's first PSN, as written (32 bits).
    pub fn psn(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::PSN])
    }

    /// The sender's udp receive port (0 off udp).
    pub fn udp_port(&self) -> u16 {
        le_u16(&self.buffer.as_ref()[field::UDP_PORT])
    }

    /// The shm rendezvous.
    pub fn rendezvous(&self) -> [u8; RENDEZVOUS_LEN] {
        let mut r = [0; RENDEZVOUS_LEN];
        r.copy_from_slice(&self.buffer.as_ref()[field::RENDEZVOUS]);
        r
    }

    /// Length of the private data that follows.
    pub fn private_len(&self) -> u32 {
        le_u32(&self.buffer.as_ref()[field::PRIVATE_LEN])
    }

    /// The private data (panics unless [`check_len`](Self::check_len) passed).
    pub fn private(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SetupPacket<T> {
    /// Writes [`MAGIC`] and the version.
    pub fn set_magic_and_version(&mut self, version: u8) {
        let b = self.buffer.as_mut();
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = version;
    }

    /// Sets the transport code.
    pub fn set_transport(&mut self, v: u8) {
        self.buffer.as_mut()[field::TRANSPORT] = v;
    }

    /// Sets the queue pair type code.
    pub fn set_qp_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::QP_TYPE] = v;
    }

    /// Zeroes the reserved bytes.
    pub fn clear_reserved(&mut self) {
        let b = self.buffer.as_mut();
        b[field::RESERVED_A] = 0;
        b[field::RESERVED_B].fill(0);
    }

    /// Sets the path MTU.
    pub fn set_mtu(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::MTU], v);
    }

    /// Sets the queue pair number.
    pub fn set_qpn(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::QPN], v);
    }

    /// Sets the first PSN.
    pub fn set_psn(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::PSN], v);
    }

    /// Sets the udp port.
    pub fn set_udp_port(&mut self, v: u16) {
        set_le_u16(&mut self.buffer.as_mut()[field::UDP_PORT], v);
    }

    /// Sets the shm rendezvous.
    pub fn set_rendezvous(&mut self, v: &[u8; RENDEZVOUS_LEN]) {
        self.buffer.as_mut()[field::RENDEZVOUS].copy_from_slice(v);
    }

    /// Sets the private length.
    pub fn set_private_len(&mut self, v: u32) {
        set_le_u32(&mut self.buffer.as_mut()[field::PRIVATE_LEN], v);
    }

    /// The private data, to fill (panics where the buffer is shorter than the private length).
    pub fn private_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The decoded fields of a setup hello; the private data stays in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetupRepr {
    /// Transport code (remora-fabric's).
    pub transport: u8,
    /// Queue pair type.
    pub service: Service,
    /// Path MTU the sender offers.
    pub mtu: u32,
    /// The sender's queue pair number (24 bits).
    pub qpn: u32,
    /// The sender's first PSN.
    pub psn: Psn,
    /// The sender's udp receive port (0 off udp).
    pub udp_port: u16,
    /// The shm rendezvous (zeros off shm).
    pub rendezvous: [u8; RENDEZVOUS_LEN],
    /// Bytes of private data.
    pub private_len: usize,
}

impl SetupRepr {
    /// Parses a whole hello (see [`SetupPacket::check_len`]); the private data is
    /// [`SetupPacket::private`]. Rejects an unknown queue pair type.
    pub fn parse<T: AsRef<[u8]>>(packet: &SetupPacket<T>) -> Result<SetupRepr> {
        packet.check_len()?;
        let service = match packet.qp_type() {
            0 => Service::Rc,
            1 => Service::Uc,
            code => {
                return Err(Error::UnknownCode {
                    field: "queue pair type",
                    code,
                })
            }
        };
        Ok(SetupRepr {
            transport: packet.transport(),
            service,
            mtu: packet.mtu(),
            qpn: packet.qpn() & Psn::MASK,
            psn: Psn::new(packet.psn()),
            udp_port: packet.udp_port(),
            rendezvous: packet.rendezvous(),
            private_len: packet.private_len() as usize,
        })
    }

    /// The hello's length: [`HEADER_LEN`] plus the private data.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.private_len
    }

    /// Writes the hello with `private`. Panics if `private` is not `private_len` bytes or the
    /// buffer is shorter than [`buffer_len`](Self::buffer_len); check `private_len` against
    /// [`MAX_PRIVATE`] first, since a peer refuses more.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut SetupPacket<T>, private: &[u8]) {
        assert_eq!(private.len(), self.private_len, "private data length");
        packet.set_magic_and_version(VERSION);
        packet.set_transport(self.transport);
        packet.set_qp_type(match self.service {
            Service::Rc => 0,
            Service::Uc => 1,
        });
        packet.clear_reserved();
        packet.set_mtu(self.mtu);
        packet.set_qpn(self.qpn);
        packet.set_psn(self.psn.value());
        packet.set_udp_port(self.udp_port);
        packet.set_rendezvous(&self.rendezvous);
        packet.set_private_len(self.private_len as u32);
        packet.private_mut().copy_from_slice(private);
    }

    /// The hello's bytes, with `private` (panics as [`emit`](Self::emit) does).
    pub fn to_bytes(&self, private: &[u8]) -> Vec<u8> {
        let mut b = vec![0; self.buffer_len()];
        self.emit(&mut SetupPacket::new_unchecked(&mut b[..]), private);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// shm, UC, MTU 4096, QPN 0x123456, PSN 0xabcdef, port 4791, rendezvous 0x10..=0x1f and
    /// private data "priv", as remora-fabric's `Hello::write` sent it before this codec existed.
    static SHM_UC: [u8; 52] = [
        0x52, 0x4d, 0x52, 0x41, 0x03, 0x02, 0x01, 0x00, 0x00, 0x10, 0x00, 0x00, 0x56, 0x34, 0x12,
        0x00, 0xef, 0xcd, 0xab, 0x00, 0xb7, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11,
        0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x04,
        0x00, 0x00, 0x00, b'p', b'r', b'i', b'v',
    ];
    /// udp, RC, MTU 1024, QPN 0x100, PSN 0, port 0xc001, no private data; same provenance.
    static UDP_RC: [u8; 48] = [
        0x52, 0x4d, 0x52, 0x41, 0x03, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00,
    ];

    fn rendezvous() -> [u8; RENDEZVOUS_LEN] {
        core::array::from_fn(|i| 0x10 + i as u8)
    }

    fn shm_uc() -> SetupRepr {
        SetupRepr {
            transport: 2,
            service: Service::Uc,
            mtu: 4096,
            qpn: 0x12_3456,
            psn: Psn::new(0xab_cdef),
            udp_port: 4791,
            rendezvous: rendezvous(),
            private_len: 4,
        }
    }

    fn udp_rc() -> SetupRepr {
        SetupRepr {
            transport: 1,
            service: Service::Rc,
            mtu: 1024,
            qpn: 0x100,
            psn: Psn::new(0),
            udp_port: 0xc001,
            rendezvous: [0; RENDEZVOUS_LEN],
            private_len: 0,
        }
    }

    #[test]
    fn deconstruct() {
        let p = SetupPacket::new_checked(&SHM_UC[..]).unwrap();
        assert_eq!((p.magic(), p.version()), (MAGIC, VERSION));
        assert_eq!((p.transport(), p.qp_type(), p.mtu()), (2, 1, 4096));
        assert_eq!(
            (p.qpn(), p.psn(), p.udp_port()),
            (0x12_3456, 0xab_cdef, 4791)
        );
        assert_eq!(p.rendezvous(), rendezvous());
        assert_eq!((p.private_len(), p.private()), (4, &b"priv"[..]));
        assert_eq!(message_len(&SHM_UC[..HEADER_LEN]), Ok(52));
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 52];
        let mut p = SetupPacket::new_unchecked(&mut buf[..]);
        p.set_magic_and_version(VERSION);
        p.set_transport(2);
        p.set_qp_type(1);
        p.clear_reserved();
        p.set_mtu(4096);
        p.set_qpn(0x12_3456);
        p.set_psn(0xab_cdef);
        p.set_udp_port(4791);
        p.set_rendezvous(&rendezvous());
        p.set_private_len(4);
        p.private_mut().copy_from_slice(b"priv");
        assert_eq!(buf, SHM_UC);
    }

    #[test]
    fn parse_and_emit_golden_hellos() {
        let p = SetupPacket::new_checked(&SHM_UC[..]).unwrap();
        assert_eq!(SetupRepr::parse(&p), Ok(shm_uc()));
        let mut buf = [0xa5u8; 52];
        shm_uc().emit(&mut SetupPacket::new_unchecked(&mut buf[..]), b"priv");
        assert_eq!(buf, SHM_UC);
        let p = SetupPacket::new_checked(&UDP_RC[..]).unwrap();
        assert_eq!(SetupRepr::parse(&p), Ok(udp_rc()));
        assert_eq!(udp_rc().to_bytes(&[]), UDP_RC);
    }

    #[test]
    fn high_bytes_of_qpn_and_psn_are_ignored() {
        let mut b = UDP_RC;
        b[15] = 0xff;
        b[19] = 0xff;
        let p = SetupPacket::new_checked(&b[..]).unwrap();
        assert_eq!(SetupRepr::parse(&p), Ok(udp_rc()));
    }

    #[test]
    fn strangers_and_bad_fields_are_refused() {
        let mut b = UDP_RC;
        b[0] = b'X';
        assert!(matches!(
            message_len(&b),
            Err(Error::BadMagic {
                found: [b'X', 0x4d, 0x52, 0x41],
                ..
            })
        ));
        let mut b = UDP_RC;
        b[4] = 2;
        assert_eq!(
            message_len(&b),
            Err(Error::UnsupportedVersion {
                frame: FRAME,
                found: 2,
                supported: 3
            })
        );
        let mut b = UDP_RC;
        b[6] = 2;
        let p = SetupPacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            SetupRepr::parse(&p),
            Err(Error::UnknownCode {
                field: "queue pair type",
                code: 2
            })
        );
        let mut b = UDP_RC;
        b[44..48].copy_from_slice(&(MAX_PRIVATE as u32 + 1).to_le_bytes());
        assert!(matches!(message_len(&b), Err(Error::TooLarge { .. })));
    }

    #[test]
    fn short_buffers() {
        assert_eq!(
            message_len(&UDP_RC[..47]),
            Err(Error::Truncated { need: 48, have: 47 })
        );
        assert_eq!(
            SetupPacket::new_checked(&SHM_UC[..51]).err(),
            Some(Error::Truncated { need: 52, have: 51 })
        );
    }
}
