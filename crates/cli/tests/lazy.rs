//! `remora lazy serve` and `remora lazy bench` as a user runs them.
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_remora");

/// A child killed on drop.
struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(args: &[&str]) -> (Killed, String) {
    let mut c = Command::new(EXE)
        .args(["lazy", "serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = c.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .expect(&line)
        .to_string();
    (Killed(c), addr)
}

/// Runs a command with a deadline and returns (success, stdout, stderr).
fn run(args: &[&str]) -> (bool, String, String) {
    let mut c = Command::new(EXE)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    while c.try_wait().unwrap().is_none() {
        assert!(Instant::now() < end, "remora {args:?} hung");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = c.wait_with_output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `remora lazy bench` against a running server: `faults` random faults, `trials` times.
fn bench_at(
    transport: &str,
    addr: &str,
    faults: &str,
    trials: &str,
    json: bool,
) -> (bool, String, String) {
    let mut args = vec!["lazy", "bench", "--transport", transport, "--connect", addr];
    args.extend(["--faults", faults, "--trials", trials]);
    if json {
        args.push("--json");
    }
    run(&args)
}

fn field(json: &str, name: &str) -> f64 {
    let v: serde_json::Value = serde_json::from_str(json.trim()).expect(json);
    v[name]
        .as_f64()
        .unwrap_or_else(|| panic!("{name} missing in {json}"))
}

#[test]
fn bench_local_and_tcp_print_json() {
    for t in ["local", "tcp"] {
        for mode in ["thread", "sigbus"] {
            let (ok, out, err) = run(&[
                "lazy",
                "bench",
                "--transport",
                t,
                "--mode",
                mode,
                "--faults",
                "64",
                "--trials",
                "3",
                "--json",
            ]);
            assert!(ok, "{err}");
            assert_eq!(field(&out, "faults"), 64.0);
            assert_eq!(field(&out, "trials"), 3.0);
            assert_eq!(field(&out, "page_size"), 4096.0);
            assert_eq!(field(&out, "faults_per_trial"), 64.0);
            for k in ["mean_us", "std_us", "p50_us", "p99_us"] {
                assert!(field(&out, k) > 0.0, "{k} in {out}");
            }
            assert!(out.contains(&format!("\"transport\":\"{t}\"")), "{out}");
        }
    }
}

#[test]
fn bench_fabric_transports() {
    for t in ["udp", "shm"] {
        let (ok, out, err) = run(&[
            "lazy",
            "bench",
            "--transport",
            t,
            "--faults",
            "32",
            "--trials",
            "2",
            "--json",
        ]);
        assert!(ok, "{t}: {err}");
        assert!(out.contains(&format!("\"transport\":\"{t}\"")), "{out}");
        assert!(field(&out, "mean_us") > 0.0);
    }
}

/// `--progress`: udp takes poll (its default) or thread and says which in the JSON; shm
/// defaults to thread; local and tcp have no queue pairs to drive.
#[test]
fn bench_progress_modes() {
    for (p, want) in [
        (None, "poll"),
        (Some("poll"), "poll"),
        (Some("thread"), "thread"),
    ] {
        let mut args = vec!["lazy", "bench", "--transport", "udp"];
        args.extend(["--faults", "32", "--trials", "2", "--json"]);
        if let Some(p) = p {
            args.extend(["--progress", p]);
        }
        let (ok, out, err) = run(&args);
        assert!(ok, "{p:?}: {err}");
        assert!(out.contains(&format!("\"progress\":\"{want}\"")), "{out}");
        assert!(field(&out, "p50_us") > 0.0, "{out}");
    }
    let (ok, out, err) = run(&[
        "lazy",
        "bench",
        "--transport",
        "shm",
        "--faults",
        "8",
        "--trials",
        "1",
        "--json",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("\"progress\":\"thread\""), "{out}");
    for (t, p) in [("tcp", "thread"), ("local", "poll")] {
        let (ok, _, err) = run(&["lazy", "bench", "--transport", t, "--progress", p]);
        assert!(!ok && err.contains("--progress"), "{t} {p}: {err}");
    }
    let (ok, _, err) = run(&["lazy", "bench", "--transport", "udp", "--progress", "fast"]);
    assert!(!ok && err.contains("poll or thread"), "{err}");
}

#[test]
fn bench_prefetch_takes_fewer_faults() {
    let (ok, out, err) = run(&[
        "lazy",
        "bench",
        "--page-size",
        "65536",
        "--faults",
        "64",
        "--trials",
        "2",
        "--pattern",
        "seq",
        "--prefetch",
        "next:7",
        "--json",
    ]);
    assert!(ok, "{err}");
    assert!(field(&out, "faults_per_trial") <= 8.0, "{out}");
}

#[test]
fn serve_file_and_bench_against_it() {
    let path = std::env::temp_dir().join(format!("remora-cli-lazy-{}", std::process::id()));
    std::fs::write(&path, vec![0xabu8; 64 * 4096]).unwrap();
    let (_srv, addr) = serve(&["--file", path.to_str().unwrap()]);
    let (ok, out, err) = bench_at("tcp", &addr, "64", "2", true);
    std::fs::remove_file(&path).ok();
    assert!(ok, "{err}");
    assert_eq!(field(&out, "faults"), 64.0);
}

#[test]
fn serve_a_stopped_process() {
    let mut child = Killed(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = child.0.id().to_string();
    let (srv, addr) = serve(&["--pid", &pid, "--stop"]);
    let state = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap()
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(state(), "T", "served process is stopped");
    let (ok, _out, err) = bench_at("tcp", &addr, "4", "1", false);
    assert!(ok, "{err}");
    drop(srv);
    let _ = child.0.kill();
}

#[test]
fn bad_arguments_are_clear_errors() {
    let (ok, _, err) = run(&["lazy", "bench", "--page-size", "3000"]);
    assert!(!ok && err.contains("power of two"), "{err}");
    let (ok, _, err) = run(&["lazy", "bench", "--prefetch", "lots"]);
    assert!(!ok && err.contains("prefetch"), "{err}");
    let (ok, _, err) = run(&["lazy", "serve", "--file", "/nonexistent/x"]);
    assert!(!ok && err.contains("/nonexistent/x"), "{err}");
    let (ok, _, err) = run(&["lazy", "serve", "--pid", "1", "--range", "20-10"]);
    assert!(!ok && err.contains("END must be above START"), "{err}");
    let (ok, _, err) = bench_at("tcp", "127.0.0.1:1", "2", "1", false);
    assert!(!ok && err.contains("127.0.0.1:1"), "{err}");
}

#[test]
fn serve_file_over_fabric_and_help_says_what_is_live() {
    // A file is registered as a live mapping over udp/shm; the bench faults it through READs.
    let path = std::env::temp_dir().join(format!("remora-cli-lazy-fab-{}", std::process::id()));
    std::fs::write(&path, vec![0x5au8; 64 * 4096]).unwrap();
    for t in ["udp", "shm"] {
        let (_srv, addr) = serve(&["--file", path.to_str().unwrap(), "--transport", t]);
        let (ok, out, err) = bench_at(t, &addr, "64", "2", true);
        assert!(ok, "{t}: {err}");
        assert_eq!(field(&out, "faults"), 64.0, "{t}");
    }
    std::fs::remove_file(&path).ok();
    let (ok, help, err) = run(&["lazy", "serve", "--help"]);
    assert!(ok, "{err}");
    assert!(help.contains("served live on every transport"), "{help}");
    assert!(help.contains("copy of its memory taken at start"), "{help}");
}
