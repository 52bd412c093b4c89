//! `remora match …` and `remora bench match`: exact descriptor matching of keypoint files, as
//! MicMac's `mm3d Ann` does for one pair, and over many pairs in MicMac's `Homol/Pastis…` layout.
//!
//! The jobs, one file each: `input` (loading and recognising keypoint files), `pair` (one pair:
//! the search and the filters), `output` (match files and the text table), `batch` (pair lists,
//! the file cache, progress) and `bench` (`remora bench match` against OpenCV and FAISS).
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use remora_match::formats::Format;
use remora_match::{Kernel, Options};

mod batch;
mod bench;
mod input;
mod output;
mod pair;

pub use bench::{bench, BenchArgs};

/// Arguments of `remora match`.
#[derive(Args)]
pub struct MatchArgs {
    /// Image 1's keypoints: the train (reference) set that FILE2's points are searched in
    /// (MicMac's first file).
    #[arg(value_name = "FILE1", required_unless_present_any = ["pairs", "all"],
          conflicts_with_all = ["pairs", "all"], requires = "file2")]
    file1: Option<PathBuf>,
    /// Image 2's keypoints: the queries.
    #[arg(value_name = "FILE2")]
    file2: Option<PathBuf>,
    /// Output file: `.result` (MicMac, x1 y1 x2 y2 with image 1 = FILE1 first), `.npy` (n × 2
    /// int64 `[query, train]` rows); anything else, `-` or none: a `query train distance`
    /// table (on stdout for `-` or none).
    #[arg(short, long, value_name = "OUT", conflicts_with_all = ["pairs", "all"])]
    output: Option<PathBuf>,
    /// Batch: a text file of two keypoint paths per line (`#` comments), or MicMac's XML pair
    /// list (`<SauvegardeNamedRel><Cple>a b</Cple>…`); paths relative to LIST's folder.
    #[arg(long, value_name = "LIST", conflicts_with = "all")]
    pairs: Option<PathBuf>,
    /// Batch: every pair of keypoint files (`.dat`, `.key`, `.npy`) in DIR, in both directions.
    #[arg(long, value_name = "DIR")]
    all: Option<PathBuf>,
    /// Batch output folder: `OUTDIR/Pastis<image1>/<image2>.result` [default: Homol].
    #[arg(short = 'd', long = "out-dir", value_name = "OUTDIR")]
    out_dir: Option<PathBuf>,
    #[command(flatten)]
    opts: MatchOpts,
}

/// What to match and how: shared by single pairs and batches.
#[derive(Args, Clone)]
pub struct MatchOpts {
    /// Lowe's ratio test on plain distances: accept when d1 < R · d2 (strictly), R in (0, 1].
    #[arg(long, value_name = "R", default_value_t = 0.6)]
    ratio: f32,
    /// No ratio test: keep every query's nearest neighbour (still subject to the other filters).
    #[arg(long, conflicts_with = "ratio")]
    no_ratio: bool,
    /// Keep a match only when it is mutual: the query is also its train point's nearest query.
    #[arg(long)]
    cross_check: bool,
    /// Keep a match only when its distance d1 <= D (plain Euclidean distance).
    #[arg(long, value_name = "D")]
    max_distance: Option<f32>,
    /// MicMac's 2-D neighbourhood filter after the other tests: keep a match when at least 5 of
    /// its 9 nearest matches in image 1 are among its 9 nearest in image 2 (twice).
    /// Needs keypoint positions (not `.npy` descriptor arrays).
    #[arg(long, alias = "neighbor-filter")]
    neighbour_filter: bool,
    /// Format of the INPUT keypoint files [default: recognised from content, then extension].
    #[arg(long, value_enum)]
    format: Option<InFormat>,
    /// Format of the output, whatever its extension.
    #[arg(long, value_enum, value_name = "FORMAT")]
    output_format: Option<OutFormat>,
    /// MicMac's binary `.result` (v1, `-newFormat`) instead of text v0.
    #[arg(long)]
    binary: bool,
    /// Threads of the search [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Distance kernel for u8 descriptors (auto: a real GPU when REMORA_GPU's policy opens
    /// one, else the fastest CPU kernel; gpu: the GPU engine on any device REMORA_GPU allows).
    #[arg(long, value_enum, env = "REMORA_MATCH_KERNEL", default_value = "auto")]
    kernel: KernelArg,
    /// Print counts, the kernel used and the seconds of each step on stderr.
    #[arg(long)]
    stats: bool,
}

