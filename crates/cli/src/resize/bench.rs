//! `remora bench resize`: the `remora resize` batch (in process, the command's own code path:
//! files read, resized, written) against `vipsthumbnail` (one process over all files) and
//! ImageMagick's `/usr/bin/convert` (one process per image, as a web application spawns it,
//! with and without `-define jpeg:size`), on the same files and cores, and the SSIM of every
//! output against a slow reference resize.
//!
//! `--engine` picks remora's resampling engine (`cpu`, the default; `gpu`; `all`: every engine
//! this machine has, timed one after the other on the same files, each with its largest
//! difference from the CPU engine's pixels); the first one timed is the one compared with the
//! peers.
//!
//! Cores: remora runs `--threads` workers, one file each; `vipsthumbnail` gets
//! `VIPS_CONCURRENCY=threads` (it resizes one file after another, each on its own thread pool);
//! ImageMagick runs `threads` `convert` processes at a time, each with `MAGICK_THREAD_LIMIT=1`.
//!
//! The SSIM check and its summaries are in `quality`.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use remora_resize::pixels::resize_pixels;
use remora_resize::{Format, Job, ResampleEngine};
use serde_json::{json, Value};

use super::batch::{resize_all, Item};
use super::ssim;

use super::peers::{fresh_dir, jpeg_size, on_path, run_convert, run_vips, CONVERT};
use quality::{min_of, qualities, worst, Quality};

mod quality;

/// Arguments of `remora bench resize`.
#[derive(Args)]
pub struct BenchArgs {
    /// Folder of JPEG photographs (every .jpg/.jpeg in it).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/usr/share/doc/opencv-doc/examples/data"
    )]
    pub(super) dir: PathBuf,
    /// Geometry for everyone (ImageMagick's; vipsthumbnail's -s reads WxH the same way).
    #[arg(long, value_name = "GEOMETRY", default_value = "500x500")]
    pub(super) geometry: String,
    /// JPEG quality for everyone.
    #[arg(long, value_name = "Q", default_value_t = 85,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub(super) quality: u8,
    /// Threads (cores) for everyone [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) threads: Option<u32>,
    /// Timed runs of each tool over the whole set; the best counts (no further runs of a tool
    /// once its runs took 20 s).
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) repeat: u32,
    /// Time remora only.
    #[arg(long)]
    pub(super) no_peers: bool,
    /// Skip the SSIM check (the f64 reference takes about a second per 10 Mpx per core).
    #[arg(long)]
    pub(super) no_ssim: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub(super) json: bool,
    /// remora's resampling engine: cpu, gpu (an error when no device opens), or all (every
    /// engine this machine has, side by side, each with its largest difference in grey levels
    /// from the CPU engine's pixels).
    #[arg(long, value_name = "ENGINE", value_enum, default_value_t = BenchEngine::Cpu)]
    pub(super) engine: BenchEngine,
}

/// `--engine` of `remora bench resize`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchEngine {
    /// fast_image_resize on the CPU (`cpu-fir`).
    Cpu,
    /// The GPU engine (`gpu-wgpu`).
    Gpu,
    /// Every engine that runs here.
    All,
}

/// One engine to time: the job's choice, its name in results, and the device it runs on.
struct Timed {
    engine: ResampleEngine,
    name: &'static str,
    device: Option<String>,
}

/// The engines `--engine` asks for that this machine has, and why any other is missing.
fn engines_to_time(choice: BenchEngine) -> anyhow::Result<(Vec<Timed>, Vec<String>)> {
    let wanted: &[ResampleEngine] = match choice {
        BenchEngine::Cpu => &[ResampleEngine::Cpu],
        BenchEngine::Gpu => &[ResampleEngine::Gpu],
        BenchEngine::All => &[ResampleEngine::Cpu, ResampleEngine::Gpu],
    };
    let (mut have, mut missing) = (Vec::new(), Vec::new());
    for &engine in wanted {
        match engine.resampler() {
            Ok(r) => have.push(Timed {
                engine,
                name: r.name(),
                device: (engine == ResampleEngine::Gpu)
                    .then(|| {
                        remora_resize::gpu::device()
                            .ok()
                            .map(|g| g.info().to_string())
                    })
                    .flatten(),
            }),
            Err(e) if choice == BenchEngine::All => missing.push(e.to_string()),
            Err(e) => return Err(e).context("--engine gpu"),
        }
    }
    Ok((have, missing))
}

