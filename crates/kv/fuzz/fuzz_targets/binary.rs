//! Binary parser invariants: no panic; key, extras and value lie inside the consumed bytes and
//! add up to the header's body length.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora_kv::protocol::{binary, Limits};

fuzz_target!(|data: &[u8]| {
    let lim = Limits { item_max: 4096, max_line: 2048, max_get_line: 16384 };
    match binary::parse(data, &lim) {
        binary::Parse::Done(r, n) => {
            assert!(n >= binary::HEADER_LEN && n <= data.len());
            assert_eq!(r.extras.len() + r.key.len() + r.value.len(), n - binary::HEADER_LEN);
            assert_eq!(n - binary::HEADER_LEN, r.header.body_len as usize);
        }
        binary::Parse::TooLarge(h, body) => assert_eq!(h.body_len as usize, body),
        binary::Parse::Incomplete | binary::Parse::Close => {}
    }
});
