//! The chained per-frame pipeline: pedestal tracking on dark frames; on the others conversion
//! with the veto count in the same pass, then for kept frames sparse compression and (when
//! configured) assembly and azimuthal integration.
//!
//! Frames may be kept in flight: [`Pipeline::submit`] hands a frame to the engine and
//! [`Pipeline::collect`] returns the oldest result. On the GPU chain a submitted frame is
//! already copied to the device, so its buffer is free, and up to
//! [`depth`](Pipeline::set_depth) frames overlap their uploads, compute and readbacks. Host
//! engines process a frame when it is submitted, or, with [`lanes`](Pipeline::set_lanes) above
//! one, gather that many frames and process them at once, one thread each on the engine's
//! shared pool (frame-level parallelism: stages that do not split well over many threads, such
//! as CSR, then run side by side for several frames).
use std::collections::VecDeque;
use std::sync::Arc;

use remora_accel::AlignedBuf;

use crate::azint::{AzConfig, AzMatrix, Profile};
use crate::calib::{Calibration, ConvTables};
use crate::engine::{ConvStats, Engine, FrameOut, FramePlan};
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

/// The chained pipeline with its buffers, reused frame after frame. A clone is an independent
/// pipeline in the same state (the engine is shared).
#[derive(Debug, Clone)]
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
    /// Whether `energy` and `image` hold the frame `collect` returned last.
    last_pixels: bool,
    depth: usize,
    lanes: usize,
    pending: Pending,
    /// Converted-frame and image buffers of frames processed side by side, for reuse.
    spare: Vec<Pixels>,
}

/// A converted frame and its image.
type Pixels = (AlignedBuf<f32>, AlignedBuf<f32>);

/// A submitted frame: its result, the device's promise of one, or its copy waiting for a batch.
// A few of them wait in a queue: boxing a variant would only add an allocation per frame.
#[allow(clippy::large_enum_variant)]
enum Submitted {
    Done(Outcome),
    /// A copy of the raw frame, for the next batch of lanes.
    Queued(Vec<u16>),
    /// Processed in a batch: the result and the converted frame and image it left.
    Batched(Outcome, Pixels),
    /// On the device; whether its converted frame and image come back with it.
    #[cfg(feature = "gpu")]
    Flight(crate::engine::InFlight, bool),
}

/// Frames submitted and not collected, oldest first. A clone of the pipeline starts with none.
#[derive(Default)]
struct Pending(VecDeque<(u64, Submitted)>);

impl Clone for Pending {
    fn clone(&self) -> Self {
        Pending::default()
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} frames in flight", self.0.len())
    }
}

/// The engine's plan for a non-dark frame (a function of the fields, so that the converted
/// frame and image buffers stay free to borrow mutably beside it).
fn frame_plan<'a>(
    cfg: &PipelineConfig,
    shape: (usize, usize),
    assembly: &'a Option<AssemblyMap>,
    matrix: &'a Option<AzMatrix>,
    host_pixels: bool,
) -> FramePlan<'a> {
    FramePlan {
        veto_kev: cfg.veto_pixel_kev,
        veto_min: cfg.veto_min_pixels,
        sparse_kev: cfg.sparse_kev,
        shape,
        integrate: assembly.as_ref().zip(matrix.as_ref()),
        host_pixels,
    }
}

