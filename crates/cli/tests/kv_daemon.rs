//! memcached's process-level flags (issue 31): `-V`/`--version` print memcached's line, every
//! long option of memcached 1.6.18 is accepted with its short flag's meaning (a sample here,
//! checked against the real memcached where it is installed; the whole table in `remora-kv`'s
//! unit tests), and `-d` daemonizes: the command returns once the daemon serves, the pid file
//! names it, and it stops on SIGTERM, removing the pid file.

mod kv_common;
use kv_common::*;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

fn remora_exe() -> &'static str {
    env!("CARGO_BIN_EXE_remora")
}

/// `remora kv serve ARGS` run to its end.
fn kv_serve(args: &[&str]) -> Output {
    Command::new(remora_exe())
        .args(["kv", "serve"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run remora")
}

/// One request and its reply on a fresh connection.
fn ask(port: u16, req: &[u8], end: &[u8]) -> String {
    let mut s = connect(port);
    s.write_all(req).unwrap();
    String::from_utf8_lossy(&read_until(&mut s, end, Duration::from_secs(5))).into_owned()
}

/// The values of `names` in `stats settings`.
fn settings(port: u16, names: &[&str]) -> Vec<String> {
    let out = ask(port, b"stats settings\r\n", b"END\r\n");
    names
        .iter()
        .map(|n| {
            out.lines()
                .find(|l| l.split(' ').nth(1) == Some(*n))
                .unwrap_or("<missing>")
                .trim_end()
                .to_string()
        })
        .collect()
}

#[test]
fn version_prints_memcacheds_line_and_exits_0() {
    for flag in ["-V", "--version", "--vers"] {
        let out = kv_serve(&[flag]);
        assert!(out.status.success(), "{flag}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "memcached 1.6.18\n",
            "{flag}"
        );
    }
    match memcached_path() {
        Some(mc) => {
            let theirs = Command::new(mc).arg("--version").output().unwrap();
            assert_eq!(kv_serve(&["--version"]).stdout, theirs.stdout);
        }
        None => eprintln!("SKIP (comparison): memcached not installed"),
    }
    for flag in ["--help", "-i", "--license"] {
        let out = kv_serve(&[flag]);
        assert!(out.status.success(), "{flag}: {out:?}");
        assert!(!out.stdout.is_empty(), "{flag} printed nothing");
    }
}

/// Long options, some shortened to a prefix as getopt_long allows, mean what their short flags
/// mean: the settings memcached reports for them agree.
#[test]
fn long_options_are_accepted_and_mean_their_short_flags() {
    let long = [
        "--thr=2",
        "--conn-limit=100",
        "--max-item-size",
        "2m",
        "--memory-limit=32",
        "--disable-cas",
        "--disable-watch",
        "--disable-dumping",
        "--listen-backlog=64",
        "--max-reqs-per-event=5",
        "--slab-growth-factor=1.5",
        "--slab-min-size=64",
        "--enable-shutdown",
        "--extended=track_sizes",
        "--enable-largepages",
    ];
    let names = [
        "num_threads",
        "maxconns",
        "item_size_max",
        "maxbytes",
        "cas_enabled",
        "dump_enabled",
        "tcp_backlog",
        "reqs_per_event",
        "growth_factor",
        "chunk_size",
        "shutdown_command",
    ];
    let srv = remora(&long);
    let ours = settings(srv.port, &names);
    let want = [
        "STAT num_threads 2",
        "STAT maxconns 100",
        "STAT item_size_max 2097152",
        "STAT maxbytes 33554432",
        "STAT cas_enabled no",
        "STAT dump_enabled no",
        "STAT tcp_backlog 64",
        "STAT reqs_per_event 5",
        "STAT growth_factor 1.50",
        "STAT chunk_size 64",
        "STAT shutdown_command yes",
    ];
    assert_eq!(ours, want);
    // -X and -W: the dump and watch commands are refused with memcached's replies.
    let refused = |port| {
        [
            ask(port, b"lru_crawler metadump all\r\n", b"\r\n"),
            ask(port, b"stats cachedump 1 1\r\n", b"\r\n"),
            ask(port, b"watch\r\n", b"\r\n"),
        ]
    };
    let ours_refused = refused(srv.port);
    assert_eq!(
        ours_refused,
        [
            "ERROR metadump not allowed\r\n",
            "CLIENT_ERROR stats cachedump not allowed\r\n",
            "CLIENT_ERROR watch commands not allowed\r\n",
        ]
    );
    if let Some(mc) = memcached(&long) {
        assert_eq!(settings(mc.port, &names), ours, "remora vs memcached");
        assert_eq!(refused(mc.port), ours_refused, "remora vs memcached");
    }
}

/// A daemon started by this test: killed on drop (by its pid, which only it holds) if the test
/// ends before it stopped it.
struct Daemon(Option<i32>);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }
}

