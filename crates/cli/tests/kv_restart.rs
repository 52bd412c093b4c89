//! Warm restart (`-e FILE`, memcached 1.6's memory file): a graceful stop (SIGUSR1 or
//! `shutdown graceful`) leaves the arena restorable and the next start with the same settings
//! serves every unexpired item with its flags, CAS and TTL; a killed server, SIGTERM or other
//! settings start cold and say why.

mod kv_common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kv_common::{connect, free_port, is_root, read_until, wait_up};

struct Run {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("remora-kv-restart-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn serve(file: &Path, extra: &[&str], log: PathBuf) -> Run {
    let port = free_port();
    let ps = port.to_string();
    let mut args = vec![
        "kv",
        "serve",
        "-p",
        &ps,
        "-U",
        "0",
        "-l",
        "127.0.0.1",
        "-t",
        "2",
    ];
    if is_root() {
        args.extend(["-u", "root"]);
    }
    let f = file.to_str().unwrap();
    args.extend(["-e", f]);
    args.extend(extra);
    let child = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    assert!(wait_up(port), "remora did not start");
    Run { child, port, log }
}

fn ask(port: u16, req: &[u8], end: &[u8]) -> String {
    let mut s = connect(port);
    s.write_all(req).unwrap();
    String::from_utf8_lossy(&read_until(&mut s, end, Duration::from_secs(5))).into_owned()
}

/// Signals our own child and waits for it to exit; its log.
fn stop(mut r: Run, sig: i32) -> String {
    // SAFETY: kill on our own child's pid.
    unsafe { libc::kill(r.child.id() as i32, sig) };
    let st = r.child.wait().unwrap();
    if sig != libc::SIGKILL {
        assert!(st.success(), "exit {st:?}");
    }
    std::fs::read_to_string(&r.log).unwrap()
}

fn gets(port: u16, keys: &str) -> String {
    ask(port, format!("gets {keys}\r\n").as_bytes(), b"END\r\n")
}

#[test]
fn a_graceful_stop_restores_items_flags_cas_and_ttls() {
    let d = dir("graceful");
    let file = d.join("arena");
    let r = serve(&file, &["-m", "8"], d.join("1.log"));
    let big = "x".repeat(5000);
    let req = format!(
        "set small 7 0 5\r\nhello\r\nset big 9 0 5000\r\n{big}\r\nset ttl 1 1000 3\r\nttl\r\n\
         set short 0 1 3\r\nbye\r\nmn\r\n"
    );
    let r1 = ask(r.port, req.as_bytes(), b"MN\r\n");
    assert!(r1.matches("STORED").count() == 4, "{r1}");
    let before = gets(r.port, "small big ttl");
    assert_eq!(before.matches("VALUE").count(), 3, "{before}");
    let log = stop(r, libc::SIGUSR1);
    assert!(log.contains("saved: the next start"), "{log}");
    // `short` expires while the server is down.
    std::thread::sleep(Duration::from_millis(2100));
    let r = serve(&file, &["-m", "8"], d.join("2.log"));
    assert_eq!(
        gets(r.port, "small big ttl"),
        before,
        "same values, flags and CAS"
    );
    assert_eq!(
        gets(r.port, "short"),
        "END\r\n",
        "an item that expired stays gone"
    );
    // The TTL kept counting: about 1000 s minus the time down.
    let t = ask(r.port, b"mg ttl t\r\n", b"\r\n");
    let left: i64 = t.trim().trim_start_matches("HD t").parse().unwrap_or(-1);
    assert!((990..=1000).contains(&left), "{t}");
    // New CAS values go on from where they were.
    let old_max = before
        .lines()
        .filter(|l| l.starts_with("VALUE"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .max()
        .unwrap();
    ask(r.port, b"set n 0 0 1\r\n1\r\n", b"STORED\r\n");
    let n = gets(r.port, "n");
    let cas: u64 = n
        .lines()
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(cas > old_max, "{n} after {old_max}");
    let log = stop(r, libc::SIGUSR1);
    assert!(log.contains("restored the arena"), "{log}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn shutdown_graceful_saves_the_memory_file_too() {
    let d = dir("shutdown");
    let file = d.join("arena");
    let mut r = serve(&file, &["-m", "8", "-A"], d.join("1.log"));
    ask(r.port, b"set k 3 0 1\r\nv\r\n", b"STORED\r\n");
    let mut s = connect(r.port);
    s.write_all(b"shutdown graceful\r\n").unwrap();
    assert!(r.child.wait().unwrap().success());
    let r = serve(&file, &["-m", "8", "-A"], d.join("2.log"));
    assert!(gets(r.port, "k").starts_with("VALUE k 3 1"));
    drop(r);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_killed_server_sigterm_or_other_settings_start_cold_and_say_why() {
    let d = dir("cold");
    let file = d.join("arena");
    let fill = |port| ask(port, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    // Killed (-9): the arena was never marked clean.
    let r = serve(&file, &["-m", "8"], d.join("1.log"));
    fill(r.port);
    stop(r, libc::SIGKILL);
    let r = serve(&file, &["-m", "8"], d.join("2.log"));
    assert_eq!(gets(r.port, "k"), "END\r\n");
    fill(r.port);
    // SIGTERM stops at once, without saving, as memcached does.
    let log = stop(r, libc::SIGTERM);
    assert!(log.contains("did not stop cleanly"), "{log}");
    let r = serve(&file, &["-m", "8"], d.join("3.log"));
    assert_eq!(gets(r.port, "k"), "END\r\n");
    fill(r.port);
    stop(r, libc::SIGUSR1);
    // Another -m: the saved arena is refused, the start is cold.
    let r = serve(&file, &["-m", "16"], d.join("4.log"));
    assert_eq!(gets(r.port, "k"), "END\r\n");
    let log = stop(r, libc::SIGUSR1);
    assert!(
        log.contains("starting cold") && log.contains("other settings"),
        "{log}"
    );
    // A file that is not an arena: cold, never trusted.
    std::fs::write(&file, vec![0x5a; 1 << 20]).unwrap();
    let r = serve(&file, &["-m", "16"], d.join("5.log"));
    assert_eq!(gets(r.port, "k"), "END\r\n");
    fill(r.port);
    let log = stop(r, libc::SIGTERM);
    assert!(log.contains("starting cold"), "{log}");
    let _ = std::fs::remove_dir_all(&d);
}
