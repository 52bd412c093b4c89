//! Every engine on the same input, and the stages against the generator's ground truth.
use remora_daq::azint::{AzConfig, AzMatrix, Split, Unit};
use remora_daq::calib::{Calibration, ConvTables, PedestalMaps};
use remora_daq::engine::{ConvOut, CpuEngine, Engine, EngineKind, Registry};
use remora_daq::model::{decode, GainStage, Word, MODULE_PIXELS};
use remora_daq::pedestal::{DarkPattern, PedestalTracker};
use remora_daq::pipeline::{Outcome, Pipeline, PipelineConfig};
use remora_daq::synth::{Synth, SynthConfig};

mod engine_common;
use engine_common::{engines, gpu_engines};

/// Relative tolerance of an engine's profile against the CPU engines': compensated f32 on a
/// device, f64 on the host.
fn profile_tolerance(e: &dyn Engine) -> f64 {
    if e.info().name == "gpu-wgpu" {
        1e-5
    } else {
        1e-9
    }
}

fn synth(modules: usize, special: f64) -> Synth {
    let mut cfg = SynthConfig::new(modules).unwrap();
    cfg.special_rate = special;
    Synth::new(cfg).unwrap()
}

#[test]
fn all_engines_agree_bit_for_bit_on_every_stage() {
    let s = synth(1, 1e-3);
    let f = s.frame(0);
    // Make sure every special word is present.
    let mut raw = f.raw.clone();
    raw[..6].copy_from_slice(&[0xc000, 0xffff, 0x4000, 0x8000, 0xbfff, 0x0000]);
    let mut mask = vec![0u8; raw.len()];
    mask[100] = 1;
    mask[3] = 1;
    let tables = ConvTables::new(s.calibration(), Some(&mask)).unwrap();
    let map = s.layout().assembly_map(Some(&mask)).unwrap();
    let poni = s.config().poni;
    let cfg = AzConfig {
        unit: Unit::QNm,
        bins: 300,
        split: Split::BBox,
        polarization: Some(0.9),
        ..Default::default()
    };
    let matrix = AzMatrix::build(&poni, (map.rows, map.cols), Some(&map.mask), &cfg).unwrap();

    #[allow(clippy::type_complexity)]
    let mut reference: Option<(Vec<u32>, Vec<i32>, _, Vec<u32>, _, Vec<f64>)> = None;
    for e in engines() {
        let mut energy = vec![0f32; raw.len()];
        let st = e
            .convert(&raw, &tables, ConvOut::Energy(&mut energy), 50.0)
            .unwrap();
        let mut counts = vec![0i32; raw.len()];
        let st2 = e
            .convert(
                &raw,
                &tables,
                ConvOut::Photons {
                    out: &mut counts,
                    energy_kev: 12.4,
                },
                50.0,
            )
            .unwrap();
        assert_eq!(st, st2);
        assert!(
            st.saturated >= 1 && st.errors >= 2 && st.invalid_gain >= 2,
            "{st:?}"
        );
        assert_eq!(e.count_above(&energy, 50.0), st.above);
        let mut image = vec![0f32; map.pixels()];
        e.assemble(&energy, &map, &mut image).unwrap();
        let sparse = e.compress(&energy, 512, 1024, 6.0).unwrap();
        let prof = e.integrate(&matrix, &image).unwrap();
        assert_eq!(prof.engine.name, e.info().name);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let got = (
            bits(&energy),
            counts.clone(),
            st,
            bits(&image),
            sparse,
            prof.intensity.clone(),
        );
        match &reference {
            None => reference = Some(got),
            Some(r) => {
                assert!(r.0 == got.0, "{}: energy differs", e.info().name);
                assert!(r.1 == got.1, "{}: counts differ", e.info().name);
                assert_eq!(r.2, got.2);
                assert!(r.3 == got.3, "{}: image differs", e.info().name);
                assert_eq!(r.4, got.4);
                let tol = profile_tolerance(e.as_ref());
                for (a, b) in r.5.iter().zip(&got.5) {
                    assert!((a - b).abs() <= tol * a.abs().max(1e-30), "{a} vs {b}");
                }
            }
        }
        // Flags: never finite numbers.
        assert_eq!(energy[0], f32::INFINITY);
        assert!(
            energy[1].is_nan() && energy[2].is_nan() && energy[3].is_nan() && energy[4].is_nan()
        );
        assert!(energy[100].is_nan());
        assert!(energy[5].is_finite());
        assert_eq!(counts[0], i32::MAX);
        assert_eq!(counts[1], i32::MIN);
    }
}

