//! The tables of the configuration file, each with its defaults.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::ring::Roi;

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
    /// A `.npy` array of little-endian u16 in C order, shape (frames, modules·512, 1024),
    /// (modules·512, 1024) for one frame, or (frames, modules, 512, 1024).
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
