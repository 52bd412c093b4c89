//! A whole RoCEv2 UDP payload: BTH, the extension headers its opcode requires (RETH, then ImmDt;
//! or AETH), the payload, zero pad to a multiple of 4 and the 4-byte ICRC.
//!
//! [`Repr::parse`] never panics. [`Repr::emit`] and [`Repr::emit_headers`] panic only on
//! programming errors: an output buffer shorter than [`Repr::buffer_len`], or (for `emit`) a
//! payload slice whose length is not `payload_len`.

use crate::{
    aeth, bth, immdt, reth, AethRepr, BthRepr, Error, Result, RethRepr, BTH_LEN, ICRC_LEN,
};

/// Pad bytes that follow a payload of `payload_len` bytes.
pub fn pad_len(payload_len: usize) -> usize {
    payload_len.wrapping_neg() & 3
}

/// The decoded headers of one RoCEv2 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repr {
    /// The base transport header. On emit its `pad_count` is ignored and computed.
    pub bth: BthRepr,
    /// RETH, present exactly when `bth.opcode.has_reth()`.
    pub reth: Option<RethRepr>,
    /// Immediate data, present exactly when `bth.opcode.has_immdt()`.
    pub immdt: Option<u32>,
    /// AETH, present exactly when `bth.opcode.has_aeth()`.
    pub aeth: Option<AethRepr>,
    /// Payload bytes (pad and ICRC excluded).
    pub payload_len: usize,
}

impl Repr {
    /// Parses `buf` (the full UDP payload incl. ICRC); returns the repr and the payload slice
    /// (pad and ICRC excluded). Does not verify the ICRC (see [`crate::icrc::check`]).
    ///
    /// Rejects: buffers too short for the headers the opcode requires plus the ICRC, unknown
    /// opcodes, TVer other than 0, unknown AETH syndromes, a length that is not a multiple of 4,
    /// a pad count larger than the bytes after the headers, and payload on READ Request or ACK.
    pub fn parse(buf: &[u8]) -> Result<(Repr, &[u8])> {
        let have = buf.len();
        if have < BTH_LEN + ICRC_LEN {
            return Err(Error::Truncated {
                need: BTH_LEN + ICRC_LEN,
                have,
            });
        }
        let bth = BthRepr::parse(&bth::Packet::new_unchecked(buf))?;
        let opcode = bth.opcode;
        let header_len = opcode.header_len();
        if have < header_len + ICRC_LEN {
            return Err(Error::Truncated {
                need: header_len + ICRC_LEN,
                have,
            });
        }
        if have % 4 != 0 {
            return Err(Error::Unaligned(have));
        }

        let mut off = BTH_LEN;
        let mut reth = None;
        if opcode.has_reth() {
            let r = RethRepr::parse(&reth::Packet::new_unchecked(&buf[off..]))?;
            reth = Some(r);
            off += r.buffer_len();
        }
        let mut imm = None;
        if opcode.has_immdt() {
            imm = Some(immdt::parse(&immdt::Packet::new_unchecked(&buf[off..]))?);
            off += crate::IMMDT_LEN;
        }
        let mut ack = None;
        if opcode.has_aeth() {
            let a = AethRepr::parse(&aeth::Packet::new_unchecked(&buf[off..]))?;
            ack = Some(a);
            off += a.buffer_len();
        }
        debug_assert_eq!(off, header_len);

        let available = have - header_len - ICRC_LEN;
        let pad = usize::from(bth.pad_count);
        if pad > available {
            return Err(Error::BadPad {
                pad: bth.pad_count,
                available,
            });
        }
        if !opcode.has_payload() && available > 0 {
            return Err(Error::UnexpectedPayload {
                opcode: opcode.to_u8(),
                len: available,
            });
        }
        let payload_len = available - pad;
        let repr = Repr {
            bth,
            reth,
            immdt: imm,
            aeth: ack,
            payload_len,
        };
        Ok((repr, &buf[header_len..header_len + payload_len]))
    }

