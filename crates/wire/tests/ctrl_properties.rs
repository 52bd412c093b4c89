//! Property tests of the control frames ([`remora_wire::ctrl`]): every repr survives emit and
//! parse; random bytes, truncated messages and valid messages with bytes overwritten never make
//! a parser panic, and whatever parses re-emits to bytes that parse to the same repr.

use proptest::prelude::*;
use remora_wire::ctrl::{
    page_hello, setup, AnnouncePacket, AnnounceRepr, FramePacket, FrameRepr, PageHeaderPacket,
    PageHelloPacket, PageHelloRepr, RegionPacket, RegionRepr, RemuHelloPacket, RemuHelloRepr,
    ReplyRepr, ReplyStatus, RequestOp, RequestRepr, Segment, SetupPacket, SetupRepr,
};
use remora_wire::{Psn, Service};

fn region() -> impl Strategy<Value = RegionRepr> {
    any::<(u64, u64, u32)>().prop_map(|(addr, len, rkey)| RegionRepr { addr, len, rkey })
}

fn setup_hello() -> impl Strategy<Value = (SetupRepr, Vec<u8>)> {
    (
        any::<(u8, bool, u32, u16, [u8; 16])>(),
        0u32..=Psn::MASK,
        0u32..=Psn::MASK,
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(
            |((transport, uc, mtu, udp_port, rendezvous), qpn, psn, private)| {
                let repr = SetupRepr {
                    transport,
                    service: if uc { Service::Uc } else { Service::Rc },
                    mtu,
                    qpn,
                    psn: Psn::new(psn),
                    udp_port,
                    rendezvous,
                    private_len: private.len(),
                };
                (repr, private)
            },
        )
}

fn frame() -> impl Strategy<Value = FrameRepr> {
    any::<(u8, u8, u32, u64, u32, u32, u64)>().prop_map(|(kind, code, len, va, rkey, imm, aux)| {
        FrameRepr {
            kind,
            code,
            len,
            va,
            rkey,
            imm,
            aux,
        }
    })
}

fn request() -> impl Strategy<Value = RequestRepr> {
    let op = proptest::sample::select(vec![
        RequestOp::Read,
        RequestOp::PushStart,
        RequestOp::PushRestart,
    ]);
    (op, 0..=remora_wire::ctrl::page::MAX_CHUNK, any::<u64>())
        .prop_map(|(op, len, offset)| RequestRepr { op, len, offset })
}

fn reply() -> impl Strategy<Value = ReplyRepr> {
    let status = proptest::sample::select(vec![
        ReplyStatus::Data,
        ReplyStatus::Zero,
        ReplyStatus::Error,
        ReplyStatus::End,
    ]);
    (status, 0..=remora_wire::ctrl::page::MAX_CHUNK, any::<u64>()).prop_map(
        |(status, len, offset)| ReplyRepr {
            status,
            len,
            offset,
        },
    )
}

/// A consistent hello: segment lengths add up, the zero map no longer than the source.
fn page_hello() -> impl Strategy<Value = PageHelloRepr> {
    (
        proptest::collection::vec((any::<u64>(), 0u64..1 << 30), 0..20),
        proptest::collection::vec(any::<u64>(), 0..10),
    )
        .prop_map(|(segs, words)| {
            let segments: Vec<Segment> =
                segs.iter().map(|&(va, len)| Segment { va, len }).collect();
            let len = segments.iter().map(|s| s.len).sum::<u64>();
            let max = len.div_ceil(page_hello::ZERO_MAP_PAGE).div_ceil(64) as usize;
            let zero_map = words[..words.len().min(max)].to_vec();
            PageHelloRepr {
                len,
                segments,
                zero_map,
            }
        })
}

fn remu_hello() -> impl Strategy<Value = RemuHelloRepr> {
    (any::<u16>(), proptest::option::of(region()))
        .prop_map(|(module, credit)| RemuHelloRepr { module, credit })
}

fn announce() -> impl Strategy<Value = AnnounceRepr> {
    (region(), any::<(u32, u32, u32)>()).prop_map(|(ring, (modules, bunch, stacks))| AnnounceRepr {
        ring,
        modules,
        bunch,
        stacks,
    })
}

/// Runs every parser over `b`; what parses must re-emit to bytes that parse to the same repr.
fn every_parser_is_total(b: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(r) = RegionRepr::parse(&RegionPacket::new_unchecked(b)) {
        prop_assert_eq!(&r.to_bytes()[..], &b[..r.buffer_len()]);
    }
    if let Ok(r) = FrameRepr::parse(&FramePacket::new_unchecked(b)) {
        let again = r.to_bytes();
        prop_assert_eq!(
            FrameRepr::parse(&FramePacket::new_unchecked(&again[..])),
            Ok(r)
        );
    }
    if let Ok(r) = RequestRepr::parse(&PageHeaderPacket::new_unchecked(b)) {
        let again = r.to_bytes();
        prop_assert_eq!(
            RequestRepr::parse(&PageHeaderPacket::new_unchecked(&again[..])),
            Ok(r)
        );
    }
    if let Ok(r) = ReplyRepr::parse(&PageHeaderPacket::new_unchecked(b)) {
        let again = r.to_bytes();
        prop_assert_eq!(
            ReplyRepr::parse(&PageHeaderPacket::new_unchecked(&again[..])),
            Ok(r)
        );
    }
    let _ = setup::message_len(b);
    if let Ok(p) = SetupPacket::new_checked(b) {
        if let Ok(r) = SetupRepr::parse(&p) {
            let again = r.to_bytes(p.private());
            let q = SetupPacket::new_checked(&again[..]).expect("re-emitted hello checks");
            prop_assert_eq!(SetupRepr::parse(&q), Ok(r));
            prop_assert_eq!(q.private(), p.private());
        }
    }
    let _ = page_hello::message_len(b);
    if let Ok(r) = PageHelloRepr::parse(&PageHelloPacket::new_unchecked(b)) {
        // Not byte-identical: the reserved bytes are ignored on receive.
        let again = r.to_bytes();
        let q = PageHelloPacket::new_unchecked(&again[..]);
        prop_assert_eq!(PageHelloRepr::parse(&q), Ok(r));
    }
    if let Ok(r) = RemuHelloRepr::parse(&RemuHelloPacket::new_unchecked(b)) {
        prop_assert_eq!(&r.to_bytes()[..], &b[..r.buffer_len()]);
    }
    if let Ok(r) = AnnounceRepr::parse(&AnnouncePacket::new_unchecked(b)) {
        prop_assert_eq!(&r.to_bytes()[..], &b[..r.buffer_len()]);
    }
    Ok(())
}

/// Every valid message of every codec, for the mutation test.
fn any_message() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        setup_hello().prop_map(|(r, p)| r.to_bytes(&p)),
        frame().prop_map(|r| r.to_bytes().to_vec()),
        request().prop_map(|r| r.to_bytes().to_vec()),
        reply().prop_map(|r| r.to_bytes().to_vec()),
        page_hello().prop_map(|r| r.to_bytes()),
        remu_hello().prop_map(|r| r.to_bytes()),
        announce().prop_map(|r| r.to_bytes().to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn setup_hellos_round_trip((repr, private) in setup_hello()) {
        let b = repr.to_bytes(&private);
        prop_assert_eq!(b.len(), repr.buffer_len());
        prop_assert_eq!(setup::message_len(&b[..setup::HEADER_LEN]), Ok(b.len()));
        let p = SetupPacket::new_checked(&b[..]).unwrap();
        prop_assert_eq!(SetupRepr::parse(&p), Ok(repr));
        prop_assert_eq!(p.private(), &private[..]);
        // A hello cut short anywhere is refused, never misread.
        for cut in 0..b.len() {
            prop_assert!(SetupPacket::new_checked(&b[..cut]).is_err());
        }
    }

    #[test]
    fn fixed_frames_round_trip(
        region in region(), frame in frame(), req in request(), rep in reply(), ann in announce(),
    ) {
        let p = RegionPacket::new_unchecked(region.to_bytes());
        prop_assert_eq!(RegionRepr::parse(&p), Ok(region));
        let p = FramePacket::new_unchecked(frame.to_bytes());
        prop_assert_eq!(FrameRepr::parse(&p), Ok(frame));
        let p = PageHeaderPacket::new_unchecked(req.to_bytes());
        prop_assert_eq!(RequestRepr::parse(&p), Ok(req));
        let p = PageHeaderPacket::new_unchecked(rep.to_bytes());
        prop_assert_eq!(ReplyRepr::parse(&p), Ok(rep));
        let b = ann.to_bytes();
        prop_assert_eq!(AnnounceRepr::parse(&AnnouncePacket::new_unchecked(&b[..])), Ok(ann));
        prop_assert!(AnnounceRepr::parse(&AnnouncePacket::new_unchecked(&b[..31])).is_err());
    }

    #[test]
    fn page_hellos_round_trip(repr in page_hello()) {
        let b = repr.to_bytes();
        prop_assert_eq!(b.len(), repr.buffer_len());
        let fixed = page_hello::HELLO_FIXED_LEN;
        prop_assert_eq!(page_hello::message_len(&b[..fixed]), Ok(b.len()));
        let p = PageHelloPacket::new_checked(&b[..]).unwrap();
        prop_assert_eq!(PageHelloRepr::parse(&p), Ok(repr));
        for cut in 0..b.len() {
            prop_assert!(PageHelloRepr::parse(&PageHelloPacket::new_unchecked(&b[..cut])).is_err());
        }
    }

    #[test]
    fn remu_hellos_round_trip(repr in remu_hello()) {
        let b = repr.to_bytes();
        let p = RemuHelloPacket::new_checked(&b[..]).unwrap();
        prop_assert_eq!(RemuHelloRepr::parse(&p), Ok(repr));
        // Cut inside the credit word: refused; cut right before it: a hello without one.
        for cut in 0..b.len() {
            let got = RemuHelloRepr::parse(&RemuHelloPacket::new_unchecked(&b[..cut]));
            match cut {
                6 => prop_assert_eq!(got.map(|h| h.credit), Ok(None)),
                _ => prop_assert!(got.is_err()),
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
        every_parser_is_total(&b)?;
    }

    #[test]
    fn damaged_messages_never_panic(
        msg in any_message(),
        cut in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let mut b = msg;
        for (at, v) in edits {
            if !b.is_empty() {
                let i = at.index(b.len());
                b[i] = v;
            }
        }
        every_parser_is_total(&b)?;
        let keep = cut.index(b.len() + 1);
        every_parser_is_total(&b[..keep])?;
    }
}
