//! The acquisition configuration: one TOML file describes the detector, the data the emulator
//! streams, the transport, the receivers, the pipeline and the output file.
//!
//! Unknown keys and wrong types are refused by the parser with the key, line and column;
//! [`Config::validate`] checks values and names the key in every message
//! (`acquisition.frames: must be at least 1`).
//!
//! ```
//! let cfg = remora_daq::config::Config::parse(r#"
//!     [detector]
//!     modules = 2
//!     [acquisition]
//!     frames = 10
//! "#).unwrap();
//! assert_eq!(cfg.acquisition.bunch, 4);
//! ```
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::access::{Access, Estimate};
use crate::ring::Roi;
use crate::{DaqError, Result};

fn err(key: &str, msg: impl std::fmt::Display) -> DaqError {
    DaqError::Config(format!("{key}: {msg}"))
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The detector.
    pub detector: DetectorCfg,
    /// What the emulator streams.
    #[serde(default)]
    pub source: SourceCfg,
    /// Frames, rate, stacks, dark frames.
    pub acquisition: AcquisitionCfg,
    /// How frames travel.
    #[serde(default)]
    pub transport: TransportCfg,
    /// Emulator settings.
    #[serde(default)]
    pub emulator: EmulatorCfg,
    /// Receivers (one by default).
    #[serde(default = "one_receiver")]
    pub receivers: Vec<ReceiverCfg>,
    /// What every receiver does with frames it cannot process at once.
    #[serde(default)]
    pub receiver: ReceiverSettings,
    /// Processing.
    #[serde(default)]
    pub pipeline: PipelineCfg,
    /// Output file.
    #[serde(default)]
    pub output: OutputCfg,
    /// What a run of this configuration may touch on this host (not part of the file: set by
    /// whoever loads it; the default allows any path and sets no memory budget).
    #[serde(skip)]
    pub access: Access,
}

fn one_receiver() -> Vec<ReceiverCfg> {
    vec![ReceiverCfg::default()]
}

/// `[detector]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DetectorCfg {
    /// JUNGFRAU modules (8 for a 4M).
    pub modules: usize,
    /// Module placement (a layout JSON file); default: the standard grid with gaps.
    pub geometry: Option<PathBuf>,
    /// PONI file for azimuthal integration; default: the synthetic generator's geometry.
    pub poni: Option<PathBuf>,
    /// Gain maps (PSI layout, float64, G0 G1 G2 per module); with `pedestal`, replaces the
    /// synthetic calibration.
    pub gain: Option<PathBuf>,
    /// Pedestal maps (float32, G0 G1 G2 per module).
    pub pedestal: Option<PathBuf>,
    /// Photon energy (keV).
    #[serde(default = "default_energy")]
    pub photon_energy_kev: f32,
}

fn default_energy() -> f32 {
    12.4
}

/// Where the emulator's frames come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// The synthetic generator (with its ground truth).
    #[default]
    Synthetic,
    /// Raw little-endian u16 frames, detector order, back to back.
    Raw,
    /// A `.npy` array of u16, shape (frames, modules·512, 1024) or (frames, modules, 512, 1024).
    Npy,
    /// An HDF5 dataset of u16 frames.
    Hdf5,
}

/// `[source]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceCfg {
    /// Kind of dataset.
    #[serde(default)]
    pub kind: SourceKind,
    /// File for raw, npy and hdf5 sources.
    pub path: Option<PathBuf>,
    /// Dataset inside an HDF5 file.
    #[serde(default = "default_h5_dataset")]
    pub dataset: String,
    /// Synthetic: random seed.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Synthetic: distinct frames generated before the run (the stream cycles through them).
    #[serde(default = "default_distinct")]
    pub distinct: usize,
    /// Synthetic: Bragg spots per frame.
    #[serde(default = "default_spots")]
    pub spots: usize,
}

fn default_h5_dataset() -> String {
    "/entry/data/data".into()
}
fn default_seed() -> u64 {
    1
}
fn default_distinct() -> usize {
    8
}
fn default_spots() -> usize {
    40
}