    /// Checks that the optional headers match the opcode and that READ Request and ACK carry no
    /// payload. `emit` writes a missing required header as zeros and skips one the opcode does not
    /// carry; call this first where the repr comes from outside.
    pub fn validate(&self) -> Result<()> {
        let opcode = self.bth.opcode;
        let b = opcode.to_u8();
        let pairs = [
            (opcode.has_reth(), self.reth.is_some(), "RETH"),
            (opcode.has_immdt(), self.immdt.is_some(), "ImmDt"),
            (opcode.has_aeth(), self.aeth.is_some(), "AETH"),
        ];
        for (needed, present, header) in pairs {
            if needed && !present {
                return Err(Error::MissingHeader { opcode: b, header });
            }
            if present && !needed {
                return Err(Error::UnexpectedHeader { opcode: b, header });
            }
        }
        if !opcode.has_payload() && self.payload_len > 0 {
            return Err(Error::UnexpectedPayload {
                opcode: b,
                len: self.payload_len,
            });
        }
        Ok(())
    }

    /// Length of the BTH and extension headers.
    pub fn header_len(&self) -> usize {
        self.bth.opcode.header_len()
    }

    /// Pad bytes after the payload.
    pub fn pad_len(&self) -> usize {
        pad_len(self.payload_len)
    }

