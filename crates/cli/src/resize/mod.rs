//! `remora resize …`, `remora resize serve` and `remora bench resize`: JPEG/PNG resizing with
//! ImageMagick's option spelling and geometry, one file or a batch on all cores, locally or
//! through a running resize service.
//!
//! The jobs, one file each: `args` (ImageMagick's single-dash spelling, the options turned into
//! a [`remora_resize::Job`]), `batch` (input → output plan, the local batch on all cores with
//! progress), `remote` (`--server URL`: the same plan through the service's client), `serve`
//! (`remora resize serve`) and `bench` (`remora bench resize` against vipsthumbnail and
//! ImageMagick), with `ssim` (the quality check the benchmark reports).
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

mod args;
mod batch;
mod bench;
mod imgproxy_env;
mod peers;
mod remote;
mod serve;
mod ssim;

pub use args::im_args;
pub use bench::{bench, BenchArgs};

/// Arguments of `remora resize`.
#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "ImageMagick's single-dash spelling works too: -resize, -thumbnail, -quality, \
                  -filter, -sampling-factor, -strip, -auto-orient, -interlace, -format."
)]
pub struct ResizeArgs {
    #[command(subcommand)]
    serve: Option<ServeCmd>,
    /// Input JPEG or PNG files; a folder stands for its .jpg/.jpeg/.png files (not recursive).
    #[arg(value_name = "IN", required = true)]
    inputs: Vec<PathBuf>,
    /// Output file for one input; its extension (.jpg, .jpeg, .png) gives the format.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "OUT",
        conflicts_with = "out_dir"
    )]
    output: Option<PathBuf>,
    /// Output folder for any number of inputs: same file names (the extension changes only
    /// with -format).
    #[arg(short = 'd', long = "out-dir", value_name = "DIR")]
    out_dir: Option<PathBuf>,
    #[command(flatten)]
    opts: JobOpts,
    /// Threads of a local batch, one file per thread [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Send the files to a running `remora resize serve` at URL instead of resizing here.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Requests in flight with --server.
    #[arg(long, value_name = "N", default_value_t = 16, requires = "server",
          value_parser = clap::value_parser!(u32).range(1..))]
    in_flight: u32,
}

/// `remora resize serve`.
#[derive(Subcommand)]
enum ServeCmd {
    /// The HTTP resize service: imgproxy-style URLs over a folder or allowed URL prefixes,
    /// and POST of an image body.
    Serve(serve::ServeArgs),
}

/// What to do to each image: ImageMagick's options. Values are checked when the job is built
/// (a bad value is an error with exit code 1, as ImageMagick's).
#[derive(Args, Clone)]
pub struct JobOpts {
    /// ImageMagick geometry: W, xH, WxH, WxH^, WxH!, WxH>, WxH<, S%, SX%xSY%, A@, W:H.
    #[arg(
        long = "resize",
        value_name = "GEOMETRY",
        conflicts_with = "thumbnail",
        required_unless_present = "thumbnail"
    )]
    resize: Option<String>,
    /// As -resize, for thumbnails: metadata stripped but the ICC profile, LanczosSharp filter.
    #[arg(long = "thumbnail", value_name = "GEOMETRY")]
    thumbnail: Option<String>,
    /// JPEG quality 1–100 [default: the input's estimated quality, else 92].
    #[arg(long = "quality", value_name = "Q")]
    quality: Option<String>,
    /// Resampling filter: point, box, triangle, catrom, mitchell, gaussian, lanczos,
    /// lanczossharp [default: lanczos when shrinking, mitchell when enlarging].
    #[arg(long = "filter", value_name = "F")]
    filter: Option<String>,
    /// JPEG chroma subsampling: 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1 or 2x2, 1x1, …
    /// [default: the input's, else 4:4:4 at quality ≥ 90 and 4:2:0 below].
    #[arg(long = "sampling-factor", value_name = "S")]
    sampling_factor: Option<String>,
    /// Drop all metadata (EXIF, XMP, IPTC, comments, ICC).
    #[arg(long = "strip")]
    strip: bool,
    /// Turn the pixels as the EXIF orientation says (and reset the tag to 1).
    #[arg(long = "auto-orient")]
    auto_orient: bool,
    /// JPEG interlace: none (baseline) or plane/line/jpeg (progressive) [default: none].
    #[arg(long = "interlace", value_name = "TYPE")]
    interlace: Option<String>,
    /// Output format for -d batches: jpg or png [default: each input's own].
    #[arg(long = "format", value_name = "FMT")]
    format: Option<String>,
    /// Resampling engine: cpu (fast_image_resize), gpu (WGSL on a Vulkan device: an error when
    /// none opens; REMORA_GPU=any allows a CPU-type one such as lavapipe) or auto (a hardware
    /// GPU when one opens, else cpu) [default: cpu]. Decode and encode stay on the CPU.
    #[arg(long = "engine", value_name = "ENGINE")]
    engine: Option<String>,
    /// Most memory one image's job may hold (pixels, codec and resampling buffers), estimated
    /// from its headers and the geometry before anything is allocated: an image over it fails
    /// with the estimate. Bytes, or with K, M, G (binary).
    #[arg(long = "max-job-memory", value_name = "SIZE", default_value = "512M",
          value_parser = args::parse_bytes)]
    max_job_memory: u64,
}

/// Runs `remora resize`.
pub fn run(a: ResizeArgs) -> anyhow::Result<()> {
    if let Some(ServeCmd::Serve(s)) = a.serve {
        return serve::run(s);
    }
    let job = a.opts.job()?;
    let plan = batch::plan(
        &a.inputs,
        a.output.as_deref(),
        a.out_dir.as_deref(),
        a.opts.format()?,
    )?;
    match &a.server {
        Some(url) => remote::run(url, &plan, &a.opts, &job, a.in_flight as usize),
        None => {
            // A GPU engine that cannot run fails the command once, not every file.
            job.engine.resampler().context("--engine")?;
            let threads = a.threads.map(|n| n as usize);
            batch::run(&plan, &job, threads)
        }
    }
}
