//! Whole-stage throughput measurement (`remora bench jungfrau`): each stage and the chained
//! pipeline over synthetic frames, with memcpy bandwidth as the ceiling. Timings only, never
//! used in tests.
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use remora_daq::azint::{AzConfig, AzMatrix};
use remora_daq::calib::ConvTables;
use remora_daq::engine::{ConvOut, Engine};
use remora_daq::model::{Detector, MODULE_PIXELS};
use remora_daq::pedestal::{DarkPattern, PedestalTracker};
use remora_daq::pipeline::{Outcome, Pipeline, PipelineConfig};
use remora_daq::synth::{Synth, SynthConfig};
use remora_daq::{DaqError, Result};

/// Most raw bytes the distinct frames may take. Cycling frames only has to defeat the CPU caches
/// (a chip's L3 is at most ~100 MiB), and the run holds each distinct frame four times over
/// (raw, dark, and a memcpy source of twice its size): 256 MiB of frames is ~1 GiB of memory.
pub const MAX_DISTINCT_BYTES: usize = 256 << 20;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Modules (8 = 4M).
    pub modules: usize,
    /// Frames per stage (per round; the best of three rounds counts). At least 1.
    pub frames: usize,
    /// Worker threads (0 = one per CPU); capped at the CPUs, see [`BenchConfig::threads_used`].
    pub threads: usize,
    /// Distinct synthetic frames cycled through (more than fit in cache): 1 to
    /// [`BenchConfig::max_distinct`]; only the first `frames` of them are generated.
    pub distinct: usize,
    /// Radial bins of the integration.
    pub bins: usize,
}

impl BenchConfig {
    /// Distinct frames allowed for a detector of `modules`: [`MAX_DISTINCT_BYTES`] of raw
    /// frames, and always one.
    pub fn max_distinct(modules: usize) -> usize {
        (MAX_DISTINCT_BYTES / (modules.max(1) * MODULE_PIXELS * 2)).max(1)
    }

    /// Refuses what would measure nothing or hold memory without bound.
    pub fn check(&self) -> Result<()> {
        let det = Detector::new(self.modules)?;
        if self.frames == 0 {
            return Err(DaqError::Config(
                "at least 1 frame per stage is needed".into(),
            ));
        }
        let max = Self::max_distinct(self.modules);
        if self.distinct == 0 || self.distinct > max {
            return Err(DaqError::Config(format!(
                "{} distinct frames: 1 to {max} are allowed for {} module(s), {} MiB of raw \
                 frames (cycling frames only has to defeat the CPU caches, and each one is held \
                 4 times in memory)",
                self.distinct,
                det.modules(),
                MAX_DISTINCT_BYTES >> 20
            )));
        }
        Ok(())
    }

    /// Worker threads the run starts: `threads`, 0 meaning one per CPU, never more than
    /// [`cpus`] (more only contend for the same cores, and each costs a stack).
    pub fn threads_used(&self) -> usize {
        match self.threads {
            0 => cpus(),
            t => t.min(cpus()),
        }
    }
}

