//! `watch`: log streams (memcached's watcher.t and watcher_connid.t), compared line by line
//! with the real memcached 1.6 once timestamps, log ids, descriptors, slab classes and client
//! ports are masked. Skips the comparisons with a printed reason without memcached.

mod kv_common;
use kv_common::*;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A connection turned into a log stream of `streams` (answered `OK`).
fn watcher(port: u16, streams: &str) -> BufReader<TcpStream> {
    let mut s = connect(port);
    let cmd = format!("watch {streams}");
    s.write_all(cmd.trim_end().as_bytes()).unwrap();
    s.write_all(b"\r\n").unwrap();
    let mut r = BufReader::new(s);
    assert_eq!(line(&mut r), "OK\r\n");
    r
}

fn line(r: &mut BufReader<TcpStream>) -> String {
    let mut l = String::new();
    let _ = r.read_line(&mut l);
    l
}

/// Masks what differs between servers and runs: `ts=`, `gid=`, `cfd=`, `clsid=`, `rport=`.
fn mask(l: &str) -> String {
    l.split_whitespace()
        .map(|t| match t.split_once('=') {
            Some((k @ ("ts" | "gid" | "cfd" | "clsid" | "rport"), _)) => format!("{k}=*"),
            _ => t.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The lines a `fetchers mutations` watcher sees for sets, gets, a miss and a delete.
fn item_lines(port: u16) -> Vec<String> {
    let mut w = watcher(port, "fetchers mutations");
    let mut c = connect(port);
    c.write_all(b"set vfoo 0 0 4\r\nvbar\r\nget vfoo\r\nget nope\r\ndelete vfoo\r\nset k%20 0 100 1\r\nx\r\n")
        .unwrap();
    let r = read_until(&mut c, b"STORED\r\n", Duration::from_secs(5));
    assert!(r.ends_with(b"DELETED\r\nSTORED\r\n"), "{r:?}");
    (0..7).map(|_| mask(&line(&mut w))).collect()
}

#[test]
fn item_lines_match_memcached() {
    item_lines_match_memcached_on(&[]);
}

#[test]
fn item_lines_match_memcached_on_uring() {
    item_lines_match_memcached_on(&["-o", "io=uring"]);
}

fn item_lines_match_memcached_on(flags: &[&str]) {
    let rm = remora(flags);
    let b = item_lines(rm.port);
    assert_eq!(
        b[0],
        "ts=* gid=* type=item_get key=vfoo status=not_found clsid=* cfd=* size=0"
    );
    assert_eq!(
        b[1],
        "ts=* gid=* type=item_store key=vfoo status=stored cmd=set ttl=0 clsid=* cfd=* size=4"
    );
    let Some(mc) = memcached(&[]) else { return };
    let a = item_lines(mc.port);
    assert_eq!(a, b);
}

/// watcher_connid.t: `cfd=` is the descriptor `stats conns` lists for the connection.
#[test]
fn cfd_is_the_stats_conns_descriptor() {
    let rm = remora(&[]);
    let mut w = watcher(rm.port, "fetchers");
    let mut c = connect(rm.port);
    c.write_all(b"stats conns\r\n").unwrap();
    let conns = String::from_utf8(read_until(&mut c, b"END\r\n", Duration::from_secs(5))).unwrap();
    let last = conns.lines().rev().nth(1).unwrap();
    let fd = last.trim_start_matches("STAT ").split(':').next().unwrap();
    c.write_all(b"get foo\r\n").unwrap();
    read_until(&mut c, b"END\r\n", Duration::from_secs(5));
    let l = line(&mut w);
    assert!(
        l.contains(&format!(" cfd={fd} ")),
        "{l} (stats conns: {conns})"
    );
}

/// The `connevents` lines of a client that quits and one that sends an HTTP request.
fn conn_lines(port: u16) -> Vec<String> {
    // The start-up probe's connection must be gone before watching, or its close shows.
    std::thread::sleep(Duration::from_millis(500));
    let mut w = watcher(port, "connevents");
    let mut c = connect(port);
    c.write_all(b"version\r\nquit\r\n").unwrap();
    read_until(&mut c, b"\r\n", Duration::from_secs(5));
    let mut lines: Vec<String> = (0..2).map(|_| mask(&line(&mut w))).collect();
    let mut h = connect(port);
    h.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    lines.extend((0..2).map(|_| mask(&line(&mut w))));
    lines
}

#[test]
fn conn_lines_match_memcached() {
    let rm = remora(&[]);
    let b = conn_lines(rm.port);
    assert_eq!(
        b[1],
        "ts=* gid=* type=conn_close rip=127.0.0.1 rport=* transport=tcp reason=normal cfd=*"
    );
    assert!(b[3].contains("reason=error"), "{b:?}");
    let Some(mc) = memcached(&[]) else { return };
    assert_eq!(conn_lines(mc.port), b);
}

/// `-W` refuses `watch`; an unknown stream is `ERROR`; `stats` counts watchers, which go when
/// their client hangs up.
#[test]
fn watch_refusals_and_watcher_count_match_memcached() {
    let Some(mc) = memcached(&["-W"]) else { return };
    let rm = remora(&["-W"]);
    let script = b"watch mutations\r\nwatch bogus\r\n";
    assert_eq!(
        text_roundtrip(mc.port, script),
        text_roundtrip(rm.port, script)
    );
    // `watch` after pipelined commands whose replies are not sent yet is refused (not under
    // `-R 1`, where remora sends each reply before the next request and memcached does not).
    let script = b"version\r\nwatch\r\nwatch bogus\r\n";
    let (mc, rm) = (memcached(&[]).unwrap(), remora(&[]));
    let a = normalize_text(&text_roundtrip(mc.port, script));
    assert_eq!(a, normalize_text(&text_roundtrip(rm.port, script)));
    assert!(
        a.ends_with("ERROR cannot pipeline other commands before watch\r\n"),
        "{a}"
    );
    let rm = remora(&[]);
    let mut c = connect(rm.port);
    c.write_all(b"watch bogus\r\n").unwrap();
    assert_eq!(
        read_until(&mut c, b"\r\n", Duration::from_secs(5)),
        b"ERROR\r\n"
    );
    let count = |c: &mut TcpStream| {
        c.write_all(b"stats\r\n").unwrap();
        let s = String::from_utf8(read_until(c, b"END\r\n", Duration::from_secs(5))).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("STAT log_watchers "))
            .unwrap()
            .to_string()
    };
    let w1 = watcher(rm.port, "fetchers");
    let w2 = watcher(rm.port, "");
    assert_eq!(count(&mut c), "2");
    drop((w1, w2));
    let t0 = Instant::now();
    while count(&mut c) != "0" {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "watchers not dropped"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// watcher.t: a watcher that does not read misses lines once its buffer is full and is told
/// how many (`skipped=N`) before the next line that fits.
#[test]
fn a_slow_watcher_is_told_what_it_skipped() {
    let rm = remora(&["-o", "watcher_logbuf_size=8"]);
    let mut w = watcher(rm.port, "fetchers");
    let mut c = connect(rm.port);
    let key = "X".repeat(180);
    let mut batch = Vec::new();
    for i in 0..2000 {
        batch.extend_from_slice(format!("get foo{i}{key}\r\n").as_bytes());
    }
    for _ in 0..20 {
        c.write_all(&batch).unwrap();
        let mut ends = 0;
        while ends < 2000 {
            let r = read_until(&mut c, b"END\r\n", Duration::from_secs(5));
            ends += r.windows(5).filter(|x| x == b"END\r\n").count();
        }
    }
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < Duration::from_secs(30), "no skipped= line");
        let l = line(&mut w);
        if l.starts_with("skipped=") {
            break;
        }
        c.write_all(b"get foob\r\n").unwrap();
        read_until(&mut c, b"END\r\n", Duration::from_secs(5));
    }
    // The line that fit: a `get foob`, or one of the burst if the socket took more meanwhile.
    let next = line(&mut w);
    assert!(next.contains(" type=item_get key=foo"), "{next}");
}
