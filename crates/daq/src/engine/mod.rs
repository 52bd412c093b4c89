//! Engines: the one trait every processing backend implements, and the registry that picks one.
//!
//! Geometry and calibration produce plain data ([`ConvTables`], [`AssemblyMap`], [`AzMatrix`]);
//! an [`Engine`] consumes it. Two CPU engines exist: `cpu-simd` (thread pool, vectorised kernels
//! dispatched to AVX2 at run time) and `cpu-scalar` (single-threaded, per-pixel decode: the
//! reference the fast one is tested against). A CUDA engine slots in behind the same trait in a
//! later issue; the registry already lists it and falls back when it is not built.
use std::sync::Arc;

use remora_accel::BackendInfo;

use crate::azint::{AzMatrix, Profile};
use crate::calib::ConvTables;
use crate::geometry::AssemblyMap;
use crate::sparse::SparseFrame;
use crate::{DaqError, Result};

mod cpu;
mod kernels;
mod scalar;

pub use cpu::CpuEngine;
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
    /// CUDA (later issue; reported unavailable until built with the `cuda` feature).
    Cuda,
    /// Thread pool and vectorised kernels.
    CpuSimd,
    /// Single-threaded reference.
    CpuScalar,
}

impl EngineKind {
    /// All kinds in fallback order.
    pub const ALL: [EngineKind; 3] = [EngineKind::Cuda, EngineKind::CpuSimd, EngineKind::CpuScalar];

    /// Registry name.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Cuda => "cuda",
            EngineKind::CpuSimd => "cpu-simd",
            EngineKind::CpuScalar => "cpu-scalar",
        }
    }

    /// Parses a registry name (`auto` is not a kind: use [`Registry::select`] with `None`).
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                DaqError::Config(format!(
                    "unknown engine {name:?} (known: cuda, cpu-simd, cpu-scalar, auto)"
                ))
            })
    }
}

/// The engine picked by the registry and the ones skipped on the way, with reasons.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The engine to use.
    pub engine: Arc<dyn Engine>,
    /// Engines tried first that could not be used.
    pub skipped: Vec<(&'static str, String)>,
}

/// Creates engines by kind, with a fallback chain.
#[derive(Debug, Clone, Copy, Default)]
pub struct Registry;

impl Registry {
    /// Creates one engine; `threads` 0 means one per core (ignored by `cpu-scalar`).
    pub fn create(kind: EngineKind, threads: usize) -> Result<Arc<dyn Engine>> {
        match kind {
            EngineKind::Cuda => Err(DaqError::Config(
                "the cuda engine is not built (feature `cuda`, later issue)".into(),
            )),
            EngineKind::CpuSimd => Ok(Arc::new(CpuEngine::new(threads)?)),
            EngineKind::CpuScalar => Ok(Arc::new(ScalarEngine)),
        }
    }

    /// Tries `preferred` (or, with `None`, every kind in [`EngineKind::ALL`] order), then falls
    /// back along the chain until one engine can be created.
    pub fn select(preferred: Option<EngineKind>, threads: usize) -> Result<Selection> {
        let start = preferred.map_or(0, |p| {
            EngineKind::ALL.iter().position(|&k| k == p).unwrap_or(0)
        });
        let mut skipped = Vec::new();
        for &kind in &EngineKind::ALL[start..] {
            match Self::create(kind, threads) {
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