fn outcome(out: FrameOut) -> Outcome {
    match out.kept {
        None => Outcome::Rejected(out.stats),
        Some((sparse, profile)) => Outcome::Kept {
            stats: out.stats,
            sparse,
            profile,
        },
    }
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
            last_pixels: false,
            depth: 1,
            lanes: 1,
            pending: Pending::default(),
            spare: Vec::new(),
        })
    }

    /// Processes frame number `n` (after any frames still in flight, whose results are
    /// dropped: use [`submit`](Self::submit) and [`collect`](Self::collect) to keep them).
    pub fn process(&mut self, n: u64, raw: &[u16]) -> Result<Outcome> {
        while self.collect()?.is_some() {}
        self.submit(n, raw)?;
        Ok(self.collect()?.expect("one frame submitted").1)
    }

    /// Submits frame number `n`. On the GPU chain the frame is copied to the device and
    /// `raw` may be reused as soon as this returns; host engines (and dark frames, which
    /// change the pedestal) are processed now. Call [`collect`](Self::collect) when
    /// [`in_flight`](Self::in_flight) reaches [`depth`](Self::depth).
    pub fn submit(&mut self, n: u64, raw: &[u16]) -> Result<()> {
        self.submit_with_pixels(n, raw, false)
    }

    /// [`submit`](Self::submit), with this frame's converted frame and image wanted in the host
    /// buffers even where [`set_host_pixels`](Self::set_host_pixels) is off: a live view takes
    /// a frame a few times a second, and a device engine then downloads those frames' pixels
    /// and no others. [`has_pixels`](Self::has_pixels) says, after `collect`, whether they came.
    pub fn submit_with_pixels(&mut self, n: u64, raw: &[u16], want: bool) -> Result<()> {
        if self.cfg.dark.is_dark(n) {
            // Frames gathered for a batch use the pedestal as it was before this one.
            self.run_batch()?;
            self.tracker
                .update(self.engine.as_ref(), raw, &mut self.tables)?;
            self.pending
                .0
                .push_back((n, Submitted::Done(Outcome::Dark)));
            return Ok(());
        }
        let pixels = self.host_pixels || want;
        let plan = frame_plan(
            &self.cfg,
            (self.rows, self.cols),
            &self.assembly,
            &self.matrix,
            pixels,
        );
        #[cfg(feature = "gpu")]
        if let Some(g) = self.engine.as_gpu() {
            let f = g.begin_frame(raw, &self.tables, &plan)?;
            self.pending.0.push_back((n, Submitted::Flight(f, pixels)));
            return Ok(());
        }
        if self.lanes > 1 {
            self.pending
                .0
                .push_back((n, Submitted::Queued(raw.to_vec())));
            let queued = self.pending.0.iter();
            if queued
                .filter(|(_, s)| matches!(s, Submitted::Queued(_)))
                .count()
                >= self.lanes
            {
                self.run_batch()?;
            }
            return Ok(());
        }
        let out = self.engine.process_frame(
            raw,
            &self.tables,
            &plan,
            &mut self.energy[..],
            &mut self.image[..],
        )?;
        self.pending.0.push_back((n, Submitted::Done(outcome(out))));
        Ok(())
    }

    /// Processes every queued frame at once, one thread each (the engine's pool shared).
    fn run_batch(&mut self) -> Result<()> {
        let Self {
            engine,
            cfg,
            tables,
            rows,
            cols,
            assembly,
            matrix,
            host_pixels,
            pending,
            spare,
            ..
        } = self;
        let plan = frame_plan(cfg, (*rows, *cols), assembly, matrix, *host_pixels);
        let (n, m) = (tables.pixels(), assembly.as_ref().map_or(0, |a| a.pixels()));
        let mut jobs: Vec<(&mut Submitted, Pixels)> = pending
            .0
            .iter_mut()
            .map(|(_, s)| s)
            .filter(|s| matches!(s, Submitted::Queued(_)))
            .map(|s| {
                let bufs = spare
                    .pop()
                    .unwrap_or_else(|| (AlignedBuf::zeroed(n), AlignedBuf::zeroed(m)));
                (s, bufs)
            })
            .collect();
        if jobs.is_empty() {
            return Ok(());
        }
        let (engine, tables, plan) = (&**engine, &*tables, &plan);
        let results: Vec<Result<Outcome>> = std::thread::scope(|scope| {
            let running: Vec<_> = jobs
                .iter_mut()
                .map(|(s, (e, i))| {
                    let Submitted::Queued(raw) = &**s else {
                        unreachable!("only queued frames are batched")
                    };
                    scope.spawn(move || {
                        engine
                            .process_frame(raw, tables, plan, &mut e[..], &mut i[..])
                            .map(outcome)
                    })
                })
                .collect();
            running
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(DaqError::Config("a frame lane panicked".into())))
                })
                .collect()
        });
        for ((s, bufs), r) in jobs.into_iter().zip(results) {
            *s = Submitted::Batched(r?, bufs);
        }
        Ok(())
    }

    /// The oldest submitted frame's number and result (waiting for the device when it is
    /// in flight); `None` when nothing is pending. [`energy`](Self::energy) and
    /// [`image`](Self::image) then hold this frame's pixels (when host pixels are on).
    pub fn collect(&mut self) -> Result<Option<(u64, Outcome)>> {
        if matches!(self.pending.0.front(), Some((_, Submitted::Queued(_)))) {
            self.run_batch()?;
        }
        let Some((n, s)) = self.pending.0.pop_front() else {
            return Ok(None);
        };
        // Host engines always leave the pixels in the buffers; a dark frame writes none.
        self.last_pixels = true;
        match s {
            Submitted::Done(o) => {
                self.last_pixels = !matches!(o, Outcome::Dark);
                Ok(Some((n, o)))
            }
            Submitted::Batched(o, (e, i)) => {
                // The frame's pixels become the pipeline's; its old buffers serve a later batch.
                let old_e = std::mem::replace(&mut self.energy, e);
                let old_i = std::mem::replace(&mut self.image, i);
                self.spare.push((old_e, old_i));
                Ok(Some((n, o)))
            }
            Submitted::Queued(_) => unreachable!("a batch ran above"),
            #[cfg(feature = "gpu")]
            Submitted::Flight(f, pixels) => {
                self.last_pixels = pixels;
                let plan = frame_plan(
                    &self.cfg,
                    (self.rows, self.cols),
                    &self.assembly,
                    &self.matrix,
                    pixels,
                );
                let g = self.engine.as_gpu().expect("in flight on the GPU engine");
                let out = g.finish_frame(f, &plan, &mut self.energy[..], &mut self.image[..])?;
                Ok(Some((n, outcome(out))))
            }
        }
    }

    /// Frames submitted and not yet collected.
    pub fn in_flight(&self) -> usize {
        self.pending.0.len()
    }

    /// How many frames the GPU chain keeps in flight (host engines use
    /// [`set_lanes`](Self::set_lanes) instead).
    pub fn set_depth(&mut self, depth: usize) {
        self.depth = depth.max(1);
    }

    /// Frames a host engine processes side by side (1: one frame at a time, spread over the
    /// engine's threads). Each lane holds a copy of its raw frame, a converted frame and an
    /// image while it waits. Ignored by the GPU chain (see [`set_depth`](Self::set_depth)).
    pub fn set_lanes(&mut self, lanes: usize) {
        self.lanes = lanes.max(1);
    }

    /// Frames to keep in flight before collecting: the depth on the GPU chain, the lanes on a
    /// host engine.
    pub fn depth(&self) -> usize {
        #[cfg(feature = "gpu")]
        if self.engine.as_gpu().is_some() {
            return self.depth;
        }
        self.lanes
    }

    /// Whether [`energy`](Self::energy) and [`image`](Self::image) must hold each frame (the
    /// default). A device engine skips downloading them when they are not needed (no images
    /// written, no preview): the results (counts, sparse frame, profile) are the same.
    pub fn set_host_pixels(&mut self, on: bool) {
        self.host_pixels = on;
    }

    /// Whether [`energy`](Self::energy) and [`image`](Self::image) hold the frame
    /// [`collect`](Self::collect) returned last: always on host engines (but for dark frames),
    /// on a device engine where host pixels are on or the frame was submitted wanting them.
    pub fn has_pixels(&self) -> bool {
        self.last_pixels
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

    /// The same pipeline on another engine (the engine calibration times copies of the run's
    /// pipeline this way).
    pub fn with_engine(mut self, engine: Arc<dyn Engine>) -> Pipeline {
        self.engine = engine;
        self
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