/// The largest difference in grey levels between `engine`'s resample and the CPU engine's over
/// the set (each file decoded whole, then resampled to the job's size), and how many samples
/// differ of how many.
fn difference_from_cpu(
    files: &[PathBuf],
    job: &Job,
    engine: ResampleEngine,
) -> anyhow::Result<(u8, u64, u64)> {
    let mut worst = (0u8, 0u64, 0u64);
    for f in files {
        let img = ssim::decode(&std::fs::read(f)?)?;
        let (w, h) = (img.w as u32, img.h as u32);
        let mut j = job.clone();
        j.engine = ResampleEngine::Cpu;
        let cpu = resize_pixels(&img.px, w, h, 3, &j)?;
        j.engine = engine;
        let other = resize_pixels(&img.px, w, h, 3, &j)
            .with_context(|| format!("{} on {}", engine, f.display()))?;
        for (a, b) in cpu.data.iter().zip(&other.data) {
            let d = a.abs_diff(*b);
            worst.0 = worst.0.max(d);
            worst.1 += u64::from(d != 0);
        }
        worst.2 += cpu.data.len() as u64;
    }
    Ok(worst)
}

/// A folder removed when dropped.
struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Best seconds of up to `repeat` runs (fewer once 20 s were spent).
fn best_of(repeat: u32, mut run: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<f64> {
    let (mut best, mut spent) = (f64::INFINITY, 0.0);
    for _ in 0..repeat {
        let s = run()?;
        best = best.min(s);
        spent += s;
        if spent > 20.0 {
            break;
        }
    }
    Ok(best)
}

fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The set's JPEGs, sorted, that remora can read.
fn photos(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading folder {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| super::args::format_of(p) == Some(Format::Jpeg))
        .filter(|p| {
            std::fs::read(p)
                .ok()
                .is_some_and(|d| remora_resize::jpeg_quality(&d).is_ok())
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("{}: no readable .jpg/.jpeg files", dir.display());
    }
    Ok(files)
}

/// What every tool works on: the set, the job, the cores, and the scratch folder with remora's
/// batch (one item per file, written under `remora/`).
struct Inputs {
    /// The load average when the run began.
    load: Option<f64>,
    threads: usize,
    files: Vec<PathBuf>,
    job: Job,
    tmp: TempDir,
    items: Vec<Item>,
}

impl Inputs {
    /// `name`'s output folder under the scratch folder.
    fn dir(&self, name: &str) -> PathBuf {
        self.tmp.0.join(name)
    }
}

/// Reads the set and the job from the arguments and prepares remora's output folder.
fn prepare(a: &BenchArgs) -> anyhow::Result<Inputs> {
    let load = load_average();
    let threads = a.threads.map(|n| n as usize).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let files = photos(&a.dir)?;
    let mut job = Job::parse(&a.geometry).with_context(|| format!("--geometry {}", a.geometry))?;
    job.quality = Some(a.quality);
    let tmp =
        TempDir(std::env::temp_dir().join(format!("remora-bench-resize-{}", std::process::id())));
    let dir = |name: &str| tmp.0.join(name);
    fresh_dir(&dir("remora"))?;
    let items: Vec<Item> = files
        .iter()
        .map(|f| Item {
            input: f.clone(),
            output: dir("remora").join(f.file_name().unwrap_or_default()),
            format: Some(Format::Jpeg),
        })
        .collect();
    Ok(Inputs {
        load,
        threads,
        files,
        job,
        tmp,
        items,
    })
}

/// Times each of `engines` over the batch (best of `repeat` after one untimed run): the input's
/// megapixels and each engine's seconds. Leaves the first engine in the job: it is remora's in
/// the comparison with the peers and in the SSIM check.
fn time_engines(
    inp: &mut Inputs,
    engines: &[Timed],
    repeat: u32,
) -> anyhow::Result<(f64, Vec<f64>)> {
    let threads = inp.threads;
    let mut mpx = 0.0;
    let mut engine_s = Vec::with_capacity(engines.len());
    for e in engines {
        inp.job.engine = e.engine;
        // An untimed run: files in the page cache for every tool, the pixel count, and on the
        // GPU the kernels compiled and the buffer pool filled.
        let warm = resize_all(&inp.items, &inp.job, Some(threads), &None)?;
        if warm.failed > 0 {
            bail!(
                "remora ({}) failed on {} of {} files",
                e.name,
                warm.failed,
                warm.files
            );
        }
        mpx = warm.input_pixels as f64 / 1e6;
        engine_s.push(best_of(repeat, || {
            Ok(resize_all(&inp.items, &inp.job, Some(threads), &None)?.seconds)
        })?);
    }
    inp.job.engine = engines[0].engine;
    Ok((mpx, engine_s))
}

/// The peers' best seconds (`None`: not run, or failed), and the `jpeg:size` hint given to
/// ImageMagick.
struct PeerTimes {
    vips: Option<f64>,
    im: Option<f64>,
    im_size: Option<f64>,
    size: Option<String>,
}

/// Times `vipsthumbnail`, `convert` and `convert -define jpeg:size` on the same files and
/// cores (none with `--no-peers`); a peer that fails is warned about and its keys are null.
fn time_peers(a: &BenchArgs, inp: &Inputs) -> PeerTimes {
    let (files, threads) = (&inp.files, inp.threads);
    let peer = |name: &str, run: &mut dyn FnMut() -> anyhow::Result<f64>| -> Option<f64> {
        if a.no_peers {
            return None;
        }
        match best_of(a.repeat, &mut *run) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("{name}: {}; its keys are null", crate::report(&e));
                eprintln!("warning: {name}: {}; its keys are null", crate::report(&e));
                None
            }
        }
    };
    let vips = on_path("vipsthumbnail");
    let vips_s = match &vips {
        Some(v) => peer("vipsthumbnail", &mut || {
            run_vips(v, files, &inp.dir("vips"), &a.geometry, a.quality, threads)
        }),
        None => peer("vipsthumbnail", &mut || {
            bail!("not found on PATH (Debian libvips-tools)")
        }),
    };
    let has_convert = Path::new(CONVERT).is_file();
    let im_s = peer("imagemagick", &mut || {
        if !has_convert {
            bail!("{CONVERT} missing (Debian imagemagick)");
        }
        run_convert(files, &inp.dir("im"), &a.geometry, a.quality, threads, None)
    });
    let size = jpeg_size(&a.geometry);
    let im_size_s = peer("imagemagick jpeg:size", &mut || match &size {
        _ if !has_convert => bail!("{CONVERT} missing (Debian imagemagick)"),
        Some(sz) => run_convert(
            files,
            &inp.dir("im-size"),
            &a.geometry,
            a.quality,
            threads,
            Some(sz),
        ),
        None => bail!("no jpeg:size for geometry {}", a.geometry),
    });
    PeerTimes {
        vips: vips_s,
        im: im_s,
        im_size: im_size_s,
        size,
    }
}

