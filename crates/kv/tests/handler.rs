//! The handler without sockets: pipelined input in, all replies out in one buffer.

use remora_kv::handler::{process, Engine, Session, Settings};

fn engine() -> Engine {
    Engine::new(Settings::default())
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
    let mut out = Vec::new();
    let o = process(&eng, &mut s, &input, &mut out, 1 << 20);
    assert_eq!(o.consumed, input.len());
    assert!(!o.close);
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.matches("STORED\r\n").count(), 100);
    assert_eq!(text.matches("VALUE ").count(), 48);
    assert!(text.ends_with("END\r\n"));
}

#[test]
fn partial_requests_wait_for_more_bytes() {
    let eng = engine();
    let mut s = Session::new(eng.register_worker());
    let mut out = Vec::new();
    let o = process(
        &eng,
        &mut s,
        b"get a\r\nset b 0 0 5\r\nab",
        &mut out,
        1 << 20,
    );
    assert_eq!(o.consumed, 7, "only the complete get is used");
    assert_eq!(out, b"END\r\n");
}

#[test]
fn output_cap_stops_parsing() {
    let eng = engine();
    let mut s = Session::new(eng.register_worker());
    let mut out = Vec::new();
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
    let mut rest = Vec::new();
    let o2 = process(&eng, &mut s, &gets[o.consumed..], &mut rest, 1 << 20);
    assert_eq!(o.consumed + o2.consumed, gets.len());
}

#[test]
fn binary_and_text_are_chosen_per_connection() {
    let eng = engine();
    let mut text = Session::new(eng.register_worker());
    let mut out = Vec::new();
    process(&eng, &mut text, b"version\r\n", &mut out, 1 << 20);
    assert!(out.starts_with(b"VERSION "));
    let mut bin = Session::new(eng.register_worker());
    let mut out = Vec::new();
    let noop = [
        0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let o = process(&eng, &mut bin, &noop, &mut out, 1 << 20);
    assert_eq!(o.consumed, 24);
    assert_eq!(out.len(), 24);
    assert_eq!(out[0], 0x81);
    assert_eq!(&out[12..16], &[0, 0, 0, 1], "opaque echoed");
}

#[test]
fn quit_closes() {
    let eng = engine();
    let mut s = Session::new(eng.register_worker());
    let mut out = Vec::new();
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
    let mut out = Vec::new();
    let o = process(&eng, &mut s, input, &mut out, 1 << 20);
    assert_eq!((o.consumed, o.yielded), (14, true));
    assert_eq!(out, b"END\r\nEND\r\n");
    let o = process(&eng, &mut s, &input[14..], &mut out, 1 << 20);
    assert_eq!((o.consumed, o.yielded), (14, true));
    // Exactly max_reqs left: no yield, nothing left over.
    let o = process(&eng, &mut s, &input[28..], &mut out, 1 << 20);
    assert_eq!((o.consumed, o.yielded), (7, false));
    let stats = eng.stats(None).unwrap();
    let yields = stats.iter().find(|(k, _)| k == "conn_yields").unwrap();
    assert_eq!(yields.1, "2");
}
