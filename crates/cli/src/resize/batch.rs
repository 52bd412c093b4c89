//! Which file goes where (`-o OUT` for one input, `-d DIR` for many) and the local batch: files
//! spread over a thread pool, one file per thread at a time (each resize is single-threaded),
//! a progress bar on a terminal, a failing file reported and the batch going on, the command
//! failing at the end when any file failed.
use std::collections::{BTreeSet, HashSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context};
use rayon::prelude::*;
use remora_resize::{Format, Job};

use super::args::format_of;

/// One file to resize.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The input file.
    pub input: PathBuf,
    /// Where its output goes.
    pub output: PathBuf,
    /// Output format; `None`: the input's.
    pub format: Option<Format>,
}

/// The files of one command.
#[derive(Debug)]
pub struct Plan {
    /// The files, in command-line order (folders expanded, sorted by name).
    pub items: Vec<Item>,
    /// `-d DIR` (a batch, with a summary line) rather than `-o OUT`.
    pub out_dir: Option<PathBuf>,
}

/// Whether a path names an image file remora resizes (by extension).
pub fn is_image(p: &Path) -> bool {
    p.is_file() && format_of(p).is_some()
}

/// The inputs with each folder replaced by its image files, sorted by name.
fn expand(inputs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in inputs {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading folder {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_image(p))
                .collect();
            files.sort();
            if files.is_empty() {
                bail!("{}: no .jpg, .jpeg or .png files", p.display());
            }
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Plans `-o OUT` (one input; the format from OUT's extension unless `-format`) or `-d DIR`
/// (same file names; with `-format` their extension changes). Creates DIR.
pub fn plan(
    inputs: &[PathBuf],
    output: Option<&Path>,
    out_dir: Option<&Path>,
    format: Option<Format>,
) -> anyhow::Result<Plan> {
    let inputs = expand(inputs)?;
    if let Some(out) = output {
        let [input] = inputs.as_slice() else {
            bail!(
                "-o OUT takes one input ({} given); use -d DIR for many",
                inputs.len()
            );
        };
        let format = format.or_else(|| format_of(out)).with_context(|| {
            format!(
                "{}: cannot tell the output format from its extension (.jpg, .jpeg, .png) \
                 and no -format was given",
                out.display()
            )
        })?;
        refuse_overwrite(input, out)?;
        let item = Item {
            input: input.clone(),
            output: out.to_path_buf(),
            format: Some(format),
        };
        return Ok(Plan {
            items: vec![item],
            out_dir: None,
        });
    }
    let Some(dir) = out_dir else {
        bail!("give -o OUT for one input or -d DIR for any number of inputs");
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut seen = HashSet::new();
    let mut items = Vec::with_capacity(inputs.len());
    for input in inputs {
        let Some(name) = input.file_name() else {
            bail!("{}: not a file name", input.display());
        };
        let mut output = dir.join(name);
        if let Some(f) = format {
            output.set_extension(match f {
                Format::Jpeg => "jpg",
                Format::Png => "png",
            });
        }
        if !seen.insert(output.clone()) {
            bail!(
                "two inputs would both be written to {} (same file name)",
                output.display()
            );
        }
        refuse_overwrite(&input, &output)?;
        items.push(Item {
            input,
            output,
            format,
        });
    }
    Ok(Plan {
        items,
        out_dir: Some(dir.to_path_buf()),
    })
}

/// Refuses to write an output over its own input.
fn refuse_overwrite(input: &Path, output: &Path) -> anyhow::Result<()> {
    if let (Ok(a), Ok(b)) = (input.canonicalize(), output.canonicalize()) {
        if a == b {
            bail!(
                "{}: the output would overwrite the input; choose another -o or -d",
                input.display()
            );
        }
    }
    Ok(())
}

/// Resizes one file: reads, resizes, writes. Returns the input's pixel count and the engine
/// that resampled (`None`: the size did not change).
pub fn resize_file(item: &Item, job: &Job) -> anyhow::Result<(u64, Option<&'static str>)> {
    let data =
        std::fs::read(&item.input).with_context(|| format!("reading {}", item.input.display()))?;
    let mut job = job.clone();
    job.format = item.format;
    let out = remora_resize::resize(&data, &job)
        .map_err(|e| match e {
            remora_resize::Error::OverBudget { .. } => {
                anyhow::anyhow!("{e}; --max-job-memory raises the limit")
            }
            e => anyhow::Error::new(e),
        })
        .with_context(|| item.input.display().to_string())?;
    std::fs::write(&item.output, &out.data)
        .with_context(|| format!("writing {}", item.output.display()))?;
    Ok((
        u64::from(out.input_width) * u64::from(out.input_height),
        out.engine,
    ))
}

/// What a batch did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Files tried.
    pub files: usize,
    /// Files that failed.
    pub failed: usize,
    /// Input pixels of the files that succeeded.
    pub input_pixels: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// The engines that resampled (`cpu-fir`, `gpu-wgpu`), sorted.
    pub engines: Vec<&'static str>,
}

impl Summary {
    /// `N files, F failed, X input Mpx, S s, R images/s[, resampled by E]`.
    pub fn line(&self) -> String {
        let mut line = format!(
            "{} files, {} failed, {:.1} input Mpx, {:.2} s, {:.1} images/s",
            self.files,
            self.failed,
            self.input_pixels as f64 / 1e6,
            self.seconds,
            (self.files - self.failed) as f64 / self.seconds.max(1e-9)
        );
        if !self.engines.is_empty() {
            line += &format!(", resampled by {}", self.engines.join(" and "));
        }
        line
    }
}

/// A progress bar on stderr when it is a terminal.
pub fn progress(len: usize) -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(len as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} files {per_sec} {msg}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        b
    })
}