/// One result row per engine timed, each (but the CPU engine's) with its difference from the
/// CPU engine's pixels.
fn engine_rows(
    inp: &Inputs,
    engines: &[Timed],
    engine_s: &[f64],
    mpx: f64,
) -> anyhow::Result<Vec<Value>> {
    let n = inp.files.len() as f64;
    let mut engine_rows = Vec::with_capacity(engines.len());
    for (e, &secs) in engines.iter().zip(engine_s) {
        // The CPU engine is the reference: no comparison (null counts).
        let (diff, differing, samples) = if e.engine == ResampleEngine::Cpu {
            (0, None, None)
        } else {
            let (d, n, of) = difference_from_cpu(&inp.files, &inp.job, e.engine)?;
            (d, Some(n), Some(of))
        };
        engine_rows.push(json!({
            "engine": e.name, "device": e.device,
            "ips": n / secs, "mpx_per_s": mpx / secs, "seconds": secs,
            "max_diff_vs_cpu": diff,
            "samples_differing_from_cpu": differing, "samples_compared": samples,
        }));
    }
    Ok(engine_rows)
}

/// What a run measured, for the report.
struct Measured {
    engines: Vec<Timed>,
    engines_missing: Vec<String>,
    engine_rows: Vec<Value>,
    /// The input's megapixels.
    mpx: f64,
    /// The first engine's seconds: remora's in the comparison with the peers.
    remora_s: f64,
    peers: PeerTimes,
    qualities: Vec<Quality>,
}

