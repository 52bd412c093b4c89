//! What the kv migration tests share: `remora kv serve` processes (source, target, the
//! `remora kv migrate` operator, in network namespaces too), a text-protocol connection, and
//! the keys and versioned values the tests load and check. The client workload that runs
//! through a switch-over is in `workload.rs`.
#![allow(dead_code)]

pub mod workload;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::kv_common::{free_port, is_root};
pub const EXE: &str = env!("CARGO_BIN_EXE_remora");

// ---------------------------------------------------------------------------------------
// processes

/// A child of this test, killed (SIGKILL) and reaped when dropped; stderr goes to `log`.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
    pub what: String,
}

impl Proc {
    pub fn spawn(mut cmd: Command, log: PathBuf, what: &str) -> Proc {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log.with_extension("out")).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        Proc {
            child,
            log,
            what: what.to_string(),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.log.with_extension("out")).unwrap_or_default()
    }

    /// Its exit status, once it exits within `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if t0.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("remora-kv-migrate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `remora kv serve` on `ip:port` (run inside the network namespace `netns` when given).
pub fn serve_cmd(ip: &str, port: u16, extra: &[&str], netns: Option<&str>) -> Command {
    let mut c = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, EXE]);
            c
        }
        None => Command::new(EXE),
    };
    let ps = port.to_string();
    c.args(["kv", "serve", "-p", &ps, "-U", "0", "-l", ip, "-t", "4"]);
    if is_root() {
        c.args(["-u", "root"]);
    }
    c.args(extra);
    c
}

/// Waits until `addr` accepts connections (the process must stay alive meanwhile).
pub fn wait_listening(p: &mut Proc, addr: &str, limit: Duration) {
    let a: SocketAddr = addr.parse().unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok() {
            return;
        }
        if !p.running() {
            panic!("{} exited before listening on {addr}: {}", p.what, p.log());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} does not listen on {addr}: {}", p.what, p.log());
}

/// A source: `-A` (admin commands, `migrate to`) on `ip`, listening.
pub fn source(d: &Path, ip: &str, extra: &[&str], netns: Option<&str>) -> (Proc, String) {
    let port = free_port();
    let mut args = vec!["-A"];
    args.extend(extra);
    let mut p = Proc::spawn(
        serve_cmd(ip, port, &args, netns),
        d.join("source.log"),
        "the source",
    );
    let addr = format!("{ip}:{port}");
    wait_listening(&mut p, &addr, Duration::from_secs(30));
    (p, addr)
}

/// A target pulling from `from` (it listens only once it has the source's arena).
pub fn target(
    d: &Path,
    ip: &str,
    from: &str,
    extra: &[&str],
    netns: Option<&str>,
) -> (Proc, String) {
    let port = free_port();
    let mut args = vec![
        "--migrate-from",
        from,
        "--migrate-secret",
        SECRET,
        "--migrate-wait",
        "60",
    ];
    args.extend(extra);
    let p = Proc::spawn(
        serve_cmd(ip, port, &args, netns),
        d.join("target.log"),
        "the target",
    );
    (p, format!("{ip}:{port}"))
}

/// The secret the tests arm sources with and start targets with.
pub const SECRET: &str = "remora-test-secret-0123456789abcdef";

/// Arms the source at `src` for `to` with [`SECRET`] (`migrate to TO SECRET`).
pub fn arm(src: &str, to: &str) {
    assert_eq!(
        ask(src, &format!("migrate to {to} {SECRET}")),
        Reply::Line(format!("SECRET {SECRET}"))
    );
}

/// `remora kv migrate --source SRC --to TO --wait 30 --secret SECRET`, in the background.
pub fn operator(d: &Path, src: &str, to: &str) -> Proc {
    let mut c = Command::new(EXE);
    c.args(["kv", "migrate", "--source", src, "--to", to, "--wait", "30"]);
    c.args(["--secret", SECRET]);
    Proc::spawn(c, d.join("migrate.log"), "remora kv migrate")
}

// ---------------------------------------------------------------------------------------
// the text protocol

/// What a request got back.
#[derive(Debug, PartialEq)]
pub enum Reply {
    /// `get`'s hits (key, value), up to `END`.
    Values(Vec<(String, Vec<u8>)>),
    Stored,
    /// `SERVER_ERROR migrated to HOST:PORT`.
    Redirect(String),
    /// Any other line (a `SERVER_ERROR …` included).
    Line(String),
    /// The connection closed (or failed) without an answer.
    Closed,
    /// No answer within the read timeout.
    Timeout,
}

pub struct Conn {
    pub r: BufReader<TcpStream>,
    pub w: TcpStream,
}

