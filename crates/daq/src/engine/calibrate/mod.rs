//! `auto` engine selection by speed: a short calibration at start, cached per device and
//! configuration.
//!
//! With `pipeline.engine` unset a receiver does not take the first engine that can be created:
//! it runs a few synthetic frames of the configured detector through every engine it may use,
//! through the same [`Pipeline::process`] path and plan as the run (pedestal tracking on the
//! run's dark frames, conversion and veto, sparse compression, assembly and integration with
//! the configured bins and geometry, host pixels downloaded when the run needs them), times each
//! frame after a warm-up, and takes the fastest. The GPU must be clearly faster: within 5% of
//! `cpu-simd` ([`CLEARLY_FASTER`]), `cpu-simd` wins, since it needs no device. The engines
//! considered are `gpu-wgpu` on a real GPU (a CPU-type Vulkan device such as lavapipe is passed
//! over, as the registry's fallback does) and `cpu-simd`; `cpu-scalar` only when neither can
//! run. With one engine left there is nothing to measure.
//!
//! The choice and the figures are kept in a small JSON file ([`cache`]) under a key of the
//! engines' devices and drivers, the CPU model and threads, the modules, the bins and the
//! stages, so that the next run on this host and configuration starts at once.
//! [`Options::from_env`] says where the file is and whether to measure again.
//!
//! What it does not: it does not time the transport or the writer (they do not depend on the
//! engine), and it does not watch the run to change engines midway.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{Engine, EngineKind, Registry};
use crate::config::Config;
use crate::pipeline::Pipeline;
use crate::{DaqError, Result};

pub mod cache;
mod candidates;

pub use cache::{CacheFile, CacheKey};
pub use candidates::{cpu_model, Candidate, Candidates};

/// The GPU is taken only when its time per frame is below this fraction of `cpu-simd`'s.
pub const CLEARLY_FASTER: f64 = 0.95;
/// Frames timed per engine, after the warm-up.
pub const TIMED_FRAMES: u64 = 8;
/// Environment variable naming the cache file (`off` or empty: no cache).
pub const CACHE_ENV: &str = "REMORA_ENGINE_CACHE";
/// Environment variable that forces a new calibration (`1`, `true`, `yes`).
pub const RECALIBRATE_ENV: &str = "REMORA_RECALIBRATE";

/// How the engine was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub enum How {
    /// `pipeline.engine` named it: no calibration.
    Configured,
    /// Only one engine could be used: nothing to compare.
    Only,
    /// The pipeline does not run (`pipeline.process = false`): nothing to measure.
    Unmeasured,
    /// Measured at start.
    Measured,
    /// Measured by an earlier run with the same devices and configuration (the cache).
    Cached,
}

/// Where an engine's figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub enum Source {
    /// Timed at this start.
    Measured,
    /// From the cache.
    Cached,
    /// Not timed (see `why`).
    NotMeasured,
}

/// One engine's figure in a choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct EngineFigure {
    /// Registry name.
    pub engine: String,
    /// Milliseconds per frame (mean over the timed frames), when timed.
    pub ms_per_frame: Option<f64>,
    /// Measured now, cached, or not measured.
    pub from: Source,
    /// Why it was not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// Which engine a run uses and why: what the run summary, `/status` and `remora bench
/// acquisition` report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct EngineChoice {
    /// The engine chosen (registry name).
    pub engine: String,
    /// How it was chosen.
    pub how: How,
    /// Why, in words, with the figures that decided.
    pub reason: String,
    /// Every engine considered, with its time per frame or why it has none.
    pub engines: Vec<EngineFigure>,
    /// Something that went wrong on the way (an unreadable cache file, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The cache file read or written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// Seconds the calibration took (0 when nothing was measured).
    #[serde(default)]
    pub calibration_seconds: f64,
}