/// CPUs this process may run on (affinity and cgroup quota included), at least 1.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Measured figures: GB/s are of raw input (2 bytes per pixel), fps frames per second.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Modules.
    pub modules: usize,
    /// Frames per stage.
    pub frames: usize,
    /// Worker threads.
    pub threads: usize,
    /// Engine name.
    pub engine: &'static str,
    /// The device, for a GPU engine (adapter name, type, driver).
    pub device: Option<String>,
    /// SIMD level in use.
    pub simd: &'static str,
    /// Raw bytes per frame.
    pub frame_bytes: usize,
    /// Conversion to keV with the fused veto count.
    pub convert_gbps: f64,
    /// Same in frames/s.
    pub convert_fps: f64,
    /// Conversion to photon counts (int32).
    pub photons_gbps: f64,
    /// Pedestal tracking on dark frames.
    pub pedestal_gbps: f64,
    /// Veto count alone over a converted frame.
    pub veto_gbps: f64,
    /// CSR compression of a converted frame.
    pub compress_gbps: f64,
    /// Kept pixels per frame in the CSR.
    pub compress_nnz: usize,
    /// Raw bytes / CSR bytes.
    pub compress_ratio: f64,
    /// Assembly into the detector image.
    pub assemble_fps: f64,
    /// Azimuthal integration (bbox CSR, q, solid angle) of an assembled image.
    pub integrate_fps: f64,
    /// Matrix entries.
    pub integrate_nnz: usize,
    /// The chained pipeline (convert+veto, CSR, assemble, integrate) on non-dark frames.
    pub pipeline_gbps: f64,
    /// Same in frames/s.
    pub pipeline_fps: f64,
    /// Frames the veto kept in the pipeline run.
    pub pipeline_kept: usize,
    /// The pipeline without assembly and integration (convert+veto, CSR), as the thesis's
    /// GPU pipeline (conversion, spot count, CSR).
    pub pipeline_sparse_gbps: f64,
    /// memcpy of frame-sized buffers: bytes copied per second (the read+write ceiling).
    pub memcpy_gbps: f64,
    /// The chained pipeline with frames in flight on a GPU engine, frames/s (the same as
    /// `gpu.pipeline_fps`); `None` for host engines.
    pub pipeline_overlap_fps: Option<f64>,
    /// Frames in flight: 1 for host engines (one frame at a time, spread over the threads).
    pub frames_in_flight: usize,
    /// A GPU engine's chain with frames in flight and its device counters.
    pub gpu: Option<GpuChainReport>,
    /// Frames a host engine processed side by side in `pipeline_lanes_fps` (see
    /// [`Pipeline::set_lanes`]).
    pub lanes: Option<usize>,
    /// The chained pipeline on a host engine with `lanes` frames side by side, frames/s.
    pub pipeline_lanes_fps: Option<f64>,
}

fn rate(bytes: usize, frames: usize, secs: f64) -> (f64, f64) {
    (
        bytes as f64 * frames as f64 / secs / 1e9,
        frames as f64 / secs,
    )
}

