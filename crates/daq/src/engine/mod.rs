//! Engines: the one trait every processing backend implements, and the registry that picks one.
//!
//! Geometry and calibration produce plain data ([`ConvTables`], [`AssemblyMap`], [`AzMatrix`]);
//! an [`Engine`] consumes it. Three engines exist: `gpu-wgpu` (WGSL compute shaders on any
//! Vulkan device, the whole per-frame chain on the device: see [`GpuEngine`]), `cpu-simd`
//! (thread pool, vectorised kernels dispatched to AVX2 at run time) and `cpu-scalar`
//! (single-threaded, per-pixel decode: the reference the fast ones are tested against). The
//! registry tries them in that order and records why one was skipped. A run with no engine
//! configured (`auto`) chooses by speed instead: [`calibrate`] times the engines on a few frames
//! at start and caches the choice.
use std::sync::Arc;

use remora_accel::BackendInfo;

use crate::azint::{AzMatrix, Profile};
use crate::calib::ConvTables;
use crate::geometry::AssemblyMap;
use crate::sparse::SparseFrame;
use crate::{DaqError, Result};

pub mod calibrate;
mod cpu;
#[cfg(feature = "gpu")]
mod gpu;
mod kernels;
mod scalar;

pub use cpu::CpuEngine;
#[cfg(feature = "gpu")]
pub use gpu::{GpuEngine, InFlight, StageTimes};
pub use scalar::ScalarEngine;

/// Where converted pixels go.
#[derive(Debug)]
pub enum ConvOut<'a> {
    /// Energy in keV; flagged pixels are NaN (masked, invalid gain, error) or +inf (saturated).
    Energy(&'a mut [f32]),
    /// Photon counts `round_ties_even(E / energy_kev)`; flagged pixels are `i32::MIN`,
    /// saturated pixels `i32::MAX`.
    Photons {
        /// Output counts.
        out: &'a mut [i32],
        /// Photon energy in keV.
        energy_kev: f32,
    },
}

impl ConvOut<'_> {
    fn len(&self) -> usize {
        match self {
            ConvOut::Energy(o) => o.len(),
            ConvOut::Photons { out, .. } => out.len(),
        }
    }
}

/// Per-frame counts from conversion.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ConvStats {
    /// Pixels whose energy exceeds the veto threshold (saturated pixels included).
    pub above: u64,
    /// Saturated pixels (`0xc000`).
    pub saturated: u64,
    /// Error words (`0xffff`, `0x4000`).
    pub errors: u64,
    /// Invalid gain bits (`10`).
    pub invalid_gain: u64,
}

impl ConvStats {
    fn add(&mut self, o: ConvStats) {
        self.above += o.above;
        self.saturated += o.saturated;
        self.errors += o.errors;
        self.invalid_gain += o.invalid_gain;
    }
}

/// What the chained per-frame processing does after conversion (see
/// [`Engine::process_frame`]).
#[derive(Debug, Clone, Copy)]
pub struct FramePlan<'a> {
    /// Veto threshold 1 (keV): pixels above it count.
    pub veto_kev: f32,
    /// Veto threshold 2: a frame is kept when at least this many pixels count.
    pub veto_min: u64,
    /// Sparse compression keeps pixels above this (keV).
    pub sparse_kev: f32,
    /// Raw frame shape (rows, columns).
    pub shape: (usize, usize),
    /// Assembly map and integration matrix, when kept frames are integrated.
    pub integrate: Option<(&'a AssemblyMap, &'a AzMatrix)>,
    /// Whether the converted frame (and, for kept frames, the image) must be in the host
    /// buffers afterwards. A device engine skips the download when not.
    pub host_pixels: bool,
}

/// The result of [`Engine::process_frame`].
#[derive(Debug, Clone)]
pub struct FrameOut {
    /// Conversion counts (`above` is the veto's spot count).
    pub stats: ConvStats,
    /// For a kept frame, its sparse form and its profile (when integrating).
    pub kept: Option<(SparseFrame, Option<Profile>)>,
}

/// The chain stage by stage through an engine's methods (the default of
/// [`Engine::process_frame`]).
pub fn process_stepwise<E: Engine + ?Sized>(
    e: &E,
    raw: &[u16],
    tables: &ConvTables,
    plan: &FramePlan<'_>,
    energy: &mut [f32],
    image: &mut [f32],
) -> Result<FrameOut> {
    let stats = e.convert(raw, tables, ConvOut::Energy(energy), plan.veto_kev)?;
    if stats.above < plan.veto_min {
        return Ok(FrameOut { stats, kept: None });
    }
    let (rows, cols) = plan.shape;
    let sparse = e.compress(energy, rows, cols, plan.sparse_kev)?;
    let profile = match plan.integrate {
        Some((map, m)) => {
            e.assemble(energy, map, image)?;
            Some(e.integrate(m, image)?)
        }
        None => None,
    };
    Ok(FrameOut {
        stats,
        kept: Some((sparse, profile)),
    })
}

