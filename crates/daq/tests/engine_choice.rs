//! `auto` chooses the engine by speed: a run with no engine configured reports its choice (in
//! the summary and each receiver's report), a configured engine skips calibration, and the
//! calibration times real engines through the run's pipeline.
//!
//! One test binary of its own: it points the engine cache at a temporary folder through the
//! environment before anything runs, so no test writes to the real cache in `~/.cache`.
use std::path::PathBuf;
use std::sync::Arc;

use remora_daq::config::Config;
use remora_daq::engine::calibrate::{self, How, Source};
use remora_daq::engine::{EngineKind, Registry};
use remora_daq::manager::run_in_process;
use remora_daq::setup::Setup;

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "remora-engine-choice-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(extra: &str) -> Config {
    let text = format!(
        "[detector]\nmodules = 1\n[source]\ndistinct = 4\n[acquisition]\nframes = 8\nbunch = 4\n\
         rate_hz = 50\ndeadline_ms = 10000\n[transport]\nkind = \"shm\"\n[pipeline]\nbins = 100\n{extra}"
    );
    Config::parse(&text).unwrap_or_else(|e| panic!("test config: {e}"))
}

#[test]
fn a_run_without_an_engine_reports_its_choice_and_a_configured_one_skips_calibration() {
    let dir = TempDir::new("run");
    let cache = dir.0.join("engines.json");
    // The only test in this binary, before any thread of it reads the environment.
    std::env::set_var(calibrate::CACHE_ENV, &cache);

    let s = run_in_process(&config(""), None, &|_, _| {}).unwrap();
    let c = s
        .engine_choice
        .clone()
        .expect("the summary says which engine and why");
    assert_eq!(s.receiver_reports[0].engine_choice.as_ref(), Some(&c));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["engine_choice"]["engine"], c.engine.as_str());
    assert!(
        s.text().contains(&format!("engine {} (auto", c.engine)),
        "{}",
        s.text()
    );
    let gpu = c
        .engines
        .iter()
        .find(|f| f.engine == "gpu-wgpu")
        .expect("the GPU is listed, measured or not");
    match c.how {
        // No real GPU here (none, or a CPU-type Vulkan device such as lavapipe, which auto
        // passes over): cpu-simd, and the reason says why the GPU was not measured.
        How::Only => {
            assert_eq!(c.engine, "cpu-simd", "{c:?}");
            assert_eq!(gpu.from, Source::NotMeasured);
            let why = gpu.why.as_deref().unwrap();
            assert!(c.reason.contains("gpu-wgpu not measured"), "{}", c.reason);
            assert!(c.reason.contains(why), "{}", c.reason);
            if std::env::var("REMORA_GPU").is_ok_and(|v| v == "any") {
                if let Ok(e) = Registry::create(EngineKind::Gpu, 0) {
                    if e.info().simd == "wgsl-cpu" {
                        assert!(why.contains("CPU (software) device"), "{why}");
                    }
                }
            }
            assert!(!cache.exists(), "nothing measured, nothing cached");
        }
        // A real GPU: both engines were timed and the choice was cached.
        How::Measured => {
            for f in &c.engines[..2] {
                assert!(f.ms_per_frame.is_some_and(|ms| ms > 0.0), "{f:?}");
            }
            assert!(cache.exists());
            let again = run_in_process(&config(""), None, &|_, _| {}).unwrap();
            let c2 = again.engine_choice.unwrap();
            assert_eq!(
                (c2.how, c2.engine.as_str()),
                (How::Cached, c.engine.as_str())
            );
        }
        other => panic!("unexpected {other:?}: {c:?}"),
    }

    let s = run_in_process(&config("engine = \"cpu-simd\"\n"), None, &|_, _| {}).unwrap();
    let c = s.engine_choice.unwrap();
    assert_eq!((c.how, c.engine.as_str()), (How::Configured, "cpu-simd"));
    assert!(
        c.engines.is_empty() && c.calibration_seconds == 0.0,
        "{c:?}"
    );
    assert!(c.reason.contains("not calibrated"), "{}", c.reason);

    // The calibration's own path, on two engines every machine has: both are timed through the
    // run's pipeline, the faster is chosen, and the cache then answers.
    let cfg = config("");
    let engines: Vec<(EngineKind, Arc<dyn remora_daq::engine::Engine>)> =
        [EngineKind::CpuScalar, EngineKind::CpuSimd]
            .into_iter()
            .map(|k| (k, Registry::create(k, 0).unwrap()))
            .collect();
    let template = Setup::new(&cfg, 0)
        .unwrap()
        .pipeline(&config("engine = \"cpu-scalar\"\n"))
        .unwrap();
    let (distinct, warmup) = calibrate::synthetic_frames(&cfg).unwrap();
    assert!(warmup >= 1 && distinct.len() % warmup == 0);
    let frames: Vec<(u64, &[u16])> = (0..warmup as u64 + calibrate::TIMED_FRAMES)
        .map(|n| (n, distinct[n as usize % distinct.len()].as_slice()))
        .collect();
    let usable: Vec<(EngineKind, String)> = engines
        .iter()
        .map(|(k, _)| (*k, "test".to_string()))
        .collect();
    let key = calibrate::key_for(&usable, 2, &cfg, false);
    let opts = calibrate::Options {
        cache: Some(dir.0.join("timed.json")),
        recalibrate: false,
    };
    let mut timed = 0;
    let mut measure = |k: EngineKind| {
        timed += 1;
        let e = engines.iter().find(|(kk, _)| *kk == k).unwrap().1.clone();
        let mut p = template.clone().with_engine(e);
        calibrate::time_frames(&mut p, &frames, warmup)
    };
    let c = calibrate::decide(&usable, &[], &key, &opts, &mut measure).unwrap();
    assert_eq!(c.how, How::Measured);
    let ms: Vec<f64> = c.engines.iter().map(|f| f.ms_per_frame.unwrap()).collect();
    assert!(ms.iter().all(|&m| m > 0.0), "{ms:?}");
    assert_eq!(
        c.engine,
        calibrate::choose(&[(EngineKind::CpuScalar, ms[0]), (EngineKind::CpuSimd, ms[1])])
            .unwrap()
            .0
            .name()
    );
    let again = calibrate::decide(&usable, &[], &key, &opts, &mut measure).unwrap();
    assert_eq!((again.how, timed), (How::Cached, 2));
}