impl EngineChoice {
    /// One line for a terminal: `engine gpu-wgpu (auto, measured: gpu-wgpu 3.10 ms/frame,
    /// cpu-simd 9.20 ms/frame): …`.
    pub fn text(&self) -> String {
        let figures: Vec<String> = self
            .engines
            .iter()
            .filter_map(|f| {
                f.ms_per_frame
                    .map(|ms| format!("{} {ms:.2} ms/frame", f.engine))
            })
            .collect();
        let how = match self.how {
            How::Configured => "pipeline.engine".to_string(),
            How::Only | How::Unmeasured => "auto".to_string(),
            How::Measured => format!(
                "auto, measured in {:.1} s: {}",
                self.calibration_seconds,
                figures.join(", ")
            ),
            How::Cached => format!(
                "auto, cached{}: {}",
                self.cache
                    .as_deref()
                    .map(|c| format!(" in {c}"))
                    .unwrap_or_default(),
                figures.join(", ")
            ),
        };
        let mut t = format!("engine {} ({how}): {}", self.engine, self.reason);
        if let Some(n) = &self.note {
            t += &format!(" ({n})");
        }
        t
    }
}

/// The choice from the times measured (milliseconds per frame): the fastest engine, except that
/// `cpu-simd` wins unless another engine is clearly faster (below [`CLEARLY_FASTER`] times its
/// time); without `cpu-simd`, the fastest. Non-finite or non-positive times are ignored. `None`
/// when nothing was measured. Returns the engine and the reason in words.
pub fn choose(measured: &[(EngineKind, f64)]) -> Option<(EngineKind, String)> {
    let valid: Vec<(EngineKind, f64)> = measured
        .iter()
        .copied()
        .filter(|(_, ms)| ms.is_finite() && *ms > 0.0)
        .collect();
    let (fast, fast_ms) = valid.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1))?;
    let simd = EngineKind::CpuSimd;
    let Some(simd_ms) = valid.iter().find(|(k, _)| *k == simd).map(|m| m.1) else {
        return Some((
            fast,
            format!(
                "{} {fast_ms:.2} ms/frame, the fastest engine measured",
                fast.name()
            ),
        ));
    };
    let others: Vec<String> = valid
        .iter()
        .filter(|(k, _)| *k != simd)
        .map(|(k, ms)| format!("{} {ms:.2} ms/frame", k.name()))
        .collect();
    if fast == simd {
        let why = if others.is_empty() {
            format!("cpu-simd {simd_ms:.2} ms/frame, the only engine measured")
        } else {
            format!(
                "cpu-simd {simd_ms:.2} ms/frame is the fastest ({})",
                others.join(", ")
            )
        };
        return Some((simd, why));
    }
    if fast_ms < simd_ms * CLEARLY_FASTER {
        return Some((
            fast,
            format!(
                "{} {fast_ms:.2} ms/frame, {:.2}x as fast as cpu-simd ({simd_ms:.2} ms/frame)",
                fast.name(),
                simd_ms / fast_ms
            ),
        ));
    }
    Some((
        simd,
        format!(
            "{} {fast_ms:.2} ms/frame is within {:.0}% of cpu-simd {simd_ms:.2} ms/frame: cpu-simd, \
             which needs no device",
            fast.name(),
            (1.0 - CLEARLY_FASTER) * 100.0
        ),
    ))
}

/// Where the cache is and whether to measure again.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The cache file (`None`: no cache, measure every time).
    pub cache: Option<PathBuf>,
    /// Measure even when the cache has an entry (and replace it).
    pub recalibrate: bool,
}

impl Options {
    /// From the environment: `REMORA_ENGINE_CACHE` names the file (`off` or empty: none),
    /// else `$XDG_CACHE_HOME/remora/engines.json`, else `~/.cache/remora/engines.json`;
    /// `REMORA_RECALIBRATE=1` measures again.
    pub fn from_env() -> Options {
        let cache = match std::env::var_os(CACHE_ENV) {
            Some(v) if v.is_empty() || v == "off" => None,
            Some(v) => Some(PathBuf::from(v)),
            None => Self::default_cache(),
        };
        let recalibrate =
            std::env::var(RECALIBRATE_ENV).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
        Options { cache, recalibrate }
    }

