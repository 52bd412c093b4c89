//! The GPU chain's steady state, held to its counters on whatever device runs the tests
//! (lavapipe in CI): one submission per frame, nothing created after warm-up, the raw frame the
//! only bytes sent, and back only what the caller asked for; any number of frames in flight
//! gives the results of one at a time, equal to the CPU engine's.
use std::collections::VecDeque;
use std::sync::Arc;

use remora_accel::gpu::{Gpu, GpuCounters, GpuPolicy};
use remora_daq::azint::{AzConfig, AzMatrix};
use remora_daq::calib::ConvTables;
use remora_daq::engine::{CpuEngine, Engine, FrameOut, FramePlan, GpuEngine};
use remora_daq::geometry::AssemblyMap;
use remora_daq::pedestal::DarkPattern;
use remora_daq::synth::{Synth, SynthConfig};

/// A device of the test's own, so that other tests running at the same time do not move its
/// counters. `None` (skip) only where `Gpu::for_tests` would skip.
fn own_gpu() -> Option<Arc<Gpu>> {
    Gpu::for_tests()?;
    let policy = match std::env::var_os("REMORA_GPU") {
        Some(_) => GpuPolicy::from_env().unwrap(),
        None => GpuPolicy::Any,
    };
    Some(Gpu::open(policy).expect("a device opened once already"))
}

struct Setup {
    raws: Vec<Vec<u16>>,
    tables: ConvTables,
    map: AssemblyMap,
    matrix: AzMatrix,
}

fn setup(frames: u64) -> Setup {
    let mut cfg = SynthConfig::new(1).unwrap();
    cfg.dark = DarkPattern::NONE;
    let s = Synth::new(cfg).unwrap();
    let map = s.layout().assembly_map(None).unwrap();
    let az = AzConfig {
        bins: 100,
        ..Default::default()
    };
    let matrix =
        AzMatrix::build(&s.config().poni, (map.rows, map.cols), Some(&map.mask), &az).unwrap();
    Setup {
        raws: (0..frames).map(|n| s.frame(n).raw).collect(),
        tables: ConvTables::new(s.calibration(), None).unwrap(),
        map,
        matrix,
    }
}

impl Setup {
    fn plan(&self, veto_min: u64, host_pixels: bool) -> FramePlan<'_> {
        FramePlan {
            veto_kev: 50.0,
            veto_min,
            sparse_kev: 6.0,
            shape: (512, 1024),
            integrate: Some((&self.map, &self.matrix)),
            host_pixels,
        }
    }
}

/// A frame's result with its host pixels (converted frame, image; empty when not asked for).
type Done = (FrameOut, Vec<f32>, Vec<f32>);

/// Frames `raws` through the chain with `depth` of them in flight; results in order, with
/// the host pixels of each (empty when not asked for).
fn run(
    g: &GpuEngine,
    s: &Setup,
    raws: &[Vec<u16>],
    plan: &FramePlan<'_>,
    depth: usize,
) -> Vec<Done> {
    let mut out = Vec::new();
    let mut queue = VecDeque::new();
    let finish = |f, out: &mut Vec<_>| {
        let (n, m) = if plan.host_pixels {
            (s.tables.pixels(), s.map.pixels())
        } else {
            (0, 0)
        };
        let (mut e, mut i) = (vec![0f32; n], vec![0f32; m]);
        let r = g.finish_frame(f, plan, &mut e, &mut i).unwrap();
        out.push((r, e, i));
    };
    for raw in raws {
        queue.push_back(g.begin_frame(raw, &s.tables, plan).unwrap());
        if queue.len() == depth {
            finish(queue.pop_front().unwrap(), &mut out);
        }
    }
    while let Some(f) = queue.pop_front() {
        finish(f, &mut out);
    }
    out
}

/// Bytes the caller asked for, as the host holds them: the four counts, the CSR (row
/// pointers, 16-bit columns, values) and the profile (five f64 per bin), for a kept frame.
fn requested(r: &FrameOut, bins: usize) -> u64 {
    16 + r.kept.as_ref().map_or(0, |(sp, p)| {
        (sp.bytes() + 2) as u64 + p.as_ref().map_or(0, |_| bins as u64 * 40)
    })
}

