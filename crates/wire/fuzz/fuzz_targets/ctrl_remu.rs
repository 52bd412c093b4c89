//! The REMU link: arbitrary bytes through the hello and announcement parsers and the region
//! description inside them; what parses re-emits byte for byte (none has reserved bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use remora_wire::ctrl::{
    AnnouncePacket, AnnounceRepr, RegionPacket, RegionRepr, RemuHelloPacket, RemuHelloRepr,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = RemuHelloRepr::parse(&RemuHelloPacket::new_unchecked(data)) {
        assert_eq!(r.to_bytes()[..], data[..r.buffer_len()]);
    }
    if let Ok(r) = AnnounceRepr::parse(&AnnouncePacket::new_unchecked(data)) {
        assert_eq!(r.to_bytes()[..], data[..r.buffer_len()]);
    }
    if let Ok(r) = RegionRepr::parse(&RegionPacket::new_unchecked(data)) {
        assert_eq!(r.to_bytes()[..], data[..r.buffer_len()]);
    }
});
