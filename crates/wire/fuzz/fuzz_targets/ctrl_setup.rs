//! The fabric's setup hello: arbitrary bytes through `message_len`, `new_checked` and
//! `SetupRepr::parse`; what parses re-emits (with its private data) to a hello that parses to the
//! same repr and private data.
#![no_main]

use libfuzzer_sys::fuzz_target;
use remora_wire::ctrl::{setup, SetupPacket, SetupRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(n) = setup::message_len(data) {
        assert!(n >= setup::HEADER_LEN && n <= setup::HEADER_LEN + setup::MAX_PRIVATE);
    }
    let Ok(p) = SetupPacket::new_checked(data) else {
        return;
    };
    if let Ok(r) = SetupRepr::parse(&p) {
        let out = r.to_bytes(p.private());
        let q = SetupPacket::new_checked(&out[..]).expect("re-emitted hello checks");
        assert_eq!(SetupRepr::parse(&q), Ok(r));
        assert_eq!(q.private(), p.private());
    }
});