impl Conn {
    pub fn open(addr: &str, timeout: Duration) -> std::io::Result<Conn> {
        let a: SocketAddr = addr.parse().unwrap();
        let s = TcpStream::connect_timeout(&a, Duration::from_secs(5))?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        s.set_nodelay(true)?;
        let w = s.try_clone()?;
        Ok(Conn {
            r: BufReader::new(s),
            w,
        })
    }

    pub fn line(&mut self) -> Result<String, Reply> {
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(0) => Err(Reply::Closed),
            Ok(_) if !l.ends_with("\r\n") => Err(Reply::Closed),
            Ok(_) => Ok(l.trim_end_matches("\r\n").to_string()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(Reply::Timeout)
            }
            Err(_) => Err(Reply::Closed),
        }
    }

    pub fn other(l: String) -> Reply {
        match l.strip_prefix("SERVER_ERROR migrated to ") {
            Some(to) => Reply::Redirect(to.to_string()),
            None => Reply::Line(l),
        }
    }

    pub fn send(&mut self, b: &[u8]) -> Result<(), Reply> {
        self.w.write_all(b).map_err(|_| Reply::Closed)
    }

    pub fn get(&mut self, keys: &[&str]) -> Reply {
        self.get_inner(keys).unwrap_or_else(|r| r)
    }

    pub fn get_inner(&mut self, keys: &[&str]) -> Result<Reply, Reply> {
        self.send(format!("get {}\r\n", keys.join(" ")).as_bytes())?;
        let mut hits = Vec::new();
        loop {
            let l = self.line()?;
            if l == "END" {
                return Ok(Reply::Values(hits));
            }
            let t: Vec<&str> = l.split(' ').collect();
            match t[..] {
                ["VALUE", k, _flags, n] => {
                    let n: usize = n.parse().map_err(|_| Reply::Line(l.clone()))?;
                    let mut v = vec![0; n + 2];
                    self.r.read_exact(&mut v).map_err(|_| Reply::Closed)?;
                    if !v.ends_with(b"\r\n") {
                        return Ok(Reply::Line(format!("{l}: no CRLF after the data")));
                    }
                    v.truncate(n);
                    hits.push((k.to_string(), v));
                }
                _ => return Ok(Conn::other(l)),
            }
        }
    }

    pub fn set(&mut self, key: &str, v: &[u8]) -> Reply {
        let mut req = format!("set {key} 0 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
        if let Err(r) = self.send(&req) {
            return r;
        }
        match self.line() {
            Ok(l) if l == "STORED" => Reply::Stored,
            Ok(l) => Conn::other(l),
            Err(r) => r,
        }
    }

    /// One request, one line back.
    pub fn ask(&mut self, req: &str) -> Reply {
        if let Err(r) = self.send(format!("{req}\r\n").as_bytes()) {
            return r;
        }
        match self.line() {
            Ok(l) => Conn::other(l),
            Err(r) => r,
        }
    }
}

/// What a target that refuses early clients answers until its source let go.
pub const NOT_YET: &str = "SERVER_ERROR not serving yet";

/// One request on a fresh connection, one line back.
pub fn ask(addr: &str, req: &str) -> Reply {
    match Conn::open(addr, Duration::from_secs(30)) {
        Ok(mut c) => c.ask(req),
        Err(_) => Reply::Closed,
    }
}

/// `stats migration` of `addr` (the operator client's reader); `None` when it does not answer.
pub fn stats(addr: &str) -> Option<HashMap<String, String>> {
    remora_kv::migrate::client::stats(addr).ok()
}

pub fn stat<'a>(m: &'a HashMap<String, String>, k: &str) -> &'a str {
    m.get(k).map_or("<missing>", String::as_str)
}

pub fn stat_n(m: &HashMap<String, String>, k: &str) -> u64 {
    stat(m, k)
        .parse()
        .unwrap_or_else(|_| panic!("{k} is not a number: {m:?}"))
}

