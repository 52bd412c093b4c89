//! `remora daq …` and `remora bench jungfrau`: the JUNGFRAU processing core and the
//! acquisition (emulator, receiver, manager) from the command line.
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
mod jungfrau;
use jungfrau::{self as bench, BenchConfig};
use remora_daq::engine::{EngineKind, Registry};
use remora_daq::synth::{Synth, SynthConfig};

mod acq;
mod bench_acq;
mod page_sim;
mod serve;

pub use acq::demo;
pub use bench_acq::{bench_acquisition, AcqBenchArgs};

/// Arguments of `remora bench jungfrau`.
#[derive(Args)]
pub struct BenchArgs {
    /// Detector modules (8 = 4M).
    #[arg(long, default_value_t = 8)]
    modules: usize,
    /// Frames per stage (at least 1).
    #[arg(long, default_value_t = 50, value_parser = at_least_one)]
    frames: usize,
    /// Worker threads (0 = one per core; more than the cores are capped, with a warning).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Distinct synthetic frames cycled through: at least 1, and at most 256 MiB of raw frames
    /// (256 of 1 module, 32 of a 4M), beyond any CPU cache; each is held 4 times in memory.
    #[arg(long, default_value_t = 4, value_parser = at_least_one)]
    distinct: usize,
    /// Radial bins of the integration.
    #[arg(long, default_value_t = 1000)]
    bins: usize,
    /// Engine: cpu-simd, cpu-scalar, gpu (gpu-wgpu: the device REMORA_GPU allows, a CPU-type
    /// Vulkan device included when REMORA_GPU=any), or all (every engine this machine has, one
    /// after the other in this run).
    #[arg(long, default_value = "cpu-simd")]
    engine: String,
    /// Frames the GPU chain keeps in flight (submitted before the oldest is read back).
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    frames_in_flight: usize,
    /// Also time the chain on host engines with this many frames processed side by side
    /// (`[pipeline] frame_lanes`; 1: not timed).
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    lanes: usize,
    /// Print JSON instead of a table (one object; with --engine all, {"engines": [...],
    /// "skipped": [...]}).
    #[arg(long)]
    json: bool,
}

