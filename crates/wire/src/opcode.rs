//! BTH opcodes of the RC and UC services.
//!
//! The opcode byte is a service base (RC 0x00, UC 0x20) plus an operation code. UC defines only
//! SEND and RDMA WRITE; READ and ACK exist only on RC.

use crate::{Error, Result, AETH_LEN, BTH_LEN, IMMDT_LEN, RETH_LEN};

/// Transport service of a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Service {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
}

impl Service {
    /// Every service, in opcode order.
    pub const ALL: [Service; 2] = [Service::Rc, Service::Uc];

    fn base(self) -> u8 {
        match self {
            Service::Rc => 0x00,
            Service::Uc => 0x20,
        }
    }
}

/// Operation within a service; the packet's position in its message is part of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the names are the IBTA opcode names
pub enum Op {
    SendFirst,
    SendMiddle,
    SendLast,
    SendLastImm,
    SendOnly,
    SendOnlyImm,
    WriteFirst,
    WriteMiddle,
    WriteLast,
    WriteLastImm,
    WriteOnly,
    WriteOnlyImm,
    ReadRequest,
    ReadResponseFirst,
    ReadResponseMiddle,
    ReadResponseLast,
    ReadResponseOnly,
    Ack,
}

impl Op {
    /// Every operation, in opcode order (the index is the low opcode bits).
    pub const ALL: [Op; 18] = [
        Op::SendFirst,
        Op::SendMiddle,
        Op::SendLast,
        Op::SendLastImm,
        Op::SendOnly,
        Op::SendOnlyImm,
        Op::WriteFirst,
        Op::WriteMiddle,
        Op::WriteLast,
        Op::WriteLastImm,
        Op::WriteOnly,
        Op::WriteOnlyImm,
        Op::ReadRequest,
        Op::ReadResponseFirst,
        Op::ReadResponseMiddle,
        Op::ReadResponseLast,
        Op::ReadResponseOnly,
        Op::Ack,
    ];

    /// The low bits of the opcode byte; `ALL` is ordered so this is the index.
    fn code(self) -> u8 {
        self as u8
    }

    /// Whether the service defines this operation.
    fn in_service(self, service: Service) -> bool {
        service == Service::Rc || self.code() <= Op::WriteOnlyImm.code()
    }
}

/// A BTH opcode: a service and an operation that the service defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Opcode {
    /// The transport service.
    pub service: Service,
    /// The operation.
    pub op: Op,
}

impl Opcode {
    /// Combines a service and an operation; UC READ and ACK are rejected.
    pub fn new(service: Service, op: Op) -> Result<Opcode> {
        if op.in_service(service) {
            Ok(Opcode { service, op })
        } else {
            Err(Error::OpNotInService { service, op })
        }
    }

    /// Decodes an opcode byte; anything but a known RC or UC opcode is an error.
    pub fn from_u8(b: u8) -> Result<Opcode> {
        let service = match b & 0xE0 {
            0x00 => Service::Rc,
            0x20 => Service::Uc,
            _ => return Err(Error::UnknownOpcode(b)),
        };
        let op = *Op::ALL
            .get(usize::from(b & 0x1F))
            .ok_or(Error::UnknownOpcode(b))?;
        Opcode::new(service, op).map_err(|_| Error::UnknownOpcode(b))
    }

    /// Encodes the opcode byte.
    pub fn to_u8(self) -> u8 {
        self.service.base() | self.op.code()
    }

    /// Every opcode of both services (18 RC and 12 UC).
    pub fn all() -> impl Iterator<Item = Opcode> {
        Service::ALL.into_iter().flat_map(|s| {
            Op::ALL
                .into_iter()
                .filter_map(move |op| Opcode::new(s, op).ok())
        })
    }

    /// Whether a RETH follows the BTH (WRITE First/Only and READ Request).
    pub fn has_reth(self) -> bool {
        matches!(
            self.op,
            Op::WriteFirst | Op::WriteOnly | Op::WriteOnlyImm | Op::ReadRequest
        )
    }

    /// Whether an ImmDt header is present (SEND and WRITE Last/Only with immediate).
    pub fn has_immdt(self) -> bool {
        matches!(
            self.op,
            Op::SendLastImm | Op::SendOnlyImm | Op::WriteLastImm | Op::WriteOnlyImm
        )
    }

    /// Whether an AETH follows the BTH (READ Response First/Last/Only and ACK).
    pub fn has_aeth(self) -> bool {
        matches!(
            self.op,
            Op::ReadResponseFirst | Op::ReadResponseLast | Op::ReadResponseOnly | Op::Ack
        )
    }

    /// Whether the packet may carry payload (everything but READ Request and ACK).
    pub fn has_payload(self) -> bool {
        !matches!(self.op, Op::ReadRequest | Op::Ack)
    }

    /// Whether the packet starts a message (First or Only; a READ request and an ACK stand alone).
    pub fn is_first(self) -> bool {
        matches!(
            self.op,
            Op::SendFirst
                | Op::SendOnly
                | Op::SendOnlyImm
                | Op::WriteFirst
                | Op::WriteOnly
                | Op::WriteOnlyImm
                | Op::ReadRequest
                | Op::ReadResponseFirst
                | Op::ReadResponseOnly
                | Op::Ack
        )
    }

