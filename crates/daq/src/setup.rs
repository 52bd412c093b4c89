//! Everything a receiver's processing unit needs, built from the configuration: calibration,
//! layout, geometry, mask and the pipeline. Tests use the same function to run the pipeline
//! directly on the emulator's frames, so both sides are built the same way.
use crate::access::Estimate;
use crate::azint::{AzConfig, Unit};
use crate::calib::{Calibration, GainMaps, PedestalMaps};
use crate::config::Config;
use crate::dataset::Dataset;
use crate::engine::calibrate::{self, EngineChoice};
use crate::engine::EngineKind;
use crate::geometry::Layout;
use crate::model::{Detector, MODULE_COLS, MODULE_PIXELS};
use crate::pedestal::DarkPattern;
use crate::pipeline::{Pipeline, PipelineConfig};
use crate::poni::Poni;
use crate::synth::Synth;
use crate::{DaqError, Result};

/// The largest geometry layout read (64 modules take a few kilobytes).
const GEOMETRY_MAX_LEN: u64 = 1 << 20;

/// The processing unit's inputs.
#[derive(Debug)]
pub struct Setup {
    /// Calibration in use.
    pub calibration: Calibration,
    /// Where it came from.
    pub calibration_source: String,
    /// Module placement.
    pub layout: Layout,
    /// Geometry for integration.
    pub poni: Poni,
    /// Raw-order mask (1 = masked): pixels outside the receiver's region of interest.
    pub mask: Option<Vec<u8>>,
    /// Pipeline settings.
    pub pipeline: PipelineConfig,
}

impl Setup {
    /// Builds receiver `index`'s inputs.
    pub fn new(cfg: &Config, index: usize) -> Result<Setup> {
        let det = Detector::new(cfg.detector.modules)?;
        let files = &cfg.access.files;
        let (calibration, calibration_source) = match (&cfg.detector.gain, &cfg.detector.pedestal) {
            (Some(g), Some(p)) => {
                let gain = GainMaps::open(files, "detector.gain", g, det)?;
                let ped = PedestalMaps::open(files, "detector.pedestal", p, det)?;
                (
                    Calibration::new(gain, ped)?,
                    format!("gain {}, pedestal {}", g.display(), p.display()),
                )
            }
            _ => {
                let sc = Dataset::synth_config(cfg)?;
                (
                    Synth::calibration_for(&sc, det),
                    format!("synthetic (seed {})", cfg.source.seed),
                )
            }
        };
        let layout = match &cfg.detector.geometry {
            Some(p) => {
                let input = files.open("detector.geometry", p)?;
                let detail = input.detail();
                // The JSON parser's messages quote the file (field names, values): not beneath
                // a directory, where the file may be anyone's.
                let quiet = input.refused(
                    "not a geometry layout (JSON: rows, cols and modules: [{row, col, flip_rows, flip_cols}])",
                );
                let text = input.read_text(GEOMETRY_MAX_LEN, "geometry layout")?;
                Layout::from_json(&text).map_err(|e| {
                    if detail {
                        DaqError::Config(format!("detector.geometry {}: {e}", p.display()))
                    } else {
                        quiet
                    }
                })?
            }
            None => Layout::standard(cfg.detector.modules)?,
        };
        if cfg.detector.geometry.is_some() {
            // A layout may spread the modules over a far larger image than the standard one.
            if let Some(b) = cfg.access.memory {
                Estimate::with_image(cfg, (layout.rows * layout.cols) as u64).check(b)?;
            }
        }
        if layout.modules.len() != cfg.detector.modules {
            return Err(DaqError::Config(format!(
                "detector.geometry places {} modules, detector.modules is {}",
                layout.modules.len(),
                cfg.detector.modules
            )));
        }
        let poni = match &cfg.detector.poni {
            Some(p) => Poni::open(files, "detector.poni", p)?,
            None => Dataset::synth_config(cfg)?.poni,
        };
        let roi = cfg.roi_of(index);
        let mask = (!roi.is_full()).then(|| {
            let mut m = vec![1u8; det.pixels()];
            for (i, v) in m.iter_mut().enumerate() {
                let k = i % MODULE_PIXELS;
                if roi.contains(k / MODULE_COLS, k % MODULE_COLS) {
                    *v = 0;
                }
            }
            m
        });
        let p = &cfg.pipeline;
        let pipeline = PipelineConfig {
            veto_pixel_kev: p.veto_pixel_kev,
            veto_min_pixels: p.veto_min_pixels,
            sparse_kev: p.sparse_kev,
            dark: DarkPattern::new(cfg.acquisition.dark_every, cfg.acquisition.dark_phase)?,
            pedestal_window: p.pedestal_window,
            integrate: p.integrate.then(|| {
                (
                    poni,
                    AzConfig {
                        unit: Unit::parse(&p.unit).expect("validated"),
                        bins: p.bins,
                        ..AzConfig::default()
                    },
                )
            }),
        };
        Ok(Setup {
            calibration,
            calibration_source,
            layout,
            poni,
            mask,
            pipeline,
        })
    }

    /// A pipeline on the configured engine, or (with `pipeline.engine` unset) on the engine
    /// the calibration chooses (see [`calibrate`]), with the cache and options of the
    /// environment; converted frames and images are downloaded to the host.
    pub fn pipeline(&self, cfg: &Config) -> Result<Pipeline> {
        Ok(self
            .pipeline_chosen(cfg, true, &calibrate::Options::from_env())?
            .0)
    }

    /// [`Setup::pipeline`] with the run's `host_pixels` (see [`Pipeline::set_host_pixels`]: the
    /// calibration times what the run will do) and calibration options; also says which engine
    /// was chosen and why.
    pub fn pipeline_chosen(
        &self,
        cfg: &Config,
        host_pixels: bool,
        opts: &calibrate::Options,
    ) -> Result<(Pipeline, EngineChoice)> {
        let build = |engine| {
            let mut p = Pipeline::new(
                engine,
                &self.calibration,
                &self.layout,
                self.mask.as_deref(),
                self.pipeline.clone(),
            )?;
            p.set_host_pixels(host_pixels);
            p.set_depth(cfg.pipeline.frames_in_flight);
            p.set_lanes(cfg.pipeline.frame_lanes);
            Ok(p)
        };
        match cfg.pipeline.engine.as_deref() {
            Some(name) => {
                let (engine, choice) =
                    calibrate::configured(EngineKind::parse(name)?, cfg.pipeline.threads)?;
                Ok((build(engine)?, choice))
            }
            None => calibrate::auto_pipeline(cfg, host_pixels, opts, &build),
        }
    }
}
