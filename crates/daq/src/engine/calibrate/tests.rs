//! The choice from injected timings, and the cache around it, without engines.
use std::cell::Cell;
use std::path::PathBuf;

use super::*;

const GPU: EngineKind = EngineKind::Gpu;
const SIMD: EngineKind = EngineKind::CpuSimd;
const SCALAR: EngineKind = EngineKind::CpuScalar;

#[test]
fn the_fastest_engine_wins_when_clearly_faster() {
    let (k, why) = choose(&[(GPU, 3.0), (SIMD, 9.0)]).unwrap();
    assert_eq!(k, GPU);
    assert!(why.contains("3.00x as fast as cpu-simd"), "{why}");
    let (k, why) = choose(&[(GPU, 27.0), (SIMD, 9.0)]).unwrap();
    assert_eq!(k, SIMD, "a GPU 3x slower than cpu-simd is not taken");
    assert!(why.contains("gpu-wgpu 27.00"), "{why}");
}

#[test]
fn a_gpu_within_five_percent_of_cpu_simd_loses_to_it() {
    for gpu in [10.0, 9.6, 9.51] {
        let (k, why) = choose(&[(GPU, gpu), (SIMD, 10.0)]).unwrap();
        assert_eq!(k, SIMD, "gpu {gpu} ms vs cpu-simd 10 ms");
        assert!(why.contains("within 5%"), "{why}");
    }
    assert_eq!(choose(&[(GPU, 9.49), (SIMD, 10.0)]).unwrap().0, GPU);
    // The order of the figures does not matter.
    assert_eq!(choose(&[(SIMD, 10.0), (GPU, 9.49)]).unwrap().0, GPU);
}

#[test]
fn without_a_gpu_figure_cpu_simd_is_chosen() {
    let (k, why) = choose(&[(SIMD, 12.0)]).unwrap();
    assert_eq!(k, SIMD);
    assert!(why.contains("only engine measured"), "{why}");
    // A GPU figure that is not a time is no figure.
    for bad in [f64::NAN, f64::INFINITY, 0.0, -1.0] {
        assert_eq!(choose(&[(GPU, bad), (SIMD, 12.0)]).unwrap().0, SIMD);
    }
}

