//! `remora daq run | receive | emulate` as processes: the manager's summary, its errors, and a
//! receiver and an emulator in two network namespaces joined by a veth pair.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use remora_daq::config::Config;
use remora_daq::dataset::Dataset;
use remora_daq::pipeline::Outcome;
use remora_daq::setup::Setup;

/// One acquisition at a time: two in parallel on two cores starve a debug build's receivers,
/// and UDP (UC, no retransmission) drops what a late receiver cannot take.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static RUNS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    RUNS.lock().unwrap_or_else(|e| e.into_inner())
}

const EXE: &str = env!("CARGO_BIN_EXE_remora");

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("remora-acq-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_config(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("acq.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn run(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running remora")
}

/// Paced at 50 frames/s: an unpaced source overflows a debug receiver's UDP socket on a busy
/// machine, and UC over UDP does not retransmit.
const SMALL: &str = "[detector]\nmodules = 2\n[source]\ndistinct = 4\n\
                     [acquisition]\nframes = 16\nbunch = 8\ndeadline_ms = 10000\nrate_hz = 50\n\
                     [pipeline]\nbins = 200\n";

/// What the pipeline run directly on the emulator's frames gives: (dark, kept, rejected,
/// sum of spot counts, sum of CSR entries).
fn direct_counts(cfg: &Config) -> (u64, u64, u64, u64, u64) {
    let data = Dataset::load(cfg).unwrap();
    let mut p = Setup::new(cfg, 0).unwrap().pipeline(cfg).unwrap();
    let mut c = (0, 0, 0, 0, 0);
    for i in 0..cfg.acquisition.frames {
        match p.process(i, &data.frame(data.index_of(i))).unwrap() {
            Outcome::Dark => c.0 += 1,
            Outcome::Rejected(s) => {
                c.2 += 1;
                c.3 += s.above
            }
            Outcome::Kept { stats, sparse, .. } => {
                c.1 += 1;
                c.3 += stats.above;
                c.4 += sparse.nnz() as u64;
            }
        }
    }
    c
}

/// A receiver's report has the direct pipeline's counts and checksums.
#[track_caller]
fn assert_counts_of_direct(r: &serde_json::Value, cfg: &Config) {
    let (dark, kept, rejected, spots, nnz) = direct_counts(cfg);
    let got = |k: &str| r[k].as_u64();
    assert_eq!(
        (got("dark"), got("kept"), got("rejected")),
        (Some(dark), Some(kept), Some(rejected)),
        "{r}"
    );
    assert_eq!(got("spots_total"), Some(spots));
    assert_eq!(got("csr_entries"), Some(nnz));
}

#[test]
fn daq_run_reports_every_frame_and_the_counts_of_the_direct_pipeline() {
    let _one = one_at_a_time();
    let dir = tmpdir("run");
    let cfg_path = write_config(&dir, &format!("{SMALL}[output]\nfile = \"out.h5\"\n"));
    let out = run(&["daq", "run", cfg_path.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(s["frames_sent"], 16);
    assert_eq!(s["frames_complete"], 16, "{s}");
    assert_eq!(s["frames_lost"], 0);
    let r = &s["receiver_reports"][0];
    assert_counts_of_direct(r, &Config::load(&cfg_path).unwrap());
    assert!(dir.join("out.h5").is_file(), "no output file");
    // `daq inspect` reads the same counts back from the file.
    let h5 = dir.join("out.h5");
    let out = run(&["daq", "inspect", h5.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(f["definition"], "NXmx");
    assert_eq!(f["frames"], 16, "{f}");
    for k in ["dark", "rejected", "kept"] {
        assert_eq!(f[k], r[k], "{k}: file {f} run {r}");
    }
    assert_eq!(f["profiles"][0], r["kept"]);
    assert_eq!(f["summary"]["frames_complete"], 16);
    let text = run(&["daq", "inspect", h5.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("frames: 16 (") && text.contains("/entry/azint/I"),
        "{text}"
    );
    let out = run(&["daq", "inspect", cfg_path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not an HDF5 file"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_configurations_fail_with_the_key_named() {
    let _one = one_at_a_time();
    let dir = tmpdir("bad");
    for (text, want) in [
        (
            format!("{SMALL}[transport]\nkind = \"carrier-pigeon\"\n"),
            "transport.kind",
        ),
        (
            SMALL.replace("frames = 16", "frames = 0"),
            "acquisition.frames",
        ),
        (format!("{SMALL}[output]\nqueue = 0\n"), "output.queue"),
        (
            SMALL.replace(
                "modules = 2",
                "modules = 2\ngain = \"nope.bin\"\npedestal = \"nope2.bin\"",
            ),
            "nope.bin",
        ),
        ("this is not toml".to_string(), "line 1, column"),
    ] {
        let p = write_config(&dir, &text);
        let out = run(&["daq", "run", p.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text:?} was accepted");
        assert!(err.contains(want), "{text:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    let out = run(&["daq", "run", "/nonexistent/acq.toml"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/acq.toml"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_emulator_pointed_at_no_receiver_says_so() {
    let _one = one_at_a_time();
    let dir = tmpdir("norx");
    let p = write_config(&dir, SMALL);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = run(&[
        "daq",
        "emulate",
        p.to_str().unwrap(),
        "--to",
        &port.to_string(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("connecting to receiver 0"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Two namespaces joined by a veth pair; removed on drop.
struct Netns {
    names: [String; 2],
}

impl Netns {
    fn create() -> Option<Netns> {
        let id = std::process::id() % 100_000;
        let names = [format!("rmrx{id}"), format!("rmtx{id}")];
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let ns = Netns { names };
        let [rx, tx] = &ns.names;
        let (va, vb) = (format!("vr{id}"), format!("vt{id}"));
        let ok = ip(&["netns", "add", rx])
            && ip(&["netns", "add", tx])
            && ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])
            && ip(&["link", "set", &va, "netns", rx])
            && ip(&["link", "set", &vb, "netns", tx])
            && ip(&["-n", rx, "addr", "add", "10.231.7.1/24", "dev", &va])
            && ip(&["-n", tx, "addr", "add", "10.231.7.2/24", "dev", &vb])
            // Jumbo frames, as on a RoCE fabric: a 4 KiB MTU datagram fits.
            && ip(&["-n", rx, "link", "set", &va, "mtu", "9000", "up"])
            && ip(&["-n", tx, "link", "set", &vb, "mtu", "9000", "up"])
            && ip(&["-n", rx, "link", "set", "lo", "up"])
            && ip(&["-n", tx, "link", "set", "lo", "up"]);
        ok.then_some(ns)
    }

    fn exec(&self, which: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[which], EXE])
            .args(args);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn udp_between_two_network_namespaces_over_a_veth_pair() {
    let _one = one_at_a_time();
    if !is_root() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let Some(ns) = Netns::create() else {
        eprintln!("skipped: ip netns / veth unavailable here");
        return;
    };
    let dir = tmpdir("netns");
    let p = write_config(&dir, SMALL);
    let cfg = p.to_str().unwrap();
    let mut rx = Kill(
        ns.exec(0, &["daq", "receive", cfg, "--listen", "10.231.7.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(rx.0.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first.strip_prefix("listening on ").expect("address line");
    assert!(addr.starts_with("10.231.7.1:"), "{addr}");
    let emu = ns
        .exec(1, &["daq", "emulate", cfg, "--to", addr])
        .output()
        .unwrap();
    assert!(
        emu.status.success(),
        "{}",
        String::from_utf8_lossy(&emu.stderr)
    );
    let report = lines
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("report ").map(str::to_owned))
        .expect("receiver report");
    let r: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(r["frames_complete"], 16, "{r}");
    assert_counts_of_direct(&r, &Config::load(&p).unwrap());
    std::fs::remove_dir_all(&dir).ok();
}

/// One HTTP GET over a plain socket: (status line, body).
fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").unwrap_or((&all, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

#[test]
fn daq_run_serve_shows_the_run_on_its_page_and_prints_the_summary() {
    let _one = one_at_a_time();
    let dir = tmpdir("serve");
    // Transfer only: a debug build's pipeline could not keep up with the rate.
    let text = SMALL
        .replace("frames = 16", "frames = 400")
        .replace("rate_hz = 50", "rate_hz = 60")
        + "process = false\n";
    let cfg_path = write_config(&dir, &text);
    let mut child = Command::new(EXE)
        .args([
            "daq",
            "run",
            cfg_path.to_str().unwrap(),
            "--serve",
            "127.0.0.1:0",
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    // The page's address with the service's token, as `daq serve` prints it.
    let (addr, token) = line
        .trim()
        .strip_prefix("live view: http://")
        .and_then(|a| a.split_once("/?token="))
        .unwrap_or_else(|| panic!("no page address with a token: {line:?}"));
    let (addr, token) = (addr.to_string(), token.to_string());
    let (code, page) = http_get(&addr, "/");
    assert!(code.contains("200"), "{code}");
    assert!(
        page.contains("<html") || page.contains("<!doctype"),
        "{page}"
    );
    let (code, _) = http_get(&addr, "/status");
    assert!(code.contains("401"), "{code}");
    let (code, body) = http_get(&addr, &format!("/status?token={token}"));
    assert!(code.contains("200"), "{code}");
    let st: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        ["running", "configured"].contains(&st["state"].as_str().unwrap()),
        "{st}"
    );
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["frames_complete"], 400, "{s}");
    assert_eq!(s["frames_lost"], 0, "{s}");
}

/// The loss-free search starts from what a flow-controlled run sustains (the source following
/// the receiver's ring credits), so it needs a few tries, not a descent from an upper bound.
#[test]
fn bench_acquisition_searches_down_from_the_flow_controlled_rate() {
    let _one = one_at_a_time();
    let out = run(&[
        "bench",
        "acquisition",
        "--transport",
        "shm",
        "--modules",
        "1",
        "--bunch",
        "2",
        "--frames",
        "40",
        "--no-process",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["sustained_complete"], 40, "{v}");
    let sustained = v["sustained_fps"].as_f64().unwrap();
    assert!(sustained > 0.0, "{v}");
    // The first try is at the sustained rate, the next (if any) 15% lower.
    let tries = v["tries"].as_array().unwrap();
    assert_eq!(tries[0]["rate_hz"].as_f64(), Some(sustained), "{v}");
    if let Some(second) = tries.get(1).and_then(|t| t["rate_hz"].as_f64()) {
        assert!((second - 0.85 * sustained).abs() < 1e-6 * sustained, "{v}");
    }
    assert!(v["rate_hz"].as_f64().unwrap() <= sustained, "{v}");
    assert_eq!(v["buffer_frames"], 8, "four stacks of two frames: {v}");
    // The engine is reported by name and how it was chosen: with no pipeline nothing is timed.
    assert_eq!(v["engine_choice"]["how"], "unmeasured", "{v}");
    assert!(v["engine_choice"]["engine"].is_string(), "{v}");
}

#[test]
fn bench_acquisition_with_the_service_repeats_the_paired_search_and_reports_each_ratio() {
    let _one = one_at_a_time();
    let out = run(&[
        "bench",
        "acquisition",
        "--transport",
        "shm",
        "--modules",
        "1",
        "--frames",
        "8",
        "--rate",
        "20",
        "--with-service",
        "--repeat",
        "2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let sv = &v["service"];
    let ratios = sv["ratios"].as_array().expect("ratios");
    assert_eq!(ratios.len(), 2, "{v}");
    let r = sv["ratio"].as_f64().unwrap();
    assert!(ratios.iter().any(|x| x.as_f64() == Some(r)), "{v}");
    // Each round tried the one rate once per runner.
    assert_eq!(v["tries"].as_array().unwrap().len(), 4, "{v}");
    assert_eq!(v["frames_sent"], 8);
    assert!(sv["page"]["events"].as_u64().unwrap() > 0, "{v}");

    let bad = run(&["bench", "acquisition", "--repeat", "2"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--with-service"));
}