/// Prints a line on stderr above the progress bar, if any.
pub fn say(bar: &Option<indicatif::ProgressBar>, line: &str) {
    match bar {
        Some(b) => b.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    }
}

/// Resizes every item on `threads` threads (all cores by default); each failure is reported on stderr
/// (every error names its file).
pub fn resize_all(
    items: &[Item],
    job: &Job,
    threads: Option<usize>,
    bar: &Option<indicatif::ProgressBar>,
) -> anyhow::Result<Summary> {
    let mut pool = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        pool = pool.num_threads(n);
    }
    let pool = pool.build().context("starting the thread pool")?;
    let failed = AtomicUsize::new(0);
    let pixels = AtomicU64::new(0);
    let engines = Mutex::new(BTreeSet::new());
    let t0 = Instant::now();
    pool.install(|| {
        items.par_iter().for_each(|item| {
            match resize_file(item, job) {
                Ok((n, engine)) => {
                    pixels.fetch_add(n, Ordering::Relaxed);
                    if let Some(e) = engine {
                        engines.lock().expect("engines").insert(e);
                    }
                }
                Err(e) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    say(bar, &format!("remora resize: {}", crate::report(&e)));
                }
            }
            if let Some(b) = bar {
                b.inc(1);
            }
        })
    });
    Ok(Summary {
        files: items.len(),
        failed: failed.into_inner(),
        input_pixels: pixels.into_inner(),
        seconds: t0.elapsed().as_secs_f64(),
        engines: engines.into_inner().expect("engines").into_iter().collect(),
    })
}

/// Runs a plan locally: one file (errors are the command's) or a batch with a summary line.
pub fn run(plan: &Plan, job: &Job, threads: Option<usize>) -> anyhow::Result<()> {
    let Some(dir) = &plan.out_dir else {
        let item = &plan.items[0];
        return resize_file(item, job).map(|_| ());
    };
    let bar = progress(plan.items.len());
    let s = resize_all(&plan.items, job, threads, &bar)?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    println!("{}; wrote {}", s.line(), dir.display());
    if s.failed > 0 {
        bail!("{} of {} files failed", s.failed, s.files);
    }
    Ok(())
}