    /// `header_len + payload_len + pad + ICRC_LEN`: the UDP payload length.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len + self.pad_len() + ICRC_LEN
    }

    /// Writes headers, `payload`, zero pad, and 4 zero bytes where the ICRC goes (seal it with
    /// [`crate::icrc::seal`]). The pad count is computed from `payload_len`. Returns
    /// [`buffer_len`](Self::buffer_len).
    ///
    /// Panics if `buf` is shorter than `buffer_len()` or `payload.len() != payload_len`.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> usize {
        assert_eq!(
            payload.len(),
            self.payload_len,
            "Repr::emit: payload length differs from payload_len"
        );
        let n = self.emit_headers(buf);
        let start = self.header_len();
        buf[start..start + payload.len()].copy_from_slice(payload);
        n
    }

    /// Like [`emit`](Self::emit) but leaves `buf[header_len..header_len + payload_len]` alone, for
    /// callers that copy the payload in themselves (e.g. straight from a registered region);
    /// writes headers, zero pad and the zero ICRC placeholder. Returns `buffer_len()`.
    ///
    /// Panics if `buf` is shorter than `buffer_len()`.
    pub fn emit_headers(&self, buf: &mut [u8]) -> usize {
        let total = self.buffer_len();
        assert!(
            buf.len() >= total,
            "Repr::emit_headers: buffer of {} bytes, packet needs {total}",
            buf.len()
        );
        let opcode = self.bth.opcode;
        let mut bth = self.bth;
        bth.pad_count = self.pad_len() as u8;
        bth.emit(&mut bth::Packet::new_unchecked(&mut buf[..BTH_LEN]));

        let mut off = BTH_LEN;
        if opcode.has_reth() {
            let r = self.reth.unwrap_or_default();
            r.emit(&mut reth::Packet::new_unchecked(&mut buf[off..]));
            off += r.buffer_len();
        }
        if opcode.has_immdt() {
            immdt::emit(
                self.immdt.unwrap_or(0),
                &mut immdt::Packet::new_unchecked(&mut buf[off..]),
            );
            off += crate::IMMDT_LEN;
        }
        if opcode.has_aeth() {
            let a = self.aeth.unwrap_or(AethRepr {
                syndrome: crate::Syndrome::Ack { credits: 0 },
                msn: 0,
            });
            a.emit(&mut aeth::Packet::new_unchecked(&mut buf[off..]));
        }
        // Zero the pad and the ICRC placeholder.
        buf[self.header_len() + self.payload_len..total].fill(0);
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NakCode, Op, Opcode, Psn, Service, Syndrome};

    fn bth(service: Service, op: Op) -> BthRepr {
        BthRepr {
            opcode: Opcode::new(service, op).unwrap(),
            solicited: false,
            mig_req: true,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x12,
            ack_req: false,
            psn: Psn::new(7),
        }
    }

    /// UC WRITE Only with immediate, 5 payload bytes: BTH, RETH, ImmDt, payload, 3 pad, ICRC.
    static WRITE_ONLY_IMM: [u8; 44] = [
        0x2b, 0x70, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x07, // BTH, pad 3
        0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, // VA
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x05, // rkey, len
        0xca, 0xfe, 0xba, 0xbe, // ImmDt
        b'h', b'e', b'l', b'l', b'o', 0, 0, 0, // payload, pad
        0, 0, 0, 0, // ICRC placeholder
    ];

    fn write_only_imm() -> Repr {
        let mut b = bth(Service::Uc, Op::WriteOnlyImm);
        b.pad_count = 3;
        Repr {
            bth: b,
            reth: Some(RethRepr {
                va: 0x1000_0000,
                rkey: 0x100,
                len: 5,
            }),
            immdt: Some(0xcafe_babe),
            aeth: None,
            payload_len: 5,
        }
    }

    #[test]
    fn parse_golden() {
        let (r, payload) = Repr::parse(&WRITE_ONLY_IMM).unwrap();
        assert_eq!(r, write_only_imm());
        assert_eq!(payload, b"hello");
        assert_eq!(r.buffer_len(), WRITE_ONLY_IMM.len());
        assert_eq!(r.validate(), Ok(()));
    }

    #[test]
    fn emit_golden_into_a5() {
        let mut buf = [0xa5u8; 44];
        let mut r = write_only_imm();
        r.bth.pad_count = 0; // ignored: emit computes it
        assert_eq!(r.emit(&mut buf, b"hello"), 44);
        assert_eq!(buf, WRITE_ONLY_IMM);
    }

    #[test]
    fn emit_headers_leaves_payload_alone() {
        let mut buf = [0xa5u8; 44];
        buf[32..37].copy_from_slice(b"hello");
        assert_eq!(write_only_imm().emit_headers(&mut buf), 44);
        assert_eq!(buf, WRITE_ONLY_IMM);
    }

    #[test]
    fn ack_golden() {
        let bytes = [
            0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x07, // BTH
            0x60, 0x00, 0x00, 0x09, // AETH: PSN sequence error, MSN 9
            0, 0, 0, 0,
        ];
        let mut b = bth(Service::Rc, Op::Ack);
        b.mig_req = false;
        let r = Repr {
            bth: b,
            reth: None,
            immdt: None,
            aeth: Some(AethRepr {
                syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                msn: 9,
            }),
            payload_len: 0,
        };
        assert_eq!(Repr::parse(&bytes), Ok((r, &[][..])));
        let mut buf = [0xa5u8; 20];
        r.emit(&mut buf, &[]);
        assert_eq!(buf, bytes);
    }

    #[test]
    fn rejects_malformed() {
        let good = WRITE_ONLY_IMM;
        // Four bytes after the headers, pad 3: one payload byte, still well-formed.
        let (r, payload) = Repr::parse(&good[..40]).unwrap();
        assert_eq!((r.payload_len, payload), (1, &b"h"[..]));
        // Pad 3 but only 0 bytes after the headers.
        assert_eq!(
            Repr::parse(&good[..36]),
            Err(Error::BadPad {
                pad: 3,
                available: 0
            })
        );
        assert_eq!(Repr::parse(&good[..42]), Err(Error::Unaligned(42)));
        assert_eq!(
            Repr::parse(&good[..30]),
            Err(Error::Truncated { need: 36, have: 30 })
        );
        let mut b = good;
        b[0] = 0x2c; // UC READ Request does not exist
        assert_eq!(Repr::parse(&b), Err(Error::UnknownOpcode(0x2c)));
        let mut b = good;
        b[0] = 0x0c; // RC READ Request: no ImmDt, no payload allowed
        assert!(matches!(
            Repr::parse(&b),
            Err(Error::UnexpectedPayload { opcode: 0x0c, .. })
        ));
    }

    #[test]
    fn validate_catches_inconsistent_reprs() {
        let mut r = write_only_imm();
        r.immdt = None;
        assert_eq!(
            r.validate(),
            Err(Error::MissingHeader {
                opcode: 0x2b,
                header: "ImmDt"
            })
        );
        let mut r = write_only_imm();
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::Ack { credits: 0 },
            msn: 0,
        });
        assert_eq!(
            r.validate(),
            Err(Error::UnexpectedHeader {
                opcode: 0x2b,
                header: "AETH"
            })
        );
    }

    #[test]
    #[should_panic(expected = "packet needs 44")]
    fn emit_into_a_short_buffer_panics_as_documented() {
        write_only_imm().emit(&mut [0u8; 43], b"hello");
    }

    #[test]
    fn pad_lengths() {
        assert_eq!(
            (0..8).map(pad_len).collect::<Vec<_>>(),
            [0, 3, 2, 1, 0, 3, 2, 1]
        );
    }
}
