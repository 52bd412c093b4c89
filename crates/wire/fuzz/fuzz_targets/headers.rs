//! Each header on its own: parse arbitrary bytes with every header's view, and re-emit what
//! parses into a buffer that must parse back to the same repr.
#![no_main]

use libfuzzer_sys::fuzz_target;
use remora_wire::{aeth, bth, immdt, reth, AethRepr, BthRepr, RethRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = BthRepr::parse(&bth::Packet::new_unchecked(data)) {
        let mut out = [0u8; remora_wire::BTH_LEN];
        r.emit(&mut bth::Packet::new_unchecked(&mut out[..]));
        assert_eq!(BthRepr::parse(&bth::Packet::new_unchecked(&out[..])), Ok(r));
    }
    if let Ok(r) = RethRepr::parse(&reth::Packet::new_unchecked(data)) {
        let mut out = [0u8; remora_wire::RETH_LEN];
        r.emit(&mut reth::Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..], data[..remora_wire::RETH_LEN]);
    }
    if let Ok(v) = immdt::parse(&immdt::Packet::new_unchecked(data)) {
        let mut out = [0u8; remora_wire::IMMDT_LEN];
        immdt::emit(v, &mut immdt::Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..], data[..remora_wire::IMMDT_LEN]);
    }
    if let Ok(r) = AethRepr::parse(&aeth::Packet::new_unchecked(data)) {
        let mut out = [0u8; remora_wire::AETH_LEN];
        r.emit(&mut aeth::Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..], data[..remora_wire::AETH_LEN]);
    }
});
