//! One pair: FILE2's points (queries) searched among FILE1's (train), the filters, the timings.
use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail};
use remora_match::formats::Descriptors;
use remora_match::{
    match_f32, match_u8, neighbour_filter, Kernel, Match, NeighbourFilter, Options,
};

use super::input::{self, format_name, Loaded};
use super::output::{self, OutKind};
use super::{engine_names, kernel_name, MatchOpts};

/// The options of every pair, checked once before any file is read.
pub struct Settings {
    /// The matcher's options.
    pub options: Options,
    /// The kernel `options.kernel` resolves to on this CPU.
    pub kernel: Kernel,
    /// MicMac's neighbour filter.
    pub neighbour_filter: bool,
}

impl Settings {
    /// Checks the options (ratio, maximum distance, kernel) so that a batch fails at once
    /// rather than once per pair.
    pub fn new(o: &MatchOpts) -> anyhow::Result<Settings> {
        let options = o.options();
        if let Some(r) = options.ratio {
            if !(r > 0.0 && r <= 1.0) {
                bail!("--ratio {r} is not in (0, 1] (d1 < R · d2; --no-ratio turns the test off)");
            }
        }
        if let Some(d) = options.max_distance {
            if !(d.is_finite() && d >= 0.0) {
                bail!("--max-distance {d} is not a finite number >= 0");
            }
        }
        let kernel = options
            .kernel
            .resolve()
            .map_err(|e| anyhow!("--kernel: {e} (available: {})", engine_names()))?;
        Ok(Settings {
            options,
            kernel,
            neighbour_filter: o.neighbour_filter,
        })
    }
}

/// The matches of one pair and what it took.
pub struct Outcome {
    /// Accepted matches, by query index.
    pub matches: Vec<Match>,
    /// Which code computed the distances, e.g. `avx512 (u8)`.
    pub kernel: String,
    /// Seconds of the search and filters.
    pub search_s: f64,
}

/// Checks that two files can be matched at all (same dimension, positions for the filter).
pub fn check_pair(train: &Loaded, query: &Loaded, s: &Settings) -> anyhow::Result<()> {
    if train.kp.dim != query.kp.dim {
        bail!(
            "{} has descriptors of dimension {} and {} of dimension {}: they cannot be matched",
            train.name(),
            train.kp.dim,
            query.name(),
            query.kp.dim
        );
    }
    if s.neighbour_filter {
        if let Some(f) = [train, query].into_iter().find(|f| !f.has_positions()) {
            bail!(
                "--neighbour-filter needs keypoint positions, and {} is a .npy descriptor array \
                 without them (use MicMac .dat or Lowe .key files)",
                f.name()
            );
        }
    }
    Ok(())
}

/// Matches `query`'s points among `train`'s (call [`check_pair`] first).
pub fn match_loaded(train: &Loaded, query: &Loaded, s: &Settings) -> anyhow::Result<Outcome> {
    let t0 = Instant::now();
    let dim = train.kp.dim;
    let (matches, kernel) = match (&train.kp.descriptors, &query.kp.descriptors) {
        (Descriptors::U8(t), Descriptors::U8(q)) => (
            match_u8(q, t, dim, &s.options)?,
            format!("{} (u8)", kernel_name(s.kernel)),
        ),
        (t, q) => {
            if let Some(u8_file) = [(t, train), (q, query)]
                .into_iter()
                .find(|(d, _)| matches!(d, Descriptors::U8(_)))
            {
                tracing::warn!(
                    "{} has u8 descriptors and the other file f32 ones: matching in f32, \
                     the u8 values converted as they are (no rescaling)",
                    u8_file.1.name()
                );
            }
            // f32 stays on the CPU (`auto` included); `--kernel gpu` is refused by match_f32.
            let f32_kernel = match s.options.kernel.resolve_cpu() {
                Ok(Kernel::Avx2 | Kernel::Avx512) => "avx2",
                _ => "portable",
            };
            (
                match_f32(&as_f32(q), &as_f32(t), dim, &s.options)?,
                format!("{f32_kernel} (f32)"),
            )
        }
    };
    let matches = if s.neighbour_filter {
        neighbour_filter(
            &matches,
            &query.kp.xy,
            &train.kp.xy,
            &NeighbourFilter::default(),
        )?
    } else {
        matches
    };
    Ok(Outcome {
        matches,
        kernel,
        search_s: t0.elapsed().as_secs_f64(),
    })
}

/// f32 descriptors, converting u8 ones.
pub fn as_f32(d: &Descriptors) -> Cow<'_, [f32]> {
    match d {
        Descriptors::F32(v) => Cow::Borrowed(v),
        Descriptors::U8(v) => Cow::Owned(v.iter().map(|&x| x as f32).collect()),
    }
}

/// `remora match FILE1 FILE2 [-o OUT]`.
pub fn run_one(
    file1: &Path,
    file2: &Path,
    out: Option<&Path>,
    o: &MatchOpts,
    s: &Settings,
) -> anyhow::Result<()> {
    let kind = OutKind::choose(out, o.output_format, o.binary);
    let t0 = Instant::now();
    let format = o.format.map(Into::into);
    let train = input::load(file1, format)?;
    let query = input::load(file2, format)?;
    let load_s = t0.elapsed().as_secs_f64();
    check_pair(&train, &query, s)?;
    kind.check_inputs(&train, &query)?;
    let r = match_loaded(&train, &query, s)?;
    let t1 = Instant::now();
    output::write(kind, out, &r.matches, &train, &query)?;
    let write_s = t1.elapsed().as_secs_f64();
    if o.stats {
        for (role, f) in [("FILE1 (train)", &train), ("FILE2 (query)", &query)] {
            eprintln!(
                "{role}: {}: {} points, {} descriptors of dimension {}, {}",
                f.name(),
                f.kp.len(),
                f.value_type(),
                f.kp.dim,
                format_name(f.format)
            );
        }
        eprintln!("matches: {}", r.matches.len());
        eprintln!("kernel: {}; available: {}", r.kernel, engine_names());
        if r.kernel.starts_with(kernel_name(Kernel::Gpu)) {
            eprintln!("device: {}", s.kernel.device()?);
        }
        eprintln!(
            "seconds: load {load_s:.3}, search {:.3}, write {write_s:.3}",
            r.search_s
        );
    }
    Ok(())
}
