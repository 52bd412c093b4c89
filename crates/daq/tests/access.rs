//! Issue 27: what a configuration sent to the control service may touch. Its files only beneath
//! the service's directories (outputs written there through HDF5, nothing outside), its inputs
//! refused without a word of their contents or size, and its memory checked against the budget
//! before anything is allocated. The same service API the HTTP face calls
//! (`Service::configure_text`); `crates/cli/tests/security_daq.rs` runs the real service as
//! root against a `nobody` client.
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use remora_daq::access::{Access, Estimate, Files, MemoryBudget};
use remora_daq::control::{ConfigFormat, ControlError, Service, ServiceOptions, State};

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("remora-access-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("data/sub")).unwrap();
        Tmp(p)
    }
    fn data(&self) -> PathBuf {
        self.0.join("data")
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn one_at_a_time() -> MutexGuard<'static, ()> {
    static RUNS: Mutex<()> = Mutex::new(());
    RUNS.lock().unwrap_or_else(|e| e.into_inner())
}

fn service(data: &Path, budget: u64) -> Service {
    Service::new(ServiceOptions {
        access: Access {
            files: Files::beneath(Some(data), Some(data)).unwrap(),
            memory: Some(MemoryBudget::new(budget)),
        },
        ..ServiceOptions::default()
    })
}

const RUN: &str = r#"
[detector]
modules = 1
[source]
distinct = 2
[acquisition]
frames = 8
rate_hz = 50
deadline_ms = 10000
[transport]
kind = "shm"
[pipeline]
bins = 100
"#;

fn refused(svc: &Service, text: &str) -> String {
    match svc.configure_text(text, ConfigFormat::Toml) {
        Err(ControlError::Invalid(m)) => m,
        other => panic!("{text}: {other:?}"),
    }
}

/// Configures `extra` after the run's settings, starts, waits; the final status message.
fn run_message(svc: &Service, detector_extra: &str, tail: &str) -> (State, String) {
    let text = RUN.replace("modules = 1\n", &format!("modules = 1\n{detector_extra}")) + tail;
    svc.configure_text(&text, ConfigFormat::Toml)
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    svc.start().unwrap();
    let st = svc.wait(Duration::from_secs(120));
    (st.state, st.message.unwrap_or_default())
}

#[test]
fn issue27_a_client_configuration_writes_its_file_beneath_the_data_directory() {
    let _one = one_at_a_time();
    let t = Tmp::new("write");
    let svc = service(&t.data(), 8 << 30);
    let (state, msg) = run_message(&svc, "", "[output]\nfile = \"sub/run.h5\"\n");
    assert_eq!(state, State::Configured, "{msg}");
    let f = hdf5::File::open(t.data().join("sub/run.h5")).unwrap();
    let n = f.dataset("/entry/frames/frame_number").unwrap().size();
    assert_eq!(n, 8);
    let sum = svc.summary().unwrap();
    assert_eq!(sum.files, vec!["sub/run.h5".to_string()]);
}

#[test]
fn issue27_client_paths_outside_the_directories_are_refused_naming_the_key() {
    let t = Tmp::new("outside");
    let svc = service(&t.data(), 8 << 30);
    let outside = t.0.join("outside.h5");
    for (section, key, path) in [
        ("output", "file", outside.display().to_string()),
        ("output", "file", "../outside.h5".into()),
        ("output", "file", "sub/../../outside.h5".into()),
        ("detector", "poni", "/etc/passwd".into()),
        ("detector", "geometry", "../../../../etc/passwd".into()),
    ] {
        let text = if section == "output" {
            format!("{RUN}[output]\n{key} = {path:?}\n")
        } else {
            RUN.replace("modules = 1\n", &format!("modules = 1\n{key} = {path:?}\n"))
        };
        let m = refused(&svc, &text);
        assert!(
            m.contains(&format!("{section}.{key}")) && m.contains("outside the"),
            "{path}: {m}"
        );
    }
    let m = refused(
        &svc,
        &RUN.replace(
            "kind = \"shm\"",
            "kind = \"shm\"\n[source]\nkind = \"raw\"\npath = \"/dev/zero\"",
        )
        .replace("[source]\ndistinct = 2\n", ""),
    );
    assert!(m.contains("source.path") && m.contains("outside"), "{m}");
    assert!(!outside.exists());
    assert_eq!(svc.status().state, State::Idle);
}

#[test]
fn issue27_client_inputs_are_refused_without_a_word_of_their_contents_or_size() {
    let _one = one_at_a_time();
    let t = Tmp::new("quiet");
    let d = t.data();
    std::fs::write(d.join("secret.poni"), "hunter2-the-secret-line\n").unwrap();
    std::fs::write(d.join("secret.json"), r#"{"hunter2_field": 1}"#).unwrap();
    std::fs::write(d.join("gain.bin"), vec![7u8; 12345]).unwrap();
    std::fs::write(d.join("ped.bin"), vec![7u8; 54321]).unwrap();
    let svc = service(&d, 8 << 30);
    for (extra, key, why) in [
        ("poni = \"secret.poni\"\n", "detector.poni", "not a valid PONI file"),
        ("geometry = \"secret.json\"\n", "detector.geometry", "not a geometry layout"),
        (
            "gain = \"gain.bin\"\npedestal = \"ped.bin\"\n",
            "detector.gain",
            "the size does not match 1 module(s) of 6 maps of 512 x 1024 f64 gains (25165824 bytes)",
        ),
    ] {
        let (state, m) = run_message(&svc, extra, "");
        assert_eq!(state, State::Error, "{m}");
        assert!(m.contains(key) && m.contains(why), "{m}");
        for leak in ["hunter2", "12345", "54321", "12 KiB", "0.01"] {
            assert!(!m.contains(leak), "{leak} in {m}");
        }
    }
}

#[test]
fn issue27_a_configuration_over_the_memory_budget_is_refused_before_anything_is_allocated() {
    let t = Tmp::new("budget");
    let svc = service(&t.data(), 4 << 30);
    let m = refused(
        &svc,
        "[detector]\nmodules = 32\n[source]\ndistinct = 4096\n[acquisition]\nframes = 1\n",
    );
    assert!(m.starts_with("source.distinct"), "{m}");
    assert!(m.contains("memory budget of 4.0 GiB"), "{m}");
    assert_eq!(svc.status().state, State::Idle);
    // A raw source file is checked against the budget when it is opened, before it is read:
    // a budget that holds everything but the file's frames refuses the run.
    let _one = one_at_a_time();
    std::fs::write(t.data().join("frames.raw"), vec![0u8; 4 << 20]).unwrap();
    let text = RUN.replace(
        "[source]\ndistinct = 2\n",
        "[source]\nkind = \"raw\"\npath = \"frames.raw\"\n",
    );
    let cfg = remora_daq::config::Config::parse(&text).unwrap();
    let without_file = Estimate::of(&cfg).total();
    let small = service(&t.data(), without_file + (1 << 20));
    small.configure_text(&text, ConfigFormat::Toml).unwrap();
    small.start().unwrap();
    let st = small.wait(Duration::from_secs(120));
    let m = st.message.unwrap_or_default();
    assert_eq!(st.state, State::Error, "{m}");
    assert!(
        m.contains("source.path") && m.contains("memory budget"),
        "{m}"
    );
}