/// Whether `pid` has ended: gone, or a zombie its new parent (init) has not reaped yet.
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')),
    }
}

/// Runs `remora kv serve ARGS` in `dir` with stdout and stderr piped, as a script would, and
/// returns once both pipes close (the daemon must not hold them) or after `limit`.
fn run_in(dir: &Path, args: &[&str], limit: Duration) -> (Option<i32>, String, Duration) {
    let t0 = Instant::now();
    let mut child = Command::new(remora_exe())
        .args(["kv", "serve"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run remora");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        let _ = err.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    let text = rx.recv_timeout(limit).unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("`kv serve {args:?}` still held its stdout/stderr after {limit:?}")
    });
    let code = child.wait().unwrap().code();
    (code, text, t0.elapsed())
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("remora-kv-daemon-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn daemon_returns_once_serving_writes_its_pid_and_stops_on_sigterm() {
    let dir = scratch("up");
    let port = free_port();
    let p = port.to_string();
    let mut args = vec!["-d", "-p", &p, "-U", "0", "-l", "127.0.0.1", "-P", "f.pid"];
    if is_root() {
        args.extend(["-u", "root"]);
    }
    // A relative pid file: written where the command ran, though the daemon moves to /.
    let (code, text, took) = run_in(&dir, &args, Duration::from_secs(10));
    let pid_file = dir.join("f.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap_or_else(|e| panic!("no pid file ({e}); exit {code:?}, output {text:?}"))
        .trim()
        .parse()
        .unwrap();
    let _guard = Daemon(Some(pid));
    assert_eq!(code, Some(0), "{text}");
    assert!(took < Duration::from_secs(5), "returned after {took:?}");
    assert!(!ended(pid), "the daemon {pid} is not running");
    // Serving already when the command returned: no wait here.
    assert!(ask(port, b"version\r\n", b"\r\n").starts_with("VERSION 1.6.18"));
    let stats = ask(port, b"stats\r\n", b"END\r\n");
    assert!(stats.contains(&format!("STAT pid {pid}\r\n")), "{stats}");
    // Detached: its own session, / as its directory, stdio on /dev/null.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    assert_eq!(fields[3], pid.to_string(), "session id (setsid)");
    let link = |what: &str| std::fs::read_link(format!("/proc/{pid}/{what}")).unwrap();
    assert_eq!(link("cwd"), Path::new("/"));
    for fd in 0..3 {
        assert_eq!(link(&format!("fd/{fd}")), Path::new("/dev/null"), "fd {fd}");
    }
    rustix::process::kill_process(Pid::from_raw(pid).unwrap(), Signal::TERM).unwrap();
    let t0 = Instant::now();
    while !ended(pid) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ended(pid), "the daemon did not stop on SIGTERM");
    assert!(!pid_file.exists(), "the daemon left its pid file");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A daemon that cannot start: the command says why on its stderr and fails, at once, instead
/// of returning 0 for a server that is not there.
#[test]
fn daemon_that_cannot_start_fails_with_its_error() {
    let dir = scratch("busy");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p = taken.local_addr().unwrap().port().to_string();
    let mut args = vec!["-d", "-p", &p, "-U", "0", "-l", "127.0.0.1", "-P", "f.pid"];
    if is_root() {
        args.extend(["-u", "root"]);
    }
    let (code, text, took) = run_in(&dir, &args, Duration::from_secs(10));
    assert!(matches!(code, Some(c) if c != 0), "exit {code:?}: {text}");
    assert!(text.contains("failed to listen"), "{text}");
    assert!(took < Duration::from_secs(5), "failed after {took:?}");
    assert!(!dir.join("f.pid").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
