//! The page server's protocol: arbitrary bytes through the request and reply parsers and the
//! hello's `message_len` and parser; what parses re-emits to bytes that parse to the same repr.
#![no_main]

use libfuzzer_sys::fuzz_target;
use remora_wire::ctrl::{
    page_hello, PageHeaderPacket, PageHelloPacket, PageHelloRepr, ReplyRepr, RequestRepr,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = RequestRepr::parse(&PageHeaderPacket::new_unchecked(data)) {
        let out = r.to_bytes();
        assert_eq!(RequestRepr::parse(&PageHeaderPacket::new_unchecked(&out[..])), Ok(r));
    }
    if let Ok(r) = ReplyRepr::parse(&PageHeaderPacket::new_unchecked(data)) {
        let out = r.to_bytes();
        assert_eq!(ReplyRepr::parse(&PageHeaderPacket::new_unchecked(&out[..])), Ok(r));
    }
    let _ = page_hello::message_len(data);
    if let Ok(r) = PageHelloRepr::parse(&PageHelloPacket::new_unchecked(data)) {
        let out = r.to_bytes();
        assert_eq!(out.len(), r.buffer_len());
        assert_eq!(PageHelloRepr::parse(&PageHelloPacket::new_unchecked(&out[..])), Ok(r));
    }
});