#[test]
fn photon_counts_match_the_truth_in_g0_and_g1() {
    let s = synth(1, 0.0);
    let f = s.frame(0);
    let tables = ConvTables::new(s.calibration(), None).unwrap();
    let e = Registry::select(None, 2).unwrap();
    // Without a real GPU the chain starts by passing over gpu-wgpu, with the reason.
    if e.engine.info().name != "gpu-wgpu" {
        assert_eq!(e.skipped[0].0, "gpu-wgpu");
        assert!(!e.skipped[0].1.is_empty());
    }
    let mut counts = vec![0i32; f.raw.len()];
    e.engine
        .convert(
            &f.raw,
            &tables,
            ConvOut::Photons {
                out: &mut counts,
                energy_kev: 12.4,
            },
            f32::INFINITY,
        )
        .unwrap();
    let (mut g0, mut g1) = (0, 0);
    for (i, &w) in f.raw.iter().enumerate() {
        match decode(w) {
            Word::Value {
                stage: GainStage::G0,
                ..
            } => {
                assert_eq!(counts[i], f.photons[i] as i32, "pixel {i}");
                g0 += 1;
            }
            Word::Value {
                stage: GainStage::G1,
                ..
            } => {
                // G1 quantisation: 1 ADU ≈ 0.67 keV, a tenth of a photon.
                assert!((counts[i] - f.photons[i] as i32).abs() <= 1, "pixel {i}");
                g1 += 1;
            }
            _ => {}
        }
    }
    assert!(g0 > 500_000 && g1 > 20, "{g0} {g1}");
}

