//! What the acquisition tests share: one acquisition at a time, the test configuration, a run
//! that keeps every committed frame, and the comparison with the pipeline run directly.
#![allow(dead_code)]
use std::sync::Mutex;

use remora_daq::config::Config;
use remora_daq::dataset::Dataset;
use remora_daq::manager::{run_in_process, Summary};
use remora_daq::model::{ERROR_WORD, MODULE_PIXELS};
use remora_daq::pipeline::Outcome;
use remora_daq::receiver::FrameResult;
use remora_daq::setup::Setup;

/// One acquisition at a time: two in parallel on two cores starve a debug build's receivers,
/// and UDP (UC, no retransmission) drops what a late receiver cannot take.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static RUNS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    RUNS.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn config(text: &str) -> Config {
    Config::parse(text).unwrap_or_else(|e| panic!("test config: {e}"))
}

/// Runs the acquisition and returns its summary and every committed frame, in commit order.
pub fn acquire(cfg: &Config) -> (Summary, Vec<(usize, FrameResult)>) {
    let got = Mutex::new(Vec::new());
    let s = run_in_process(
        cfg,
        Some(&|r, f: &FrameResult| got.lock().unwrap().push((r, f.clone()))),
        &|_, _| {},
    )
    .unwrap_or_else(|e| panic!("acquisition failed: {e}"));
    (s, got.into_inner().unwrap())
}

/// Replays receiver `index`'s committed frames, in order, through a pipeline built the same
/// way, on the emulator's frames with the same modules masked; every result must be identical.
#[track_caller]
pub fn assert_same_as_direct(cfg: &Config, index: usize, frames: &[(usize, FrameResult)]) {
    let data = Dataset::load(cfg).unwrap();
    let setup = Setup::new(cfg, index).unwrap();
    let mut p = setup.pipeline(cfg).unwrap();
    let mine: Vec<&FrameResult> = frames
        .iter()
        .filter(|(r, _)| *r == index)
        .map(|(_, f)| f)
        .collect();
    assert!(!mine.is_empty(), "receiver {index} committed nothing");
    let mut last = None;
    for f in mine {
        assert!(last < Some(f.frame), "frames committed out of order");
        last = Some(f.frame);
        let mut raw = data.frame(data.index_of(f.frame));
        for m in 0..cfg.detector.modules {
            match f.missing_packets.get(m) {
                // Native: the 4 rows of each lost packet.
                Some(&miss) => {
                    for k in (0..128).filter(|k| miss >> k & 1 == 1) {
                        let at = m * MODULE_PIXELS + k * 4 * 1024;
                        raw[at..at + 4 * 1024].fill(ERROR_WORD);
                    }
                }
                None if f.lost_modules >> m & 1 == 1 => {
                    raw[m * MODULE_PIXELS..(m + 1) * MODULE_PIXELS].fill(ERROR_WORD);
                }
                None => {}
            }
        }
        let want = p.process(f.frame, &raw).unwrap();
        let got = f.outcome.as_ref().expect("processing was on");
        match (got, &want) {
            (Outcome::Dark, Outcome::Dark) => {}
            (Outcome::Rejected(a), Outcome::Rejected(b)) => assert_eq!(a, b, "frame {}", f.frame),
            (
                Outcome::Kept {
                    stats: sa,
                    sparse: ca,
                    profile: pa,
                },
                Outcome::Kept {
                    stats: sb,
                    sparse: cb,
                    profile: pb,
                },
            ) => {
                assert_eq!(sa, sb, "frame {} counts", f.frame);
                assert_eq!(ca, cb, "frame {} CSR", f.frame);
                let (pa, pb) = (pa.as_ref().unwrap(), pb.as_ref().unwrap());
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&pa.intensity),
                    bits(&pb.intensity),
                    "frame {} profile",
                    f.frame
                );
                if let Some(img) = &f.image {
                    let same = img
                        .iter()
                        .zip(p.image())
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same && img.len() == p.image().len(),
                        "frame {} image",
                        f.frame
                    );
                }
            }
            (a, b) => panic!("frame {}: receiver {a:?}, direct {b:?}", f.frame),
        }
    }
}

pub const BASE: &str = r#"
[detector]
modules = 2
[source]
distinct = 4
[pipeline]
bins = 200
"#;

/// A debug build on a loaded machine can take longer than the default deadline (500 ms) to
/// land a stack; a test that does not test the deadline gives it 10 s, so that a slow transport
/// is never mistaken for a lost module. Unpaced runs get 50 frames/s: a source that sends as fast
/// as it can overflows a debug receiver's UDP socket when the machine is busy, and UC over UDP
/// does not retransmit (the rate tests set their own).
pub fn with(extra: &str) -> Config {
    let mut cfg = config(&format!("{BASE}{extra}"));
    if !extra.contains("deadline_ms") {
        cfg.acquisition.deadline_ms = 10_000;
    }
    if !extra.contains("rate_hz") {
        cfg.acquisition.rate_hz = 50.0;
    }
    cfg
}

/// Whether the GPU engine can run here; `false` (skip the test) only where `REMORA_GPU` is
/// unset, since a machine that names a GPU must have one.
pub fn gpu_engine_or_skip() -> bool {
    match remora_daq::engine::GpuEngine::new() {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var_os("REMORA_GPU").is_none(),
                "REMORA_GPU is set but there is no GPU engine: {e}"
            );
            eprintln!("skipped: {e}");
            false
        }
    }
}