impl Default for SourceCfg {
    fn default() -> Self {
        SourceCfg {
            kind: SourceKind::Synthetic,
            path: None,
            dataset: default_h5_dataset(),
            seed: default_seed(),
            distinct: default_distinct(),
            spots: default_spots(),
        }
    }
}

/// `[acquisition]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AcquisitionCfg {
    /// Detector frames to acquire.
    pub frames: u64,
    /// Frame rate (Hz); 0: as fast as possible.
    #[serde(default)]
    pub rate_hz: f64,
    /// Frames per stack (one event per module per stack; the ring holds two stacks).
    #[serde(default = "default_bunch")]
    pub bunch: usize,
    /// One dark frame every this many frames (0: none).
    #[serde(default = "default_dark_every")]
    pub dark_every: u64,
    /// Which frame of each period is dark.
    #[serde(default = "default_dark_phase")]
    pub dark_phase: u64,
    /// How long a stack waits for its last module before it is processed with it masked (ms).
    #[serde(default = "default_deadline")]
    pub deadline_ms: u64,
    /// How long a receiver waits for every module to connect (ms).
    #[serde(default = "default_connect")]
    pub connect_timeout_ms: u64,
}

fn default_connect() -> u64 {
    30_000
}

fn default_bunch() -> usize {
    4
}
fn default_dark_every() -> u64 {
    2
}
fn default_dark_phase() -> u64 {
    1
}
fn default_deadline() -> u64 {
    500
}

/// Transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// RoCEv2 UC queue pairs over UDP.
    #[default]
    Udp,
    /// UC queue pairs over same-host shared memory.
    Shm,
    /// The detector's own UDP packets (48-byte header + 8192 bytes).
    Native,
}

impl TransportKind {
    /// Name as in the file.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Udp => "udp",
            TransportKind::Shm => "shm",
            TransportKind::Native => "native",
        }
    }
}

/// `[transport]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TransportCfg {
    /// udp, shm or native.
    #[serde(default)]
    pub kind: TransportKind,
    /// Path MTU (udp).
    #[serde(default = "default_mtu")]
    pub mtu: usize,
    /// Fraction of datagrams the emulator drops on transmit (udp and native; for tests).
    #[serde(default)]
    pub loss: f64,
    /// Seed of the loss pattern.
    #[serde(default = "default_seed")]
    pub loss_seed: u64,
    /// Who drives the receivers' queue pairs (udp, shm): `thread`, the fabric's receive
    /// thread, or `poll`, the receive loop itself (one thread fewer on the data path).
    #[serde(default)]
    pub progress: ProgressKind,
}

/// `transport.progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProgressKind {
    /// A background receive thread per device (the fabric's default).
    #[default]
    Thread,
    /// The receiver's own receive loop.
    Poll,
}

impl ProgressKind {
    /// The fabric's setting.
    pub fn fabric(self) -> remora_fabric::Progress {
        match self {
            ProgressKind::Thread => remora_fabric::Progress::Thread,
            ProgressKind::Poll => remora_fabric::Progress::Poll,
        }
    }
}

fn default_mtu() -> usize {
    4096
}

impl Default for TransportCfg {
    fn default() -> Self {
        TransportCfg {
            kind: TransportKind::Udp,
            mtu: default_mtu(),
            loss: 0.0,
            loss_seed: 1,
            progress: ProgressKind::Thread,
        }
    }
}

/// How frames are split between receivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Fanout {
    /// Frame `i` to receiver `i mod N`.
    #[default]
    Time,
    /// Every frame to every receiver, each receiver its own region of interest.
    Roi,
}

/// `[emulator]`.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EmulatorCfg {
    /// Time or spatial (RoI) slicing between receivers.
    #[serde(default)]
    pub fanout: Fanout,
    /// Region of interest of every module (default: whole modules).
    pub roi: Option<Roi>,
}

/// `[[receivers]]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverCfg {
    /// Control address (`127.0.0.1:0`: any free port on loopback).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// With `fanout = "roi"`: the part of every module this receiver gets.
    pub roi: Option<Roi>,
}

