//! `/metrics` for the tests: one scrape over plain HTTP/1.1, the text's samples by name and
//! labels, and a free loopback port to put a `--metrics` listener on.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A scrape's answer.
pub struct Scraped {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// `GET /metrics` on its own connection, with the bearer `token` when given.
pub fn scrape(addr: SocketAddr, token: Option<&str>) -> Scraped {
    // The metrics listener may come up a moment after the text port the caller waited for.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
            Ok(s) => break s,
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("connect {addr}: {e}"),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    Scraped {
        status,
        content_type,
        body: body.to_string(),
    }
}

/// The samples of a Prometheus text, by `name{labels}` as written (`name` alone without
/// labels); checks that every family has HELP and TYPE lines.
pub fn samples(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap();
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "{name}: no HELP in\n{text}"
            );
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (key, v) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        let v: f64 = v.parse().unwrap_or_else(|_| panic!("bad value {line:?}"));
        assert!(out.insert(key.to_string(), v).is_none(), "{key} twice");
    }
    out
}

/// One sample's value, or a panic that shows the text.
#[track_caller]
pub fn value(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("{key} missing; samples: {:#?}", m.keys()))
}

/// Scrapes until `pred` holds on the samples (counters read at scrape time may trail the
/// work by a moment), for up to 10 s; returns the last samples.
pub fn scrape_until(
    addr: SocketAddr,
    token: Option<&str>,
    pred: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> BTreeMap<String, f64> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let s = scrape(addr, token);
        assert_eq!(s.status, 200, "{}", s.body);
        let m = samples(&s.body);
        if pred(&m) || Instant::now() > end {
            return m;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A loopback address with a port free now (the kernel's choice, released at once).
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}