/// A processing backend. Every method checks its inputs' sizes and returns an error, never
/// panics, on a mismatch.
pub trait Engine: Send + Sync + std::fmt::Debug {
    /// What this engine is (name, threads, SIMD level); results carry it.
    fn info(&self) -> BackendInfo;

    /// Converts one raw frame (`tables.pixels()` words) and counts pixels above `threshold` keV
    /// (pass `f32::INFINITY` to count nothing).
    fn convert(
        &self,
        raw: &[u16],
        tables: &ConvTables,
        out: ConvOut<'_>,
        threshold: f32,
    ) -> Result<ConvStats>;

    /// Updates the G0 pedestal with a dark frame: pixels in G0 enter a moving average of up to
    /// `window` frames (`counts` holds each pixel's frames so far); others are left out.
    fn track_pedestal(
        &self,
        raw: &[u16],
        tables: &mut ConvTables,
        counts: &mut [u16],
        window: u16,
    ) -> Result<()>;

    /// Pixels of `data` above `threshold` (NaN never counts).
    fn count_above(&self, data: &[f32], threshold: f32) -> u64;

    /// Copies a raw frame (the snapshot a receiver takes of a dark frame before it checks that
    /// the frame is intact and feeds the pedestal). Engines with a thread pool split it, so
    /// that the copy does not hold one core while the others wait.
    fn copy_frame(&self, src: &[u16], dst: &mut [u16]) -> Result<()> {
        check_copy(src, dst)?;
        dst.copy_from_slice(src);
        Ok(())
    }

    /// Assembles a converted raw frame into the detector image.
    fn assemble(&self, raw: &[f32], map: &AssemblyMap, out: &mut [f32]) -> Result<()>;

    /// CSR of the pixels of a `rows × cols` frame above `threshold`.
    fn compress(
        &self,
        frame: &[f32],
        rows: usize,
        cols: usize,
        threshold: f32,
    ) -> Result<SparseFrame>;

    /// Azimuthal integration of an image with a precomputed matrix.
    fn integrate(&self, matrix: &AzMatrix, image: &[f32]) -> Result<Profile>;

    /// The whole chain for one non-dark frame: conversion with the veto count, then for a kept
    /// frame compression and (when planned) assembly and integration. `energy` receives the
    /// converted frame and `image` the assembled one when `plan.host_pixels` (or always, for
    /// engines that compute on the host). The default runs the stages one by one; a device
    /// engine overrides it to keep the frame on the device between stages.
    fn process_frame(
        &self,
        raw: &[u16],
        tables: &ConvTables,
        plan: &FramePlan<'_>,
        energy: &mut [f32],
        image: &mut [f32],
    ) -> Result<FrameOut> {
        process_stepwise(self, raw, tables, plan, energy, image)
    }

    /// The engine as the GPU chain, for callers that keep frames in flight
    /// ([`GpuEngine::begin_frame`]); `None` for engines that compute on the host.
    #[cfg(feature = "gpu")]
    fn as_gpu(&self) -> Option<&GpuEngine> {
        None
    }
}

fn check_convert(raw: &[u16], tables: &ConvTables, out_len: usize) -> Result<()> {
    DaqError::check_len("raw frame", tables.pixels(), raw.len())?;
    DaqError::check_len("conversion output", tables.pixels(), out_len)?;
    for s in 0..3 {
        DaqError::check_len("pedestal table", tables.pixels(), tables.pedestal[s].len())?;
        DaqError::check_len("gain table", tables.pixels(), tables.gain[s].len())?;
    }
    Ok(())
}

fn check_copy(src: &[u16], dst: &[u16]) -> Result<()> {
    DaqError::check_len("frame copy", src.len(), dst.len())
}

fn check_energy(out: &ConvOut<'_>) -> Result<()> {
    if let ConvOut::Photons { energy_kev, .. } = out {
        if !(energy_kev.is_finite() && *energy_kev > 0.0) {
            return Err(DaqError::Config(format!(
                "photon energy must be a positive number of keV, not {energy_kev}"
            )));
        }
    }
    Ok(())
}

fn check_pedestal(raw: &[u16], tables: &ConvTables, counts: &[u16], window: u16) -> Result<()> {
    DaqError::check_len("dark frame", tables.pixels(), raw.len())?;
    DaqError::check_len("pedestal counts", tables.pixels(), counts.len())?;
    DaqError::check_len("pedestal table", tables.pixels(), tables.pedestal[0].len())?;
    if window == 0 {
        return Err(DaqError::Config(
            "pedestal window must be at least 1".into(),
        ));
    }
    Ok(())
}

fn check_assemble(raw: &[f32], map: &AssemblyMap, out: &[f32]) -> Result<()> {
    DaqError::check_len("converted frame", map.raw_pixels, raw.len())?;
    DaqError::check_len("image", map.pixels(), out.len())?;
    DaqError::check_len("assembly map", map.pixels(), map.src.len())?;
    DaqError::check_len("assembly row index", map.rows + 1, map.row_runs.len())?;
    if map.cols == 0 {
        return Err(DaqError::Config("assembly map has no columns".into()));
    }
    // Entries pointing outside the frame become NaN in the kernels rather than being scanned
    // for here on every frame.
    Ok(())
}

