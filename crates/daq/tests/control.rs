//! The control service without HTTP: whole runs, a stop that ends on whole stacks, a dark run
//! whose pedestal the next acquisition uses, previews, and refusals that leave it serving.
mod acq_common;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use remora_daq::calib::PedestalMaps;
use remora_daq::config::{Config, TransportKind};
use remora_daq::control::{ConfigFormat, ControlError, Service, ServiceOptions, State};
use remora_daq::dataset::Dataset;
use remora_daq::model::{Detector, MODULE_PIXELS};
use remora_daq::pipeline::Outcome;
use remora_daq::setup::Setup;
use remora_daq::synth::Synth;

const BASE: &str = r#"
[detector]
modules = 2
[source]
distinct = 4
[pipeline]
bins = 200
"#;

fn config(extra: &str) -> Config {
    let mut cfg = Config::parse(&format!("{BASE}{extra}")).unwrap();
    // A slow debug build must not be mistaken for a lost module.
    cfg.acquisition.deadline_ms = 10_000;
    // Nor a busy machine for a lossy link: a debug receiver that falls behind overflows its UDP
    // socket and UC does not retransmit (CI once lost a whole stack that way at 50 Hz). These
    // tests are about the service, so they run over shared memory, which does not drop; the UDP
    // paths are tested in tests/acquisition.rs, and the native test below asks for UDP itself.
    if !extra.contains("[transport]") {
        cfg.transport.kind = TransportKind::Shm;
    }
    if cfg.acquisition.rate_hz == 0.0 {
        cfg.acquisition.rate_hz = 50.0;
    }
    cfg
}

/// One acquisition at a time: runs in parallel on two cores in a debug build starve each
/// other's receivers, and UDP drops what a late receiver cannot take.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static RUNS: Mutex<()> = Mutex::new(());
    RUNS.lock().unwrap_or_else(|e| e.into_inner())
}

fn service() -> Service {
    Service::new(ServiceOptions {
        preview_every: Duration::from_millis(1),
        ..ServiceOptions::default()
    })
}

#[test]
fn a_run_reports_what_its_summary_says_and_leaves_previews() {
    let _one = one_at_a_time();
    let svc = service();
    // The ring holds the whole run: no overrun however slow this build is.
    svc.configure(config("[acquisition]\nframes = 24\nbunch = 12\n"))
        .unwrap();
    assert_eq!(svc.status().state, State::Configured);
    assert_eq!(svc.start().unwrap(), 1);
    let st = svc.wait(Duration::from_secs(120));
    assert_eq!(st.state, State::Configured, "{:?}", st.message);
    let s = svc.summary().expect("a summary");
    let c = &st.counters;
    assert_eq!(c.frames_sent, 24);
    assert_eq!(
        (c.frames_complete, c.kept, c.dark, c.overruns, c.frames_lost),
        (s.frames_complete, s.kept, s.dark, s.overruns, s.frames_lost)
    );
    assert_eq!(c.frames_complete, 24);
    assert_eq!(c.kept + c.dark + c.rejected, 24);
    assert_eq!(st.progress, 1.0);
    assert_eq!(st.receivers[0].frames_done, 24);
    assert_eq!(st.modules.len(), 2);
    let p = svc.preview().expect("a preview of a kept frame");
    assert!(p.assembled && p.width * p.height == p.pixels.len());
    assert!(p.pixels.iter().any(|v| v.is_nan()), "gaps are NaN");
    assert!(p.pixels.iter().any(|v| v.is_finite() && *v > 1.0));
    let prof = svc.profile().expect("a profile");
    assert_eq!(prof.x.len(), 200);
    assert!(prof.y.iter().flatten().any(|&v| v > 0.0));
    assert_eq!(st.preview.unwrap().frame, p.frame);
}