/// `remora daq` subcommands.
#[derive(Subcommand)]
pub enum Cmd {
    /// Runs an acquisition described by a TOML file: starts the receivers and the emulator as
    /// processes on this host, shows progress, prints a summary (see examples/*.toml).
    Run(acq::RunArgs),
    /// The control service: REST API (OpenAPI at /openapi.json), status stream and live view
    /// page for configuring, starting, stopping and watching acquisitions and dark runs.
    Serve(serve::ServeArgs),
    /// The receiver (ROMULU): registers its ring, waits for the modules, processes and writes.
    Receive(acq::ReceiveArgs),
    /// The detector emulator (REMU): streams the configured frames to running receivers.
    Emulate(acq::EmulateArgs),
    /// Reads back an acquisition file (a receiver's or a run's master): frames by kind, spots,
    /// the integrated profiles and images, and the run's summary.
    Inspect {
        /// The HDF5 file.
        file: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Writes synthetic raw frames (uint16, module order) and the calibration truth to files.
    Synth {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Modules.
        #[arg(long, default_value_t = 1)]
        modules: usize,
        /// Frames (at least 1; written one at a time, so any number fits in memory).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
        frames: u64,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

pub fn run(c: Cmd) -> anyhow::Result<()> {
    match c {
        Cmd::Run(a) => acq::run(a),
        Cmd::Serve(a) => serve::serve(a),
        Cmd::Receive(a) => acq::receive(a),
        Cmd::Emulate(a) => acq::emulate(a),
        Cmd::Inspect { file, json } => {
            let s = remora_daq::writer::inspect::inspect(&file)?;
            if json {
                println!("{}", serde_json::to_string(&s)?);
            } else {
                print!("{s}");
            }
            Ok(())
        }
        Cmd::Synth {
            out,
            modules,
            frames,
            seed,
        } => {
            let mut cfg = SynthConfig::new(modules)?;
            cfg.seed = seed;
            let s = Synth::new(cfg)?;
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            // Frame by frame: memory stays one frame's whatever --frames is.
            let frames_path = out.join("frames.u16");
            std::fs::File::create(&frames_path)
                .and_then(|f| s.write_raw(frames, f))
                .with_context(|| format!("writing {}", frames_path.display()))?;
            s.calibration().gain.save(&out.join("gain.bin"))?;
            s.calibration().pedestal.save(&out.join("pedestal.bin"))?;
            let l = s.layout();
            std::fs::write(out.join("geometry.json"), l.to_json())?;
            std::fs::write(
                out.join("geometry.poni"),
                s.config().poni.to_text((l.rows, l.cols)),
            )?;
            let plural = |n: u64, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
            println!(
                "wrote {} of {} to {}",
                plural(frames, "frame"),
                plural(modules as u64, "module"),
                out.display()
            );
            Ok(())
        }
    }
}

/// Counts where 0 would silently measure or cycle nothing.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

pub fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let cfg = BenchConfig {
        modules: a.modules,
        frames: a.frames,
        threads: a.threads,
        distinct: a.distinct,
        bins: a.bins,
    };
    if cfg.threads_used() < a.threads {
        tracing::warn!(
            "--threads {} is more than the {} CPUs this process may use; using {}",
            a.threads,
            bench::cpus(),
            cfg.threads_used()
        );
    }
    let (engines, skipped) = if a.engine == "all" {
        Registry::available(cfg.threads_used())
    } else {
        let kind = EngineKind::parse(&a.engine)?;
        (
            vec![Registry::create(kind, cfg.threads_used())?],
            Vec::new(),
        )
    };
    for (name, why) in &skipped {
        eprintln!("engine {name} not run: {why}");
    }
    let mut reports = Vec::new();
    for e in engines {
        let device = gpu_device(&e);
        let gpu = device.is_some();
        let mut r = bench::run_with(&cfg, e.clone(), device).context("jungfrau benchmark")?;
        if !gpu && a.lanes > 1 {
            r.lanes = Some(a.lanes);
            r.pipeline_lanes_fps = Some(bench::host_lanes(&cfg, e, a.lanes)?);
        }
        if gpu {
            let g = remora_daq::engine::GpuEngine::new()?;
            let c = bench::gpu_chain(&cfg, &g, a.frames_in_flight)?;
            r.pipeline_overlap_fps = Some(c.pipeline_fps);
            r.frames_in_flight = c.frames_in_flight;
            r.gpu = Some(c);
        }
        if !a.json {
            print_report(&r);
        }
        reports.push(r);
    }
    if a.json {
        if a.engine == "all" {
            let skipped: Vec<_> = skipped
                .iter()
                .map(|(n, w)| serde_json::json!({"engine": n, "reason": w}))
                .collect();
            println!(
                "{}",
                serde_json::json!({"engines": reports, "skipped": skipped})
            );
        } else {
            println!("{}", serde_json::to_string(&reports[0])?);
        }
    }
    Ok(())
}

/// The device a GPU engine runs on, for the report.
fn gpu_device(e: &std::sync::Arc<dyn remora_daq::engine::Engine>) -> Option<String> {
    (e.info().name == "gpu-wgpu")
        .then(|| remora_daq::engine::GpuEngine::new().ok())
        .flatten()
        .map(|g| g.device().info().to_string())
}

fn print_report(r: &bench::BenchReport) {
    println!(
        "JUNGFRAU {} modules, {} frames/stage, engine {} ({} threads, {}){}",
        r.modules,
        r.frames,
        r.engine,
        r.threads,
        r.simd,
        r.device
            .as_ref()
            .map(|d| format!(" on {d}"))
            .unwrap_or_default()
    );
    let mb = r.frame_bytes as f64 / 1e9;
    let row = |name: &str, gbps: f64| {
        println!("  {name:<28} {gbps:>8.2} GB/s  {:>9.1} frames/s", gbps / mb)
    };
    row("convert (keV + veto count)", r.convert_gbps);
    row("convert (photon counts)", r.photons_gbps);
    row("pedestal tracking (dark)", r.pedestal_gbps);
    row("veto count", r.veto_gbps);
    row("CSR compression", r.compress_gbps);
    row("assembly", r.assemble_fps * mb);
    row("azimuthal integration", r.integrate_fps * mb);
    row("pipeline (chained)", r.pipeline_gbps);
    row("pipeline without integration", r.pipeline_sparse_gbps);
    if let (Some(l), Some(fps)) = (r.lanes, r.pipeline_lanes_fps) {
        row(&format!("pipeline, {l} frames side by side"), fps * mb);
    }
    if let Some(g) = &r.gpu {
        row(
            &format!("pipeline, {} in flight", g.frames_in_flight),
            g.pipeline_fps * mb,
        );
        row(
            &format!("convert+veto, {} in flight", g.frames_in_flight),
            g.convert_fps * mb,
        );
        println!(
            "  per frame: {:.2} submissions, {:.0} B to the device, {:.0} B back; {} objects created after warm-up",
            g.submissions_per_frame, g.h2d_bytes_per_frame, g.d2h_bytes_per_frame, g.objects_after_warmup
        );
        if let Some(ms) = &g.device_ms {
            let parts: Vec<String> = ms.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
            println!("  device ms/frame: {}", parts.join(", "));
        }
    }
    println!(
        "  memcpy ceiling               {:>8.2} GB/s copied",
        r.memcpy_gbps
    );
    println!(
        "  CSR {} pixels/frame ({:.0}x smaller); integration matrix {} entries; pipeline kept {}/{}",
        r.compress_nnz, r.compress_ratio, r.integrate_nnz, r.pipeline_kept, r.frames
    );
}