fn check_compress(frame: &[f32], rows: usize, cols: usize) -> Result<()> {
    DaqError::check_len("frame", rows.saturating_mul(cols), frame.len())?;
    if cols > u16::MAX as usize + 1 {
        return Err(DaqError::Config(format!(
            "sparse frames hold at most 65536 columns, not {cols}"
        )));
    }
    if frame.len() > u32::MAX as usize {
        return Err(DaqError::Config(
            "frame too large for 32-bit row pointers".into(),
        ));
    }
    Ok(())
}

/// Engines the registry knows, in fallback order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// WGSL compute shaders through wgpu (feature `gpu`); needs a Vulkan device.
    Gpu,
    /// Thread pool and vectorised kernels.
    CpuSimd,
    /// Single-threaded reference.
    CpuScalar,
}

impl EngineKind {
    /// All kinds in fallback order.
    pub const ALL: [EngineKind; 3] = [EngineKind::Gpu, EngineKind::CpuSimd, EngineKind::CpuScalar];

    /// Registry name.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Gpu => "gpu-wgpu",
            EngineKind::CpuSimd => "cpu-simd",
            EngineKind::CpuScalar => "cpu-scalar",
        }
    }

    /// Parses a registry name (`gpu` is short for `gpu-wgpu`; `auto` is not a kind: use
    /// [`Registry::select`] with `None`).
    pub fn parse(name: &str) -> Result<Self> {
        if name == "gpu" {
            return Ok(EngineKind::Gpu);
        }
        Self::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                DaqError::Config(format!(
                    "unknown engine {name:?} (known: gpu-wgpu (or gpu), cpu-simd, cpu-scalar, auto)"
                ))
            })
    }
}

/// Engines passed over, with the reason for each.
pub type Skipped = Vec<(&'static str, String)>;

/// The engine picked by the registry and the ones skipped on the way, with reasons.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The engine to use.
    pub engine: Arc<dyn Engine>,
    /// Engines tried first that could not be used.
    pub skipped: Skipped,
}

impl Registry {
    /// Every engine this machine can run (the fallback order), with the reasons for those it
    /// cannot; a CPU-type GPU device is listed (benchmarks and tests compare it).
    pub fn available(threads: usize) -> (Vec<Arc<dyn Engine>>, Skipped) {
        let (mut ok, mut skipped) = (Vec::new(), Vec::new());
        for kind in EngineKind::ALL {
            match Self::create(kind, threads) {
                Ok(e) => ok.push(e),
                Err(e) => skipped.push((kind.name(), e.to_string())),
            }
        }
        (ok, skipped)
    }
}

/// Creates engines by kind, with a fallback chain.
#[derive(Debug, Clone, Copy, Default)]
pub struct Registry;

impl Registry {
    /// Creates one engine; `threads` 0 means one per core (ignored by `cpu-scalar` and the
    /// GPU). The GPU engine uses the device `REMORA_GPU` allows (see
    /// [`remora_accel::gpu::GpuPolicy`]).
    pub fn create(kind: EngineKind, threads: usize) -> Result<Arc<dyn Engine>> {
        match kind {
            #[cfg(feature = "gpu")]
            EngineKind::Gpu => Ok(Arc::new(GpuEngine::new()?)),
            #[cfg(not(feature = "gpu"))]
            EngineKind::Gpu => Err(DaqError::Config(
                "the gpu-wgpu engine is not built (feature `gpu`)".into(),
            )),
            EngineKind::CpuSimd => Ok(Arc::new(CpuEngine::new(threads)?)),
            EngineKind::CpuScalar => Ok(Arc::new(ScalarEngine)),
        }
    }

    /// Tries `preferred` (or, with `None`, every kind in [`EngineKind::ALL`] order), then falls
    /// back along the chain until one engine can be created. Without a preference a CPU-type
    /// Vulkan device (lavapipe) is passed over: it is slower than the CPU engines. (An
    /// acquisition without a configured engine does not take the first: it measures, see
    /// [`calibrate::auto_pipeline`].)
    pub fn select(preferred: Option<EngineKind>, threads: usize) -> Result<Selection> {
        let start = preferred.map_or(0, |p| {
            EngineKind::ALL.iter().position(|&k| k == p).unwrap_or(0)
        });
        let mut skipped = Vec::new();
        for &kind in &EngineKind::ALL[start..] {
            let made = Self::create(kind, threads).and_then(|e| {
                if preferred.is_none() && e.info().simd == "wgsl-cpu" {
                    Err(DaqError::Config(
                        "the Vulkan device is a CPU (software) device, slower than the CPU engines; ask for gpu-wgpu to use it".into(),
                    ))
                } else {
                    Ok(e)
                }
            });
            match made {
                Ok(engine) => return Ok(Selection { engine, skipped }),
                Err(e) => {
                    tracing::info!(engine = kind.name(), reason = %e, "engine unavailable");
                    skipped.push((kind.name(), e.to_string()));
                }
            }
        }
        Err(DaqError::Config(format!(
            "no engine available: {skipped:?}"
        )))
    }
}