/// Seconds for `frames` calls: the best of three rounds after a warm-up call, because the
/// machine is shared and a round can lose the CPU to other jobs.
fn time(frames: usize, mut f: impl FnMut(usize) -> Result<()>) -> Result<f64> {
    f(0)?; // warm-up: page faults, caches
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        for i in 0..frames {
            f(i)?;
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// The bench's synthetic frames: no dark frames, rare special words, the distinct frames
/// cycled through (only the first `frames` of them: later ones would never be used).
fn bench_frames(cfg: &BenchConfig) -> Result<(SynthConfig, Synth, Vec<Vec<u16>>)> {
    let mut sc = SynthConfig::new(cfg.modules)?;
    sc.dark = DarkPattern::NONE;
    sc.special_rate = 1e-5;
    let synth = Synth::new(sc.clone())?;
    let raws = (0..cfg.distinct.min(cfg.frames) as u64)
        .map(|n| synth.frame(n).raw)
        .collect();
    Ok((sc, synth, raws))
}

/// Runs every stage on the `cpu-simd` engine (what the tests of the limits call).
#[cfg(test)]
pub fn run(cfg: &BenchConfig) -> Result<BenchReport> {
    let engine = std::sync::Arc::new(remora_daq::engine::CpuEngine::new(cfg.threads_used())?);
    run_with(cfg, engine, None)
}

/// Runs every stage on `engine` (`device` names a GPU in the report). The chained runs leave
/// the pixels where the engine computed them (no download of converted frames and images).
pub fn run_with(
    cfg: &BenchConfig,
    engine: std::sync::Arc<dyn Engine>,
    device: Option<String>,
) -> Result<BenchReport> {
    cfg.check()?;
    let frames = cfg.frames;
    let threads = cfg.threads_used();
    let (sc, synth, raws) = bench_frames(cfg)?;
    let info = engine.info();
    let det = synth.layout().detector();
    let bytes = det.frame_bytes();
    let mut tables = ConvTables::new(synth.calibration(), None)?;
    let mut energy = vec![0f32; det.pixels()];
    let mut counts = vec![0i32; det.pixels()];
    let raw = |i: usize| &raws[i % raws.len()];

    let t = time(frames, |i| {
        engine
            .convert(raw(i), &tables, ConvOut::Energy(&mut energy), 50.0)
            .map(drop)
    })?;
    let (convert_gbps, convert_fps) = rate(bytes, frames, t);
    let t = time(frames, |i| {
        engine
            .convert(
                raw(i),
                &tables,
                ConvOut::Photons {
                    out: &mut counts,
                    energy_kev: 12.4,
                },
                50.0,
            )
            .map(drop)
    })?;
    let photons_gbps = rate(bytes, frames, t).0;
    let darks: Vec<Vec<u16>> = {
        let mut d = sc.clone();
        d.dark = DarkPattern::new(1, 0)?;
        let s = Synth::new(d)?;
        (0..raws.len() as u64).map(|n| s.frame(n).raw).collect()
    };
    let mut tracker = PedestalTracker::seeded(det.pixels(), 128)?;
    let t = time(frames, |i| {
        tracker.update(engine.as_ref(), &darks[i % darks.len()], &mut tables)
    })?;
    let pedestal_gbps = rate(bytes, frames, t).0;
    let tables = ConvTables::new(synth.calibration(), None)?;

    engine.convert(raw(0), &tables, ConvOut::Energy(&mut energy), 50.0)?;
    let t = time(frames, |_| {
        std::hint::black_box(engine.count_above(&energy, 50.0));
        Ok(())
    })?;
    let veto_gbps = rate(bytes, frames, t).0;
    let (rows, cols) = det.raw_shape();
    let mut nnz = 0;
    let mut csr_bytes = 0;
    let t = time(frames, |_| {
        let s = engine.compress(&energy, rows, cols, 6.0)?;
        nnz = s.nnz();
        csr_bytes = s.bytes();
        Ok(())
    })?;
    let compress_gbps = rate(bytes, frames, t).0;

    let map = synth.layout().assembly_map(None)?;
    let mut image = vec![0f32; map.pixels()];
    let t = time(frames, |_| engine.assemble(&energy, &map, &mut image))?;
    let assemble_fps = rate(bytes, frames, t).1;
    let az = AzConfig {
        bins: cfg.bins,
        ..Default::default()
    };
    let matrix = AzMatrix::build(&sc.poni, (map.rows, map.cols), Some(&map.mask), &az)?;
    let t = time(frames, |_| engine.integrate(&matrix, &image).map(drop))?;
    let integrate_fps = rate(bytes, frames, t).1;

    let pcfg = PipelineConfig {
        integrate: Some((sc.poni, az)),
        ..Default::default()
    };
    let mut p = Pipeline::new(
        engine.clone(),
        synth.calibration(),
        synth.layout(),
        None,
        pcfg,
    )?;
    p.set_host_pixels(false);
    let mut kept = 0;
    let t = time(frames, |i| {
        if let Outcome::Kept { .. } = p.process(i as u64, raw(i))? {
            kept += 1;
        }
        Ok(())
    })?;
    let (pipeline_gbps, pipeline_fps) = rate(bytes, frames, t);
    let kept = kept.min(frames);
    let mut p = Pipeline::new(
        engine.clone(),
        synth.calibration(),
        synth.layout(),
        None,
        PipelineConfig::default(),
    )?;
    p.set_host_pixels(false);
    let t = time(frames, |i| p.process(i as u64, raw(i)).map(drop))?;
    let pipeline_sparse_gbps = rate(bytes, frames, t).0;

    let memcpy_gbps = memcpy_gbps(threads, raws.len(), bytes, frames)?;

    Ok(BenchReport {
        modules: cfg.modules,
        frames,
        threads: info.threads,
        engine: info.name,
        device,
        simd: info.simd,
        frame_bytes: bytes,
        convert_gbps,
        convert_fps,
        photons_gbps,
        pedestal_gbps,
        veto_gbps,
        compress_gbps,
        compress_nnz: nnz,
        compress_ratio: bytes as f64 / csr_bytes.max(1) as f64,
        assemble_fps,
        integrate_fps,
        integrate_nnz: matrix.nnz(),
        pipeline_gbps,
        pipeline_fps,
        pipeline_kept: kept,
        pipeline_sparse_gbps,
        memcpy_gbps,
        pipeline_overlap_fps: None,
        frames_in_flight: 1,
        gpu: None,
        lanes: None,
        pipeline_lanes_fps: None,
    })
}

/// memcpy of frame-sized buffers on `threads` threads, the yardstick beside the stages (the
/// source cycles over `sources` buffers as the raw frames do): GB/s.
fn memcpy_gbps(threads: usize, sources: usize, bytes: usize, frames: usize) -> Result<f64> {
    let pool = remora_accel::CpuPool::new(threads)?;
    let src: Vec<Vec<u8>> = (0..sources).map(|k| vec![k as u8; bytes * 2]).collect();
    let mut dst = vec![0u8; bytes * 2];
    let chunk = pool.chunk_len(dst.len(), 4096);
    let t = time(frames, |i| {
        let s = &src[i % src.len()];
        pool.install(|| {
            dst.par_chunks_mut(chunk)
                .zip(s.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s))
        });
        std::hint::black_box(&dst);
        Ok(())
    })?;
    Ok(rate(bytes * 2, frames, t).0)
}

/// The chained pipeline (convert+veto, CSR, assembly, integration; no pixels kept) on a host
/// engine with `lanes` frames processed side by side: frames/s, best of three rounds.
pub fn host_lanes(
    cfg: &BenchConfig,
    engine: std::sync::Arc<dyn Engine>,
    lanes: usize,
) -> Result<f64> {
    cfg.check()?;
    let (sc, synth, raws) = bench_frames(cfg)?;
    let az = AzConfig {
        bins: cfg.bins,
        ..Default::default()
    };
    let pcfg = PipelineConfig {
        integrate: Some((sc.poni, az)),
        ..Default::default()
    };
    let mut p = Pipeline::new(engine, synth.calibration(), synth.layout(), None, pcfg)?;
    p.set_host_pixels(false);
    p.set_lanes(lanes);
    let mut round = |n: usize| -> Result<()> {
        for i in 0..n {
            p.submit(i as u64, &raws[i % raws.len()])?;
            while p.in_flight() >= p.depth() {
                p.collect()?;
            }
        }
        while p.collect()?.is_some() {}
        Ok(())
    };
    round(lanes)?;
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        round(cfg.frames)?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(cfg.frames as f64 / best)
}

/// The GPU chain with frames in flight, and what it costs the device per frame.
#[derive(Debug, Clone, Serialize)]
pub struct GpuChainReport {
    /// Frames submitted before the oldest is read back.
    pub frames_in_flight: usize,
    /// The chain (upload, convert+veto, CSR, assembly, integration; no pixels downloaded),
    /// frames/s.
    pub pipeline_fps: f64,
    /// The chain with every frame vetoed: upload, conversion and the veto count, frames/s.
    pub convert_fps: f64,
    /// Queue submissions per frame in the timed rounds.
    pub submissions_per_frame: f64,
    /// Bytes written to the device per frame.
    pub h2d_bytes_per_frame: f64,
    /// Bytes read from the device per frame.
    pub d2h_bytes_per_frame: f64,
    /// Buffers, bind groups and pipelines created during the timed rounds (after warm-up).
    pub objects_after_warmup: u64,
    /// Mean device milliseconds per frame of each stage, from timestamp queries (a separate
    /// run); `None` where the device has no timestamps.
    pub device_ms: Option<std::collections::BTreeMap<String, f64>>,
    /// The device.
    pub device: String,
}

/// Runs `frames` frames through `engine`'s chain with `depth` in flight: seconds of the best of
/// three rounds after a warm-up that fills every slot, and the counters over the three rounds.
fn chain_rounds(
    engine: &remora_daq::engine::GpuEngine,
    raws: &[Vec<u16>],
    tables: &ConvTables,
    plan: &remora_daq::engine::FramePlan<'_>,
    frames: usize,
    depth: usize,
) -> Result<(f64, remora_accel::gpu::GpuCounters)> {
    let round = |n: usize| -> Result<()> {
        let (mut e, mut i) = (Vec::new(), Vec::new());
        let mut queue = std::collections::VecDeque::new();
        for k in 0..n {
            queue.push_back(engine.begin_frame(&raws[k % raws.len()], tables, plan)?);
            if queue.len() >= depth {
                let f = queue.pop_front().expect("a frame in flight");
                engine.finish_frame(f, plan, &mut e, &mut i)?;
            }
        }
        while let Some(f) = queue.pop_front() {
            engine.finish_frame(f, plan, &mut e, &mut i)?;
        }
        Ok(())
    };
    round(depth + 1)?;
    let before = engine.device().counters();
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        round(frames)?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok((best, engine.device().counters().since(&before)))
}

/// The chained pipeline (convert+veto, CSR, assembly, integration; no pixels downloaded) on a
/// GPU engine with `depth` frames in flight, its counters, and (where the device has
/// timestamps) the device time of each stage.
pub fn gpu_chain(
    cfg: &BenchConfig,
    engine: &remora_daq::engine::GpuEngine,
    depth: usize,
) -> Result<GpuChainReport> {
    use remora_daq::engine::{FramePlan, GpuEngine};
    cfg.check()?;
    let depth = depth.max(1);
    let (sc, synth, raws) = bench_frames(cfg)?;
    let tables = ConvTables::new(synth.calibration(), None)?;
    let map = synth.layout().assembly_map(None)?;
    let az = AzConfig {
        bins: cfg.bins,
        ..Default::default()
    };
    let matrix = AzMatrix::build(&sc.poni, (map.rows, map.cols), Some(&map.mask), &az)?;
    let d = PipelineConfig::default();
    let plan = FramePlan {
        veto_kev: d.veto_pixel_kev,
        veto_min: d.veto_min_pixels,
        sparse_kev: d.sparse_kev,
        shape: synth.layout().detector().raw_shape(),
        integrate: Some((&map, &matrix)),
        host_pixels: false,
    };
    let (t, c) = chain_rounds(engine, &raws, &tables, &plan, cfg.frames, depth)?;
    let vetoed = FramePlan {
        veto_min: u64::MAX,
        integrate: None,
        ..plan
    };
    let (tc, _) = chain_rounds(engine, &raws, &tables, &vetoed, cfg.frames, depth)?;
    let timed = GpuEngine::new()?.with_timestamps(true);
    let device_ms = if timed.timestamps() {
        chain_rounds(&timed, &raws, &tables, &plan, cfg.frames, depth)?;
        let st = timed.take_stage_times();
        Some(
            st.per_frame()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
    } else {
        None
    };
    let n = 3.0 * cfg.frames as f64;
    Ok(GpuChainReport {
        frames_in_flight: depth,
        pipeline_fps: cfg.frames as f64 / t,
        convert_fps: cfg.frames as f64 / tc,
        submissions_per_frame: c.submissions as f64 / n,
        h2d_bytes_per_frame: c.h2d_bytes as f64 / n,
        d2h_bytes_per_frame: c.d2h_bytes as f64 / n,
        objects_after_warmup: c.objects(),
        device_ms,
        device: engine.device().info().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::{self as bench, BenchConfig};

    fn bench_config() -> BenchConfig {
        BenchConfig {
            modules: 1,
            frames: 1,
            threads: 1,
            distinct: 1,
            bins: 10,
        }
    }

    #[test]
    fn issue10_bench_refuses_zero_frames_zero_distinct_and_unbounded_distinct() {
        assert!(bench_config().check().is_ok());
        let zero_frames = BenchConfig {
            frames: 0,
            ..bench_config()
        };
        assert!(bench::run(&zero_frames)
            .unwrap_err()
            .to_string()
            .contains("at least 1 frame"));
        let zero_distinct = BenchConfig {
            distinct: 0,
            ..bench_config()
        };
        assert!(zero_distinct.check().is_err());
        // 256 MiB of raw frames: 256 of one module, 32 of a 4M.
        assert_eq!(BenchConfig::max_distinct(1), 256);
        assert_eq!(BenchConfig::max_distinct(8), 32);
        assert_eq!(BenchConfig::max_distinct(64), 4);
        let huge = BenchConfig {
            distinct: 100_000,
            ..bench_config()
        };
        let m = bench::run(&huge).unwrap_err().to_string();
        assert!(
            m.contains("100000 distinct frames: 1 to 256 are allowed"),
            "{m}"
        );
        assert!(BenchConfig {
            distinct: 256,
            ..bench_config()
        }
        .check()
        .is_ok());
    }

    #[test]
    fn issue10_bench_threads_are_capped_at_the_cpus() {
        let cpus = bench::cpus();
        let many = BenchConfig {
            threads: 100_000,
            ..bench_config()
        };
        assert_eq!(many.threads_used(), cpus);
        let zero = BenchConfig {
            threads: 0,
            ..bench_config()
        };
        assert_eq!(zero.threads_used(), cpus);
        assert_eq!(bench_config().threads_used(), 1);
    }
}