/// Warms `depth` slots up, then counts what `frames` more frames cost.
fn measure(
    g: &GpuEngine,
    s: &Setup,
    plan: &FramePlan<'_>,
    depth: usize,
) -> (GpuCounters, Vec<Done>) {
    run(g, s, &s.raws[..depth + 1], plan, depth);
    let before = g.device().counters();
    let r = run(g, s, &s.raws, plan, depth);
    (g.device().counters().since(&before), r)
}

fn same(a: &FrameOut, b: &FrameOut) {
    assert_eq!(a.stats, b.stats);
    match (&a.kept, &b.kept) {
        (None, None) => {}
        (Some((sa, pa)), Some((sb, pb))) => {
            assert_eq!((&sa.row_ptr, &sa.col), (&sb.row_ptr, &sb.col));
            assert!(sa
                .values
                .iter()
                .zip(&sb.values)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
            let (pa, pb) = (pa.as_ref().unwrap(), pb.as_ref().unwrap());
            for (x, y) in pa.signal.iter().zip(&pb.signal) {
                assert!((x - y).abs() <= 1e-5 * x.abs().max(1e-6), "{x} vs {y}");
            }
            for (x, y) in pa.count.iter().zip(&pb.count) {
                assert!((x - y).abs() <= 1e-5 * x.abs().max(1e-6), "{x} vs {y}");
            }
        }
        (x, y) => panic!("kept differs: {x:?} vs {y:?}"),
    }
}

#[test]
fn the_steady_state_is_one_submission_per_frame_with_nothing_created_and_only_the_bytes_asked_for()
{
    let Some(gpu) = own_gpu() else { return };
    let s = setup(8);
    let plan = s.plan(5, false);
    let raw_bytes = s.raws[0].len() as u64 * 2;
    let frames = s.raws.len() as u64;
    let mut reference = None;
    for depth in [1, 2, 3] {
        let g = GpuEngine::on(gpu.clone());
        let (d, r) = measure(&g, &s, &plan, depth);
        assert_eq!(d.submissions, frames, "depth {depth}: {d:?}");
        assert_eq!(
            d.objects(),
            0,
            "depth {depth}: created after warm-up: {d:?}"
        );
        assert!(d.h2d_bytes <= frames * raw_bytes, "depth {depth}: {d:?}");
        let asked: u64 = r.iter().map(|x| requested(&x.0, 100)).sum();
        assert!(
            r.iter().all(|x| x.0.kept.is_some()),
            "frames should be kept"
        );
        assert!(
            d.d2h_bytes as f64 <= asked as f64 * 1.05,
            "depth {depth}: {} bytes back for {asked} asked",
            d.d2h_bytes
        );
        let r: Vec<FrameOut> = r.into_iter().map(|x| x.0).collect();
        match &reference {
            None => reference = Some(r),
            Some(one) => one.iter().zip(&r).for_each(|(a, b)| same(a, b)),
        }
    }
    // One at a time equals the CPU engine.
    let cpu = CpuEngine::new(2).unwrap();
    let (mut e, mut i) = (vec![0f32; s.tables.pixels()], vec![0f32; s.map.pixels()]);
    for (raw, g) in s.raws.iter().zip(reference.unwrap()) {
        let c = cpu
            .process_frame(raw, &s.tables, &plan, &mut e, &mut i)
            .unwrap();
        same(&g, &c);
    }
}

#[test]
fn a_rejected_frame_costs_its_upload_and_sixteen_bytes_of_counts() {
    let Some(gpu) = own_gpu() else { return };
    let s = setup(5);
    let plan = s.plan(u64::MAX, false);
    let g = GpuEngine::on(gpu);
    let (d, r) = measure(&g, &s, &plan, 2);
    let frames = s.raws.len() as u64;
    assert!(r.iter().all(|x| x.0.kept.is_none()));
    assert_eq!(d.submissions, frames, "{d:?}");
    assert_eq!(d.objects(), 0, "{d:?}");
    assert_eq!(d.h2d_bytes, frames * s.raws[0].len() as u64 * 2, "{d:?}");
    assert_eq!(d.d2h_bytes, frames * 16, "{d:?}");
}

#[test]
fn host_pixels_come_back_with_the_frame_and_equal_the_cpu_engine() {
    let Some(gpu) = own_gpu() else { return };
    let s = setup(4);
    let plan = s.plan(5, true);
    let g = GpuEngine::on(gpu);
    let (d, r) = measure(&g, &s, &plan, 2);
    let frames = s.raws.len() as u64;
    assert_eq!(d.submissions, frames, "{d:?}");
    assert_eq!(d.objects(), 0, "{d:?}");
    let pixels = (s.tables.pixels() + s.map.pixels()) as u64 * 4;
    let asked: u64 = r.iter().map(|x| requested(&x.0, 100) + pixels).sum();
    assert!(
        d.d2h_bytes as f64 <= asked as f64 * 1.05,
        "{d:?} for {asked}"
    );
    let cpu = CpuEngine::new(2).unwrap();
    let (mut e, mut i) = (vec![0f32; s.tables.pixels()], vec![0f32; s.map.pixels()]);
    for (raw, (gr, ge, gi)) in s.raws.iter().zip(r) {
        let c = cpu
            .process_frame(raw, &s.tables, &plan, &mut e, &mut i)
            .unwrap();
        same(&gr, &c);
        assert!(ge.iter().zip(&e).all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(gi.iter().zip(&i).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
    // A wrong output size is an error, not a panic.
    let f = g.begin_frame(&s.raws[0], &s.tables, &plan).unwrap();
    assert!(g
        .finish_frame(f, &plan, &mut [0f32; 3], &mut [0f32; 3])
        .is_err());
    // So is finishing a frame with another plan than it began with.
    let f = g.begin_frame(&s.raws[0], &s.tables, &plan).unwrap();
    let other = s.plan(6, true);
    let (mut e, mut i) = (vec![0f32; s.tables.pixels()], vec![0f32; s.map.pixels()]);
    let err = g.finish_frame(f, &other, &mut e, &mut i).unwrap_err();
    assert!(err.to_string().contains("another plan"), "{err}");
}

#[test]
fn a_frame_dropped_in_flight_leaves_the_engine_working() {
    let Some(gpu) = own_gpu() else { return };
    let s = setup(3);
    let plan = s.plan(5, false);
    let g = GpuEngine::on(gpu);
    drop(g.begin_frame(&s.raws[0], &s.tables, &plan).unwrap());
    let r = run(&g, &s, &s.raws, &plan, 2);
    let one = run(&g, &s, &s.raws, &plan, 1);
    r.iter().zip(&one).for_each(|(a, b)| same(&a.0, &b.0));
}

#[test]
fn stage_times_come_from_timestamps_where_the_device_has_them() {
    let Some(gpu) = own_gpu() else { return };
    let s = setup(3);
    let plan = s.plan(5, false);
    let g = GpuEngine::on(gpu).with_timestamps(true);
    let r = run(&g, &s, &s.raws, &plan, 2);
    let t = g.take_stage_times();
    if !g.timestamps() {
        assert_eq!(t.frames, 0);
        return;
    }
    assert_eq!(t.frames, r.len() as u64);
    let names: Vec<_> = t.per_frame().iter().map(|x| x.0).collect();
    assert_eq!(
        names,
        [
            "upload",
            "convert",
            "decide",
            "csr count",
            "csr scan",
            "csr fill",
            "csr pack",
            "assemble",
            "integrate"
        ]
    );
    assert!(t.total_ms.iter().all(|x| x.1 >= 0.0 && x.1.is_finite()));
    assert_eq!(g.take_stage_times().frames, 0, "taking resets");
}

#[test]
fn pedestal_tracking_keeps_the_device_copy_equal_to_the_host_one_without_reading_it_back() {
    use remora_daq::engine::ConvOut;
    use remora_daq::pedestal::PedestalTracker;
    let Some(gpu) = own_gpu() else { return };
    let mut cfg = SynthConfig::new(1).unwrap();
    cfg.dark = DarkPattern::new(1, 0).unwrap();
    let darks = Synth::new(cfg).unwrap();
    let s = setup(2);
    let g = GpuEngine::on(gpu.clone());
    let cpu = CpuEngine::new(2).unwrap();
    let mut tables = s.tables.clone();
    let mut tracker = PedestalTracker::seeded(tables.pixels(), 4).unwrap();
    // Warm: the first dark frame makes the device's slot and counts.
    tracker
        .update(&g, &darks.frame(0).raw, &mut tables)
        .unwrap();
    let before = gpu.counters();
    for n in 1..6 {
        tracker
            .update(&g, &darks.frame(n).raw, &mut tables)
            .unwrap();
    }
    let d = gpu.counters().since(&before);
    assert_eq!(d.d2h_bytes, 0, "{d:?}");
    assert_eq!(d.objects(), 0, "{d:?}");
    assert_eq!(d.submissions, 5, "{d:?}");
    // The device's pedestal (used by the GPU's conversion) equals the host's (used by the CPU's).
    let (mut a, mut b) = (vec![0f32; tables.pixels()], vec![0f32; tables.pixels()]);
    for raw in &s.raws {
        g.convert(raw, &tables, ConvOut::Energy(&mut a), 50.0)
            .unwrap();
        cpu.convert(raw, &tables, ConvOut::Energy(&mut b), 50.0)
            .unwrap();
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
    // And the host's equals tracking on the CPU alone.
    let mut alone = s.tables.clone();
    let mut t2 = PedestalTracker::seeded(alone.pixels(), 4).unwrap();
    for n in 0..6 {
        t2.update(&cpu, &darks.frame(n).raw, &mut alone).unwrap();
    }
    assert!(tables.pedestal[0]
        .iter()
        .zip(&alone.pedestal[0])
        .all(|(x, y)| x.to_bits() == y.to_bits()));
}

/// A live view takes a frame now and then: a pipeline on the GPU with host pixels off
/// downloads the pixels of the frames submitted wanting them and of no other, says which
/// frames have them, and those equal the CPU pipeline's.
#[test]
fn only_frames_submitted_wanting_pixels_bring_them_back() {
    use remora_daq::pipeline::{Outcome, Pipeline, PipelineConfig};
    let Some(gpu) = own_gpu() else { return };
    let mut cfg = SynthConfig::new(1).unwrap();
    cfg.dark = DarkPattern::NONE;
    let synth = Synth::new(cfg.clone()).unwrap();
    let az = AzConfig {
        bins: 100,
        ..Default::default()
    };
    let pcfg = PipelineConfig {
        integrate: Some((cfg.poni, az)),
        ..Default::default()
    };
    let make = |e: Arc<dyn Engine>| {
        Pipeline::new(e, synth.calibration(), synth.layout(), None, pcfg.clone()).unwrap()
    };
    let mut p = make(Arc::new(GpuEngine::on(gpu.clone())));
    p.set_host_pixels(false);
    p.set_depth(2);
    let mut cpu = make(Arc::new(CpuEngine::new(2).unwrap()));
    let raws: Vec<Vec<u16>> = (0..6).map(|n| synth.frame(n).raw).collect();
    // Every slot the counted frames use made before counting: two without pixels in flight
    // together, then one with them beside one without.
    for (n, raw) in raws.iter().enumerate().take(3) {
        p.submit_with_pixels(n as u64, raw, n == 2).unwrap();
        if p.in_flight() == p.depth() {
            p.collect().unwrap();
        }
    }
    while p.collect().unwrap().is_some() {}

    let want = [false, true, false, false, true, false];
    let before = gpu.counters();
    let mut got = Vec::new();
    let mut take = |p: &mut Pipeline| {
        let (n, o) = p.collect().unwrap().unwrap();
        got.push((
            n,
            o,
            p.has_pixels(),
            p.energy().to_vec(),
            p.image().to_vec(),
        ));
    };
    for (n, raw) in raws.iter().enumerate() {
        p.submit_with_pixels(n as u64, raw, want[n]).unwrap();
        if p.in_flight() == p.depth() {
            take(&mut p);
        }
    }
    while p.in_flight() > 0 {
        take(&mut p);
    }
    let d = gpu.counters().since(&before);

    let pixels = (p.energy().len() + p.image().len()) as u64 * 4;
    let mut asked = 0;
    for (n, o, has, e, i) in &got {
        let n = *n as usize;
        assert_eq!(*has, want[n], "frame {n}");
        asked += 16
            + match o {
                Outcome::Kept {
                    sparse, profile, ..
                } => (sparse.bytes() + 2) as u64 + profile.as_ref().map_or(0, |_| 100 * 40),
                _ => 0,
            };
        cpu.process(n as u64, &raws[n]).unwrap();
        assert!(cpu.has_pixels());
        if want[n] {
            asked += pixels;
            assert!(e
                .iter()
                .zip(cpu.energy())
                .all(|(x, y)| x.to_bits() == y.to_bits()));
            assert!(i
                .iter()
                .zip(cpu.image())
                .all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }
    assert_eq!(got.len(), raws.len());
    assert_eq!(d.objects(), 0, "{d:?}");
    assert!(d.d2h_bytes >= 2 * pixels, "{d:?}");
    assert!(
        d.d2h_bytes as f64 <= asked as f64 * 1.05,
        "{d:?} for {asked}"
    );
}
