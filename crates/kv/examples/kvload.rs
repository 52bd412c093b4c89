//! A small memcached load generator for `bench/kv.sh`: blocking connections on a few threads,
//! one request in flight per connection (so `--conns` requests in flight), ASCII protocol.
//!
//! `kvload HOST:PORT WORKLOAD [--threads T] [--conns C] [--secs S] [--keys K] [--rate R]`
//! WORKLOAD: `get` (single get), `multiget48`, `mix` (90% get / 10% set), 32-byte values.
//! `--rate R` paces rounds so all connections together send about R requests/s (latency at
//! moderate load).
//! Prints one line: `ops/s keys/s p50_us p99_us p999_us`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

struct Args {
    addr: String,
    workload: String,
    threads: usize,
    conns: usize,
    secs: f64,
    keys: usize,
    rate: f64,
}

fn parse() -> Args {
    let v: Vec<String> = std::env::args().skip(1).collect();
    if v.len() < 2 {
        eprintln!("usage: kvload HOST:PORT get|multiget48|mix [--threads T] [--conns C] [--secs S] [--keys K] [--rate R]");
        std::process::exit(2);
    }
    let mut a = Args {
        addr: v[0].clone(),
        workload: v[1].clone(),
        threads: 1,
        conns: 32,
        secs: 5.0,
        keys: 10_000,
        rate: 0.0,
    };
    let mut i = 2;
    while i + 1 < v.len() {
        let val = &v[i + 1];
        match v[i].as_str() {
            "--threads" => a.threads = val.parse().expect("threads"),
            "--conns" => a.conns = val.parse().expect("conns"),
            "--secs" => a.secs = val.parse().expect("secs"),
            "--keys" => a.keys = val.parse().expect("keys"),
            "--rate" => a.rate = val.parse().expect("rate"),
            o => panic!("unknown option {o}"),
        }
        i += 2;
    }
    a
}

/// Reads one whole reply (ending in END, STORED or an error line).
fn read_reply(s: &mut TcpStream, buf: &mut Vec<u8>, tmp: &mut [u8]) -> std::io::Result<()> {
    buf.clear();
    loop {
        let n = s.read(tmp)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&tmp[..n]);
        if buf.ends_with(b"END\r\n") || buf.ends_with(b"STORED\r\n") || buf.ends_with(b"ERROR\r\n")
        {
            return Ok(());
        }
    }
}

fn key(i: usize) -> String {
    format!("key:{i:012}")
}

fn main() {
    let a = parse();
    let value = [b'v'; 32];
    // Preload every key.
    {
        let mut s = TcpStream::connect(&a.addr).expect("connect");
        let mut req = Vec::new();
        for i in 0..a.keys {
            req.extend_from_slice(format!("set {} 0 0 32 noreply\r\n", key(i)).as_bytes());
            req.extend_from_slice(&value);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"get key:000000000000\r\n");
        s.write_all(&req).unwrap();
        let mut buf = Vec::new();
        read_reply(&mut s, &mut buf, &mut [0u8; 65536]).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs_f64(a.secs);
    let per_thread = a.conns.div_ceil(a.threads);
    let interval = if a.rate > 0.0 {
        Some(Duration::from_secs_f64(a.conns as f64 / a.rate))
    } else {
        None
    };
    let handles: Vec<_> = (0..a.threads)
        .map(|t| {
            let addr = a.addr.clone();
            let workload = a.workload.clone();
            let keys = a.keys;
            std::thread::spawn(move || {
                let mut conns: Vec<TcpStream> = (0..per_thread)
                    .map(|_| {
                        let s = TcpStream::connect(&addr).expect("connect");
                        s.set_nodelay(true).unwrap();
                        s
                    })
                    .collect();
                let mut lat = Vec::with_capacity(1 << 20);
                let mut ops = 0u64;
                let mut nkeys = 0u64;
                let mut rng = 0x9e3779b97f4a7c15u64 ^ (t as u64 + 1);
                let mut next = |n: usize| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % n as u64) as usize
                };
                let mut buf = Vec::new();
                let mut tmp = vec![0u8; 1 << 16];
                let mut req = Vec::new();
                let mut pace = Instant::now();
                let mut sent = vec![Instant::now(); per_thread];
                // Each round sends one request on every connection, then collects the replies:
                // `conns` requests are in flight at once.
                while Instant::now() < deadline {
                    if let Some(iv) = interval {
                        let target = pace + iv;
                        let now = Instant::now();
                        if target > now {
                            std::thread::sleep(target - now);
                        }
                        pace = target.max(now - iv);
                    }
                    let mut round_keys = 0;
                    for (i, c) in conns.iter_mut().enumerate() {
                        req.clear();
                        round_keys += match workload.as_str() {
                            "multiget48" => {
                                req.extend_from_slice(b"get");
                                for _ in 0..48 {
                                    req.push(b' ');
                                    req.extend_from_slice(key(next(keys)).as_bytes());
                                }
                                req.extend_from_slice(b"\r\n");
                                48
                            }
                            "mix" if next(10) == 0 => {
                                req.extend_from_slice(
                                    format!("set {} 0 0 32\r\n", key(next(keys))).as_bytes(),
                                );
                                req.extend_from_slice(&value);
                                req.extend_from_slice(b"\r\n");
                                1
                            }
                            _ => {
                                req.extend_from_slice(
                                    format!("get {}\r\n", key(next(keys))).as_bytes(),
                                );
                                1
                            }
                        };
                        sent[i] = Instant::now();
                        c.write_all(&req).unwrap();
                    }
                    for (i, c) in conns.iter_mut().enumerate() {
                        read_reply(c, &mut buf, &mut tmp).unwrap();
                        lat.push(sent[i].elapsed().as_nanos() as u64);
                    }
                    ops += per_thread as u64;
                    nkeys += round_keys;
                }
                (ops, nkeys, lat)
            })
        })
        .collect();
    let t0 = Instant::now();
    let mut ops = 0;
    let mut nkeys = 0;
    let mut lat = Vec::new();
    for h in handles {
        let (o, k, l) = h.join().unwrap();
        ops += o;
        nkeys += k;
        lat.extend(l);
    }
    let secs = a.secs.max(t0.elapsed().as_secs_f64().min(a.secs));
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0) as f64
            / 1000.0
    };
    println!(
        "{:.0} {:.0} {:.1} {:.1} {:.1}",
        ops as f64 / secs,
        nkeys as f64 / secs,
        pct(0.5),
        pct(0.99),
        pct(0.999)
    );
}
