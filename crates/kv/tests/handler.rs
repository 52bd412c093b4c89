//! The handler without sockets: pipelined input in, all replies out in one buffer.

use remora_kv::handler::{process, Cache, Session, Settings};
use remora_kv::out::Out;

fn engine() -> Cache {
    Cache::new(Settings::default())
}

#[test]
fn pipelined_requests_are_answered_in_one_buffer() {
    let eng = engine();
    let mut s = Session::new(eng.register_worker());
    let mut input = Vec::new();
    for i in 0..100 {
        input.extend_from_slice(format!("set k{i} 0 0 1\r\n{}\r\n", i % 10).as_bytes());
    }
    input.extend_from_slice(b"get");
    for i in 0..48 {
        input.extend_from_slice(format!(" k{i}").as_bytes());
    }
    input.extend_from_slice(b"\r\n");
    let mut out = Out::new();
    let o = process(&eng, &mut s, &input, &mut out, 1 << 20);
    assert_eq!(o.consumed, input.len());
    assert!(!o.close);
    let text = String::from_utf8(out.to_vec()).unwrap();
    assert_eq!(text.matches("STORED\r\n").count(), 100);
    assert_eq!(text.matches("VALUE ").count(), 48);
    assert!(text.ends_with("END\r\n"));
}

#[test]
fn partial_requests_wait_for_more_bytes() {
    let eng = engine();
    let mut s = Session::new(eng.register_worker());
    let mut out = Out::new();
    let o = process(
        &eng,
        &mut s,
        b"get a\r\nset b 0 0 5\r\nab",
        &mut out,
        1 << 20,
    );
    assert_eq!(o.consumed, 7, "only the complete get is used");
    assert_eq!(out.to_vec(), b"END\r\n");
}

#[test]
fn output_cap_stops_parsing() {
    let eng = engine();
    let mut s = Session::new(eng.register_worker());
    let mut out = Out::new();
    let v = vec![b'x'; 1000];
    let mut input = format!("set big 0 0 {}\r\n", v.len()).into_bytes();
    input.extend_from_slice(&v);
    input.extend_from_slice(b"\r\n");
    process(&eng, &mut s, &input, &mut out, 1 << 20);
    out.clear();
    let gets = b"get big\r\n".repeat(100);
    let o = process(&eng, &mut s, &gets, &mut out, 10_000);
    assert!(o.consumed < gets.len(), "stopped before the end");
    assert!(out.len() < 12_000);
    // The rest is answered once the output drained.
    let mut rest = Out::new();
    let o2 = process(&eng, &mut s, &gets[o.consumed..], &mut rest, 1 << 20);
    assert_eq!(o.consumed + o2.consumed, gets.len());
}

#[test]
fn binary_and_text_are_chosen_per_connection() {
    let eng = engine();
    let mut text = Session::new(eng.register_worker());
    let mut out = Out::new();
    process(&eng, &mut text, b"version\r\n", &mut out, 1 << 20);
    assert!(out.to_vec().starts_with(b"VERSION "));
    let mut bin = Session::new(eng.register_worker());
    let mut out = Out::new();
    let noop = [
        0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let o = process(&eng, &mut bin, &noop, &mut out, 1 << 20);
    assert_eq!(o.consumed, 24);
    assert_eq!(out.len(), 24);
    let out = out.to_vec();
    assert_eq!(out[0], 0x81);
    assert_eq!(&out[12..16], &[0, 0, 0, 1], "opaque echoed");
}

#[test]
fn quit_closes() {
    let eng = engine();
    let mut s = Session::new(eng.register_worker());
    let mut out = Out::new();
    let o = process(&eng, &mut s, b"quit\r\nget a\r\n", &mut out, 1 << 20);
    assert!(o.close);
    assert!(out.is_empty());
}

#[test]
fn max_reqs_yields_with_input_left_and_counts_it() {
    let eng = engine();
    let mut s = Session::new(eng.register_worker());
    s.max_reqs = 2;
    let input = b"get a\r\nget b\r\nget c\r\nget d\r\nget e\r\n";
    let mut out = Out::new();
    let o = process(&eng, &mut s, input, &mut out, 1 << 20);
    assert_eq!((o.consumed, o.yielded), (14, true));
    assert_eq!(out.to_vec(), b"END\r\nEND\r\n");
    let o = process(&eng, &mut s, &input[14..], &mut out, 1 << 20);
    assert_eq!((o.consumed, o.yielded), (14, true));
    // Exactly max_reqs left: no yield, nothing left over.
    let o = process(&eng, &mut s, &input[28..], &mut out, 1 << 20);
    assert_eq!((o.consumed, o.yielded), (7, false));
    let stats = eng.stats(None).unwrap();
    let yields = stats.iter().find(|(k, _)| k == "conn_yields").unwrap();
    assert_eq!(yields.1, "2");
}

/// Regression for issue 10 (findings 3 and 4): a multiget whose reply passes the output limit
/// is neither refused nor built whole; it stops between keys, leaves its line unconsumed, and
/// resumes at the next key. The pieces join to the one-shot reply and every key counts once.
#[test]
fn multiget_over_the_output_limit_resumes_where_it_stopped() {
    let eng = engine();
    let mut s = Session::new(eng.register_worker());
    let mut out = Out::new();
    let v = vec![b'x'; 5000];
    let mut set = format!("set big 0 0 {}\r\n", v.len()).into_bytes();
    set.extend_from_slice(&v);
    set.extend_from_slice(b"\r\nset s 0 0 1\r\ny\r\n");
    process(&eng, &mut s, &set, &mut out, 1 << 20);
    out.clear();
    let get = b"get big s big nope big\r\nget s\r\n";
    process(&eng, &mut s, get, &mut out, 1 << 20);
    let whole = out.to_vec();
    out.clear();
    assert!(whole.ends_with(b"END\r\nVALUE s 0 1\r\ny\r\nEND\r\n"));
    let mut pieces = Vec::new();
    let mut used = 0;
    let mut calls = 0;
    while used < get.len() && calls < 100 {
        let o = process(&eng, &mut s, &get[used..], &mut out, 4000);
        used += o.consumed;
        pieces.extend_from_slice(&out.to_vec());
        // The stuck output drains before the next call.
        out.clear();
        calls += 1;
    }
    assert_eq!(
        calls, 4,
        "stops after each 5000-byte value, and before the second get"
    );
    assert_eq!(pieces, whole);
    let stats = eng.stats(None).unwrap();
    let stat = |k: &str| stats.iter().find(|(n, _)| n == k).unwrap().1.clone();
    assert_eq!(stat("cmd_get"), "12", "each key counted once per multiget");
    assert_eq!(stat("get_hits"), "10");
}

/// Regression (issue 10 soak): a meta set whose length does not fit memcached's int32 overflowed
/// the size check (a panic in debug builds, a wrapped sum in release).
#[test]
fn meta_set_with_a_hostile_length_is_a_bad_data_chunk_not_an_overflow() {
    let eng = engine();
    let mut s = Session::new(eng.register_worker());
    for len in ["18446744073709551615", "2147483646", "4294967296"] {
        let mut out = Out::new();
        let req = format!("ms k {len} T0\r\nmn\r\n");
        let o = process(&eng, &mut s, req.as_bytes(), &mut out, 1 << 20);
        assert!(!o.close);
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert!(
            text.starts_with("CLIENT_ERROR bad data chunk\r\n"),
            "{len}: {text:?}"
        );
        assert!(
            text.ends_with("MN\r\n"),
            "{len}: the connection keeps serving: {text:?}"
        );
    }
}