/// On the GPU engine a service without image output downloads only the frames its preview
/// takes (`Pipeline::submit_with_pixels`): the preview must still be a whole converted image.
#[test]
fn the_gpu_engine_brings_back_the_frames_the_preview_takes() {
    let _one = one_at_a_time();
    if !acq_common::gpu_engine_or_skip() {
        return;
    }
    let svc = service();
    let mut cfg = config("[acquisition]\nframes = 24\nbunch = 12\n");
    cfg.pipeline.engine = Some("gpu-wgpu".into());
    svc.configure(cfg).unwrap();
    svc.start().unwrap();
    let st = svc.wait(Duration::from_secs(120));
    assert_eq!(st.state, State::Configured, "{:?}", st.message);
    assert_eq!(st.counters.frames_complete, 24);
    let p = svc.preview().expect("a preview of a kept frame");
    assert!(p.assembled && p.width * p.height == p.pixels.len());
    assert!(p.pixels.iter().any(|v| v.is_nan()), "gaps are NaN");
    assert!(p.pixels.iter().any(|v| v.is_finite() && *v > 1.0));
    assert_eq!(st.preview.unwrap().frame, p.frame);
}

/// Starts `cfg`, lets 20 frames through, then asks for a stop.
fn start_then_stop(svc: &Service, cfg: Config) {
    svc.configure(cfg).unwrap();
    svc.start().unwrap();
    let t = Instant::now();
    while svc.status().counters.frames_complete < 20 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the run never got going"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    svc.stop().unwrap();
}

#[test]
fn a_stop_ends_the_run_on_whole_stacks_and_nothing_sent_is_lost() {
    let _one = one_at_a_time();
    let svc = service();
    // Without processing, so that no overrun muddles the counts whatever the build's speed.
    let mut cfg = config("[acquisition]\nframes = 4000\nbunch = 4\nrate_hz = 100\n");
    cfg.pipeline.process = false;
    start_then_stop(&svc, cfg);
    assert!(svc.status().stopping);
    let st = svc.wait(Duration::from_secs(60));
    assert_eq!(st.state, State::Configured, "{:?}", st.message);
    let s = svc.summary().unwrap();
    assert!(s.stopped && s.frames_sent < 4000, "{s:?}");
    assert_eq!(s.frames_sent % 4, 0, "whole stacks of 4: {}", s.frames_sent);
    assert_eq!(s.frames_complete, s.frames_sent, "{s:?}");
    assert_eq!((s.frames_partial, s.frames_lost, s.overruns), (0, 0, 0));
    assert_eq!(s.frames_not_sent, 4000 - s.frames_sent);
    assert!(st.message.unwrap().contains("stopped"));
    // And it serves the next run.
    svc.configure(config("[acquisition]\nframes = 8\nbunch = 4\n"))
        .unwrap();
    svc.start().unwrap();
    assert_eq!(
        svc.wait(Duration::from_secs(60)).counters.frames_complete,
        8
    );
}

#[test]
fn requests_that_do_not_fit_are_refused_and_the_service_keeps_serving() {
    let _one = one_at_a_time();
    let svc = service();
    assert!(matches!(svc.start(), Err(ControlError::Conflict(_))));
    assert!(matches!(svc.stop(), Err(ControlError::Conflict(_))));
    let bad = svc
        .configure_text(
            "[detector]\nmodules = 0\n[acquisition]\nframes = 1\n",
            ConfigFormat::Toml,
        )
        .unwrap_err();
    assert!(
        matches!(&bad, ControlError::Invalid(m) if m.contains("detector.modules")),
        "{bad}"
    );
    let bad = svc
        .configure_text(
            r#"{"detector": {"modules": 2}, "acquisition": {"frames": "x"}}"#,
            ConfigFormat::Json,
        )
        .unwrap_err();
    assert!(
        matches!(&bad, ControlError::Invalid(m) if m.starts_with("acquisition.frames")),
        "{bad}"
    );
    assert_eq!(svc.status().state, State::Idle);
    assert!(matches!(
        svc.pedestal(Some(0)),
        Err(ControlError::Invalid(_))
    ));
    // A run that cannot start its receivers ends in error with the reason, and a new
    // configuration clears it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut cfg = config("[acquisition]\nframes = 4\n");
    cfg.receivers[0].listen = taken.local_addr().unwrap().to_string();
    svc.configure(cfg).unwrap();
    svc.start().unwrap();
    let st = svc.wait(Duration::from_secs(60));
    assert_eq!(st.state, State::Error);
    assert!(st.message.unwrap().contains("run 1 failed"));
    svc.configure(config("[acquisition]\nframes = 4\n"))
        .unwrap();
    assert_eq!(svc.status().state, State::Configured);
}

