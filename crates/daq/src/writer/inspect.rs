//! Reading back what the writer wrote (`remora daq inspect FILE`): the frame counts by kind,
//! the first frames' spot counts, the integrated profiles' shape and radial range, the images'
//! shape, and the run's summary, from a receiver's file or a run's master file, with no Python
//! needed.
//!
//! ```no_run
//! let s = remora_daq::writer::inspect::inspect(std::path::Path::new("remora-demo.h5"))?;
//! println!("{} frames, {} kept", s.frames, s.kept);
//! # Ok::<(), remora_daq::DaqError>(())
//! ```
use std::path::Path;

use hdf5::types::VarLenUnicode;
use serde::Serialize;

use crate::{DaqError, Result};

/// What a file holds.
#[derive(Debug, Clone, Serialize, Default)]
pub struct FileSummary {
    /// The file read.
    pub file: String,
    /// `/entry/definition` (NXmx).
    pub definition: String,
    /// Frames recorded in `/entry/frames`.
    pub frames: u64,
    /// Of those: dark, rejected by the veto, kept, not processed.
    pub dark: u64,
    /// Rejected by the veto.
    pub rejected: u64,
    /// Kept.
    pub kept: u64,
    /// Received but not processed.
    pub unprocessed: u64,
    /// Frames with at least one module masked (lost or late).
    pub masked: u64,
    /// Spot counts of the first (up to 8) frames.
    pub first_spots: Vec<u64>,
    /// `/entry/azint/I`'s shape (kept frames × bins), when the run integrated.
    pub profiles: Option<Vec<usize>>,
    /// The radial axis' first and last values and units.
    pub radial: Option<(f64, f64, String)>,
    /// `/entry/data/data`'s shape (images of kept frames), when the run wrote them.
    pub images: Option<Vec<usize>>,
    /// The run's summary (JSON), as the writer stored it.
    pub summary: Option<serde_json::Value>,
}

/// Reads `path`'s summary; a file that is not one of remora's says which part is missing.
pub fn inspect(path: &Path) -> Result<FileSummary> {
    // Chunks are bitshuffle + LZ4 (filter 32008): the read path needs it registered too.
    super::filter::register();
    let bad = |what: &str, e: hdf5::Error| {
        DaqError::Acquisition(format!("{}: {what}: {e}", path.display()))
    };
    std::fs::metadata(path)
        .map_err(|e| DaqError::Acquisition(format!("{}: {e}", path.display())))?;
    let f = hdf5::File::open(path).map_err(|e| bad("not an HDF5 file", e))?;
    let entry = f
        .group("entry")
        .map_err(|e| bad("no /entry (not a remora acquisition file)", e))?;
    let mut s = FileSummary {
        file: path.display().to_string(),
        ..Default::default()
    };
    if let Ok(d) = entry.dataset("definition") {
        s.definition = d
            .read_scalar::<VarLenUnicode>()
            .map(|v| v.as_str().to_string())
            .unwrap_or_default();
    }
    let kinds: Vec<u8> = entry
        .dataset("frames/kind")
        .and_then(|d| d.read_raw())
        .map_err(|e| bad("/entry/frames/kind", e))?;
    s.frames = kinds.len() as u64;
    for k in &kinds {
        match k {
            0 => s.dark += 1,
            1 => s.rejected += 1,
            2 => s.kept += 1,
            _ => s.unprocessed += 1,
        }
    }
    if let Ok(lost) = entry
        .dataset("frames/lost_modules")
        .and_then(|d| d.read_raw::<u64>())
    {
        s.masked = lost.iter().filter(|&&m| m != 0).count() as u64;
    }
    if let Ok(spots) = entry
        .dataset("frames/spots")
        .and_then(|d| d.read_raw::<u64>())
    {
        s.first_spots = spots.into_iter().take(8).collect();
    }
    if let Ok(i) = entry.dataset("azint/I") {
        s.profiles = Some(i.shape());
        if let Ok(axis) = entry.dataset("azint/radial_axis") {
            let v: Vec<f64> = axis.read_raw().unwrap_or_default();
            let units = axis
                .attr("units")
                .and_then(|a| a.read_scalar::<VarLenUnicode>())
                .map(|u| u.as_str().to_string())
                .unwrap_or_default();
            if let (Some(a), Some(b)) = (v.first(), v.last()) {
                s.radial = Some((*a, *b, units));
            }
        }
    }
    if let Ok(d) = entry.dataset("data/data") {
        s.images = Some(d.shape());
    }
    if let Ok(d) = entry.dataset("remora/summary") {
        let text = d
            .read_scalar::<VarLenUnicode>()
            .map(|v| v.as_str().to_string())
            .unwrap_or_default();
        s.summary = serde_json::from_str(&text).ok();
    }
    Ok(s)
}

impl std::fmt::Display for FileSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} ({})", self.file, self.definition)?;
        writeln!(
            f,
            "frames: {} ({} dark, {} rejected, {} kept, {} not processed; {} with modules masked)",
            self.frames, self.dark, self.rejected, self.kept, self.unprocessed, self.masked
        )?;
        writeln!(f, "spots of the first frames: {:?}", self.first_spots)?;
        match (&self.profiles, &self.radial) {
            (Some(shape), Some((a, b, u))) => writeln!(
                f,
                "azimuthal integration: /entry/azint/I {shape:?}, radial axis {a:.4} to {b:.4} {u}"
            )?,
            (Some(shape), None) => writeln!(f, "azimuthal integration: /entry/azint/I {shape:?}")?,
            _ => writeln!(f, "azimuthal integration: none")?,
        }
        match &self.images {
            Some(shape) => writeln!(f, "images: /entry/data/data {shape:?}")?,
            None => writeln!(f, "images: none (output.images = false)")?,
        }
        // A receiver's file holds its report, a master file the run's summary: show what is there.
        if let Some(sm) = &self.summary {
            let mut parts = Vec::new();
            for (key, label) in [
                ("frames_sent", "sent"),
                ("frames_expected", "expected"),
                ("frames_complete", "complete"),
                ("frames_partial", "masked"),
                ("frames_lost", "lost"),
                ("overruns", "overruns"),
            ] {
                if let Some(v) = sm.get(key).and_then(|v| v.as_u64()) {
                    parts.push(format!("{v} {label}"));
                }
            }
            if let Some(v) = sm.get("e2e_fps").and_then(|v| v.as_f64()) {
                parts.push(format!("{v:.1} frames/s end to end"));
            }
            writeln!(f, "run: {}", parts.join(", "))?;
        }
        Ok(())
    }
}
