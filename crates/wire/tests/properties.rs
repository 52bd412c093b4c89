//! Property tests: valid packets round-trip, malformed prefixes and random bytes give errors and
//! never panics, the ICRC catches every single-bit error outside the masked fields.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;
use remora_wire::packet::pad_len;
use remora_wire::{
    aeth, bth, icrc, immdt, reth, AethRepr, BthRepr, Endpoints, NakCode, Opcode, Psn, Repr,
    RethRepr, Syndrome, ICRC_LEN,
};

fn opcode() -> impl Strategy<Value = Opcode> {
    let all: Vec<Opcode> = Opcode::all().collect();
    proptest::sample::select(all)
}

fn syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| Syndrome::RnrNak { timer }),
        proptest::sample::select(NakCode::ALL.to_vec()).prop_map(Syndrome::Nak),
    ]
}

/// A consistent repr and a payload of its length.
fn packet() -> impl Strategy<Value = (Repr, Vec<u8>)> {
    (
        opcode(),
        any::<(bool, bool, u16, bool, bool, bool)>(),
        0u32..=0xFF_FFFF,
        0u32..=0xFF_FFFF,
        any::<(u64, u32, u32)>(),
        any::<u32>(),
        (syndrome(), 0u32..=0xFF_FFFF),
        proptest::collection::vec(any::<u8>(), 0..600),
    )
        .prop_map(
            |(opcode, (se, m, pkey, fecn, becn, a), qp, psn, reth, imm, aeth, mut payload)| {
                if !opcode.has_payload() {
                    payload.clear();
                }
                let repr = Repr {
                    bth: BthRepr {
                        opcode,
                        solicited: se,
                        mig_req: m,
                        pad_count: pad_len(payload.len()) as u8,
                        pkey,
                        fecn,
                        becn,
                        dest_qp: qp,
                        ack_req: a,
                        psn: Psn::new(psn),
                    },
                    reth: opcode.has_reth().then_some(RethRepr {
                        va: reth.0,
                        rkey: reth.1,
                        len: reth.2,
                    }),
                    immdt: opcode.has_immdt().then_some(imm),
                    aeth: opcode.has_aeth().then_some(AethRepr {
                        syndrome: aeth.0,
                        msn: aeth.1,
                    }),
                    payload_len: payload.len(),
                };
                (repr, payload)
            },
        )
}

fn endpoints() -> impl Strategy<Value = Endpoints> {
    let v4 = (any::<[u8; 4]>(), any::<[u8; 4]>())
        .prop_map(|(s, d)| (IpAddr::V4(Ipv4Addr::from(s)), IpAddr::V4(Ipv4Addr::from(d))));
    let v6 = (any::<[u8; 16]>(), any::<[u8; 16]>())
        .prop_map(|(s, d)| (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d))));
    (prop_oneof![v4, v6], any::<u16>()).prop_map(|((s, d), sport)| {
        Endpoints::new(SocketAddr::new(s, sport), SocketAddr::new(d, 4791))
    })
}

