//! The chained per-frame pipeline: pedestal tracking on dark frames; on the others conversion
//! with the veto count in the same pass, then for kept frames sparse compression and (when
//! configured) assembly and azimuthal integration.
use std::sync::Arc;

use remora_accel::AlignedBuf;

use crate::azint::{AzConfig, AzMatrix, Profile};
use crate::calib::{Calibration, ConvTables};
use crate::engine::{ConvStats, Engine, FramePlan};
use crate::geometry::{AssemblyMap, Layout};
use crate::pedestal::{DarkPattern, PedestalTracker};
use crate::poni::Poni;
use crate::sparse::SparseFrame;
use crate::{DaqError, Result};

/// Pipeline settings.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Veto threshold 1: a pixel counts when its energy exceeds this (keV).
    pub veto_pixel_kev: f32,
    /// Veto threshold 2: a frame is kept when at least this many pixels count.
    pub veto_min_pixels: u64,
    /// Sparse compression keeps pixels above this (keV).
    pub sparse_kev: f32,
    /// Which frames are dark.
    pub dark: DarkPattern,
    /// Pedestal moving-average window (frames).
    pub pedestal_window: u16,
    /// Integration settings; `None` skips assembly and integration.
    pub integrate: Option<(Poni, AzConfig)>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            veto_pixel_kev: 50.0,
            veto_min_pixels: 10,
            sparse_kev: 6.0,
            dark: DarkPattern::NONE,
            pedestal_window: PedestalTracker::DEFAULT_WINDOW,
            integrate: None,
        }
    }
}

/// What happened to one frame.
// Kept is the common, large case; boxing it would only add an allocation per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A dark frame: the G0 pedestal was updated.
    Dark,
    /// Converted, then rejected by the veto.
    Rejected(ConvStats),
    /// Kept: its sparse form, and its profile when integration is on.
    Kept {
        /// Conversion counts (`above` is the spot count).
        stats: ConvStats,
        /// CSR of the pixels above the sparse threshold (raw layout).
        sparse: SparseFrame,
        /// The 1D profile.
        profile: Option<Profile>,
    },
}

/// The chained pipeline with its buffers, reused frame after frame.
#[derive(Debug)]
pub struct Pipeline {
    engine: Arc<dyn Engine>,
    cfg: PipelineConfig,
    tables: ConvTables,
    tracker: PedestalTracker,
    rows: usize,
    cols: usize,
    assembly: Option<AssemblyMap>,
    matrix: Option<AzMatrix>,
    energy: AlignedBuf<f32>,
    image: AlignedBuf<f32>,
    host_pixels: bool,
}

impl Pipeline {
    /// Prepares tables, the assembly map and the integration matrix.
    pub fn new(
        engine: Arc<dyn Engine>,
        cal: &Calibration,
        layout: &Layout,
        mask: Option<&[u8]>,
        cfg: PipelineConfig,
    ) -> Result<Self> {
        let det = cal.detector();
        if layout.modules.len() != det.modules() {
            return Err(DaqError::Config(format!(
                "layout has {} modules, calibration {}",
                layout.modules.len(),
                det.modules()
            )));
        }
        let tables = ConvTables::new(cal, mask)?;
        let tracker = PedestalTracker::seeded(det.pixels(), cfg.pedestal_window)?;
        let (assembly, matrix) = match &cfg.integrate {
            Some((poni, az)) => {
                let map = layout.assembly_map(mask)?;
                let m = AzMatrix::build(poni, (map.rows, map.cols), Some(&map.mask), az)?;
                (Some(map), Some(m))
            }
            None => (None, None),
        };
        let (rows, cols) = det.raw_shape();
        let image = AlignedBuf::zeroed(assembly.as_ref().map_or(0, |a| a.pixels()));
        Ok(Self {
            engine,
            cfg,
            tables,
            tracker,
            rows,
            cols,
            assembly,
            matrix,
            energy: AlignedBuf::zeroed(det.pixels()),
            image,
            host_pixels: true,
        })
    }

    /// Processes frame number `n`.
    pub fn process(&mut self, n: u64, raw: &[u16]) -> Result<Outcome> {
        if self.cfg.dark.is_dark(n) {
            self.tracker
                .update(self.engine.as_ref(), raw, &mut self.tables)?;
            return Ok(Outcome::Dark);
        }
        let plan = FramePlan {
            veto_kev: self.cfg.veto_pixel_kev,
            veto_min: self.cfg.veto_min_pixels,
            sparse_kev: self.cfg.sparse_kev,
            shape: (self.rows, self.cols),
            integrate: self.assembly.as_ref().zip(self.matrix.as_ref()),
            host_pixels: self.host_pixels,
        };
        let out = self.engine.process_frame(
            raw,
            &self.tables,
            &plan,
            &mut self.energy[..],
            &mut self.image[..],
        )?;
        Ok(match out.kept {
            None => Outcome::Rejected(out.stats),
            Some((sparse, profile)) => Outcome::Kept {
                stats: out.stats,
                sparse,
                profile,
            },
        })
    }

    /// Whether [`energy`](Self::energy) and [`image`](Self::image) must hold each frame (the
    /// default). A device engine skips downloading them when they are not needed (no images
    /// written, no preview): the results (counts, sparse frame, profile) are the same.
    pub fn set_host_pixels(&mut self, on: bool) {
        self.host_pixels = on;
    }

    /// The last converted frame (keV, raw layout).
    pub fn energy(&self) -> &[f32] {
        &self.energy
    }

    /// The last assembled image (empty without integration).
    pub fn image(&self) -> &[f32] {
        &self.image
    }

    /// The conversion tables (with the tracked pedestal).
    pub fn tables(&self) -> &ConvTables {
        &self.tables
    }

    /// The engine in use.
    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// The integration matrix, if integration is on.
    pub fn matrix(&self) -> Option<&AzMatrix> {
        self.matrix.as_ref()
    }

    /// Forgets the pedestal average: the next dark frame replaces the G0 pedestal and later
    /// ones average with it (a dark run measures the pedestal afresh).
    pub fn restart_pedestal(&mut self) -> Result<()> {
        self.tracker = PedestalTracker::fresh(self.tables.pixels(), self.cfg.pedestal_window)?;
        Ok(())
    }

    /// Hands the last kept frame over for a preview without copying it: the buffer that holds
    /// it (the assembled image when integration is on, else the converted frame in raw layout,
    /// modules stacked) is swapped with `spare` when that has the same length, else with a
    /// fresh one; the next frame is written into whichever the pipeline now holds. Gaps,
    /// masked and invalid pixels are NaN in both layouts. Returns (pixels, width, height,
    /// assembled).
    ///
    /// Call it only after the frame's image and energy have been used (the writer's copy).
    pub fn take_preview(
        &mut self,
        spare: Option<AlignedBuf<f32>>,
    ) -> (AlignedBuf<f32>, usize, usize, bool) {
        let (buf, w, h, assembled) = match &self.assembly {
            Some(map) if !self.image.is_empty() => (&mut self.image, map.cols, map.rows, true),
            _ => (&mut self.energy, self.cols, self.rows, false),
        };
        let len = buf.len();
        let fresh = spare
            .filter(|s| s.len() == len)
            .unwrap_or_else(|| AlignedBuf::zeroed(len));
        (std::mem::replace(buf, fresh), w, h, assembled)
    }
}
