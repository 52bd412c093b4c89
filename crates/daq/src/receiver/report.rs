//! What a receiver reports: each committed frame, its progress while it runs, and its report
//! at the end.
use serde::Serialize;

use crate::pipeline::Outcome;
use crate::scheduler::SchedStats;

/// One processed frame, as the receiver commits it.
#[derive(Debug, Clone)]
pub struct FrameResult {
    /// Detector frame number.
    pub frame: u64,
    /// Modules masked because they did not arrive whole.
    pub lost_modules: u64,
    /// Native mode: per module, a bit per packet that was lost and whose 4 rows were masked
    /// (empty in fabric mode, where a module is masked whole).
    pub missing_packets: Vec<u128>,
    /// What the pipeline made of it (`None` when processing is off).
    pub outcome: Option<Outcome>,
    /// The converted, assembled image of a kept frame, when `output.images` asks for it.
    pub image: Option<Vec<f32>>,
    /// The frame's raw words as received (lost modules as the error word), when `output.raw`
    /// asks for them.
    pub raw: Option<Vec<u16>>,
}

/// Progress while running.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize)]
pub struct Progress {
    /// Frames expected by this receiver.
    pub frames_expected: u64,
    /// Frames committed so far.
    pub frames_done: u64,
    /// Overruns so far.
    pub overruns: u64,
    /// Frames kept so far.
    pub kept: u64,
    /// Frames the frame buffer holds now (arrived or arriving, not yet processed).
    #[serde(default)]
    pub buffered: u64,
}

/// What a receiver did.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct ReceiverReport {
    /// Receiver index.
    pub receiver: usize,
    /// Transport.
    pub transport: String,
    /// Modules.
    pub modules: usize,
    /// Frames this receiver should get.
    pub frames_expected: u64,
    /// Frames processed with every module whole.
    pub frames_complete: u64,
    /// Frames processed with modules masked.
    pub frames_partial: u64,
    /// Frames processed but discarded, or dropped, because a newer stack overwrote them or
    /// would have before they could be processed.
    pub frames_overrun: u64,
    /// Frames that never arrived.
    pub frames_lost: u64,
    /// Dark frames (pedestal updates).
    pub dark: u64,
    /// Frames kept by the veto.
    pub kept: u64,
    /// Frames rejected by the veto.
    pub rejected: u64,
    /// Overrun events.
    pub overruns: u64,
    /// Sum of the veto counts of converted frames (a checksum of the run's results).
    pub spots_total: u64,
    /// Sum of the CSR entries of kept frames.
    pub csr_entries: u64,
    /// Scheduler counters.
    pub scheduler: SchedStats,
    /// Packets the fabric saw out of sequence (losses).
    pub packets_out_of_sequence: u64,
    /// Bytes of frame data expected to land (RoI of every module of every frame).
    pub bytes_expected: u64,
    /// Frames the writer dropped (queue full).
    pub writer_dropped: u64,
    /// Frames written.
    pub writer_frames: u64,
    /// Output file.
    pub file: Option<String>,
    /// Engine that ran.
    pub engine: String,
    /// Which engine was chosen and why (measured, cached or configured).
    #[serde(default)]
    pub engine_choice: Option<crate::engine::calibrate::EngineChoice>,
    /// Seconds from the first marker to the last commit.
    pub seconds: f64,
    /// Seconds spent in the pipeline.
    pub pipeline_seconds: f64,
    /// Native mode: reassembly counters.
    pub native: Option<crate::native::ReassemblyStats>,
    /// Native mode: datagrams that are not JUNGFRAU packets of this run.
    pub native_malformed: u64,
    /// Native mode: packets dropped because their slot was still being processed.
    pub overrun_packets: u64,
    /// The frame buffer (fabric transports): its size and how it was chosen.
    pub buffer: Option<crate::flow::BufferChoice>,
    /// Most frames the frame buffer held at once (stacks held × frames per stack).
    pub buffer_high_water_frames: u64,
    /// The overrun policy that applied (`mask`, `pause`, `backpressure`).
    pub overrun_policy: String,
    /// What flow control cost on the receiver's side (credit writes, pauses).
    pub flow: crate::flow::FlowStats,
}