/// Parse, and where that works re-emit and re-parse: the repr and payload must survive.
fn reemit_is_stable(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok((repr, payload)) = Repr::parse(bytes) {
        prop_assert_eq!(repr.buffer_len(), bytes.len());
        prop_assert_eq!(repr.validate(), Ok(()));
        let mut again = vec![0u8; repr.buffer_len()];
        repr.emit(&mut again, payload);
        let (repr2, payload2) = Repr::parse(&again).expect("re-emitted packet parses");
        prop_assert_eq!(repr2, repr);
        prop_assert_eq!(payload2, payload);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn valid_packets_round_trip((repr, payload) in packet(), ep in endpoints()) {
        let mut buf = vec![0xa5u8; repr.buffer_len()];
        prop_assert_eq!(repr.emit(&mut buf, &payload), buf.len());
        prop_assert_eq!(buf.len() % 4, 0);
        icrc::seal(&ep, &mut buf);
        prop_assert_eq!(icrc::check(&ep, &buf), Ok(()));
        let (parsed, got) = Repr::parse(&buf).unwrap();
        prop_assert_eq!(parsed, repr);
        prop_assert_eq!(got, &payload[..]);
        // emit_headers over a buffer that already holds the payload gives the same bytes.
        let mut buf2 = vec![0x5au8; repr.buffer_len()];
        let h = repr.header_len();
        buf2[h..h + payload.len()].copy_from_slice(&payload);
        repr.emit_headers(&mut buf2);
        icrc::seal(&ep, &mut buf2);
        prop_assert_eq!(buf2, buf);
    }

    /// Without a length field a prefix ending on a 4-byte boundary can be a well-formed shorter
    /// packet; then only the ICRC tells. Every strict prefix must fail `parse` or `check`.
    #[test]
    fn every_strict_prefix_is_rejected((repr, payload) in packet(), ep in endpoints()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf, &payload);
        icrc::seal(&ep, &mut buf);
        for k in 0..buf.len() {
            let prefix = &buf[..k];
            let parsed = Repr::parse(prefix);
            if parsed.is_ok() {
                prop_assert!(icrc::check(&ep, prefix).is_err(), "prefix {} accepted", k);
            }
            // Headers alone (and READ requests, ACKs, payloads under 4 bytes) leave no such
            // ambiguity: the structure check must reject them.
            if payload.len() < 4 || k < repr.header_len() + ICRC_LEN {
                prop_assert!(parsed.is_err(), "prefix {} of {} parsed", k, buf.len());
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        reemit_is_stable(&bytes)?;
    }

    /// Random bytes behind a known opcode and TVer 0 reach the extension header checks.
    #[test]
    fn random_bytes_behind_a_valid_opcode(
        op in opcode(),
        flags in any::<u8>(),
        rest in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        let mut bytes = vec![op.to_u8(), flags & 0xF0];
        bytes.extend_from_slice(&rest);
        reemit_is_stable(&bytes)?;
        let ep = Endpoints::new("127.0.0.1:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap());
        let _ = icrc::check(&ep, &bytes);
    }

    #[test]
    fn single_bit_errors_are_caught(
        (repr, payload) in packet(),
        ep in endpoints(),
        pos in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf, &payload);
        icrc::seal(&ep, &mut buf);
        let i = pos.index(buf.len());
        buf[i] ^= 1 << bit;
        if i == 4 {
            // FECN, BECN and the reserved bits may change in flight: masked out of the ICRC.
            prop_assert_eq!(icrc::check(&ep, &buf), Ok(()));
        } else {
            let is_bad_icrc = matches!(icrc::check(&ep, &buf), Err(remora_wire::Error::BadIcrc { .. }));
            prop_assert!(is_bad_icrc);
        }
    }

    /// Each header view on its own: short or random input gives an error or a repr that
    /// re-emits to the same fields.
    #[test]
    fn header_views_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        if let Ok(r) = BthRepr::parse(&bth::Packet::new_unchecked(&bytes[..])) {
            let mut out = [0u8; remora_wire::BTH_LEN];
            r.emit(&mut bth::Packet::new_unchecked(&mut out[..]));
            prop_assert_eq!(BthRepr::parse(&bth::Packet::new_unchecked(&out[..])), Ok(r));
        } else {
            prop_assert!(bytes.len() < remora_wire::BTH_LEN
                || Opcode::from_u8(bytes[0]).is_err()
                || bytes[1] & 0x0F != 0);
        }
        prop_assert_eq!(
            RethRepr::parse(&reth::Packet::new_unchecked(&bytes[..])).is_ok(),
            bytes.len() >= remora_wire::RETH_LEN
        );
        prop_assert_eq!(
            immdt::parse(&immdt::Packet::new_unchecked(&bytes[..])).is_ok(),
            bytes.len() >= remora_wire::IMMDT_LEN
        );
        if let Ok(r) = AethRepr::parse(&aeth::Packet::new_unchecked(&bytes[..])) {
            let mut out = [0u8; remora_wire::AETH_LEN];
            r.emit(&mut aeth::Packet::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[..], &bytes[..remora_wire::AETH_LEN]);
        }
    }
}
