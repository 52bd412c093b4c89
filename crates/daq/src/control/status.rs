//! What the control service reports: the types behind `GET /status`, the status stream and the
//! profile preview (their OpenAPI schemas come from these definitions).
use serde::Serialize;

use super::state::{RunKind, State};

/// Counters of the current or last run, summed over receivers.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Counters {
    /// Detector frames the emulator sent.
    pub frames_sent: u64,
    /// Frames processed with every module whole.
    pub frames_complete: u64,
    /// Frames processed with modules masked.
    pub frames_partial: u64,
    /// Frames sent that never arrived (known at the end of a run).
    pub frames_lost: u64,
    /// Frames lost to overruns (known at the end of a run).
    pub frames_overrun: u64,
    /// Frames the veto kept.
    pub kept: u64,
    /// Dark frames (pedestal updates).
    pub dark: u64,
    /// Frames the veto rejected.
    pub rejected: u64,
    /// Overrun events.
    pub overruns: u64,
    /// Module parts masked because they did not arrive whole.
    pub modules_lost: u64,
    /// Frames the writer dropped because the disk was too slow (known at the end of a run).
    pub writer_dropped: u64,
}

/// Rates over the last second or so.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Rates {
    /// Detector frames processed per second.
    pub fps: f64,
    /// Raw data processed, gigabytes (1e9 bytes) per second.
    pub gbps: f64,
}

/// One receiver's progress.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct ReceiverStatus {
    /// Index in `[[receivers]]`.
    pub index: usize,
    /// Frames this receiver expects.
    pub frames_expected: u64,
    /// Frames it committed.
    pub frames_done: u64,
    /// Frames it kept.
    pub kept: u64,
    /// Overruns it saw.
    pub overruns: u64,
    /// Frames its frame buffer holds now, not yet processed.
    pub buffered: u64,
}

/// One detector module.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct ModuleStatus {
    /// Module number.
    pub index: usize,
    /// Frames in which this module was masked (did not arrive whole).
    pub lost: u64,
}

/// The pedestal in use when it comes from a dark run.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct PedestalInfo {
    /// Which run measured it.
    pub source: String,
    /// Dark frames averaged.
    pub frames: u64,
}

/// The latest image available at `/preview/image`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct PreviewInfo {
    /// Detector frame number.
    pub frame: u64,
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
}

/// Everything `GET /status` and the status stream report.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Status {
    /// Where the service is.
    pub state: State,
    /// The last event, or why the last run failed.
    pub message: Option<String>,
    /// Runs started so far (the current or last run's number).
    pub run: u64,
    /// The current or last run's kind.
    pub kind: Option<RunKind>,
    /// Whether a stop was asked for the current run.
    pub stopping: bool,
    /// Fraction of the run's frames committed (0 to 1).
    pub progress: f64,
    /// Seconds since the current or last run started.
    pub elapsed_s: f64,
    /// Frames the run expects (summed over receivers).
    pub frames_expected: u64,
    /// Counters of the current or last run.
    pub counters: Counters,
    /// Current rates.
    pub rates: Rates,
    /// Per receiver.
    pub receivers: Vec<ReceiverStatus>,
    /// Per detector module.
    pub modules: Vec<ModuleStatus>,
    /// The pedestal from the last dark run, used by the following runs.
    pub pedestal: Option<PedestalInfo>,
    /// The latest preview image.
    pub preview: Option<PreviewInfo>,
    /// Frame of the latest profile at `/preview/profile`.
    pub profile_frame: Option<u64>,
    /// Which engine the current run's pipeline runs on and why (once its first receiver has
    /// bound; the last run's between runs): measured at start, from the cache, or configured.
    pub engine_choice: Option<crate::engine::calibrate::EngineChoice>,
    /// The last finished run's summary (as `remora daq run --json` prints it).
    #[cfg_attr(feature = "http", schema(value_type = Option<Object>))]
    pub summary: Option<serde_json::Value>,
    /// Increases with every change the service publishes.
    pub generation: u64,
}

/// The latest 1D profile (`GET /preview/profile`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct ProfileOut {
    /// Detector frame number.
    pub frame: u64,
    /// A title for plots.
    pub title: String,
    /// Unit of `x` (pyFAI's name, e.g. `q_nm^-1`).
    pub unit_x: String,
    /// Bin centres.
    pub x: Vec<f64>,
    /// Mean intensity per bin (keV per pixel, solid-angle corrected); `null` for empty bins.
    pub y: Vec<Option<f64>>,
}
