//! Base Transport Header (12 bytes), the first header of every RoCEv2 packet.
//!
//! ```text
//!  0        1                 2-3     4            5-7      8            9-11
//! +--------+--+-+--+----+    +-----+ +-+-+------+ +------+ +-+-------+ +-----+
//! | opcode |SE|M|Pad|TVer|   | PKey| |F|B| resv | |destQP| |A| resv  | | PSN |
//! +--------+--+-+--+----+    +-----+ +-+-+------+ +------+ +-+-------+ +-----+
//! ```
//! Reserved bits are written as zero and ignored on receive.

use crate::{Error, Opcode, Psn, Result, BTH_LEN};

/// Byte ranges and bit masks of the BTH fields.
mod field {
    use core::ops::Range;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const SE: u8 = 0x80;
    pub const MIG: u8 = 0x40;
    pub const PAD_SHIFT: u8 = 4;
    pub const PAD: u8 = 0x30;
    pub const TVER: u8 = 0x0F;
    pub const PKEY: Range<usize> = 2..4;
    pub const CN: usize = 4;
    pub const FECN: u8 = 0x80;
    pub const BECN: u8 = 0x40;
    pub const DEST_QP: Range<usize> = 5..8;
    pub const ACK: usize = 8;
    pub const ACK_REQ: u8 = 0x80;
    pub const PSN: Range<usize> = 9..12;
}

/// Reads a 24-bit big-endian number.
pub(crate) fn get_u24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

/// Writes the low 24 bits of `v` big-endian.
pub(crate) fn set_u24(b: &mut [u8], v: u32) {
    b.copy_from_slice(&v.to_be_bytes()[1..]);
}

crate::view::fixed_view! {
    /// A read/write view of a BTH at the start of a buffer.
    Packet, crate::BTH_LEN
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The raw opcode byte.
    pub fn opcode_raw(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }

    /// The decoded opcode.
    pub fn opcode(&self) -> Result<Opcode> {
        Opcode::from_u8(self.opcode_raw())
    }

    /// Solicited event bit.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::SE != 0
    }

    /// Migration request bit.
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::MIG != 0
    }

    /// Number of pad bytes (0..=3) after the payload.
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] & field::PAD) >> field::PAD_SHIFT
    }

    /// Transport header version (0 for this version of the spec).
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & field::TVER
    }

    /// Partition key.
    pub fn pkey(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PKEY];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Forward explicit congestion notification bit.
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::CN] & field::FECN != 0
    }

    /// Backward explicit congestion notification bit.
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::CN] & field::BECN != 0
    }

    /// Destination queue pair number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        get_u24(&self.buffer.as_ref()[field::DEST_QP])
    }

    /// Acknowledge request bit.
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK] & field::ACK_REQ != 0
    }

    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(get_u24(&self.buffer.as_ref()[field::PSN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_flag(&mut self, byte: usize, mask: u8, on: bool) {
        let b = &mut self.buffer.as_mut()[byte];
        *b = if on { *b | mask } else { *b & !mask };
    }

    /// Sets the raw opcode byte.
    pub fn set_opcode_raw(&mut self, v: u8) {
        self.buffer.as_mut()[field::OPCODE] = v;
    }

    /// Sets the opcode.
    pub fn set_opcode(&mut self, v: Opcode) {
        self.set_opcode_raw(v.to_u8());
    }

    /// Sets the solicited event bit.
    pub fn set_solicited(&mut self, v: bool) {
        self.set_flag(field::FLAGS, field::SE, v);
    }

    /// Sets the migration request bit.
    pub fn set_mig_req(&mut self, v: bool) {
        self.set_flag(field::FLAGS, field::MIG, v);
    }

    /// Sets the pad count (low 2 bits of `v`).
    pub fn set_pad_count(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !field::PAD) | ((v << field::PAD_SHIFT) & field::PAD);
    }

    /// Sets the transport header version (low 4 bits of `v`).
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !field::TVER) | (v & field::TVER);
    }

    /// Sets the partition key.
    pub fn set_pkey(&mut self, v: u16) {
        self.buffer.as_mut()[field::PKEY].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets FECN and BECN and clears the reserved bits of byte 4.
    pub fn set_congestion(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[field::CN] =
            if fecn { field::FECN } else { 0 } | if becn { field::BECN } else { 0 };
    }

    /// Sets the destination QP (low 24 bits of `v`).
    pub fn set_dest_qp(&mut self, v: u32) {
        set_u24(&mut self.buffer.as_mut()[field::DEST_QP], v);
    }

    /// Sets the acknowledge request bit and clears the reserved bits of byte 8.
    pub fn set_ack_req(&mut self, v: bool) {
        self.buffer.as_mut()[field::ACK] = if v { field::ACK_REQ } else { 0 };
    }

    /// Sets the packet sequence number.
    pub fn set_psn(&mut self, v: Psn) {
        set_u24(&mut self.buffer.as_mut()[field::PSN], v.value());
    }
}