/// Mean of the profile's bins that have data.
fn mean(y: &[f64]) -> f64 {
    let v: Vec<f64> = y.iter().copied().filter(|v| v.is_finite()).collect();
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn a_dark_run_measures_the_pedestal_that_the_next_acquisition_uses() {
    let _one = one_at_a_time();
    // Calibration files whose G0 pedestal is 60 ADU off the truth the frames were made with.
    let dir = std::env::temp_dir().join(format!("remora-control-ped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Stacks of 12: the ring holds each run whole (24 dark frames), so none is overrun.
    let truth_cfg = config("[acquisition]\nframes = 8\nbunch = 12\ndark_every = 0\n");
    let s = Synth::new(Dataset::synth_config(&truth_cfg).unwrap()).unwrap();
    let det = Detector::new(2).unwrap();
    let mut ped = s.calibration().pedestal.as_slice().to_vec();
    for m in 0..2 {
        let g0 = m * 3 * MODULE_PIXELS;
        for v in &mut ped[g0..g0 + MODULE_PIXELS] {
            *v += 60.0;
        }
    }
    s.calibration().gain.save(&dir.join("gain.bin")).unwrap();
    PedestalMaps::from_vec(det, ped)
        .unwrap()
        .save(&dir.join("pedestal.bin"))
        .unwrap();
    let mut cfg = truth_cfg.clone();
    cfg.detector.gain = Some(dir.join("gain.bin"));
    cfg.detector.pedestal = Some(dir.join("pedestal.bin"));

    // What the truth gives for the last frame, run directly.
    let data = Dataset::load(&truth_cfg).unwrap();
    let mut direct = Setup::new(&truth_cfg, 0)
        .unwrap()
        .pipeline(&truth_cfg)
        .unwrap();
    let last = 7;
    let truth_mean = match direct
        .process(last, &data.frame(data.index_of(last)))
        .unwrap()
    {
        Outcome::Kept { profile, .. } => mean(&profile.unwrap().intensity),
        o => panic!("frame {last}: {o:?}"),
    };
    let svc = service();
    svc.configure(cfg).unwrap();
    let run_mean = |svc: &Service| {
        svc.start().unwrap();
        let st = svc.wait(Duration::from_secs(120));
        assert_eq!(st.state, State::Configured, "{:?}", st.message);
        let p = svc.profile().unwrap();
        assert_eq!(p.frame, last);
        let y: Vec<f64> = p.y.iter().map(|v| v.unwrap_or(f64::NAN)).collect();
        mean(&y)
    };
    let before = run_mean(&svc);
    assert_eq!(svc.pedestal(Some(24)).unwrap(), 2);
    assert_eq!(svc.status().state, State::Pedestal);
    let st = svc.wait(Duration::from_secs(120));
    assert_eq!(st.state, State::Configured, "{:?}", st.message);
    let info = st.pedestal.expect("the dark run's pedestal");
    assert_eq!(info.frames, 24);
    assert!(info.source.contains("dark run 2"));
    let after = run_mean(&svc);
    let (off_before, off_after) = ((before - truth_mean).abs(), (after - truth_mean).abs());
    assert!(
        off_after < 0.2 * off_before,
        "profile mean: truth {truth_mean}, with the file's pedestal {before}, after the dark run {after}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stop_ends_a_native_udp_run_on_whole_frames() {
    let _one = one_at_a_time();
    let svc = service();
    // UDP drops what a slow receiver cannot take: 25 Hz keeps a debug build's receiver ahead of
    // the source even on a busy machine, so that any loss here is the stop's fault.
    let mut cfg = config(
        "[acquisition]\nframes = 4000\nbunch = 4\nrate_hz = 25\n[transport]\nkind = \"native\"\n",
    );
    cfg.pipeline.process = false;
    start_then_stop(&svc, cfg);
    let st = svc.wait(Duration::from_secs(60));
    assert_eq!(st.state, State::Configured, "{:?}", st.message);
    let s = svc.summary().unwrap();
    assert!(s.stopped && s.frames_sent < 4000, "{s:?}");
    assert_eq!(s.frames_complete, s.frames_sent, "{s:?}");
    assert_eq!((s.frames_partial, s.frames_lost), (0, 0), "{s:?}");
}