/// The JSON object `--json` prints (and the table is drawn from).
fn report(a: &BenchArgs, inp: &Inputs, m: &Measured) -> Value {
    let (n, mpx, remora_s) = (inp.files.len() as f64, m.mpx, m.remora_s);
    let (vips_s, im_s, im_size_s) = (m.peers.vips, m.peers.im, m.peers.im_size);
    let qualities = &m.qualities;
    // The largest shortfall of remora's SSIM below the reference's own (the tests' bound: 0.005).
    let gap = qualities
        .iter()
        .map(|q| q.reference - q.ours)
        .filter(|g| g.is_finite())
        .reduce(f64::max);
    let ips = |s: Option<f64>| s.map(|s| n / s);
    let mpxs = |s: Option<f64>| s.map(|s| mpx / s);
    let ratio = |s: Option<f64>| s.map(|s| s / remora_s);
    json!({
        "images": inp.files.len(),
        "dir": a.dir.display().to_string(),
        "geometry": a.geometry, "quality": a.quality, "threads": inp.threads, "load": inp.load,
        "input_mpx": mpx,
        "engine": m.engines[0].name, "engines": m.engine_rows,
        "engines_missing": m.engines_missing,
        "remora_ips": n / remora_s, "vips_ips": ips(vips_s), "imagemagick_ips": ips(im_s),
        "imagemagick_jpeg_size_ips": ips(im_size_s), "imagemagick_jpeg_size": m.peers.size,
        "mpx_per_s": {
            "remora": mpx / remora_s, "vips": mpxs(vips_s), "imagemagick": mpxs(im_s),
            "imagemagick_jpeg_size": mpxs(im_size_s),
        },
        "seconds": {
            "remora": remora_s, "vips": vips_s, "imagemagick": im_s,
            "imagemagick_jpeg_size": im_size_s,
        },
        "ratios": {
            "vips": ratio(vips_s), "imagemagick": ratio(im_s),
            "imagemagick_jpeg_size": ratio(im_size_s),
        },
        "ssim_images": qualities.len(),
        "ssim_min": min_of(qualities.iter().map(|q| q.ours)),
        "ssim_ref_min": min_of(qualities.iter().map(|q| q.reference)),
        "ssim_gap_max": gap,
        "vips_ssim_min": min_of(qualities.iter().map(|q| q.vips)),
        "imagemagick_ssim_min": min_of(qualities.iter().map(|q| q.imagemagick)),
        "worst": {
            "remora": worst(qualities, |q| q.ours),
            "remora_vs_reference": worst(qualities, |q| q.ours - q.reference),
            "vips": worst(qualities, |q| q.vips),
            "imagemagick": worst(qualities, |q| q.imagemagick),
        },
    })
}

