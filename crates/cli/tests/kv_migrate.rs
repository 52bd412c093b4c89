//! Post-copy live migration of `remora kv serve`: a source started with `-A` is armed
//! (`migrate to HOST:PORT` or `remora kv migrate`), a target started with `--migrate-from`
//! maps the source's arena lazily, takes its clients over and pulls the rest; the failures
//! (the source killed mid-copy, the target killed after or leaving before taking over) end
//! on one consistent side. Every process started here is killed and reaped on drop.

mod kv_common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kv_common::{free_port, is_root};

const EXE: &str = env!("CARGO_BIN_EXE_remora");

// ---------------------------------------------------------------------------------------
// processes

/// A child of this test, killed (SIGKILL) and reaped when dropped; stderr goes to `log`.
struct Proc {
    child: Child,
    log: PathBuf,
    what: String,
}

impl Proc {
    fn spawn(mut cmd: Command, log: PathBuf, what: &str) -> Proc {
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

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(self.log.with_extension("out")).unwrap_or_default()
    }

    /// Its exit status, once it exits within `limit`.
    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
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

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL and reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("remora-kv-migrate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `remora kv serve` on `ip:port` (run inside the network namespace `netns` when given).
fn serve_cmd(ip: &str, port: u16, extra: &[&str], netns: Option<&str>) -> Command {
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
fn wait_listening(p: &mut Proc, addr: &str, limit: Duration) {
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
fn source(d: &Path, ip: &str, extra: &[&str], netns: Option<&str>) -> (Proc, String) {
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
fn target(d: &Path, ip: &str, from: &str, extra: &[&str], netns: Option<&str>) -> (Proc, String) {
    let port = free_port();
    let mut args = vec!["--migrate-from", from, "--migrate-wait", "60"];
    args.extend(extra);
    let p = Proc::spawn(
        serve_cmd(ip, port, &args, netns),
        d.join("target.log"),
        "the target",
    );
    (p, format!("{ip}:{port}"))
}

/// `remora kv migrate --source SRC --to TO --wait 30`, in the background.
fn operator(d: &Path, src: &str, to: &str) -> Proc {
    let mut c = Command::new(EXE);
    c.args(["kv", "migrate", "--source", src, "--to", to, "--wait", "30"]);
    Proc::spawn(c, d.join("migrate.log"), "remora kv migrate")
}

// ---------------------------------------------------------------------------------------
// the text protocol

/// What a request got back.
#[derive(Debug, PartialEq)]
enum Reply {
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

struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn open(addr: &str, timeout: Duration) -> std::io::Result<Conn> {
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

    fn line(&mut self) -> Result<String, Reply> {
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

    fn other(l: String) -> Reply {
        match l.strip_prefix("SERVER_ERROR migrated to ") {
            Some(to) => Reply::Redirect(to.to_string()),
            None => Reply::Line(l),
        }
    }

    fn send(&mut self, b: &[u8]) -> Result<(), Reply> {
        self.w.write_all(b).map_err(|_| Reply::Closed)
    }

    fn get(&mut self, keys: &[&str]) -> Reply {
        self.get_inner(keys).unwrap_or_else(|r| r)
    }

    fn get_inner(&mut self, keys: &[&str]) -> Result<Reply, Reply> {
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

    fn set(&mut self, key: &str, v: &[u8]) -> Reply {
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
    fn ask(&mut self, req: &str) -> Reply {
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
const NOT_YET: &str = "SERVER_ERROR not serving yet";

/// One request on a fresh connection, one line back.
fn ask(addr: &str, req: &str) -> Reply {
    match Conn::open(addr, Duration::from_secs(30)) {
        Ok(mut c) => c.ask(req),
        Err(_) => Reply::Closed,
    }
}

/// `stats migration` of `addr`; `None` when it does not answer.
fn stats(addr: &str) -> Option<HashMap<String, String>> {
    let mut c = Conn::open(addr, Duration::from_secs(30)).ok()?;
    c.send(b"stats migration\r\n").ok()?;
    let mut m = HashMap::new();
    loop {
        let l = c.line().ok()?;
        if l == "END" {
            return Some(m);
        }
        let mut t = l.splitn(3, ' ');
        match (t.next(), t.next(), t.next()) {
            (Some("STAT"), Some(k), v) => {
                m.insert(k.to_string(), v.unwrap_or("").to_string());
            }
            _ => return None,
        }
    }
}

fn stat<'a>(m: &'a HashMap<String, String>, k: &str) -> &'a str {
    m.get(k).map_or("<missing>", String::as_str)
}

fn stat_n(m: &HashMap<String, String>, k: &str) -> u64 {
    stat(m, k)
        .parse()
        .unwrap_or_else(|_| panic!("{k} is not a number: {m:?}"))
}

/// Polls `stats migration` until `migrate_state` is one of `states`; the last answer.
fn wait_state(addr: &str, states: &[&str], limit: Duration) -> HashMap<String, String> {
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
fn wait_serving(addr: &str, limit: Duration) {
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

fn key(i: usize) -> String {
    format!("key:{i}")
}

/// The value of `key` at `version`: length and bytes depend on both, so a value of another
/// key or version never passes for this one.
fn value(key: &str, version: u64, base: usize) -> Vec<u8> {
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
fn load(addr: &str, n: usize, base: usize) {
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
fn assert_copied(
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

fn check_all(addr: &str, model: &HashMap<String, u64>, base: usize) -> Vec<String> {
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

fn initial_model(n: usize) -> HashMap<String, u64> {
    (0..n).map(|i| (key(i), 0)).collect()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

// ---------------------------------------------------------------------------------------
// a client through the switch-over

/// What the client thread saw.
#[derive(Default)]
struct ClientRun {
    /// Requests answered by the source and by the target.
    on_source: u64,
    on_target: u64,
    /// Where the source sent it.
    sent_to: Option<String>,
    /// Requests the target refused as `not serving yet` (and were asked again).
    not_yet: u64,
    /// Values that differ from the last acknowledged write (misses included).
    mismatches: Vec<String>,
    /// Anything else unexpected (a reply of the wrong kind, a timeout, a lost server).
    errors: Vec<String>,
    /// Key -> version of the last acknowledged set.
    model: HashMap<String, u64>,
}

enum Op {
    Get(usize),
    Set(usize),
    Multi(usize),
}

/// Runs get / set / 10-key multiget against `addr` until `stop`, following the source's
/// redirect (and retrying the request there); `moved` is raised on the first request the
/// target answers.
fn client(
    addr: String,
    n: usize,
    base: usize,
    stop: Arc<AtomicBool>,
    moved: Arc<AtomicBool>,
) -> ClientRun {
    let mut run = ClientRun {
        model: initial_model(n),
        ..ClientRun::default()
    };
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut version = 0u64;
    let mut at = addr;
    let mut conn = Conn::open(&at, Duration::from_secs(30)).ok();
    'ops: while !stop.load(Ordering::Relaxed) {
        if run.errors.len() > 20 {
            break;
        }
        let op = match rng.below(10) {
            0..=4 => Op::Get(rng.below(n)),
            5..=7 => Op::Set(rng.below(n)),
            _ => Op::Multi(rng.below(n)),
        };
        if let Op::Set(_) = op {
            version += 1;
        }
        let mut tries = 0;
        let reply = loop {
            tries += 1;
            if tries > 500 {
                run.errors
                    .push(format!("no answer from {at} after 500 tries"));
                break 'ops;
            }
            let Some(c) = conn.as_mut() else {
                std::thread::sleep(Duration::from_millis(20));
                conn = Conn::open(&at, Duration::from_secs(30)).ok();
                continue;
            };
            let r = match &op {
                Op::Get(i) => c.get(&[&key(*i)]),
                Op::Set(i) => c.set(&key(*i), &value(&key(*i), version, base)),
                Op::Multi(i) => {
                    let ks: Vec<String> = (0..10).map(|j| key((i + j * 7) % n)).collect();
                    let refs: Vec<&str> = ks.iter().map(String::as_str).collect();
                    c.get(&refs)
                }
            };
            match r {
                Reply::Redirect(to) => {
                    if run.sent_to.is_some() {
                        run.errors
                            .push(format!("redirected again, by {at}, to {to}"));
                        break 'ops;
                    }
                    run.sent_to = Some(to.clone());
                    at = to;
                    conn = Conn::open(&at, Duration::from_secs(30)).ok();
                }
                // Closed after (or instead of) the redirect line: ask the same server again.
                Reply::Closed => conn = Conn::open(&at, Duration::from_secs(30)).ok(),
                // A target that refuses clients until its source let go (rather than holding
                // them) may do so a moment after the source sent them on: ask again.
                Reply::Line(l) if run.sent_to.is_some() && l.starts_with(NOT_YET) => {
                    run.not_yet += 1;
                    std::thread::sleep(Duration::from_millis(10));
                    conn = Conn::open(&at, Duration::from_secs(30)).ok();
                }
                r => break r,
            }
        };
        if run.sent_to.is_some() {
            run.on_target += 1;
            moved.store(true, Ordering::Relaxed);
        } else {
            run.on_source += 1;
        }
        let expect = |run: &mut ClientRun, k: &str, got: Option<&Vec<u8>>| {
            let want = value(k, run.model[k], base);
            match got {
                Some(v) if *v == want => {}
                Some(v) => run.mismatches.push(format!(
                    "{k} from {at}: expected version {}, got {:?}",
                    run.model[k],
                    String::from_utf8_lossy(&v[..v.len().min(40)])
                )),
                None => run.mismatches.push(format!(
                    "{k} from {at}: miss (expected version {})",
                    run.model[k]
                )),
            }
        };
        match (op, reply) {
            (Op::Set(i), Reply::Stored) => {
                run.model.insert(key(i), version);
            }
            (Op::Get(i), Reply::Values(hits)) => {
                let k = key(i);
                if hits.len() > 1 || hits.first().is_some_and(|(hk, _)| *hk != k) {
                    run.errors.push(format!("get {k}: hits {:?}", hits.len()));
                }
                expect(&mut run, &k, hits.first().map(|(_, v)| v));
            }
            (Op::Multi(i), Reply::Values(hits)) => {
                if hits.len() > 10 {
                    run.errors
                        .push(format!("multiget: {} hits for 10 keys", hits.len()));
                }
                let got: HashMap<String, Vec<u8>> = hits.into_iter().collect();
                for j in 0..10 {
                    let k = key((i + j * 7) % n);
                    expect(&mut run, &k, got.get(&k));
                }
            }
            (_, r) => run
                .errors
                .push(format!("unexpected reply from {at}: {r:?}")),
        }
    }
    run
}

/// Waits for `flag` up to `limit`.
fn wait_flag(flag: &AtomicBool, limit: Duration) -> bool {
    let t0 = Instant::now();
    while !flag.load(Ordering::Relaxed) {
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
fn a_client_workload_runs_through_the_switch_over_and_reads_its_last_acknowledged_writes() {
    const N: usize = 5000;
    const BASE: usize = 250;
    let d = dir("workload");
    let (mut src, src_addr) = source(&d, "127.0.0.1", &[], None);
    load(&src_addr, N, BASE);
    let (stop, moved) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let worker = {
        let (a, s, m) = (src_addr.clone(), stop.clone(), moved.clone());
        std::thread::spawn(move || client(a, N, BASE, s, m))
    };
    // The client is at work on the source before the migration starts.
    std::thread::sleep(Duration::from_millis(300));
    let (mut tgt, tgt_addr) = target(
        &d,
        "127.0.0.1",
        &src_addr,
        &["--migrate-push-rate", "2m"],
        None,
    );
    let mut op = operator(&d, &src_addr, &tgt_addr);
    let switched = wait_flag(&moved, Duration::from_secs(90));
    // Right after the switch the copy is still under way (the push is held to 2 MB/s).
    let at_switch = stats(&tgt_addr);
    if switched {
        std::thread::sleep(Duration::from_millis(1500));
    }
    stop.store(true, Ordering::Relaxed);
    let run = worker.join().unwrap();
    eprintln!(
        "client: {} requests on the source, {} on the target ({} refused as not serving yet); \
         target at the switch: {at_switch:?}",
        run.on_source, run.on_target, run.not_yet
    );
    assert!(
        switched,
        "the client never reached the target; source: {}\ntarget: {}\nmigrate: {}",
        src.log(),
        tgt.log(),
        op.log()
    );
    assert!(
        run.mismatches.is_empty(),
        "{} values differ from the last acknowledged writes, first: {:?}",
        run.mismatches.len(),
        &run.mismatches[..run.mismatches.len().min(10)]
    );
    assert!(run.errors.is_empty(), "client errors: {:?}", run.errors);
    assert_eq!(
        run.sent_to.as_deref(),
        Some(tgt_addr.as_str()),
        "redirect target"
    );
    assert!(
        run.on_source > 0 && run.on_target > 0,
        "{} on the source, {} on the target",
        run.on_source,
        run.on_target
    );
    let at_switch = at_switch.expect("the target answers stats migration");
    assert!(
        matches!(
            stat(&at_switch, "migrate_state"),
            "handing_over" | "pulling"
        ) && stat_n(&at_switch, "migrate_units_present")
            < stat_n(&at_switch, "migrate_units_total"),
        "the copy was still under way when the client moved: {at_switch:?}"
    );
    let st = op.wait_exit(Duration::from_secs(180));
    assert!(
        st.is_some_and(|s| s.success()),
        "remora kv migrate: {st:?}\n{}\n{}",
        op.log(),
        op.stdout()
    );
    assert!(op.stdout().contains("migrated "), "{}", op.stdout());
    let st = src.wait_exit(Duration::from_secs(60));
    assert!(
        st.is_some_and(|s| s.success()),
        "the source did not stop by itself: {st:?}\n{}",
        src.log()
    );
    assert!(src.log().contains("[migrate] the copy to"), "{}", src.log());
    let m = stats(&tgt_addr).expect("target stats");
    eprintln!("target at the end: {m:?}");
    assert_eq!(stat(&m, "migrate_role"), "target", "{m:?}");
    assert_eq!(stat(&m, "migrate_state"), "complete", "{m:?}");
    assert_eq!(
        stat_n(&m, "migrate_units_present"),
        stat_n(&m, "migrate_units_total"),
        "{m:?}"
    );
    assert!(stat_n(&m, "migrate_units_total") > 0, "{m:?}");
    assert!(
        stat_n(&m, "migrate_faults") > 0,
        "the client's reads faulted pages in: {m:?}"
    );
    assert!(tgt.log().contains("is complete"), "{}", tgt.log());
    // Every item, as last acknowledged, is on the target once the copy is complete.
    let bad = check_all(&tgt_addr, &run.model, BASE);
    assert!(
        bad.is_empty(),
        "{} items wrong on the target: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    assert!(tgt.running(), "the target serves on: {}", tgt.log());
    drop(tgt);
    let _ = std::fs::remove_dir_all(&d);
}

// ---------------------------------------------------------------------------------------
// two network namespaces

/// A network namespace joined to this one by a veth pair: `host` on this side, `inner`
/// inside; removed (with the pair) on drop.
struct Netns {
    name: String,
    link: String,
    host: String,
    inner: String,
}

impl Netns {
    fn create() -> Option<Netns> {
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

#[test]
fn between_two_network_namespaces() {
    const N: usize = 3000;
    const BASE: usize = 400;
    if !is_root() {
        eprintln!("SKIP: network namespaces need root");
        return;
    }
    let Some(ns) = Netns::create() else {
        eprintln!("SKIP: ip netns / veth pairs are unavailable here");
        return;
    };
    let d = dir("netns");
    // The source on this side of the pair, the target inside the namespace: the page
    // server, the control channel and the clients all cross the veth pair.
    let (mut src, src_addr) = source(&d, &ns.host, &[], None);
    load(&src_addr, N, BASE);
    let mut model = initial_model(N);
    let (mut tgt, tgt_addr) = target(
        &d,
        &ns.inner,
        &src_addr,
        &["--migrate-push-rate", "500k"],
        Some(&ns.name),
    );
    let mut op = operator(&d, &src_addr, &tgt_addr);
    let m = wait_state(&tgt_addr, &["pulling", "complete"], Duration::from_secs(90));
    assert_eq!(
        stat(&m, "migrate_state"),
        "pulling",
        "the copy is under way (the push is held to 500 kB/s): {m:?}"
    );
    wait_serving(&tgt_addr, Duration::from_secs(30));
    // During the copy: the source sends clients on, the target serves reads and writes.
    match ask(&src_addr, "get key:1") {
        Reply::Redirect(to) => assert_eq!(to, tgt_addr),
        // The copy completed meanwhile and the source is gone.
        Reply::Closed => assert!(!src.running(), "the source closed without a redirect"),
        r => panic!("the source answered {r:?}"),
    }
    let mut c = Conn::open(&tgt_addr, Duration::from_secs(30)).unwrap();
    for i in (0..N).step_by(N / 20) {
        let k = key(i);
        match c.get(&[&k]) {
            Reply::Values(h) => assert_eq!(h, vec![(k.clone(), value(&k, 0, BASE))], "{k}"),
            r => panic!("get {k} from the target during the copy: {r:?}"),
        }
        let v = value(&k, 1, BASE);
        assert_eq!(c.set(&k, &v), Reply::Stored, "set {k} on the target");
        model.insert(k.clone(), 1);
        assert_eq!(c.get(&[&k]), Reply::Values(vec![(k.clone(), v)]), "{k}");
    }
    for i in N..N + 10 {
        let k = key(i);
        assert_eq!(c.set(&k, &value(&k, 0, BASE)), Reply::Stored, "set {k}");
        model.insert(k, 0);
    }
    drop(c);
    let st = op.wait_exit(Duration::from_secs(180));
    assert!(
        st.is_some_and(|s| s.success()),
        "remora kv migrate: {st:?}\n{}",
        op.log()
    );
    let st = src.wait_exit(Duration::from_secs(60));
    assert!(
        st.is_some_and(|s| s.success()),
        "the source did not stop by itself: {st:?}\n{}",
        src.log()
    );
    let m = stats(&tgt_addr).expect("target stats");
    assert_eq!(stat(&m, "migrate_state"), "complete", "{m:?}");
    assert_copied(&m, &tgt_addr, &model, BASE, "target");
    assert!(tgt.running(), "the target serves on: {}", tgt.log());
    drop(tgt);
    drop(ns);
    let _ = std::fs::remove_dir_all(&d);
}

// ---------------------------------------------------------------------------------------
// failures

/// A source with `n` items of about `base` bytes, armed for `target`, and a target pulling
/// from it at 100 kB/s (a copy of many seconds), once it took over.
fn slow_migration(d: &Path, n: usize, base: usize) -> (Proc, String, Proc, String) {
    let (src, src_addr) = source(d, "127.0.0.1", &[], None);
    load(&src_addr, n, base);
    let (tgt, tgt_addr) = target(
        d,
        "127.0.0.1",
        &src_addr,
        &["--migrate-push-rate", "100k"],
        None,
    );
    assert_eq!(
        ask(&src_addr, &format!("migrate to {tgt_addr}")),
        Reply::Line("OK".into())
    );
    let m = wait_state(&tgt_addr, &["pulling", "complete"], Duration::from_secs(90));
    assert_eq!(stat(&m, "migrate_state"), "pulling", "{m:?}");
    wait_serving(&tgt_addr, Duration::from_secs(30));
    (src, src_addr, tgt, tgt_addr)
}

/// A read from the target while its source may be gone: the right value, a `SERVER_ERROR`,
/// or no answer are all fine; `Err` describes anything else.
fn read_or_refuse(addr: &str, k: &str, base: usize) -> Result<&'static str, String> {
    let Ok(mut c) = Conn::open(addr, Duration::from_secs(60)) else {
        return Ok("refused");
    };
    match c.get(&[k]) {
        Reply::Values(h) if h == vec![(k.to_string(), value(k, 0, base))] => Ok("value"),
        Reply::Values(h) if h.is_empty() => Err(format!("{k}: a miss")),
        Reply::Values(h) => Err(format!(
            "{k}: a wrong value: {:?}",
            h.iter()
                .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(&v[..v.len().min(40)])))
                .collect::<Vec<_>>()
        )),
        Reply::Line(l) if l.starts_with("SERVER_ERROR") => Ok("server_error"),
        Reply::Closed => Ok("closed"),
        r => Err(format!("{k}: {r:?}")),
    }
}

#[test]
fn a_source_killed_mid_copy_leaves_the_target_with_a_clear_error_and_no_wrong_values() {
    const N: usize = 3000;
    const BASE: usize = 1000;
    let d = dir("source-killed");
    let (mut src, _src_addr, mut tgt, tgt_addr) = slow_migration(&d, N, BASE);
    // With the source alive, reads fault their pages in (a few: most of the items stay
    // behind on the source).
    for i in (0..N).step_by(N / 4) {
        let k = key(i);
        assert_eq!(read_or_refuse(&tgt_addr, &k, BASE), Ok("value"), "{k}");
    }
    src.kill();
    // From here a read may fail, never return another value.
    let t0 = Instant::now();
    let mut seen: HashMap<&'static str, usize> = HashMap::new();
    let mut wrong = Vec::new();
    let mut i = 1;
    let status = loop {
        if let Ok(Some(st)) = tgt.child.try_wait() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            break None;
        }
        match read_or_refuse(&tgt_addr, &key(i % N), BASE) {
            Ok(what) => *seen.entry(what).or_default() += 1,
            Err(e) => wrong.push(e),
        }
        // About one 64 KiB unit of items further on each time.
        i += 53;
    };
    eprintln!("reads after the kill: {seen:?}");
    assert!(wrong.is_empty(), "reads after the source died: {wrong:?}");
    let log = tgt.log();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(75),
        "the target exits with EX_TEMPFAIL: {log}"
    );
    assert!(log.contains("lost the source"), "{log}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_target_killed_after_taking_over_leaves_the_source_serving() {
    const N: usize = 3000;
    const BASE: usize = 1000;
    let d = dir("target-killed");
    let (mut src, src_addr, mut tgt, tgt_addr) = slow_migration(&d, N, BASE);
    assert_eq!(
        ask(&src_addr, "get key:1"),
        Reply::Redirect(tgt_addr.clone()),
        "the source sends its clients on"
    );
    // A write the target acknowledged: gone with it.
    assert_eq!(
        Conn::open(&tgt_addr, Duration::from_secs(30))
            .unwrap()
            .set("key:2", b"written on the target"),
        Reply::Stored
    );
    tgt.kill();
    let m = wait_state(&src_addr, &["failed"], Duration::from_secs(60));
    assert_eq!(stat(&m, "migrate_role"), "source", "{m:?}");
    assert_eq!(stat_n(&m, "migrate_failures"), 1, "{m:?}");
    assert_eq!(stat_n(&m, "migrate_aborts"), 0, "{m:?}");
    assert!(src.running(), "the source serves on: {}", src.log());
    assert!(
        src.log().contains("left after taking over"),
        "{}",
        src.log()
    );
    let mut c = Conn::open(&src_addr, Duration::from_secs(30)).unwrap();
    // Flushed: older than the writes the target acknowledged, so never served.
    assert_eq!(c.get(&["key:1"]), Reply::Values(vec![]), "an old item");
    assert_eq!(
        c.get(&["key:2"]),
        Reply::Values(vec![]),
        "the item written on the target"
    );
    assert_eq!(c.set("fresh", b"after the failure"), Reply::Stored);
    assert_eq!(
        c.get(&["fresh"]),
        Reply::Values(vec![("fresh".into(), b"after the failure".to_vec())])
    );
    assert_eq!(c.set("key:1", b"again"), Reply::Stored);
    assert_eq!(
        c.get(&["key:1"]),
        Reply::Values(vec![("key:1".into(), b"again".to_vec())])
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_target_that_leaves_before_taking_over_leaves_every_item_on_the_source() {
    const N: usize = 2000;
    const BASE: usize = 300;
    let d = dir("target-left");
    let (mut src, src_addr) = source(&d, "127.0.0.1", &[], None);
    load(&src_addr, N, BASE);
    let model = initial_model(N);
    let first_to = format!("127.0.0.1:{}", free_port());
    assert_eq!(
        ask(&src_addr, &format!("migrate to {first_to}")),
        Reply::Line("OK".into())
    );
    // A target that asks, reads the offer, and leaves.
    {
        let mut c = Conn::open(&src_addr, Duration::from_secs(30)).unwrap();
        c.send(b"migrate begin\r\n").unwrap();
        let first = c.line().expect("the offer");
        assert!(first.starts_with("MIGRATE "), "{first}");
        assert!(
            first.ends_with(&first_to),
            "the offer names where clients go: {first}"
        );
        // The state lines of the offer end with a bare LF, its head and `END` with CRLF.
        let mut l = String::new();
        while l.trim_end() != "END" {
            l.clear();
            let n = c.r.read_line(&mut l).expect("the offer");
            assert!(n > 0, "the offer ended without END");
        }
    }
    let m = wait_state(&src_addr, &["aborted"], Duration::from_secs(60));
    assert_eq!(stat_n(&m, "migrate_aborts"), 1, "{m:?}");
    assert_eq!(stat_n(&m, "migrate_failures"), 0, "{m:?}");
    assert!(
        src.log().contains("left before it took over"),
        "{}",
        src.log()
    );
    let bad = check_all(&src_addr, &model, BASE);
    assert!(
        bad.is_empty(),
        "{} items lost or changed on the source: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    let mut c = Conn::open(&src_addr, Duration::from_secs(30)).unwrap();
    assert_eq!(c.set("fresh", b"1"), Reply::Stored);
    assert_eq!(
        c.get(&["fresh"]),
        Reply::Values(vec![("fresh".into(), b"1".to_vec())])
    );
    drop(c);
    // Armed again, it hands every item to a real target.
    let (mut tgt, tgt_addr) = target(&d, "127.0.0.1", &src_addr, &[], None);
    assert_eq!(
        ask(&src_addr, &format!("migrate to {tgt_addr}")),
        Reply::Line("OK".into())
    );
    let m = wait_state(&tgt_addr, &["complete"], Duration::from_secs(120));
    assert_copied(&m, &tgt_addr, &model, BASE, "second target");
    let mut c = Conn::open(&tgt_addr, Duration::from_secs(30)).unwrap();
    assert_eq!(
        c.get(&["fresh"]),
        Reply::Values(vec![("fresh".into(), b"1".to_vec())])
    );
    let st = src.wait_exit(Duration::from_secs(60));
    assert!(st.is_some_and(|s| s.success()), "{st:?}: {}", src.log());
    assert!(tgt.running(), "{}", tgt.log());
    let _ = std::fs::remove_dir_all(&d);
}

/// The same connection still serves a set and a get after `req` answered `want`.
fn answers_then_serves(c: &mut Conn, req: &str, want: &str, prefix: bool) {
    match c.ask(req) {
        Reply::Line(l) if l == want || (prefix && l.starts_with(want)) => {}
        r => panic!("`{req}` answered {r:?}, expected {want}"),
    }
    let k = format!("after:{}", req.replace(' ', "_"));
    assert_eq!(c.set(&k, b"v"), Reply::Stored, "after `{req}`");
    assert_eq!(
        c.get(&[&k]),
        Reply::Values(vec![(k.clone(), b"v".to_vec())]),
        "after `{req}`"
    );
}

#[test]
fn migrate_commands_need_dash_a_and_an_armed_source() {
    let d = dir("commands");
    // Without -A.
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut plain = Proc::spawn(
        serve_cmd("127.0.0.1", port, &[], None),
        d.join("plain.log"),
        "a server without -A",
    );
    wait_listening(&mut plain, &addr, Duration::from_secs(30));
    let mut c = Conn::open(&addr, Duration::from_secs(30)).unwrap();
    let no_a = "ERROR: migrate not enabled (start with -A)";
    answers_then_serves(&mut c, "migrate to 127.0.0.1:1", no_a, false);
    answers_then_serves(&mut c, "migrate cancel", no_a, false);
    answers_then_serves(
        &mut c,
        "migrate begin",
        "SERVER_ERROR migration not armed",
        true,
    );
    let m = stats(&addr).unwrap();
    assert_eq!(stat(&m, "migrate_role"), "none", "{m:?}");
    assert_eq!(stat(&m, "migrate_state"), "idle", "{m:?}");
    // With -A.
    let (_src, src_addr) = source(&d, "127.0.0.1", &[], None);
    let mut c = Conn::open(&src_addr, Duration::from_secs(30)).unwrap();
    answers_then_serves(
        &mut c,
        "migrate begin",
        "SERVER_ERROR migration not armed",
        true,
    );
    answers_then_serves(
        &mut c,
        "migrate cancel",
        "SERVER_ERROR no armed migration to cancel",
        false,
    );
    answers_then_serves(
        &mut c,
        "migrate bogus",
        "CLIENT_ERROR bad command line format",
        false,
    );
    answers_then_serves(
        &mut c,
        "migrate",
        "CLIENT_ERROR bad command line format",
        false,
    );
    answers_then_serves(
        &mut c,
        "migrate to nowhere",
        "CLIENT_ERROR bad command line format",
        false,
    );
    let m = stats(&src_addr).unwrap();
    assert_eq!(stat(&m, "migrate_state"), "idle", "{m:?}");
    // Armed, then cancelled: a target asking then is refused.
    answers_then_serves(&mut c, "migrate to 127.0.0.1:1", "OK", false);
    let m = stats(&src_addr).unwrap();
    assert_eq!(stat(&m, "migrate_role"), "source", "{m:?}");
    assert_eq!(stat(&m, "migrate_state"), "armed", "{m:?}");
    assert_eq!(stat(&m, "migrate_peer"), "127.0.0.1:1", "{m:?}");
    answers_then_serves(&mut c, "migrate cancel", "OK", false);
    answers_then_serves(
        &mut c,
        "migrate begin",
        "SERVER_ERROR migration not armed",
        true,
    );
    let m = stats(&src_addr).unwrap();
    assert_eq!(stat(&m, "migrate_state"), "idle", "{m:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Regression: the target built its arena settings without the source's `-I` and `-C` (the
/// item size limit and CAS), so the header check refused a source started with either.
#[test]
fn a_source_started_with_dash_i_or_dash_c_migrates_too() {
    for flags in [&["-I", "2m"][..], &["-C"][..]] {
        let d = dir(&format!("flags{}", flags.join("")));
        let (mut src, src_addr) = source(&d, "127.0.0.1", flags, None);
        load(&src_addr, 200, 100);
        let (mut tgt, tgt_addr) = target(&d, "127.0.0.1", &src_addr, flags, None);
        assert_eq!(
            ask(&src_addr, &format!("migrate to {tgt_addr}")),
            Reply::Line("OK".into())
        );
        wait_listening(&mut tgt, &tgt_addr, Duration::from_secs(60));
        wait_state(&tgt_addr, &["complete"], Duration::from_secs(120));
        let bad = check_all(&tgt_addr, &initial_model(200), 100);
        assert!(bad.is_empty(), "{flags:?}: {bad:?}");
        assert!(
            src.wait_exit(Duration::from_secs(60))
                .is_some_and(|s| s.success()),
            "{flags:?}: {}",
            src.log()
        );
        drop(tgt);
        let _ = std::fs::remove_dir_all(&d);
    }
}
