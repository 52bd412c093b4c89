//! Shared helpers for the kv integration tests: start `remora kv serve` and `memcached` on free
//! loopback ports, talk to them with timeouts, and kill only our own children.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A server process that is killed when dropped.
pub struct Srv {
    pub child: Child,
    pub port: u16,
    pub name: &'static str,
}

impl Drop for Srv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(mut m) = SERVERS.lock() {
            m.remove(&self.port);
        }
    }
}

/// Each running server's process id and stderr file by port, so that a failed connect can say
/// whether the server is still alive and what it printed (once seen in CI: a connect reset right
/// after the server accepted its readiness probe, with nothing else to go on).
static SERVERS: Mutex<BTreeMap<u16, (u32, PathBuf)>> = Mutex::new(BTreeMap::new());

/// What is known about the server on `port`: alive or gone, and the end of its stderr.
pub fn server_report(port: u16) -> String {
    let Some((pid, log)) = SERVERS.lock().ok().and_then(|m| m.get(&port).cloned()) else {
        return format!("no server of this test on port {port}");
    };
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .map(|(_, r)| r.chars().next().unwrap_or('?'))
        })
        .map_or("gone".to_string(), |c| format!("state {c}"));
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    let tail: String = err
        .chars()
        .rev()
        .take(2000)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("server pid {pid} on port {port}: {state}; its stderr:\n{tail}")
}

/// A port free for both TCP and UDP right now, and never handed to two tests of this process.
///
/// Regression (seen in CI, in a since-replaced large-multiget test): ports from `bind(0)` come from the
/// kernel's ephemeral range and are free again as soon as the probe closes, so two tests running
/// in parallel could draw the same port; the second server failed to bind, `wait_up` saw the
/// first one listening, and the test talked to another test's (descriptor-starved) server.
/// Ports here come from a per-process counter below the ephemeral range (32768 and up), which
/// `bind(0)` never hands out.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = 20_000 + (std::process::id().wrapping_mul(131).wrapping_add(n) % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", p)).is_ok() && UdpSocket::bind(("127.0.0.1", p)).is_ok()
        {
            return p;
        }
    }
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

pub fn memcached_path() -> Option<String> {
    let out = Command::new("sh")
        .args(["-c", "command -v memcached"])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!p.is_empty()).then_some(p)
}

/// Waits up to 10 s for a server to accept on `port`.
pub fn wait_up(port: u16) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Waits up to 10 s for a memcached-protocol server on `port` to answer `version` (with anything:
/// under `-Y` the answer is an authentication error): a listening socket alone does not say the
/// server behind it got past its start-up.
fn wait_serving(port: u16) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 64];
            if s.write_all(b"version\r\n").is_ok() && matches!(s.read(&mut buf), Ok(n) if n > 0) {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn start(name: &'static str, prog: &str, pre: &[&str], extra: &[&str]) -> Srv {
    let port = free_port();
    let ps = port.to_string();
    let mut args: Vec<&str> = pre.to_vec();
    args.extend(["-p", &ps, "-U", &ps, "-l", "127.0.0.1", "-t", "2"]);
    if is_root() {
        args.extend(["-u", "root"]);
    }
    args.extend(extra);
    let log =
        std::env::temp_dir().join(format!("remora-kv-test-{}-{port}.err", std::process::id()));
    let err = std::fs::File::create(&log).expect("server stderr file");
    let child = Command::new(prog)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {prog}: {e}"));
    SERVERS.lock().unwrap().insert(port, (child.id(), log));
    let s = Srv { child, port, name };
    assert!(
        wait_serving(port),
        "{name} did not start serving on port {port}: {}",
        server_report(port)
    );
    s
}

pub fn remora(extra: &[&str]) -> Srv {
    start(
        "remora",
        env!("CARGO_BIN_EXE_remora"),
        &["kv", "serve"],
        extra,
    )
}

/// Starts memcached, or prints why the test is skipped and returns None.
pub fn memcached(extra: &[&str]) -> Option<Srv> {
    match memcached_path() {
        Some(p) => Some(start("memcached", &p, &[], extra)),
        None => {
            eprintln!("SKIP: memcached not installed (apt-get install memcached)");
            None
        }
    }
}

pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("connect: {e}; {}", server_report(port)));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Reads until `out` ends with `end` or the deadline passes.
pub fn read_until(s: &mut TcpStream, end: &[u8], limit: Duration) -> Vec<u8> {
    let t0 = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) && t0.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(_) => break,
        }
    }
    out
}