/// Runs `remora bench resize`.
pub fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let mut inp = prepare(&a)?;
    let (engines, engines_missing) = engines_to_time(a.engine)?;
    for m in &engines_missing {
        eprintln!("warning: not timed: {m}");
    }
    let (mpx, engine_s) = time_engines(&mut inp, &engines, a.repeat)?;
    let peers = time_peers(&a, &inp);
    let qualities = qualities(&a, &inp, &peers)?;
    let engine_rows = engine_rows(&inp, &engines, &engine_s, mpx)?;
    let m = Measured {
        remora_s: engine_s[0],
        engines,
        engines_missing,
        engine_rows,
        mpx,
        peers,
        qualities,
    };
    let r = report(&a, &inp, &m);
    if a.json {
        println!("{r}");
    } else {
        print_table(&r);
    }
    Ok(())
}

fn print_table(r: &Value) {
    let f = |v: &Value| v.as_f64().map_or("–".to_string(), |x| format!("{x:.1}"));
    let x = |v: &Value| v.as_f64().map_or("–".to_string(), |x| format!("{x:.1}x"));
    let s4 = |v: &Value| v.as_f64().map_or("–".to_string(), |x| format!("{x:.4}"));
    println!(
        "{} images ({:.1} Mpx) from {}, {} at quality {}, {} threads, load {}",
        r["images"],
        r["input_mpx"].as_f64().unwrap_or(0.0),
        r["dir"].as_str().unwrap_or("?"),
        r["geometry"].as_str().unwrap_or("?"),
        r["quality"],
        r["threads"],
        r["load"]
    );
    println!(
        "  {:<34} {:>9} {:>9} {:>12}",
        "tool", "images/s", "Mpx/s", "remora is"
    );
    for e in r["engines"].as_array().into_iter().flatten() {
        let diff = match e["max_diff_vs_cpu"].as_u64() {
            Some(d) if e["engine"] != "cpu-fir" => format!(
                "  {d} grey level(s) at most from cpu-fir ({} of {} samples differ)",
                e["samples_differing_from_cpu"], e["samples_compared"]
            ),
            _ => String::new(),
        };
        println!(
            "  {:<34} {:>9} {:>9} {:>12}{diff}",
            format!("remora resize ({})", e["engine"].as_str().unwrap_or("?")),
            f(&e["ips"]),
            f(&e["mpx_per_s"]),
            ""
        );
        if let Some(d) = e["device"].as_str() {
            println!("    on {d}");
        }
    }
    for m in r["engines_missing"].as_array().into_iter().flatten() {
        println!("  not timed: {}", m.as_str().unwrap_or("?"));
    }
    for (label, ips, key) in [
        ("vipsthumbnail", "vips_ips", "vips"),
        ("convert", "imagemagick_ips", "imagemagick"),
        (
            "convert -define jpeg:size",
            "imagemagick_jpeg_size_ips",
            "imagemagick_jpeg_size",
        ),
    ] {
        println!(
            "  {label:<34} {:>9} {:>9} {:>12}",
            f(&r[ips]),
            f(&r["mpx_per_s"][key]),
            x(&r["ratios"][key])
        );
    }
    println!(
        "  SSIM (luma, vs f64 Lanczos3 of the full decode; {} shrunk images): remora min {}, reference at the same \
         quality min {}, largest shortfall {}; vipsthumbnail min {}, convert min {}",
        r["ssim_images"],
        s4(&r["ssim_min"]),
        s4(&r["ssim_ref_min"]),
        s4(&r["ssim_gap_max"]),
        s4(&r["vips_ssim_min"]),
        s4(&r["imagemagick_ssim_min"])
    );
    println!(
        "  lowest per tool (file, SSIM; remora_vs_reference: remora − reference): {}",
        r["worst"]
    );
}