/// Keypoint file formats as named on the command line.
#[derive(Clone, Copy, ValueEnum)]
pub enum InFormat {
    /// MicMac Pastis `.dat` v0 (Tapioca's default).
    Micmac,
    /// MicMac Digeo `.dat` v1.
    MicmacV1,
    /// Lowe's `.key` text (Bundler, VisualSFM).
    Key,
    /// NumPy `.npy` descriptor array (n × dim, no positions).
    Npy,
}

impl From<InFormat> for Format {
    fn from(f: InFormat) -> Format {
        match f {
            InFormat::Micmac => Format::MicmacV0,
            InFormat::MicmacV1 => Format::MicmacV1,
            InFormat::Key => Format::LoweKey,
            InFormat::Npy => Format::Npy,
        }
    }
}

/// Output formats as named on the command line.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum OutFormat {
    /// `query train distance` per line.
    Text,
    /// MicMac `.result` v0 text.
    Result,
    /// MicMac `.result` v1 binary.
    ResultV1,
    /// n × 2 int64 `[query, train]`.
    Npy,
}

/// Kernels as named on the command line and in `REMORA_MATCH_KERNEL`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KernelArg {
    /// A real GPU if one opens, else the fastest CPU kernel.
    Auto,
    /// Plain Rust.
    Portable,
    /// x86-64 AVX2.
    Avx2,
    /// x86-64 AVX-512 VNNI.
    Avx512,
    /// The GPU engine (gpu-wgpu; u8 descriptors only) on the device REMORA_GPU allows.
    #[value(alias = "gpu-wgpu")]
    Gpu,
}

impl From<KernelArg> for Kernel {
    fn from(k: KernelArg) -> Kernel {
        match k {
            KernelArg::Auto => Kernel::Auto,
            KernelArg::Portable => Kernel::Portable,
            KernelArg::Avx2 => Kernel::Avx2,
            KernelArg::Avx512 => Kernel::Avx512,
            KernelArg::Gpu => Kernel::Gpu,
        }
    }
}

/// Engines of `remora bench match --engine`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// The CPU kernel `--kernel` names (auto: the fastest this CPU runs).
    Cpu,
    /// The GPU engine (gpu-wgpu) on the device REMORA_GPU allows.
    Gpu,
    /// Every engine this machine has, side by side: each CPU kernel, and the GPU if one opens.
    All,
}

/// A kernel's name as the command line and results spell it (`gpu-wgpu` for the GPU).
pub fn kernel_name(k: Kernel) -> &'static str {
    k.name()
}

/// The engines this machine runs, by name, for messages.
fn engine_names() -> String {
    let v: Vec<&str> = Kernel::engines().into_iter().map(kernel_name).collect();
    v.join(", ")
}

impl MatchOpts {
    /// The matcher's options.
    fn options(&self) -> Options {
        Options {
            ratio: (!self.no_ratio).then_some(self.ratio),
            cross_check: self.cross_check,
            max_distance: self.max_distance,
            threads: self.threads.map(|n| n as usize),
            kernel: self.kernel.into(),
        }
    }
}

/// Runs `remora match`.
pub fn run(a: MatchArgs) -> anyhow::Result<()> {
    let settings = pair::Settings::new(&a.opts)?;
    if let Some(list) = &a.pairs {
        let jobs = batch::read_list(list)?;
        return batch::run(&jobs, &out_dir(&a), &a.opts, &settings);
    }
    if let Some(dir) = &a.all {
        let jobs = batch::all_pairs(dir)?;
        return batch::run(&jobs, &out_dir(&a), &a.opts, &settings);
    }
    if a.out_dir.is_some() {
        anyhow::bail!("-d/--out-dir is for batches (--pairs, --all); use -o for one pair");
    }
    match (&a.file1, &a.file2) {
        (Some(f1), Some(f2)) => pair::run_one(f1, f2, a.output.as_deref(), &a.opts, &settings),
        _ => anyhow::bail!("give FILE1 FILE2, --pairs LIST or --all DIR"),
    }
}

fn out_dir(a: &MatchArgs) -> PathBuf {
    a.out_dir.clone().unwrap_or_else(|| PathBuf::from("Homol"))
}