#[test]
fn pedestal_tracking_converges_to_the_truth() {
    let mut cfg = SynthConfig::new(1).unwrap();
    cfg.dark = DarkPattern::new(1, 0).unwrap();
    let s = Synth::new(cfg).unwrap();
    let truth = s.calibration().clone();
    // Start from a pedestal that is 40 ADU off everywhere.
    let det = truth.detector();
    let mut off: Vec<f32> = truth.pedestal.as_slice().to_vec();
    for v in &mut off[..MODULE_PIXELS] {
        *v += 40.0;
    }
    let wrong = Calibration::new(
        truth.gain.clone(),
        PedestalMaps::from_vec(det, off).unwrap(),
    )
    .unwrap();
    let mut tables = ConvTables::new(&wrong, None).unwrap();
    let mut tracker = PedestalTracker::fresh(det.pixels(), 128).unwrap();
    let e = CpuEngine::new(2).unwrap();
    for n in 0..150 {
        let f = s.frame(n);
        assert!(f.dark);
        tracker.update(&e, &f.raw, &mut tables).unwrap();
    }
    let t0 = truth.pedestal.map(0, 0);
    let errs: Vec<f64> = tables.pedestal[0]
        .iter()
        .zip(t0)
        .map(|(a, b)| f64::from(a - b).abs())
        .collect();
    let mean = errs.iter().sum::<f64>() / errs.len() as f64;
    let max = errs.iter().cloned().fold(0.0, f64::max);
    // Noise 3 ADU over ~128 frames: σ ≈ 0.27 ADU.
    assert!(mean < 0.35, "mean error {mean}");
    assert!(max < 2.0, "max error {max}");
    // G1 pedestal untouched.
    assert_eq!(tables.pedestal[1][..10], wrong.pedestal.map(0, 1)[..10]);
    // Scalar engine does the same arithmetic.
    let mut t2 = ConvTables::new(&wrong, None).unwrap();
    let mut tr2 = PedestalTracker::fresh(det.pixels(), 128).unwrap();
    for n in 0..3 {
        tr2.update(&remora_daq::engine::ScalarEngine, &s.frame(n).raw, &mut t2)
            .unwrap();
    }
    let mut t3 = ConvTables::new(&wrong, None).unwrap();
    let mut tr3 = PedestalTracker::fresh(det.pixels(), 128).unwrap();
    for n in 0..3 {
        tr3.update(&e, &s.frame(n).raw, &mut t3).unwrap();
    }
    assert!(t2.pedestal[0]
        .iter()
        .zip(&t3.pedestal[0])
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn dark_pixels_not_in_g0_are_left_out() {
    let det = remora_daq::model::Detector::new(1).unwrap();
    let cal = Calibration::synthetic(det, 3);
    let mut tables = ConvTables::new(&cal, None).unwrap();
    let before = tables.pedestal[0].clone();
    let mut tracker = PedestalTracker::fresh(det.pixels(), 4).unwrap();
    let raw = vec![0x4123u16; det.pixels()];
    tracker
        .update(&CpuEngine::new(2).unwrap(), &raw, &mut tables)
        .unwrap();
    assert_eq!(tables.pedestal[0], before);
    assert!(tracker.counts.iter().all(|&c| c == 0));
}

/// The pipeline the chain tests run: veto at 20 pixels over 100 keV, CSR over 6 keV, 200 bins
/// of integration with `split`, the synthetic source's dark pattern.
fn spotty_pipeline(cfg: &SynthConfig, split: Split) -> PipelineConfig {
    PipelineConfig {
        veto_pixel_kev: 100.0,
        veto_min_pixels: 20,
        sparse_kev: 6.0,
        dark: cfg.dark,
        integrate: Some((
            cfg.poni,
            AzConfig {
                bins: 200,
                split,
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

#[test]
fn pipeline_tracks_darks_vetoes_and_keeps_spotty_frames() {
    let mut cfg = SynthConfig::new(1).unwrap();
    cfg.dark = DarkPattern::new(4, 3).unwrap();
    let mut s = Synth::new(cfg.clone()).unwrap();
    let e = Registry::create(EngineKind::CpuSimd, 2).unwrap();
    let pcfg = spotty_pipeline(&cfg, Split::BBox);
    let mut p = Pipeline::new(e.clone(), s.calibration(), s.layout(), None, pcfg.clone()).unwrap();
    let (mut dark, mut kept) = (0, 0);
    for n in 0..4 {
        let f = s.frame(n);
        match p.process(n, &f.raw).unwrap() {
            Outcome::Dark => dark += 1,
            Outcome::Kept {
                stats,
                sparse,
                profile,
            } => {
                kept += 1;
                assert!(stats.above >= 20);
                assert!(sparse.nnz() > 0 && sparse.bytes() < f.raw.len() * 2);
                let back = sparse.decompress(0.0);
                for (a, b) in p.energy().iter().zip(&back) {
                    if *a > 6.0 {
                        assert_eq!(a.to_bits(), b.to_bits());
                    }
                }
                let prof = profile.unwrap();
                assert!(prof.intensity.iter().any(|&v| v > 0.0));
            }
            Outcome::Rejected(st) => panic!("spotty frame rejected: {st:?}"),
        }
    }
    assert_eq!((dark, kept), (1, 3));
    // Without spots, frames are rejected.
    cfg.spots = 0;
    s = Synth::new(cfg).unwrap();
    let mut p = Pipeline::new(e, s.calibration(), s.layout(), None, pcfg).unwrap();
    assert!(matches!(
        p.process(0, &s.frame(0).raw).unwrap(),
        Outcome::Rejected(_)
    ));
}

#[test]
fn wrong_sizes_are_errors_not_panics() {
    let det = remora_daq::model::Detector::new(1).unwrap();
    let cal = Calibration::synthetic(det, 3);
    let mut tables = ConvTables::new(&cal, None).unwrap();
    for e in engines() {
        let mut out = vec![0f32; 10];
        assert!(e
            .convert(&[0u16; 10], &tables, ConvOut::Energy(&mut out), 1.0)
            .is_err());
        let mut out = vec![0f32; det.pixels()];
        assert!(e
            .convert(&[0u16; 10], &tables, ConvOut::Energy(&mut out), 1.0)
            .is_err());
        let mut c = vec![0i32; det.pixels()];
        let raw = vec![0u16; det.pixels()];
        assert!(e
            .convert(
                &raw,
                &tables,
                ConvOut::Photons {
                    out: &mut c,
                    energy_kev: 0.0
                },
                1.0
            )
            .is_err());
        let mut counts = vec![0u16; 3];
        assert!(e.track_pedestal(&raw, &mut tables, &mut counts, 8).is_err());
        assert!(e.compress(&[0.0; 10], 3, 3, 0.0).is_err());
        assert!(e.compress(&[0.0; 70000], 1, 70000, 0.0).is_err());
    }
    assert!(EngineKind::parse("cuda").is_err());
    assert_eq!(EngineKind::parse("gpu").unwrap(), EngineKind::Gpu);
    assert_eq!(EngineKind::parse("gpu-wgpu").unwrap(), EngineKind::Gpu);
}

#[test]
fn the_registry_lists_the_gpu_engine_when_a_device_is_allowed() {
    let (ok, skipped) = Registry::available(1);
    let names: Vec<_> = ok.iter().map(|e| e.info().name).collect();
    assert!(
        names.contains(&"cpu-simd") && names.contains(&"cpu-scalar"),
        "{names:?}"
    );
    if std::env::var_os("REMORA_GPU").is_some_and(|v| v != "off") {
        assert_eq!(names[0], "gpu-wgpu", "skipped: {skipped:?}");
        // Asked for by name, a CPU-type device is used; picked automatically, it is not.
        let sel = Registry::select(Some(EngineKind::Gpu), 1).unwrap();
        assert_eq!(sel.engine.info().name, "gpu-wgpu");
    } else {
        assert!(names[0] == "gpu-wgpu" || skipped[0].0 == "gpu-wgpu");
    }
}

#[test]
fn pedestal_tracking_on_the_gpu_is_bit_identical_to_the_cpu() {
    let mut cfg = SynthConfig::new(1).unwrap();
    cfg.dark = DarkPattern::new(1, 0).unwrap();
    let s = Synth::new(cfg).unwrap();
    let det = s.calibration().detector();
    let mut mask = vec![0u8; det.pixels()];
    mask[17] = 1;
    let cpu = CpuEngine::new(2).unwrap();
    for g in gpu_engines() {
        let mut ta = ConvTables::new(s.calibration(), Some(&mask)).unwrap();
        let mut tb = ta.clone();
        let mut ra = PedestalTracker::fresh(det.pixels(), 3).unwrap();
        let mut rb = PedestalTracker::fresh(det.pixels(), 3).unwrap();
        for n in 0..5 {
            let mut raw = s.frame(n).raw;
            raw[..4].copy_from_slice(&[0x4000, 0xc000, 0xffff, 0x8000]);
            ra.update(&cpu, &raw, &mut ta).unwrap();
            rb.update(g.as_ref(), &raw, &mut tb).unwrap();
            // The device keeps its copy in step: conversion after tracking sees the new pedestal.
            let (mut ea, mut eb) = (vec![0f32; raw.len()], vec![0f32; raw.len()]);
            let sa = cpu
                .convert(&raw, &ta, ConvOut::Energy(&mut ea), 5.0)
                .unwrap();
            let sb = g.convert(&raw, &tb, ConvOut::Energy(&mut eb), 5.0).unwrap();
            assert_eq!(sa, sb);
            assert!(
                ea.iter().zip(&eb).all(|(a, b)| a.to_bits() == b.to_bits()),
                "frame {n}"
            );
        }
        assert_eq!(ra.counts, rb.counts);
        assert!(ta.pedestal[0]
            .iter()
            .zip(&tb.pedestal[0])
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(tb.pedestal[0][17].is_nan());
        assert_eq!(ta.revision, tb.revision);
    }
}

#[test]
fn the_chained_frame_on_the_gpu_equals_the_cpu_pipeline() {
    let mut cfg = SynthConfig::new(1).unwrap();
    cfg.dark = DarkPattern::new(4, 3).unwrap();
    cfg.special_rate = 1e-3;
    let s = Synth::new(cfg.clone()).unwrap();
    let pcfg = spotty_pipeline(&cfg, Split::BBox);
    let cpu: std::sync::Arc<dyn Engine> = std::sync::Arc::new(CpuEngine::new(2).unwrap());
    for (k, g) in gpu_engines().into_iter().enumerate() {
        let mut pc =
            Pipeline::new(cpu.clone(), s.calibration(), s.layout(), None, pcfg.clone()).unwrap();
        let mut pg = Pipeline::new(g, s.calibration(), s.layout(), None, pcfg.clone()).unwrap();
        // One of the two leaves the pixels on the device: results must not change.
        pg.set_host_pixels(k == 0);
        for n in 0..6 {
            let mut raw = s.frame(n).raw;
            if n == 5 {
                // No spots: vetoed on the device.
                raw.fill(0x0100);
            }
            let (a, b) = (pc.process(n, &raw).unwrap(), pg.process(n, &raw).unwrap());
            match (a, b) {
                (Outcome::Dark, Outcome::Dark) => {}
                (Outcome::Rejected(x), Outcome::Rejected(y)) => {
                    assert_eq!(x, y);
                    assert_eq!(n, 5);
                }
                (
                    Outcome::Kept {
                        stats: sa,
                        sparse: xa,
                        profile: pa,
                    },
                    Outcome::Kept {
                        stats: sb,
                        sparse: xb,
                        profile: pb,
                    },
                ) => {
                    assert_eq!(sa, sb, "frame {n}");
                    assert_eq!(xa.row_ptr, xb.row_ptr, "frame {n}");
                    assert_eq!(xa.col, xb.col, "frame {n}");
                    assert!(xa
                        .values
                        .iter()
                        .zip(&xb.values)
                        .all(|(p, q)| p.to_bits() == q.to_bits()));
                    let (pa, pb) = (pa.unwrap(), pb.unwrap());
                    assert_eq!(pb.engine.name, "gpu-wgpu");
                    for (p, q) in pa.signal.iter().zip(&pb.signal) {
                        assert!((p - q).abs() <= 1e-5 * p.abs().max(1e-6), "{p} vs {q}");
                    }
                    for (p, q) in pa.count.iter().zip(&pb.count) {
                        assert!((p - q).abs() <= 1e-5 * p.abs().max(1e-6), "{p} vs {q}");
                    }
                    if k == 0 {
                        assert!(pc
                            .image()
                            .iter()
                            .zip(pg.image())
                            .all(|(p, q)| p.to_bits() == q.to_bits()));
                    }
                }
                (a, b) => panic!("frame {n}: cpu {a:?} but gpu {b:?}"),
            }
        }
    }
}

/// Odd shapes on every engine: CSR of frames whose rows are not a multiple of any workgroup or
/// band (1 × 1, 7 × 13, 300 × 1021 with empty rows and all-empty frames), and counts over
/// lengths that are not multiples of a workgroup; all equal to the scalar reference.
#[test]
fn odd_shapes_and_empty_rows_give_the_reference_results_on_every_engine() {
    let reference = remora_daq::engine::ScalarEngine;
    let shapes = [(1usize, 1usize), (7, 13), (300, 1021), (5, 256), (2, 257)];
    for e in engines() {
        for &(rows, cols) in &shapes {
            let frame: Vec<f32> = (0..rows * cols)
                .map(|i| match (i / cols) % 4 {
                    // Every fourth row empty, special values elsewhere.
                    0 => 0.0,
                    _ if i % 97 == 0 => f32::NAN,
                    _ if i % 89 == 0 => f32::INFINITY,
                    _ => ((i * 37) % 23) as f32,
                })
                .collect();
            let want = reference.compress(&frame, rows, cols, 6.0).unwrap();
            let got = e.compress(&frame, rows, cols, 6.0).unwrap();
            let name = e.info().name;
            assert_eq!(got.row_ptr, want.row_ptr, "{name} {rows}x{cols}");
            assert_eq!(got.col, want.col, "{name} {rows}x{cols}");
            assert!(got
                .values
                .iter()
                .zip(&want.values)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            let none = e.compress(&frame, rows, cols, f32::INFINITY).unwrap();
            assert_eq!(none.nnz(), 0, "{name}");
            for n in [0, 1, 255, 257, frame.len()] {
                assert_eq!(
                    e.count_above(&frame[..n.min(frame.len())], 6.0),
                    reference.count_above(&frame[..n.min(frame.len())], 6.0),
                    "{name} count over {n}"
                );
            }
        }
    }
}

/// The copy a receiver takes of a dark frame before it checks it: every engine copies every
/// word, whatever the length's remainder against its chunks, and refuses a mismatched output.
#[test]
fn frame_copies_are_exact_and_check_their_lengths() {
    for e in engines() {
        for len in [0usize, 1, 65_535, 65_537, 524_288 + 3] {
            let src: Vec<u16> = (0..len).map(|i| (i * 7919 % 65_521) as u16).collect();
            let mut dst = vec![0xFFFF; len];
            e.copy_frame(&src, &mut dst).unwrap();
            assert!(dst == src, "{} at {len} words", e.info().name);
        }
        let err = e.copy_frame(&[1, 2, 3], &mut [0; 2]).unwrap_err();
        assert!(err.to_string().contains("frame copy"), "{err}");
    }
}
