//! Text parser invariants: no panic; a parsed request used between 1 and len bytes and parses
//! identically from exactly those bytes (it never looked past its end).
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora_kv::protocol::{text, Limits};

fuzz_target!(|data: &[u8]| {
    let lim = Limits { item_max: 4096, max_line: 2048, max_get_line: 16384 };
    if let text::Parse::Done(cmd, n) = text::parse(data, &lim) {
        assert!(n > 0 && n <= data.len());
        assert_eq!(text::parse(&data[..n], &lim), text::Parse::Done(cmd, n));
    }
});
