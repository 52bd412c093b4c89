//! Parses arbitrary bytes as a RoCEv2 UDP payload; whatever parses must re-emit to bytes that
//! parse to the same repr and payload, of the same length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use remora_wire::{icrc, Endpoints, Repr};

fuzz_target!(|data: &[u8]| {
    let ep = Endpoints::new(
        "127.0.0.1:49152".parse().unwrap(),
        "127.0.0.1:4791".parse().unwrap(),
    );
    // The checker must not panic on anything either.
    let _ = icrc::check(&ep, data);
    if let Ok((repr, payload)) = Repr::parse(data) {
        assert_eq!(repr.validate(), Ok(()));
        assert_eq!(repr.buffer_len(), data.len());
        let mut out = vec![0u8; repr.buffer_len()];
        assert_eq!(repr.emit(&mut out, payload), data.len());
        let (again, payload2) = Repr::parse(&out).expect("re-emitted packet must parse");
        assert_eq!(again, repr);
        assert_eq!(payload2, payload);
    }
});
