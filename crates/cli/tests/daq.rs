//! `remora bench jungfrau` and `remora daq synth` as a user runs them.
use std::process::Command;

fn remora() -> Command {
    Command::new(env!("CARGO_BIN_EXE_remora"))
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
    assert_eq!(v["threads"], 2);
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
