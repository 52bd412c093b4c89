//! `remora daq …` and `remora bench jungfrau`: the JUNGFRAU processing core from the command line.
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use remora_daq::bench::{self, BenchConfig};
use remora_daq::synth::{Synth, SynthConfig};

/// Arguments of `remora bench jungfrau`.
#[derive(Args)]
pub struct BenchArgs {
    /// Detector modules (8 = 4M).
    #[arg(long, default_value_t = 8)]
    modules: usize,
    /// Frames per stage.
    #[arg(long, default_value_t = 50)]
    frames: usize,
    /// Worker threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Distinct synthetic frames cycled through.
    #[arg(long, default_value_t = 4)]
    distinct: usize,
    /// Radial bins of the integration.
    #[arg(long, default_value_t = 1000)]
    bins: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// `remora daq` subcommands.
#[derive(Subcommand)]
pub enum Cmd {
    /// Writes synthetic raw frames (uint16, module order) and the calibration truth to files.
    Synth {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Modules.
        #[arg(long, default_value_t = 1)]
        modules: usize,
        /// Frames.
        #[arg(long, default_value_t = 4)]
        frames: u64,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

pub fn run(c: Cmd) -> anyhow::Result<()> {
    match c {
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
            let mut raw = Vec::new();
            for n in 0..frames {
                raw.extend(s.frame(n).raw.iter().flat_map(|w| w.to_le_bytes()));
            }
            let frames_path = out.join("frames.u16");
            std::fs::write(&frames_path, raw)
                .with_context(|| format!("writing {}", frames_path.display()))?;
            s.calibration().gain.save(&out.join("gain.bin"))?;
            s.calibration().pedestal.save(&out.join("pedestal.bin"))?;
            let l = s.layout();
            std::fs::write(out.join("geometry.json"), l.to_json())?;
            std::fs::write(
                out.join("geometry.poni"),
                s.config().poni.to_text((l.rows, l.cols)),
            )?;
            println!(
                "wrote {frames} frames of {modules} modules to {}",
                out.display()
            );
            Ok(())
        }
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
    let r = bench::run(&cfg).context("jungfrau benchmark")?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!(
        "JUNGFRAU {} modules, {} frames/stage, engine {} ({} threads, {})",
        r.modules, r.frames, r.engine, r.threads, r.simd
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
    println!(
        "  memcpy ceiling               {:>8.2} GB/s copied",
        r.memcpy_gbps
    );
    println!(
        "  CSR {} pixels/frame ({:.0}x smaller); integration matrix {} entries; pipeline kept {}/{}",
        r.compress_nnz, r.compress_ratio, r.integrate_nnz, r.pipeline_kept, r.frames
    );
    Ok(())
}