    /// `$XDG_CACHE_HOME/remora/engines.json` (an absolute `XDG_CACHE_HOME` only, as the
    /// specification asks), else `$HOME/.cache/remora/engines.json`.
    pub fn default_cache() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .map(|h| h.join(".cache"))
            })?;
        Some(base.join("remora").join("engines.json"))
    }
}

/// The cache key of `usable` engines running the work of `cfg` (with `host_pixels`).
pub fn key_for(
    usable: &[(EngineKind, String)],
    threads: usize,
    cfg: &Config,
    host_pixels: bool,
) -> CacheKey {
    let p = &cfg.pipeline;
    let a = &cfg.acquisition;
    let mut stages = String::from("convert+veto+sparse");
    if p.integrate {
        stages += &format!("+integrate({})", p.unit);
    }
    if host_pixels {
        stages += "+host-pixels";
    }
    if a.dark_every > 0 {
        stages += &format!("; dark every {}", a.dark_every);
    }
    if p.frames_in_flight > 1 {
        stages += &format!("; {} in flight", p.frames_in_flight);
    }
    if p.frame_lanes > 1 {
        stages += &format!("; {} lanes", p.frame_lanes);
    }
    CacheKey {
        remora: env!("CARGO_PKG_VERSION").into(),
        devices: usable
            .iter()
            .map(|(k, d)| format!("{}: {d}", k.name()))
            .collect(),
        cpu: cpu_model(),
        threads,
        modules: cfg.detector.modules,
        bins: if p.integrate { p.bins } else { 0 },
        stages,
    }
}

/// Chooses among `usable` engines (kind and device; at least two): from the cache entry of
/// `key` when there is one and `opts` does not ask to measure again, else by timing each with
/// `measure` (milliseconds per frame) and [`choose`], then keeping the result in the cache.
/// `passed` are the engines passed over, reported with their reason. A cache that cannot be
/// read or written is warned about and noted in the choice, never an error.
pub fn decide(
    usable: &[(EngineKind, String)],
    passed: &[(EngineKind, String)],
    key: &CacheKey,
    opts: &Options,
    measure: &mut dyn FnMut(EngineKind) -> Result<f64>,
) -> Result<EngineChoice> {
    let passed_figures = || {
        passed.iter().map(|(k, why)| EngineFigure {
            engine: k.name().into(),
            ms_per_frame: None,
            from: Source::NotMeasured,
            why: Some(why.clone()),
        })
    };
    let cache_name = opts.cache.as_ref().map(|p| p.display().to_string());
    let mut note = None;
    if let Some(path) = opts.cache.as_deref().filter(|_| !opts.recalibrate) {
        match CacheFile::load(path) {
            Ok(file) => {
                if let Some(e) = file.get(key) {
                    if usable.iter().any(|(k, _)| k.name() == e.engine) {
                        let mut engines: Vec<EngineFigure> = usable
                            .iter()
                            .map(|(k, _)| EngineFigure {
                                engine: k.name().into(),
                                ms_per_frame: e.ms_per_frame.get(k.name()).copied(),
                                from: Source::Cached,
                                why: None,
                            })
                            .collect();
                        engines.extend(passed_figures());
                        return Ok(EngineChoice {
                            engine: e.engine.clone(),
                            how: How::Cached,
                            reason: format!("{} (measured {})", e.reason, e.measured_at),
                            engines,
                            note: None,
                            cache: cache_name,
                            calibration_seconds: 0.0,
                        });
                    }
                }
            }
            Err(why) => {
                tracing::warn!(cache = %path.display(), %why, "engine cache unreadable; calibrating again");
                note = Some(format!(
                    "the engine cache {} could not be read ({why}); measured again",
                    path.display()
                ));
            }
        }
    }
    let t0 = Instant::now();
    let mut measured = Vec::new();
    let mut engines = Vec::new();
    for (kind, _) in usable {
        match measure(*kind) {
            Ok(ms) => {
                tracing::info!(engine = kind.name(), ms_per_frame = ms, "engine calibrated");
                measured.push((*kind, ms));
                engines.push(EngineFigure {
                    engine: kind.name().into(),
                    ms_per_frame: Some(ms),
                    from: Source::Measured,
                    why: None,
                });
            }
            Err(e) => {
                tracing::warn!(engine = kind.name(), error = %e, "engine calibration failed");
                engines.push(EngineFigure {
                    engine: kind.name().into(),
                    ms_per_frame: None,
                    from: Source::NotMeasured,
                    why: Some(format!("failed while measured: {e}")),
                });
            }
        }
    }
    engines.extend(passed_figures());
    let calibration_seconds = t0.elapsed().as_secs_f64();
    let Some((kind, reason)) = choose(&measured) else {
        return Err(DaqError::Config(format!(
            "no engine could be measured: {}",
            engines
                .iter()
                .map(|f| format!("{}: {}", f.engine, f.why.as_deref().unwrap_or("?")))
                .collect::<Vec<_>>()
                .join("; ")
        )));
    };
    if let Some(path) = &opts.cache {
        let mut file = CacheFile::load(path).unwrap_or_default();
        file.put(cache::Entry {
            key: key.clone(),
            engine: kind.name().into(),
            ms_per_frame: measured
                .iter()
                .map(|(k, ms)| (k.name().to_string(), *ms))
                .collect::<BTreeMap<_, _>>(),
            reason: reason.clone(),
            measured_at: crate::timestamp::now_iso8601(),
        });
        if let Err(e) = file.store(path) {
            tracing::warn!(cache = %path.display(), error = %e, "engine cache not written");
            let n = format!(
                "the engine cache {} could not be written ({e})",
                path.display()
            );
            note = Some(match note {
                Some(old) => format!("{old}; {n}"),
                None => n,
            });
        }
    }
    Ok(EngineChoice {
        engine: kind.name().into(),
        how: How::Measured,
        reason,
        engines,
        note,
        cache: cache_name,
        calibration_seconds,
    })
}