    /// Whether the packet ends a message (Last or Only; a READ request and an ACK stand alone).
    pub fn is_last(self) -> bool {
        matches!(
            self.op,
            Op::SendLast
                | Op::SendLastImm
                | Op::SendOnly
                | Op::SendOnlyImm
                | Op::WriteLast
                | Op::WriteLastImm
                | Op::WriteOnly
                | Op::WriteOnlyImm
                | Op::ReadRequest
                | Op::ReadResponseLast
                | Op::ReadResponseOnly
                | Op::Ack
        )
    }

    /// Length of the BTH and the extension headers this opcode carries.
    pub fn header_len(self) -> usize {
        BTH_LEN
            + if self.has_reth() { RETH_LEN } else { 0 }
            + if self.has_immdt() { IMMDT_LEN } else { 0 }
            + if self.has_aeth() { AETH_LEN } else { 0 }
    }
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{:?} {:?} (0x{:02x})",
            self.service,
            self.op,
            self.to_u8()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_ibta_table() {
        let rc = |op| Opcode::new(Service::Rc, op).unwrap().to_u8();
        let uc = |op| Opcode::new(Service::Uc, op).unwrap().to_u8();
        assert_eq!(rc(Op::SendFirst), 0x00);
        assert_eq!(rc(Op::SendLastImm), 0x03);
        assert_eq!(rc(Op::SendOnlyImm), 0x05);
        assert_eq!(rc(Op::WriteFirst), 0x06);
        assert_eq!(rc(Op::WriteOnly), 0x0A);
        assert_eq!(rc(Op::WriteOnlyImm), 0x0B);
        assert_eq!(rc(Op::ReadRequest), 0x0C);
        assert_eq!(rc(Op::ReadResponseFirst), 0x0D);
        assert_eq!(rc(Op::ReadResponseMiddle), 0x0E);
        assert_eq!(rc(Op::ReadResponseLast), 0x0F);
        assert_eq!(rc(Op::ReadResponseOnly), 0x10);
        assert_eq!(rc(Op::Ack), 0x11);
        assert_eq!(uc(Op::SendFirst), 0x20);
        assert_eq!(uc(Op::SendOnly), 0x24);
        assert_eq!(uc(Op::WriteOnlyImm), 0x2B);
    }

    #[test]
    fn all_opcodes_round_trip_through_the_byte() {
        let all: Vec<_> = Opcode::all().collect();
        assert_eq!(all.len(), 30);
        for oc in all {
            assert_eq!(Opcode::from_u8(oc.to_u8()), Ok(oc));
        }
    }

    #[test]
    fn uc_read_and_ack_are_rejected() {
        for op in [
            Op::ReadRequest,
            Op::ReadResponseFirst,
            Op::ReadResponseMiddle,
            Op::ReadResponseLast,
            Op::ReadResponseOnly,
            Op::Ack,
        ] {
            assert_eq!(
                Opcode::new(Service::Uc, op),
                Err(Error::OpNotInService {
                    service: Service::Uc,
                    op
                })
            );
        }
        for b in 0x2C..=0x31 {
            assert_eq!(Opcode::from_u8(b), Err(Error::UnknownOpcode(b)));
        }
    }

    #[test]
    fn every_other_byte_is_unknown() {
        let known: Vec<u8> = Opcode::all().map(Opcode::to_u8).collect();
        for b in 0..=255u8 {
            if !known.contains(&b) {
                assert_eq!(
                    Opcode::from_u8(b),
                    Err(Error::UnknownOpcode(b)),
                    "0x{b:02x}"
                );
            }
        }
    }

    #[test]
    fn header_lengths() {
        let rc = |op| Opcode::new(Service::Rc, op).unwrap();
        assert_eq!(rc(Op::SendFirst).header_len(), 12);
        assert_eq!(rc(Op::SendOnlyImm).header_len(), 16);
        assert_eq!(rc(Op::WriteFirst).header_len(), 28);
        assert_eq!(rc(Op::WriteMiddle).header_len(), 12);
        assert_eq!(rc(Op::WriteLastImm).header_len(), 16);
        assert_eq!(rc(Op::WriteOnlyImm).header_len(), 32);
        assert_eq!(rc(Op::ReadRequest).header_len(), 28);
        assert_eq!(rc(Op::ReadResponseMiddle).header_len(), 12);
        assert_eq!(rc(Op::ReadResponseOnly).header_len(), 16);
        assert_eq!(rc(Op::Ack).header_len(), 16);
        assert!(!rc(Op::ReadRequest).has_payload());
        assert!(!rc(Op::Ack).has_payload());
        assert!(rc(Op::ReadResponseMiddle).has_payload());
    }

    #[test]
    fn first_and_last() {
        let rc = |op| Opcode::new(Service::Rc, op).unwrap();
        assert!(rc(Op::WriteFirst).is_first() && !rc(Op::WriteFirst).is_last());
        assert!(!rc(Op::WriteMiddle).is_first() && !rc(Op::WriteMiddle).is_last());
        assert!(!rc(Op::WriteLastImm).is_first() && rc(Op::WriteLastImm).is_last());
        assert!(rc(Op::SendOnlyImm).is_first() && rc(Op::SendOnlyImm).is_last());
        assert!(!rc(Op::ReadResponseMiddle).is_first());
    }
}