#[test]
fn without_cpu_simd_the_fastest_is_chosen_and_without_figures_none() {
    assert_eq!(choose(&[(SCALAR, 80.0), (GPU, 90.0)]).unwrap().0, SCALAR);
    assert!(choose(&[]).is_none());
    assert!(choose(&[(GPU, f64::NAN)]).is_none());
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p =
            std::env::temp_dir().join(format!("remora-calibrate-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn options(&self) -> Options {
        Options {
            cache: Some(self.0.join("remora/engines.json")),
            recalibrate: false,
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn usable() -> Vec<(EngineKind, String)> {
    vec![
        (GPU, "Test GPU (driver 1)".into()),
        (SIMD, "2 threads, avx2".into()),
    ]
}

fn key(modules: usize) -> CacheKey {
    CacheKey {
        remora: "test".into(),
        devices: usable()
            .iter()
            .map(|(k, d)| format!("{}: {d}", k.name()))
            .collect(),
        cpu: "Test CPU".into(),
        threads: 2,
        modules,
        bins: 1000,
        stages: "convert+veto+sparse+integrate(q_nm^-1)".into(),
    }
}

/// A measurement that returns fixed times and counts its calls.
fn timings<'a>(
    calls: &'a Cell<u32>,
    gpu: f64,
    simd: f64,
) -> impl FnMut(EngineKind) -> Result<f64> + 'a {
    move |k| {
        calls.set(calls.get() + 1);
        Ok(if k == GPU { gpu } else { simd })
    }
}

#[test]
fn a_measured_choice_is_cached_and_the_next_run_reads_it_without_measuring() {
    let d = TempDir::new("cached");
    let opts = d.options();
    let calls = Cell::new(0);
    let c = decide(
        &usable(),
        &[],
        &key(8),
        &opts,
        &mut timings(&calls, 27.0, 9.0),
    )
    .unwrap();
    assert_eq!(
        (c.engine.as_str(), c.how, calls.get()),
        ("cpu-simd", How::Measured, 2)
    );
    assert_eq!(c.engines[0].ms_per_frame, Some(27.0));
    assert_eq!(c.engines[0].from, Source::Measured);
    assert!(c.note.is_none(), "{:?}", c.note);
    assert!(opts.cache.as_ref().unwrap().exists());

    let again = decide(
        &usable(),
        &[],
        &key(8),
        &opts,
        &mut timings(&calls, 1.0, 9.0),
    )
    .unwrap();
    assert_eq!(calls.get(), 2, "the cache answered");
    assert_eq!(
        (again.engine.as_str(), again.how),
        ("cpu-simd", How::Cached)
    );
    assert_eq!(again.engines[0].ms_per_frame, Some(27.0));
    assert_eq!(again.engines[0].from, Source::Cached);
    assert!(again.text().contains("cached in"), "{}", again.text());

    // Another configuration is another key: measured.
    let other = decide(
        &usable(),
        &[],
        &key(2),
        &opts,
        &mut timings(&calls, 1.0, 9.0),
    )
    .unwrap();
    assert_eq!(
        (other.engine.as_str(), other.how, calls.get()),
        ("gpu-wgpu", How::Measured, 4)
    );
    // Both entries are kept.
    let file = CacheFile::load(opts.cache.as_ref().unwrap()).unwrap();
    assert_eq!(file.entries.len(), 2);
}

#[test]
fn recalibrate_measures_again_and_replaces_the_entry() {
    let d = TempDir::new("recalibrate");
    let mut opts = d.options();
    let calls = Cell::new(0);
    decide(
        &usable(),
        &[],
        &key(8),
        &opts,
        &mut timings(&calls, 27.0, 9.0),
    )
    .unwrap();
    opts.recalibrate = true;
    let c = decide(
        &usable(),
        &[],
        &key(8),
        &opts,
        &mut timings(&calls, 2.0, 9.0),
    )
    .unwrap();
    assert_eq!(
        (c.engine.as_str(), c.how, calls.get()),
        ("gpu-wgpu", How::Measured, 4)
    );
    opts.recalibrate = false;
    let c = decide(
        &usable(),
        &[],
        &key(8),
        &opts,
        &mut timings(&calls, 50.0, 9.0),
    )
    .unwrap();
    assert_eq!(
        (c.engine.as_str(), c.how, calls.get()),
        ("gpu-wgpu", How::Cached, 4)
    );
}

#[test]
fn a_corrupt_cache_is_warned_about_measured_again_and_replaced() {
    let d = TempDir::new("corrupt");
    let opts = d.options();
    let path = opts.cache.clone().unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"\x00\x01 not json at all").unwrap();
    let calls = Cell::new(0);
    let c = decide(
        &usable(),
        &[],
        &key(8),
        &opts,
        &mut timings(&calls, 2.0, 9.0),
    )
    .unwrap();
    assert_eq!(
        (c.engine.as_str(), c.how, calls.get()),
        ("gpu-wgpu", How::Measured, 2)
    );
    let note = c.note.unwrap();
    assert!(
        note.contains("could not be read") && note.contains("measured again"),
        "{note}"
    );
    // Replaced by a good file.
    assert_eq!(CacheFile::load(&path).unwrap().entries.len(), 1);
}

#[test]
fn a_cache_that_cannot_be_written_is_noted_and_the_choice_stands() {
    let d = TempDir::new("unwritable");
    // A file where the cache's folder should be.
    std::fs::write(d.0.join("remora"), b"").unwrap();
    let opts = d.options();
    let calls = Cell::new(0);
    let c = decide(
        &usable(),
        &[],
        &key(8),
        &opts,
        &mut timings(&calls, 2.0, 9.0),
    )
    .unwrap();
    assert_eq!(c.engine, "gpu-wgpu");
    assert!(c.note.unwrap().contains("could not be written"));
}

#[test]
fn without_a_cache_every_run_measures() {
    let calls = Cell::new(0);
    let opts = Options::default();
    for _ in 0..2 {
        decide(
            &usable(),
            &[],
            &key(8),
            &opts,
            &mut timings(&calls, 2.0, 9.0),
        )
        .unwrap();
    }
    assert_eq!(calls.get(), 4);
}

#[test]
fn a_failed_measurement_leaves_the_engine_out_with_its_reason() {
    let opts = Options::default();
    let mut measure = |k: EngineKind| -> Result<f64> {
        if k == GPU {
            Err(DaqError::Config("out of device memory".into()))
        } else {
            Ok(9.0)
        }
    };
    let passed = [(SCALAR, "not considered".to_string())];
    let c = decide(&usable(), &passed, &key(8), &opts, &mut measure).unwrap();
    assert_eq!(c.engine, "cpu-simd");
    assert_eq!(c.engines[0].from, Source::NotMeasured);
    assert!(c.engines[0]
        .why
        .as_deref()
        .unwrap()
        .contains("out of device memory"));
    assert_eq!(c.engines[2].engine, "cpu-scalar");
    let mut none = |_: EngineKind| -> Result<f64> { Err(DaqError::Config("broken".into())) };
    let e = decide(&usable(), &[], &key(8), &opts, &mut none).unwrap_err();
    assert!(e.to_string().contains("no engine could be measured"), "{e}");
}

#[test]
fn the_choice_serialises_with_its_figures() {
    let calls = Cell::new(0);
    let c = decide(
        &usable(),
        &[],
        &key(8),
        &Options::default(),
        &mut timings(&calls, 2.0, 9.0),
    )
    .unwrap();
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["engine"], "gpu-wgpu");
    assert_eq!(v["how"], "measured");
    assert_eq!(v["engines"][1]["engine"], "cpu-simd");
    assert_eq!(v["engines"][1]["ms_per_frame"], 9.0);
    assert_eq!(v["engines"][1]["from"], "measured");
    let back: EngineChoice = serde_json::from_value(v).unwrap();
    assert_eq!(back, c);
}