/// Milliseconds per frame of `pipeline` on `frames` (frame number, raw words): the first
/// `warmup` frames untimed, then the rest, submitted and collected as the run does (up to the
/// pipeline's [`depth`](Pipeline::depth) in flight).
pub fn time_frames(
    pipeline: &mut Pipeline,
    frames: &[(u64, &[u16])],
    warmup: usize,
) -> Result<f64> {
    let warmup = warmup.min(frames.len().saturating_sub(1));
    let run = |p: &mut Pipeline, list: &[(u64, &[u16])]| -> Result<()> {
        for (n, raw) in list {
            p.submit(*n, raw)?;
            while p.in_flight() >= p.depth() {
                p.collect()?;
            }
        }
        while p.collect()?.is_some() {}
        Ok(())
    };
    run(pipeline, &frames[..warmup])?;
    let timed = &frames[warmup..];
    let t = Instant::now();
    run(pipeline, timed)?;
    Ok(t.elapsed().as_secs_f64() * 1e3 / timed.len().max(1) as f64)
}

/// Synthetic frames of `cfg`'s detector for the calibration: one warm-up period of the run's
/// dark pattern (one frame without dark frames), then [`TIMED_FRAMES`], each with the darkness
/// the run gives its number. Returns the distinct frames and the warm-up length; frame `n` is
/// `distinct[n % distinct.len()]`.
pub fn synthetic_frames(cfg: &Config) -> Result<(Vec<Vec<u16>>, usize)> {
    let sc = crate::dataset::Dataset::synth_config(cfg)?;
    let period = cfg.acquisition.dark_every.max(1);
    // A whole number of dark periods, at least two frames.
    let distinct = period * 2u64.div_ceil(period);
    let synth = crate::synth::Synth::new(sc)?;
    let frames = (0..distinct).map(|n| synth.frame(n).raw).collect();
    Ok((frames, period as usize))
}