fn default_listen() -> String {
    "127.0.0.1:0".into()
}

impl Default for ReceiverCfg {
    fn default() -> Self {
        ReceiverCfg {
            listen: default_listen(),
            roi: None,
        }
    }
}

/// `[receiver]`: the frame buffer and the overrun policy, the same for every receiver.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverSettings {
    /// Bytes of frame buffer per receiver: `"2GiB"`, `"512M"` or a number of bytes. The ring
    /// the modules write into gets as many stack buffers as fit (at least two). Default: a
    /// quarter of the host's available memory shared by the receivers, at most 8 GiB, never
    /// more than the run needs ([`crate::flow::ring_for`]).
    #[serde(default)]
    pub buffer: Option<crate::flow::BufferSize>,
    /// What happens when the source would overwrite a stack not yet processed.
    #[serde(default)]
    pub overrun: crate::flow::OverrunPolicy,
}

/// `[pipeline]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineCfg {
    /// Run the pipeline (false: the receiver only counts frames).
    #[serde(default = "yes")]
    pub process: bool,
    /// Engine (`gpu-wgpu`, `cpu-simd`, `cpu-scalar`); default (auto): the fastest, measured at
    /// start and cached (see [`crate::engine::calibrate`]).
    pub engine: Option<String>,
    /// Engine threads (0: all cores).
    #[serde(default)]
    pub threads: usize,
    /// Veto threshold 1 (keV).
    #[serde(default = "default_veto_kev")]
    pub veto_pixel_kev: f32,
    /// Veto threshold 2 (pixels).
    #[serde(default = "default_veto_pixels")]
    pub veto_min_pixels: u64,
    /// Sparse threshold (keV).
    #[serde(default = "default_sparse_kev")]
    pub sparse_kev: f32,
    /// Pedestal moving-average window (frames).
    #[serde(default = "default_window")]
    pub pedestal_window: u16,
    /// Azimuthal integration on kept frames.
    #[serde(default = "yes")]
    pub integrate: bool,
    /// Radial bins.
    #[serde(default = "default_bins")]
    pub bins: usize,
    /// Radial unit (`q_nm^-1`, `q_A^-1`, `2th_deg`, `2th_rad`, `r_mm`).
    #[serde(default = "default_unit")]
    pub unit: String,
    /// Testing: extra time spent per frame (ms), to provoke overruns.
    #[serde(default)]
    pub slow_ms: u64,
    /// Frames the GPU chain keeps in flight (uploads, compute and readbacks of different
    /// frames overlap); host engines process one frame at a time whatever this says.
    #[serde(default = "default_in_flight")]
    pub frames_in_flight: usize,
    /// Frames a host engine (cpu-simd) processes side by side, one thread each on its pool (1:
    /// one frame at a time spread over all threads). More lanes help where one frame's stages
    /// stop scaling with threads (CSR); each lane holds a raw frame, a converted frame and an
    /// image. `remora bench jungfrau --lanes N` measures it.
    #[serde(default = "one")]
    pub frame_lanes: usize,
}

fn one() -> usize {
    1
}

fn default_in_flight() -> usize {
    3
}

fn yes() -> bool {
    true
}
fn default_veto_kev() -> f32 {
    50.0
}
fn default_veto_pixels() -> u64 {
    10
}
fn default_sparse_kev() -> f32 {
    6.0
}
fn default_window() -> u16 {
    128
}
fn default_bins() -> usize {
    1000
}
fn default_unit() -> String {
    "q_nm^-1".into()
}

impl Default for PipelineCfg {
    fn default() -> Self {
        PipelineCfg {
            process: true,
            engine: None,
            threads: 0,
            veto_pixel_kev: default_veto_kev(),
            veto_min_pixels: default_veto_pixels(),
            sparse_kev: default_sparse_kev(),
            pedestal_window: default_window(),
            integrate: true,
            bins: default_bins(),
            unit: default_unit(),
            slow_ms: 0,
            frames_in_flight: default_in_flight(),
            frame_lanes: 1,
        }
    }
}

