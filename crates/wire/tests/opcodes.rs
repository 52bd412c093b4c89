//! Every RC and UC opcode survives repr -> bytes -> repr; UC READ and ACK codes are rejected.

mod common;

use common::{emit_vec, sample_repr};
use remora_wire::{icrc, Endpoints, Error, Op, Opcode, Repr, Service};

fn endpoints() -> Endpoints {
    Endpoints::new(
        "192.0.2.1:49170".parse().unwrap(),
        "192.0.2.2:4791".parse().unwrap(),
    )
}

#[test]
fn every_opcode_round_trips() {
    let mut seen = 0;
    for opcode in Opcode::all() {
        for payload_len in [0usize, 1, 2, 3, 4, 5, 255, 256, 4096] {
            let repr = sample_repr(opcode, payload_len);
            repr.validate().unwrap();
            let payload: Vec<u8> = (0..repr.payload_len).map(|i| i as u8 ^ 0x5a).collect();
            let mut bytes = emit_vec(&repr, &payload);
            assert_eq!(bytes[0], opcode.to_u8());
            assert_eq!(bytes.len() % 4, 0);
            icrc::seal(&endpoints(), &mut bytes);
            let (parsed, got) = Repr::parse(&bytes).unwrap_or_else(|e| panic!("{opcode}: {e}"));
            assert_eq!(parsed, repr, "{opcode} with {payload_len} bytes");
            assert_eq!(got, &payload[..]);
            icrc::check(&endpoints(), &bytes).unwrap();
        }
        seen += 1;
    }
    assert_eq!(seen, 18 + 12);
}

#[test]
fn uc_read_and_ack_codes_are_rejected() {
    // UC base 0x20 plus READ Request .. ACK (0x0C..=0x11).
    for b in 0x2Cu8..=0x31 {
        assert_eq!(Opcode::from_u8(b), Err(Error::UnknownOpcode(b)));
        // A packet that is otherwise a well-formed RC packet with the same low bits.
        let rc = Opcode::from_u8(b - 0x20).unwrap();
        let mut bytes = emit_vec(&sample_repr(rc, 0), &[]);
        assert!(Repr::parse(&bytes).is_ok());
        bytes[0] = b;
        assert_eq!(Repr::parse(&bytes), Err(Error::UnknownOpcode(b)));
    }
    for op in [Op::ReadRequest, Op::ReadResponseOnly, Op::Ack] {
        assert!(Opcode::new(Service::Uc, op).is_err());
        assert!(Opcode::new(Service::Rc, op).is_ok());
    }
}

#[test]
fn opcode_bytes_match_fabric_md() {
    let expect = [
        (Op::SendFirst, 0x00),
        (Op::SendMiddle, 0x01),
        (Op::SendLast, 0x02),
        (Op::SendLastImm, 0x03),
        (Op::SendOnly, 0x04),
        (Op::SendOnlyImm, 0x05),
        (Op::WriteFirst, 0x06),
        (Op::WriteMiddle, 0x07),
        (Op::WriteLast, 0x08),
        (Op::WriteLastImm, 0x09),
        (Op::WriteOnly, 0x0A),
        (Op::WriteOnlyImm, 0x0B),
        (Op::ReadRequest, 0x0C),
        (Op::ReadResponseFirst, 0x0D),
        (Op::ReadResponseMiddle, 0x0E),
        (Op::ReadResponseLast, 0x0F),
        (Op::ReadResponseOnly, 0x10),
        (Op::Ack, 0x11),
    ];
    for (op, code) in expect {
        assert_eq!(Opcode::new(Service::Rc, op).unwrap().to_u8(), code);
        if code <= 0x0B {
            assert_eq!(Opcode::new(Service::Uc, op).unwrap().to_u8(), 0x20 + code);
        }
    }
}
