//! What a new user meets besides the README's snippets (those run in `python/tests/test_readme.py`):
//! help texts, first error messages and log output (issue 10, findings 6 and 7). One test per
//! finding, named after it.
mod serve_common;

use std::io::{BufRead, BufReader};

use serve_common::is_root;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn remora() -> Command {
    Command::new(env!("CARGO_BIN_EXE_remora"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `remora ARGS` with stdin closed and stdout/stderr piped; kills it after `limit`.
fn run(args: &[&str], limit: Duration) -> Output {
    let mut child = remora()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn remora");
    let t0 = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("probe a free port")
        .port()
}

/// Regression (issue 10, finding 6): log lines kept their ANSI colours when stderr was a pipe or
/// a file. `kv serve -L` logs a warning (the option has no effect) before it serves.
#[test]
fn log_output_has_no_colours_when_stderr_is_not_a_terminal() {
    let port = free_tcp_port().to_string();
    let mut args = vec![
        "kv",
        "serve",
        "-L",
        "-p",
        &port,
        "-U",
        "0",
        "-l",
        "127.0.0.1",
    ];
    if is_root() {
        args.extend(["-u", "root"]);
    }
    let mut child = remora()
        .args(&args)
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn remora kv serve");
    let stderr = child.stderr.take().unwrap();
    // The reader ends at the warning line or at EOF; the server is killed after it either way.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).split(b'\n') {
            let Ok(line) = line else { break };
            let warn = text(&line).contains("WARN");
            seen.extend_from_slice(&line);
            seen.push(b'\n');
            if warn {
                break;
            }
        }
        let _ = tx.send(seen);
    });
    let seen = rx.recv_timeout(Duration::from_secs(10));
    let _ = child.kill();
    let _ = child.wait();
    let seen = seen.expect("no warning on stderr within 10 s");
    let s = text(&seen);
    assert!(
        s.contains("WARN") && s.contains("-L"),
        "no -L warning: {s:?}"
    );
    assert!(
        !s.contains("\x1b["),
        "ANSI escapes in piped log output: {s:?}"
    );
}

/// Regression (issue 10, finding 6): `lazy serve --file` of a missing file printed the error
/// twice (the library's message included the OS error, which was then printed again as its cause).
#[test]
fn missing_file_is_reported_once_with_its_path() {
    let path = "/nonexistent-remora-test/image.bin";
    let out = run(
        &["lazy", "serve", "--file", path, "--listen", "127.0.0.1:0"],
        Duration::from_secs(10),
    );
    let err = text(&out.stderr);
    assert!(!out.status.success(), "serving a missing file succeeded");
    assert_eq!(err.matches(path).count(), 1, "path not once in {err:?}");
    assert_eq!(
        err.matches("No such file or directory").count(),
        1,
        "OS error not exactly once in {err:?}"
    );
    assert_eq!(err.trim().lines().count(), 1, "more than one line: {err:?}");
}

/// Regression (issue 10, finding 7): `fabric bench --help` listed no values for `--transport`
/// and `--qp`.
#[test]
fn fabric_bench_help_lists_transport_and_qp_values() {
    for args in [
        &["fabric", "bench", "--help"][..],
        &["bench", "fabric", "--help"][..],
        &["fabric", "bench", "-h"][..],
    ] {
        let out = run(args, Duration::from_secs(10));
        assert!(out.status.success(), "{args:?} failed");
        let help = text(&out.stdout);
        assert!(
            help.contains("[possible values: udp, shm, tcp]"),
            "{args:?}: no transport values in {help}"
        );
        assert!(
            help.contains("[possible values: rc, uc]"),
            "{args:?}: no qp values in {help}"
        );
    }
    // The spellings stay those of `Transport::from_str` / `QpType::from_str`.
    let out = run(
        &["fabric", "bench", "write-lat", "--transport", "rdma"],
        Duration::from_secs(10),
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("possible values: udp, shm, tcp"));
}

/// Regression (issue 10, finding 7): `lazy bench` without `--connect` silently ignored a running
/// `lazy serve` and measured a private server of its own.
#[test]
fn lazy_bench_without_connect_says_it_starts_its_own_server() {
    // The note comes before any fault is taken, so it is there whether or not this machine
    // allows userfaultfd.
    let out = run(
        &[
            "lazy",
            "bench",
            "--transport",
            "tcp",
            "--faults",
            "4",
            "--trials",
            "1",
            "--json",
        ],
        Duration::from_secs(60),
    );
    let err = text(&out.stderr);
    assert_eq!(
        err.matches("starting a private tcp page server").count(),
        1,
        "note not exactly once in {err:?}"
    );
    assert!(
        err.contains("--connect ADDR"),
        "no --connect hint in {err:?}"
    );
    assert!(
        !text(&out.stdout).contains("--connect"),
        "the note went to stdout"
    );
}

/// `lazy bench --connect` with the default (local) transport used to ignore the address.
#[test]
fn lazy_bench_connect_without_a_network_transport_is_refused() {
    let out = run(
        &["lazy", "bench", "--connect", "127.0.0.1:7878"],
        Duration::from_secs(10),
    );
    assert!(!out.status.success(), "local bench with --connect ran");
    let err = text(&out.stderr);
    assert!(err.contains("--transport tcp, udp or shm"), "{err:?}");
}
