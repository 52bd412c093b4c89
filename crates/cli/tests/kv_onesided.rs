//! `remora kv serve --one-sided`: GETs by one-sided READs of a running server's arena, over shm
//! and udp, agree with its text protocol; settings it cannot serve are refused at start.

mod kv_common;

use std::process::Command;

use kv_common::{free_port, remora, text_roundtrip};
use remora_fabric::Transport;
use remora_kv::arena::remote::{Got, Reader};
use remora_kv::onesided::FabricFetch;

#[test]
fn one_sided_reads_see_what_the_text_protocol_stored() {
    let grant_port = free_port();
    let grant = format!("127.0.0.1:{grant_port}");
    let srv = remora(&["--one-sided", &grant]);
    let out = text_roundtrip(
        srv.port,
        b"set alpha 7 0 5\r\nhello\r\nset gone 0 0 1\r\nx\r\ndelete gone\r\nset short 3 1 2\r\nhi\r\n",
    );
    assert_eq!(out, b"STORED\r\nSTORED\r\nDELETED\r\nSTORED\r\n");
    let cas_line = String::from_utf8(text_roundtrip(srv.port, b"gets alpha\r\n")).unwrap();
    let cas: u64 = cas_line.split_whitespace().nth(4).unwrap().parse().unwrap();
    for transport in [Transport::Shm, Transport::Udp] {
        let mut f = FabricFetch::connect(grant.parse().unwrap(), transport).unwrap();
        let mut r = Reader::open(&mut f).unwrap();
        assert!(r.epoch() > 0, "the server published its clock");
        let now = r.now();
        match r.get(&mut f, b"alpha", now).unwrap() {
            Got::Hit(it) => {
                assert_eq!((&it.value[..], it.flags, it.cas), (&b"hello"[..], 7, cas));
            }
            other => panic!("{transport:?}: {other:?}"),
        }
        assert_eq!(r.get(&mut f, b"gone", now).unwrap(), Got::Miss);
        assert_eq!(r.get(&mut f, b"never", now).unwrap(), Got::Miss);
        // Expired (1 s TTL) on the server's clock: a miss.
        assert_eq!(r.get(&mut f, b"short", now + 5).unwrap(), Got::Miss);
    }
    // The server serves text clients as before.
    assert_eq!(
        text_roundtrip(srv.port, b"get alpha\r\n"),
        b"VALUE alpha 7 5\r\nhello\r\nEND\r\n"
    );
}

#[test]
fn one_sided_with_settings_it_cannot_serve_is_refused_at_start() {
    let port = free_port().to_string();
    // Readers of the arena are not authenticated: -Y cannot hold for them.
    let auth = std::env::temp_dir().join(format!("remora-onesided-auth-{}", std::process::id()));
    std::fs::write(&auth, "user:secret\n").unwrap();
    let auth = auth.to_str().unwrap().to_string();
    for extra in [&["-o", "storage=heap"][..], &["-Y", &auth]] {
        let out = Command::new(env!("CARGO_BIN_EXE_remora"))
            .args(["kv", "serve", "-p", &port, "--one-sided", "127.0.0.1:0"])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?}: started");
        assert!(err.contains("--one-sided with"), "{extra:?}: {err}");
    }
    let _ = std::fs::remove_file(&auth);
    let out = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(["kv", "serve", "--one-sided", "nowhere"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--one-sided nowhere"));
}

/// `remora bench kv-onesided` reports every key the issue names, and checked every value.
#[test]
fn the_bench_reports_its_figures_and_checks_every_value() {
    if kv_common::memcached_path().is_none() {
        eprintln!("SKIP: memcached not installed");
        return;
    }
    for transport in ["shm", "udp"] {
        let out = Command::new(env!("CARGO_BIN_EXE_remora"))
            .args(["bench", "kv-onesided", "--transport", transport])
            .args(["--items", "500", "--seconds", "0.3", "--json"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{transport}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        for k in [
            "transport",
            "threads",
            "gets_per_s",
            "server_cpu_us_per_get",
            "memcached_gets_per_s",
            "memcached_cpu_us_per_get",
            "torn_retries",
            "fallbacks",
            "wrong_values",
        ] {
            assert!(v.get(k).is_some(), "{transport}: no {k} in {v}");
        }
        assert_eq!(v["transport"], transport);
        assert_eq!(v["wrong_values"], 0);
        assert!(v["gets_per_s"].as_f64().unwrap() > 0.0);
    }
}

/// `remora_kv::onesided::Client`: READs where they decide, `mg` for what they cannot (an item
/// over the reader's budget) and for everything once there is no grant.
#[test]
fn the_client_falls_back_to_mg_where_reads_cannot_decide() {
    use remora_kv::onesided::Client;
    let grant_port = free_port();
    let grant = format!("127.0.0.1:{grant_port}");
    let srv = remora(&["--one-sided", &grant]);
    let big = vec![b'b'; 2000];
    let mut script = b"set alpha 7 0 5\r\nhello\r\nset big 9 100 2000\r\n".to_vec();
    script.extend_from_slice(&big);
    script.extend_from_slice(b"\r\n");
    assert_eq!(text_roundtrip(srv.port, &script), b"STORED\r\nSTORED\r\n");
    let text = format!("127.0.0.1:{}", srv.port).parse().unwrap();
    let mut c = Client::connect(text, grant.parse().unwrap(), Transport::Shm).unwrap();
    c.reader_mut().expect("granted").max_value = 1000;
    let it = c.get(b"alpha").unwrap().expect("alpha");
    assert_eq!(
        (&it.value[..], it.flags, c.fallbacks),
        (&b"hello"[..], 7, 0)
    );
    assert_eq!(c.get(b"never").unwrap(), None);
    assert_eq!(c.fallbacks, 0, "a miss READs decide");
    let it = c.get(b"big").unwrap().expect("big");
    assert_eq!((&it.value[..], it.flags, c.fallbacks), (&big[..], 9, 1));
    assert!(it.exptime > 0, "its expiry came back with it");
    // No grant to be had: the text protocol answers everything.
    let nowhere = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut c = Client::connect(text, nowhere, Transport::Shm).unwrap();
    assert!(c.reader_mut().is_none());
    assert_eq!(c.get(b"alpha").unwrap().expect("alpha").value, b"hello");
    assert_eq!(c.get(b"never").unwrap(), None);
    assert_eq!(c.fallbacks, 2);
}