/// The pipeline of a run with `pipeline.engine` unset: see the module's doc. `build` makes the
/// run's pipeline on an engine (calibration runs on copies of it, which are dropped).
pub fn auto_pipeline(
    cfg: &Config,
    host_pixels: bool,
    opts: &Options,
    build: &dyn Fn(Arc<dyn Engine>) -> Result<Pipeline>,
) -> Result<(Pipeline, EngineChoice)> {
    let threads = cfg.pipeline.threads;
    let cands = Candidates::find(threads)?;
    if !cfg.pipeline.process {
        let (e, c) = cands.unmeasured(
            How::Unmeasured,
            "pipeline.process = false, so no frame is processed and nothing was measured",
        );
        return Ok((build(e)?, c));
    }
    if cands.usable.len() < 2 {
        let (e, c) = cands.unmeasured(How::Only, "the only engine auto may use here");
        return Ok((build(e)?, c));
    }
    let template = build(cands.usable[0].engine.clone())?;
    let usable: Vec<(EngineKind, String)> = cands
        .usable
        .iter()
        .map(|c| (c.kind, c.device.clone()))
        .collect();
    let cpu_threads = cands
        .usable
        .iter()
        .map(|c| c.engine.info().threads)
        .max()
        .unwrap_or(0);
    let key = key_for(&usable, cpu_threads, cfg, host_pixels);
    let mut frames: Option<(Vec<Vec<u16>>, usize)> = None;
    let mut measure = |kind: EngineKind| -> Result<f64> {
        if frames.is_none() {
            frames = Some(synthetic_frames(cfg)?);
        }
        let (distinct, warmup) = frames.as_ref().expect("just made");
        // The GPU chain makes one frame slot per frame in flight on first use: the warm-up
        // covers them all (on an H200, two slots made in the timed frames read as 14 ms/frame
        // for a chain that runs 1.8).
        let depth = cfg
            .pipeline
            .frames_in_flight
            .max(cfg.pipeline.frame_lanes)
            .max(1);
        let warmup = (*warmup).max(depth + 1);
        let list: Vec<(u64, &[u16])> = (0..(warmup as u64 + TIMED_FRAMES))
            .map(|n| (n, distinct[(n % distinct.len() as u64) as usize].as_slice()))
            .collect();
        let engine = cands
            .usable
            .iter()
            .find(|c| c.kind == kind)
            .map(|c| c.engine.clone())
            .expect("a usable engine");
        let mut p = template.clone().with_engine(engine);
        time_frames(&mut p, &list, warmup)
    };
    let choice = decide(&usable, &cands.passed, &key, opts, &mut measure)?;
    drop(cands);
    // A fresh engine for the run: nothing of the calibration's device state stays behind.
    let kind = EngineKind::parse(&choice.engine)?;
    let engine = Registry::create(kind, threads)?;
    Ok((template.with_engine(engine), choice))
}

/// The choice when `pipeline.engine` names the engine: no calibration. The registry falls back
/// along its chain when the engine named cannot be created, and the reason says so.
pub fn configured(kind: EngineKind, threads: usize) -> Result<(Arc<dyn Engine>, EngineChoice)> {
    let sel = Registry::select(Some(kind), threads)?;
    let name = sel.engine.info().name;
    let mut reason = format!("pipeline.engine = {:?}; not calibrated", kind.name());
    for (k, why) in &sel.skipped {
        reason += &format!("; {k} unavailable ({why})");
    }
    if name != kind.name() {
        reason += &format!(": fell back to {name}");
    }
    let choice = EngineChoice {
        engine: name.into(),
        how: How::Configured,
        reason,
        engines: Vec::new(),
        note: None,
        cache: None,
        calibration_seconds: 0.0,
    };
    Ok((sel.engine, choice))
}

#[cfg(test)]
mod tests;