/// Polls `stats migration` until `migrate_state` is one of `states`; the last answer.
pub fn wait_state(addr: &str, states: &[&str], limit: Duration) -> HashMap<String, String> {
    let t0 = Instant::now();
    let mut last = None;
    while t0.elapsed() < limit {
        if let Some(m) = stats(addr) {
            if states.contains(&stat(&m, "migrate_state")) {
                return m;
            }
            last = Some(m);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{addr} never reached migrate_state {states:?}; last stats: {last:?}");
}

/// Waits until the target at `addr` runs requests (`version`) rather than holding or
/// refusing them until its source let go.
pub fn wait_serving(addr: &str, limit: Duration) {
    let t0 = Instant::now();
    loop {
        let r = ask(addr, "version");
        match &r {
            Reply::Line(l) if l.starts_with("VERSION ") => return,
            _ if t0.elapsed() > limit => panic!("{addr} does not serve: {r:?}"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// items

pub fn key(i: usize) -> String {
    format!("key:{i}")
}

/// The value of `key` at `version`: length and bytes depend on both, so a value of another
/// key or version never passes for this one.
pub fn value(key: &str, version: u64, base: usize) -> Vec<u8> {
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let len = base + (h % 97) as usize;
    let mut v = format!("{key}/v{version}/").into_bytes();
    let mut x = h ^ version.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(b'a' + (x % 26) as u8);
    }
    v.truncate(len);
    v
}

/// Stores `key(i)` at version 0 for `i < n` with pipelined sets.
pub fn load(addr: &str, n: usize, base: usize) {
    let mut c = Conn::open(addr, Duration::from_secs(30)).unwrap();
    let keys: Vec<usize> = (0..n).collect();
    for chunk in keys.chunks(250) {
        let mut req = Vec::new();
        for &i in chunk {
            let k = key(i);
            let v = value(&k, 0, base);
            req.extend_from_slice(format!("set {k} 0 0 {}\r\n", v.len()).as_bytes());
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\n");
        }
        c.send(&req).unwrap();
        for &i in chunk {
            let l = c
                .line()
                .unwrap_or_else(|r| panic!("loading {}: {r:?}", key(i)));
            assert_eq!(l, "STORED", "loading {}", key(i));
        }
    }
}

/// Reads every key of `model` (key -> version) from `addr`; the keys that are missing or
/// differ, described.
/// The target's copy is complete and every item in `model` reads back from it.
pub fn assert_copied(
    m: &HashMap<String, String>,
    addr: &str,
    model: &HashMap<String, u64>,
    base: usize,
    what: &str,
) {
    assert_eq!(
        stat_n(m, "migrate_units_present"),
        stat_n(m, "migrate_units_total"),
        "{m:?}"
    );
    let bad = check_all(addr, model, base);
    assert!(
        bad.is_empty(),
        "{} items wrong on the {what}: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
}

pub fn check_all(addr: &str, model: &HashMap<String, u64>, base: usize) -> Vec<String> {
    let mut c = Conn::open(addr, Duration::from_secs(30)).unwrap();
    let mut keys: Vec<&String> = model.keys().collect();
    keys.sort();
    let mut bad = Vec::new();
    for chunk in keys.chunks(100) {
        let ks: Vec<&str> = chunk.iter().map(|k| k.as_str()).collect();
        match c.get(&ks) {
            Reply::Values(hits) => {
                let got: HashMap<String, Vec<u8>> = hits.into_iter().collect();
                for k in chunk {
                    match got.get(k.as_str()) {
                        None => bad.push(format!("{k}: miss")),
                        Some(v) if *v != value(k, model[*k], base) => bad.push(format!(
                            "{k}: expected version {}, got {:?}",
                            model[*k],
                            String::from_utf8_lossy(&v[..v.len().min(40)])
                        )),
                        Some(_) => {}
                    }
                }
            }
            other => bad.push(format!("get of {} keys: {other:?}", ks.len())),
        }
    }
    bad
}

pub fn initial_model(n: usize) -> HashMap<String, u64> {
    (0..n).map(|i| (key(i), 0)).collect()
}

pub struct Rng(u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

pub struct Netns {
    pub name: String,
    pub link: String,
    pub host: String,
    pub inner: String,
}

impl Netns {
    pub fn create() -> Option<Netns> {
        let id = std::process::id() % 100_000;
        // A /24 of its own per process, so two runs side by side do not share addresses.
        let net = format!("10.99.{}", 10 + id % 240);
        let ns = Netns {
            name: format!("rmkv{id}"),
            link: format!("vkh{id}"),
            host: format!("{net}.1"),
            inner: format!("{net}.2"),
        };
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let (n, h, peer) = (&ns.name, &ns.link, format!("vkn{id}"));
        let ok = ip(&["netns", "add", n])
            && ip(&["link", "add", h, "type", "veth", "peer", "name", &peer])
            && ip(&["link", "set", &peer, "netns", n])
            && ip(&["addr", "add", &format!("{}/24", ns.host), "dev", h])
            && ip(&[
                "-n",
                n,
                "addr",
                "add",
                &format!("{}/24", ns.inner),
                "dev",
                &peer,
            ])
            && ip(&["link", "set", h, "up"])
            && ip(&["-n", n, "link", "set", &peer, "up"])
            && ip(&["-n", n, "link", "set", "lo", "up"]);
        ok.then_some(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let quiet = |args: &[&str]| {
            let _ = Command::new("ip")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        quiet(&["netns", "del", &self.name]);
        // Deleting the namespace deletes the pair; this is for a namespace that never got it.
        quiet(&["link", "del", &self.link]);
    }
}
