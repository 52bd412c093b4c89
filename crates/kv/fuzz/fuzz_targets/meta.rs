//! Meta command parser invariants (meta lines go through the text parser): as for `text`, with
//! every input forced to start with a meta verb.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora_kv::protocol::{text, Limits};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let verb: &[u8] = [&b"mg "[..], b"ms ", b"md ", b"ma ", b"me ", b"mn"][sel as usize % 6];
    let mut buf = verb.to_vec();
    buf.extend_from_slice(rest);
    let lim = Limits { item_max: 4096, max_line: 2048, max_get_line: 16384 };
    if let text::Parse::Done(cmd, n) = text::parse(&buf, &lim) {
        assert!(n > 0 && n <= buf.len());
        assert_eq!(text::parse(&buf[..n], &lim), text::Parse::Done(cmd, n));
    }
});
