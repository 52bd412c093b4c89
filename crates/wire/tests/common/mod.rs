//! Helpers shared by the integration tests: building a consistent `Repr` for any opcode.
#![allow(dead_code)] // each test binary uses a different subset

use remora_wire::{AethRepr, BthRepr, NakCode, Opcode, Psn, Repr, RethRepr, Syndrome, ICRC_LEN};

/// A repr for `opcode` with every field the opcode carries set to a distinctive value.
pub fn sample_repr(opcode: Opcode, payload_len: usize) -> Repr {
    let payload_len = if opcode.has_payload() { payload_len } else { 0 };
    Repr {
        bth: BthRepr {
            opcode,
            solicited: opcode.is_last(),
            mig_req: true,
            pad_count: remora_wire::packet::pad_len(payload_len) as u8,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x00_0012 + u32::from(opcode.to_u8()),
            ack_req: opcode.is_last(),
            psn: Psn::new(0xFF_FFF0 + u32::from(opcode.to_u8())),
        },
        reth: opcode.has_reth().then_some(RethRepr {
            va: 0x7f00_0000_1000 + u64::from(opcode.to_u8()),
            rkey: 0x1234_5678,
            len: 4096,
        }),
        immdt: opcode.has_immdt().then_some(0xdead_beef),
        aeth: opcode.has_aeth().then_some(AethRepr {
            syndrome: if opcode.op == remora_wire::Op::Ack {
                Syndrome::Nak(NakCode::RemoteAccessError)
            } else {
                Syndrome::Ack { credits: 31 }
            },
            msn: 0x00_0042,
        }),
        payload_len,
    }
}

/// Emits `repr` with `payload` into a fresh buffer.
pub fn emit_vec(repr: &Repr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0xa5; repr.buffer_len()];
    assert_eq!(repr.emit(&mut buf, payload), buf.len());
    assert!(buf.len() >= repr.header_len() + ICRC_LEN);
    buf
}