/// The reply to [`SENTINEL`], unique enough to mark the end of a script's replies.
const SENTINEL_REPLY: &[u8] = b"VA 6\r\n424242\r\n";
/// Creates a counter and returns it: both servers answer `SENTINEL_REPLY`.
const SENTINEL: &[u8] = b"ma __sentinel__ N0 J424242 v\r\nmd __sentinel__ q\r\n";

/// Sends a text script followed by a sentinel and returns the replies before the sentinel's.
pub fn text_roundtrip(port: u16, script: &[u8]) -> Vec<u8> {
    let mut s = connect(port);
    s.write_all(script).unwrap();
    s.write_all(SENTINEL).unwrap();
    let out = read_until(&mut s, SENTINEL_REPLY, Duration::from_secs(5));
    out.strip_suffix(SENTINEL_REPLY)
        .map(<[u8]>::to_vec)
        .unwrap_or(out)
}

/// Masks what legitimately differs between servers: CAS values and the version string.
pub fn normalize_text(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let mut out = String::new();
    for line in s.split_inclusive("\r\n") {
        let toks: Vec<&str> = line.trim_end_matches("\r\n").split(' ').collect();
        let fixed = match toks[0] {
            "VALUE" if toks.len() == 5 => {
                format!("{} {} {} {} <cas>", toks[0], toks[1], toks[2], toks[3])
            }
            "VERSION" => "VERSION <v>".to_string(),
            "VA" | "HD" | "EN" | "NF" | "NS" | "EX" => toks
                .iter()
                .map(|t| {
                    if t.len() > 1
                        && t.starts_with('c')
                        && t[1..].chars().all(|c| c.is_ascii_digit())
                    {
                        "c<cas>".to_string()
                    } else {
                        t.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(" "),
            _ => toks.join(" "),
        };
        out.push_str(&fixed);
        out.push_str(if line.ends_with("\r\n") { "\r\n" } else { "" });
    }
    out
}

/// Kills the child and returns what it wrote to stderr (if that was piped).
pub fn finish(c: &mut Child) -> String {
    let _ = c.kill();
    let _ = c.wait();
    let mut err = String::new();
    if let Some(mut e) = c.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

/// A binary-protocol request (opaque 0xdeadbeef).
pub fn bin(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let mut v = vec![0x80, opcode];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]);
    v.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    v.extend_from_slice(&0xdeadbeefu32.to_be_bytes());
    v.extend_from_slice(&cas.to_be_bytes());
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

/// Splits responses into frames, masking CAS and version bodies.
pub fn frames(mut b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while b.len() >= 24 {
        let len = 24 + u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize;
        if b.len() < len {
            break;
        }
        let mut f = b[..len].to_vec();
        f[16..24].fill(0);
        if f[1] == 0x0b {
            // Version strings differ by design.
            f.truncate(24);
            f[8..12].fill(0);
        }
        out.push(f);
        b = &b[len..];
    }
    out
}

/// Sends binary requests then a NOOP and returns the response frames up to its reply.
pub fn bin_roundtrip(port: u16, reqs: &[u8]) -> Vec<Vec<u8>> {
    let mut s = connect(port);
    s.write_all(reqs).unwrap();
    s.write_all(&bin(0x0a, &[], &[], &[], 0)).unwrap();
    let mut all = Vec::new();
    let t0 = std::time::Instant::now();
    loop {
        all.extend(read_until(&mut s, &[], Duration::from_millis(1)));
        let f = frames(&all);
        if f.last().is_some_and(|l| l[1] == 0x0a) || t0.elapsed() > Duration::from_secs(5) {
            return f;
        }
        let mut buf = [0u8; 65536];
        use std::io::Read;
        match s.read(&mut buf) {
            Ok(0) => return frames(&all),
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
}