/// `[output]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutputCfg {
    /// HDF5 file (NeXus); none: nothing written. With several receivers, receiver `i` writes
    /// `<stem>_r<i>.h5` and this file is the run's master, which joins theirs with virtual
    /// datasets ([`crate::writer::master`]).
    pub file: Option<PathBuf>,
    /// Also write the converted, assembled images.
    #[serde(default)]
    pub images: bool,
    /// Also keep every frame's raw words as received (`/entry/raw/data`, what an `hdf5` source
    /// replays with `source.dataset = "/entry/raw/data"`).
    #[serde(default)]
    pub raw: bool,
    /// Frames the writer may fall behind before it drops (counted, never stalls the receiver).
    #[serde(default = "default_queue")]
    pub queue: usize,
}

fn default_queue() -> usize {
    256
}

impl Default for OutputCfg {
    fn default() -> Self {
        OutputCfg {
            file: None,
            images: false,
            raw: false,
            queue: default_queue(),
        }
    }
}

/// The dotted key assigned on line `line` (1-based), with its table: `transport.kind`.
fn key_at(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let l = lines.get(line.checked_sub(1)?)?;
    let key = l.split_once('=')?.0.trim();
    if key.is_empty() || key.starts_with('[') {
        return None;
    }
    let table = lines[..line - 1]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_string(),
    })
}

impl Config {
    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Config> {
        Self::parse_text(text).map_err(DaqError::Config)
    }

