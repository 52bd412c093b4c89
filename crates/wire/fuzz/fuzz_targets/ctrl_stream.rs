//! The stream transports' frame: arbitrary bytes through `FrameRepr::parse`; what parses re-emits
//! to the same fields, and parsing fails only on a short buffer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use remora_wire::ctrl::{stream, FramePacket, FrameRepr};

fuzz_target!(|data: &[u8]| {
    match FrameRepr::parse(&FramePacket::new_unchecked(data)) {
        Ok(r) => {
            let out = r.to_bytes();
            assert_eq!(out[..2], data[..2]);
            assert_eq!(out[4..], data[4..stream::FRAME_LEN]);
        }
        Err(_) => assert!(data.len() < stream::FRAME_LEN),
    }
});
