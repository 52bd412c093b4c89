//! `remora bench jungfrau` and `remora daq synth` as a user runs them.
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use remora_daq::synth::{Synth, SynthConfig};

fn remora() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_remora"));
    // Warnings are part of what the tests check; a RUST_LOG from outside must not hide them.
    c.env_remove("RUST_LOG");
    c
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("remora-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `remora bench jungfrau --json` with small values for the flags `set` leaves out.
fn bench_jungfrau(set: &[(&str, &str)]) -> Output {
    let mut c = remora();
    c.args(["bench", "jungfrau", "--json"]);
    for (flag, small) in [
        ("--modules", "1"),
        ("--frames", "1"),
        ("--distinct", "1"),
        ("--bins", "10"),
    ] {
        let value = set
            .iter()
            .find(|(f, _)| *f == flag)
            .map_or(small, |(_, v)| v);
        c.args([flag, value]);
    }
    for (flag, value) in set {
        if !c.get_args().any(|a| a == *flag) {
            c.args([flag, value]);
        }
    }
    c.output().unwrap()
}

fn refused(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in: {err}");
    }
}

#[test]
fn bench_jungfrau_prints_the_json_fields() {
    let out = remora()
        .args([
            "bench",
            "jungfrau",
            "--modules",
            "1",
            "--frames",
            "2",
            "--threads",
            "2",
            "--distinct",
            "1",
            "--bins",
            "100",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in [
        "modules",
        "frames",
        "threads",
        "convert_gbps",
        "pipeline_gbps",
        "pipeline_fps",
        "memcpy_gbps",
    ] {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    assert_eq!(v["modules"], 1);
    assert_eq!(v["threads"], 2.min(cpus()));
    assert!(v["convert_gbps"].as_f64().unwrap() > 0.0);
}

#[test]
fn bad_bench_arguments_are_errors() {
    let out = remora()
        .args(["bench", "jungfrau", "--modules", "0", "--json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("modules"));
}

#[test]
fn daq_synth_writes_frames_and_calibration() {
    let dir = std::env::temp_dir().join(format!("remora-cli-daq-{}", std::process::id()));
    let out = remora()
        .args(["daq", "synth", "--modules", "1", "--frames", "2", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::metadata(dir.join("frames.u16")).unwrap().len(),
        2 * 512 * 1024 * 2
    );
    assert_eq!(
        std::fs::metadata(dir.join("gain.bin")).unwrap().len(),
        6 * 512 * 1024 * 8
    );
    assert_eq!(
        std::fs::metadata(dir.join("pedestal.bin")).unwrap().len(),
        3 * 512 * 1024 * 4
    );
    assert!(std::fs::read_to_string(dir.join("geometry.poni"))
        .unwrap()
        .contains("Distance"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn issue10_bench_jungfrau_refuses_zero_frames() {
    refused(
        &bench_jungfrau(&[("--frames", "0")]),
        &["'--frames <FRAMES>'", "must be at least 1"],
    );
}

#[test]
fn issue10_bench_jungfrau_refuses_zero_distinct() {
    refused(
        &bench_jungfrau(&[("--distinct", "0")]),
        &["'--distinct <DISTINCT>'", "must be at least 1"],
    );
}

#[test]
fn issue10_bench_jungfrau_refuses_unbounded_distinct() {
    refused(
        &bench_jungfrau(&[("--distinct", "100000")]),
        &[
            "100000 distinct frames: 1 to 256 are allowed for 1 module(s), 256 MiB",
            "CPU caches",
        ],
    );
}

#[test]
fn issue10_bench_jungfrau_caps_threads_at_the_cpus_with_a_warning() {
    let out = bench_jungfrau(&[("--threads", "100000")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let n = cpus();
    assert!(
        err.contains(&format!(
            "--threads 100000 is more than the {n} CPUs this process may use; using {n}"
        )),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["threads"], n);
    // Within the CPUs: no warning.
    let out = bench_jungfrau(&[("--threads", "1")]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("--threads"));
}

/// Runs `remora daq synth` of one module and returns its peak resident memory in KiB (the
/// child's own `ru_maxrss`, from `wait4`).
#[allow(clippy::zombie_processes)] // reaped by wait4, which also returns the child's rusage
fn synth_peak_rss_kib(dir: &Path, frames: u64) -> i64 {
    let child = remora()
        .args(["daq", "synth", "--modules", "1", "--frames"])
        .arg(frames.to_string())
        .arg("--out")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: all-zero bytes are a valid `rusage` (plain integers).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child and not waited for yet (`child` is never waited on); `status`
    // and `usage` are valid for writes.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "{}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status:#x}"
    );
    usage.ru_maxrss
}

#[test]
fn issue10_daq_synth_streams_frames_in_flat_memory() {
    let dir = TempDir::new("synth-stream");
    let few = synth_peak_rss_kib(&dir.0, 2);
    // 24 frames of 1 MiB: holding them all (as before) peaked 21 MiB above 2 frames (measured:
    // 50 MiB -> 71 MiB); streamed, the peak stays within a few hundred KiB.
    let frames = 24u64;
    let many = synth_peak_rss_kib(&dir.0, frames);
    assert!(
        many - few < 8 << 10,
        "peak RSS grew from {few} KiB (2 frames) to {many} KiB ({frames} frames)"
    );
    // Same file as before: the frames one after the other, little-endian u16.
    let bytes = std::fs::read(dir.0.join("frames.u16")).unwrap();
    let frame_bytes = 512 * 1024 * 2;
    assert_eq!(bytes.len(), frames as usize * frame_bytes);
    let s = Synth::new(SynthConfig::new(1).unwrap()).unwrap();
    for n in [0, frames - 1] {
        let at = n as usize * frame_bytes;
        let want: Vec<u8> = s
            .frame(n)
            .raw
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert!(bytes[at..at + frame_bytes] == want[..], "frame {n} differs");
    }
}

#[test]
fn issue10_daq_synth_refuses_zero_frames() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_remora"))
        .args([
            "daq",
            "synth",
            "--out",
            "/nonexistent/never-written",
            "--frames",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--frames"), "{err}");
}

#[test]
fn bench_jungfrau_engine_all_runs_every_engine_side_by_side() {
    let out = bench_jungfrau(&[("--engine", "all")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["engines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["engine"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"cpu-simd") && names.contains(&"cpu-scalar"),
        "{v}"
    );
    let gpu = v["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["engine"] == "gpu-wgpu");
    match gpu {
        // The device is named, the chain measured with frames in flight, and its counters
        // show the steady state.
        Some(g) => {
            assert!(g["device"].as_str().is_some_and(|d| !d.is_empty()), "{g}");
            assert!(g["pipeline_overlap_fps"].as_f64().unwrap() > 0.0, "{g}");
            let c = &g["gpu"];
            assert_eq!(c["frames_in_flight"], 3, "{g}");
            assert_eq!(c["submissions_per_frame"], 1.0, "{g}");
            assert_eq!(c["objects_after_warmup"], 0, "{g}");
            assert!(c["h2d_bytes_per_frame"].as_f64().unwrap() > 0.0, "{g}");
            assert!(c["d2h_bytes_per_frame"].as_f64().unwrap() > 0.0, "{g}");
            assert!(
                c["device_ms"].is_null() || c["device_ms"]["convert"].is_number(),
                "{g}"
            );
        }
        None => {
            // Only allowed when the run did not ask for a device; the reason is given.
            assert!(std::env::var_os("REMORA_GPU").is_none(), "{v}");
            assert_eq!(v["skipped"][0]["engine"], "gpu-wgpu", "{v}");
        }
    }
    refused(
        &bench_jungfrau(&[("--engine", "cuda")]),
        &["unknown engine"],
    );
}