    /// Parses and validates the same schema as JSON; errors name the key
    /// (`acquisition.frames: invalid type: string "x", expected u64`).
    pub fn parse_json(text: &str) -> Result<Config> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let cfg: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let msg = inner.to_string();
            // serde_json appends "at line L column C"; keep it, the key goes first.
            if path == "." || path.is_empty() {
                DaqError::Config(msg)
            } else {
                DaqError::Config(format!("{path}: {msg}"))
            }
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parse and validation errors as one line: `line 3, column 9: unknown field ...`.
    fn parse_text(text: &str) -> std::result::Result<Config, String> {
        let cfg: Config = toml::from_str(text).map_err(|e| {
            let msg = e.message().trim().replace('\n', " ");
            match e.span() {
                Some(span) => {
                    let before = &text[..span.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    match key_at(text, line) {
                        Some(key) => format!("{key} (line {line}, column {col}): {msg}"),
                        None => format!("line {line}, column {col}: {msg}"),
                    }
                }
                None => msg,
            }
        })?;
        cfg.validate().map_err(|e| match e {
            DaqError::Config(m) => m,
            other => other.to_string(),
        })?;
        Ok(cfg)
    }

    /// Reads, parses and validates a file; relative paths inside are taken from its folder.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|source| DaqError::Io {
            path: path.to_owned(),
            source,
        })?;
        let mut cfg = Config::parse_text(&text)
            .map_err(|e| DaqError::Config(format!("{}: {e}", path.display())))?;
        if let Some(dir) = path.parent() {
            cfg.rebase(dir);
        }
        Ok(cfg)
    }

    /// Makes relative file paths relative to `dir`.
    pub fn rebase(&mut self, dir: &Path) {
        let fix = |p: &mut Option<PathBuf>| {
            if let Some(q) = p {
                if q.is_relative() {
                    *q = dir.join(&*q);
                }
            }
        };
        fix(&mut self.detector.geometry);
        fix(&mut self.detector.poni);
        fix(&mut self.detector.gain);
        fix(&mut self.detector.pedestal);
        fix(&mut self.source.path);
        fix(&mut self.output.file);
    }

    /// Checks every value; the message names the key.
    pub fn validate(&self) -> Result<()> {
        let d = &self.detector;
        if !(1..=32).contains(&d.modules) {
            return Err(err("detector.modules", format!("{} (1..=32)", d.modules)));
        }
        if d.gain.is_some() != d.pedestal.is_some() {
            return Err(err(
                "detector.gain",
                "gain and pedestal files go together (or neither: synthetic calibration)",
            ));
        }
        if !(d.photon_energy_kev.is_finite() && d.photon_energy_kev > 0.0) {
            return Err(err("detector.photon_energy_kev", "must be positive"));
        }
        let s = &self.source;
        if s.kind != SourceKind::Synthetic && s.path.is_none() {
            return Err(err("source.path", "needed for raw, npy and hdf5 sources"));
        }
        if !(1..=4096).contains(&s.distinct) {
            return Err(err("source.distinct", format!("{} (1..=4096)", s.distinct)));
        }
        let a = &self.acquisition;
        if a.frames == 0 || a.frames > 1 << 40 {
            return Err(err(
                "acquisition.frames",
                "must be at least 1 (and below 2^40)",
            ));
        }
        if !(a.rate_hz.is_finite() && a.rate_hz >= 0.0) {
            return Err(err(
                "acquisition.rate_hz",
                "must be 0 (as fast as possible) or positive",
            ));
        }
        if !(1..=4096).contains(&a.bunch) {
            return Err(err("acquisition.bunch", format!("{} (1..=4096)", a.bunch)));
        }
        if a.dark_every > 0 && a.dark_phase >= a.dark_every {
            return Err(err("acquisition.dark_phase", "must be below dark_every"));
        }
        if a.deadline_ms == 0 || a.deadline_ms > 600_000 {
            return Err(err("acquisition.deadline_ms", "1..=600000"));
        }
        if a.connect_timeout_ms == 0 || a.connect_timeout_ms > 3_600_000 {
            return Err(err("acquisition.connect_timeout_ms", "1..=3600000"));
        }
        let t = &self.transport;
        if !(256..=4096).contains(&t.mtu) || !t.mtu.is_power_of_two() {
            return Err(err(
                "transport.mtu",
                format!("{} (256, 512, 1024, 2048 or 4096)", t.mtu),
            ));
        }
        if !(0.0..1.0).contains(&t.loss) {
            return Err(err("transport.loss", "a fraction in [0, 1)"));
        }
        if let Some(r) = &self.emulator.roi {
            r.validate().map_err(|e| err("emulator.roi", e))?;
        }
        if self.receivers.is_empty() || self.receivers.len() > 16 {
            return Err(err("receivers", "1 to 16 receivers"));
        }
        for (i, r) in self.receivers.iter().enumerate() {
            r.listen.parse::<SocketAddr>().map_err(|e| {
                err(
                    &format!("receivers[{i}].listen"),
                    format!("{:?}: {e}", r.listen),
                )
            })?;
            match (&r.roi, self.emulator.fanout) {
                (Some(roi), Fanout::Roi) => roi
                    .validate()
                    .map_err(|e| err(&format!("receivers[{i}].roi"), e))?,
                (None, Fanout::Roi) => {
                    return Err(err(
                        &format!("receivers[{i}].roi"),
                        "fanout = \"roi\" needs a region of interest per receiver",
                    ))
                }
                (Some(_), Fanout::Time) => {
                    return Err(err(
                        &format!("receivers[{i}].roi"),
                        "only with emulator.fanout = \"roi\" (use emulator.roi for every receiver)",
                    ))
                }
                (None, Fanout::Time) => {}
            }
        }
        if t.kind == TransportKind::Native
            && self.receiver.overrun == crate::flow::OverrunPolicy::Pause
        {
            return Err(err(
                "receiver.overrun",
                "\"pause\" needs a fabric transport (udp or shm): the native UDP stream is a \
                 detector's; \"mask\" is what a real detector gets, and \"backpressure\" makes \
                 the emulated one wait for the receiver's grants",
            ));
        }
        crate::flow::ring_for(self, 0).map_err(|e| err("receiver.buffer", e))?;
        if t.kind == TransportKind::Native {
            if self.receivers.len() > 1 {
                return Err(err("receivers", "the native UDP stream feeds one receiver"));
            }
            if self.emulator.roi.is_some() {
                return Err(err(
                    "emulator.roi",
                    "the native UDP stream sends whole modules",
                ));
            }
        }
        let p = &self.pipeline;
        if let Some(e) = &p.engine {
            crate::engine::EngineKind::parse(e).map_err(|e| err("pipeline.engine", e))?;
        }
        if p.threads > 1024 {
            return Err(err("pipeline.threads", "at most 1024"));
        }
        if !p.veto_pixel_kev.is_finite() {
            return Err(err("pipeline.veto_pixel_kev", "must be a number"));
        }
        if !p.sparse_kev.is_finite() {
            return Err(err("pipeline.sparse_kev", "must be a number"));
        }
        if p.pedestal_window == 0 {
            return Err(err("pipeline.pedestal_window", "at least 1 frame"));
        }
        if !(1..=100_000).contains(&p.bins) {
            return Err(err("pipeline.bins", format!("{} (1..=100000)", p.bins)));
        }
        crate::azint::Unit::parse(&p.unit).map_err(|e| err("pipeline.unit", e))?;
        if p.slow_ms > 60_000 {
            return Err(err("pipeline.slow_ms", "at most 60000"));
        }
        if !(1..=64).contains(&p.frame_lanes) {
            return Err(err(
                "pipeline.frame_lanes",
                format!("{} (1..=64)", p.frame_lanes),
            ));
        }
        if !(1..=64).contains(&p.frames_in_flight) {
            return Err(err(
                "pipeline.frames_in_flight",
                format!("{} (1..=64)", p.frames_in_flight),
            ));
        }
        if self.output.images && !p.integrate {
            return Err(err(
                "output.images",
                "the assembled images come from the integration stage (pipeline.integrate = true)",
            ));
        }
        if !(1..=1 << 20).contains(&self.output.queue) {
            return Err(err("output.queue", "1..=1048576 frames"));
        }
        self.check_access()
    }

    /// The input files the configuration names, with their keys.
    pub fn inputs(&self) -> [(&'static str, Option<&Path>); 5] {
        let d = &self.detector;
        [
            ("detector.gain", d.gain.as_deref()),
            ("detector.pedestal", d.pedestal.as_deref()),
            ("detector.geometry", d.geometry.as_deref()),
            ("detector.poni", d.poni.as_deref()),
            (
                "source.path",
                match self.source.kind {
                    SourceKind::Synthetic => None,
                    _ => self.source.path.as_deref(),
                },
            ),
        ]
    }

    /// Checks the configuration against its [`Access`] ([`Config::validate`] does too): every
    /// file path against the file rule, and the memory its values imply against the budget.
    /// The message names the key.
    pub fn check_access(&self) -> Result<()> {
        let files = &self.access.files;
        for (key, path) in self.inputs() {
            if let Some(p) = path {
                files.check_input(key, p)?;
            }
        }
        for i in 0..self.receivers.len() {
            if let Some(p) = self.output_of(i) {
                files.check_output("output.file", &p)?;
            }
        }
        if let Some(p) = self.master_output() {
            files.check_output("output.file", &p)?;
        }
        if let Some(budget) = self.access.memory {
            Estimate::of(self).check(budget)?;
        }
        Ok(())
    }

    /// The region of interest receiver `i` gets from every module.
    pub fn roi_of(&self, i: usize) -> Roi {
        match self.emulator.fanout {
            Fanout::Roi => self.receivers[i].roi.unwrap_or(Roi::FULL),
            Fanout::Time => self.emulator.roi.unwrap_or(Roi::FULL),
        }
    }

    /// Detector frames receiver `i` gets.
    pub fn frames_of(&self, i: usize) -> u64 {
        match self.emulator.fanout {
            Fanout::Roi => self.acquisition.frames,
            Fanout::Time => {
                let n = self.receivers.len() as u64;
                self.acquisition.frames / n + u64::from((i as u64) < self.acquisition.frames % n)
            }
        }
    }

    /// The detector frame number of receiver `i`'s frame `local`.
    pub fn global_frame(&self, i: usize, local: u64) -> u64 {
        match self.emulator.fanout {
            Fanout::Roi => local,
            Fanout::Time => local * self.receivers.len() as u64 + i as u64,
        }
    }

    /// The output file of receiver `i`.
    pub fn output_of(&self, i: usize) -> Option<PathBuf> {
        let f = self.output.file.as_ref()?;
        if self.receivers.len() == 1 {
            return Some(f.clone());
        }
        let stem = f
            .file_stem()
            .map_or("out".into(), |s| s.to_string_lossy().into_owned());
        Some(f.with_file_name(format!("{stem}_r{i}.h5")))
    }

    /// The run's master file, which joins the receivers' files: `output.file` itself when
    /// there are several receivers (with one, that receiver's file is the run's file).
    pub fn master_output(&self) -> Option<PathBuf> {
        (self.receivers.len() > 1)
            .then(|| self.output.file.clone())
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "[detector]\nmodules = 8\n[acquisition]\nframes = 100\n";

    fn bad(extra: &str) -> String {
        Config::parse(&format!("{MIN}{extra}"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_minimal_file_gets_the_defaults() {
        let c = Config::parse(MIN).unwrap();
        assert_eq!(c.receivers.len(), 1);
        assert_eq!(c.transport.kind, TransportKind::Udp);
        assert_eq!(c.roi_of(0), Roi::FULL);
        assert_eq!(c.frames_of(0), 100);
    }

    #[test]
    fn every_bad_value_names_its_key() {
        for (extra, key) in [
            ("[transport]\nmtu = 1000\n", "transport.mtu"),
            ("[transport]\nloss = 1.5\n", "transport.loss"),
            (
                "[transport]\nprogress = \"sometimes\"\n",
                "transport.progress",
            ),
            ("[pipeline]\nengine = \"cuda-magic\"\n", "pipeline.engine"),
            ("[pipeline]\nunit = \"furlongs\"\n", "pipeline.unit"),
            ("[pipeline]\nbins = 0\n", "pipeline.bins"),
            (
                "[emulator]\nroi = { x = 1000, y = 0, width = 100, height = 1 }\n",
                "emulator.roi",
            ),
            (
                "[[receivers]]\nlisten = \"nowhere\"\n",
                "receivers[0].listen",
            ),
            ("[source]\nkind = \"npy\"\n", "source.path"),
            ("[output]\nqueue = 0\n", "output.queue"),
        ] {
            let e = bad(extra);
            assert!(e.contains(key), "{extra:?} gave {e:?}");
        }
        let e = Config::parse("[detector]\nmodules = 0\n[acquisition]\nframes = 1\n").unwrap_err();
        assert!(e.to_string().contains("detector.modules"), "{e}");
        let e = Config::parse("[detector]\nmodules = 1\n[acquisition]\nframes = 0\n").unwrap_err();
        assert!(e.to_string().contains("acquisition.frames"), "{e}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_refused_with_the_key() {
        let e = bad("[acquisition2]\nx = 1\n");
        assert!(e.contains("acquisition2"), "{e}");
        let e = Config::parse("[detector]\nmodules = \"eight\"\n[acquisition]\nframes = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("modules"), "{e}");
        let e = Config::parse("[detector]\nmodules = 8\n[acquisition]\nfames = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("fames"), "{e}");
    }

    #[test]
    fn time_fanout_deals_frames_round_robin() {
        let c = Config::parse(&format!(
            "{MIN}[[receivers]]\n[[receivers]]\n[[receivers]]\n"
        ))
        .unwrap();
        assert_eq!(
            (c.frames_of(0), c.frames_of(1), c.frames_of(2)),
            (34, 33, 33)
        );
        assert_eq!(c.global_frame(2, 5), 17);
        let f = Config::parse(&format!(
            "{MIN}[output]\nfile = \"x/run.h5\"\n[[receivers]]\n[[receivers]]\n"
        ))
        .unwrap();
        assert_eq!(f.output_of(1).unwrap(), PathBuf::from("x/run_r1.h5"));
    }
}