/// The decoded fields of a BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event: the responder should raise a completion event.
    pub solicited: bool,
    /// Migration request bit.
    pub mig_req: bool,
    /// Pad bytes after the payload (0..=3).
    pub pad_count: u8,
    /// Partition key (0xFFFF is the default partition).
    pub pkey: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN.
    pub becn: bool,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// The requester asks for an acknowledgement.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// Parses a BTH; rejects short buffers, unknown opcodes and a version other than 0.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<BthRepr> {
        packet.check_len()?;
        let opcode = packet.opcode()?;
        if packet.tver() != 0 {
            return Err(Error::BadVersion(packet.tver()));
        }
        Ok(BthRepr {
            opcode,
            solicited: packet.solicited(),
            mig_req: packet.mig_req(),
            pad_count: packet.pad_count(),
            pkey: packet.pkey(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            dest_qp: packet.dest_qp(),
            ack_req: packet.ack_req(),
            psn: packet.psn(),
        })
    }

    /// The header length, [`BTH_LEN`].
    pub fn buffer_len(&self) -> usize {
        BTH_LEN
    }

    /// Writes every byte of the BTH (TVer 0, reserved bits 0; pad count and QP truncated to
    /// their widths). Panics if the buffer is shorter than [`BTH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_opcode(self.opcode);
        packet.buffer.as_mut()[field::FLAGS] = 0;
        packet.set_solicited(self.solicited);
        packet.set_mig_req(self.mig_req);
        packet.set_pad_count(self.pad_count);
        packet.set_tver(0);
        packet.set_pkey(self.pkey);
        packet.set_congestion(self.fecn, self.becn);
        packet.set_dest_qp(self.dest_qp);
        packet.set_ack_req(self.ack_req);
        packet.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Op, Service};

    /// RC WRITE Only with immediate, SE, pad 3, P_Key 0x8001, FECN, QP 0x123456, AckReq,
    /// PSN 0xABCDEF.
    static BYTES: [u8; 12] = [
        0x0b, 0xb0, 0x80, 0x01, 0x80, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef,
    ];

    fn repr() -> BthRepr {
        BthRepr {
            opcode: Opcode::new(Service::Rc, Op::WriteOnlyImm).unwrap(),
            solicited: true,
            mig_req: false,
            pad_count: 3,
            pkey: 0x8001,
            fecn: true,
            becn: false,
            dest_qp: 0x12_3456,
            ack_req: true,
            psn: Psn::new(0xAB_CDEF),
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.opcode_raw(), 0x0b);
        assert!(p.solicited());
        assert!(!p.mig_req());
        assert_eq!(p.pad_count(), 3);
        assert_eq!(p.tver(), 0);
        assert_eq!(p.pkey(), 0x8001);
        assert!(p.fecn());
        assert!(!p.becn());
        assert_eq!(p.dest_qp(), 0x12_3456);
        assert!(p.ack_req());
        assert_eq!(p.psn(), Psn::new(0xAB_CDEF));
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_opcode_raw(0x0b);
        p.set_solicited(true);
        p.set_mig_req(false);
        p.set_pad_count(3);
        p.set_tver(0);
        p.set_pkey(0x8001);
        p.set_congestion(true, false);
        p.set_dest_qp(0x12_3456);
        p.set_ack_req(true);
        p.set_psn(Psn::new(0xAB_CDEF));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let p = Packet::new_unchecked(&BYTES[..]);
        assert_eq!(BthRepr::parse(&p), Ok(repr()));
    }

    #[test]
    fn emit() {
        let mut buf = [0xa5u8; 12];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn scapy_uc_send_only_header() {
        // The BTH of scapy's UC SEND Only example: M, pad 2, P_Key 0xFFFF, QP 211, PSN 13571856.
        let bytes = [0x24, 0x60, 0xff, 0xff, 0, 0, 0, 211, 0, 0xcf, 0x17, 0x10];
        let r = BthRepr::parse(&Packet::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(r.opcode, Opcode::new(Service::Uc, Op::SendOnly).unwrap());
        assert!(r.mig_req && !r.solicited && !r.ack_req);
        assert_eq!((r.pad_count, r.pkey, r.dest_qp), (2, 0xffff, 211));
        assert_eq!(r.psn.value(), 13_571_856);
    }

    #[test]
    fn rejects_bad_version_short_buffer_and_unknown_opcode() {
        let mut b = BYTES;
        b[1] |= 0x01;
        assert_eq!(
            BthRepr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::BadVersion(1))
        );
        assert_eq!(
            Packet::new_checked(&BYTES[..11]),
            Err(Error::Truncated { need: 12, have: 11 })
        );
        let mut b = BYTES;
        b[0] = 0x81; // CNP
        assert_eq!(
            BthRepr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::UnknownOpcode(0x81))
        );
    }

    #[test]
    fn reserved_bits_are_ignored_on_parse() {
        let mut b = BYTES;
        b[4] |= 0x3f;
        b[8] |= 0x7f;
        assert_eq!(BthRepr::parse(&Packet::new_unchecked(&b[..])), Ok(repr()));
    }
}
