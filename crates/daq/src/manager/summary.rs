//! What an acquisition did, summed over its nodes' reports: apart from the manager, which makes
//! it, because the master file that ends every run (`writer::master`) stores it.
use serde::Serialize;

use crate::config::Config;
use crate::emulator::report::EmulatorReport;
use crate::receiver::report::ReceiverReport;

/// What an acquisition did, over all receivers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Transport used.
    pub transport: String,
    /// Modules.
    pub modules: usize,
    /// Receivers.
    pub receivers: usize,
    /// Detector frames sent.
    pub frames_sent: u64,
    /// Frames processed with every module whole (summed over receivers).
    pub frames_complete: u64,
    /// Frames processed with modules masked.
    pub frames_partial: u64,
    /// Frames that were sent and never arrived.
    pub frames_lost: u64,
    /// Frames not sent because the run was stopped early (per receiver with RoI slicing).
    pub frames_not_sent: u64,
    /// Whether the run was stopped before its last frame.
    pub stopped: bool,
    /// Frames lost to overruns.
    pub frames_overrun: u64,
    /// Overrun events.
    pub overruns: u64,
    /// Module parts masked.
    pub modules_lost: u64,
    /// Dark frames.
    pub dark: u64,
    /// Kept frames.
    pub kept: u64,
    /// Rejected frames.
    pub rejected: u64,
    /// Frames the writers dropped.
    pub writer_dropped: u64,
    /// Acquisition time (s): the longest receiver's, first marker to last frame committed.
    pub seconds: f64,
    /// Wall time (s) from the emulator's start to the last receiver's report (includes loading
    /// the dataset and connecting).
    pub wall_seconds: f64,
    /// Frames per second end to end (committed frames / wall time).
    pub e2e_fps: f64,
    /// Raw data rate end to end (GB/s, 1e9 bytes).
    pub e2e_gbps: f64,
    /// The emulator's report.
    pub emulator: EmulatorReport,
    /// Every receiver's report.
    pub receiver_reports: Vec<ReceiverReport>,
    /// With RoI slicing every receiver gets every frame: the frame counts above are summed over
    /// receivers.
    pub counts_per_receiver: bool,
    /// Output files.
    pub files: Vec<String>,
    /// With several receivers: the run's master file, which joins their files.
    pub master: Option<String>,
    /// The overrun policy that applied (`receiver.overrun`).
    pub overrun_policy: String,
    /// Frames each receiver's frame buffer holds (the smallest, with several receivers).
    pub buffer_frames: u64,
    /// Most frames a frame buffer held at once (the fullest receiver's).
    pub buffer_high_water_frames: u64,
    /// What the policy cost the source: seconds it waited for ring credits (`pause` and
    /// `backpressure`).
    pub credit_wait_seconds: f64,
    /// Times a receiver paused the source (`pause`).
    pub pauses: u64,
    /// Which engine the (first) receiver's pipeline runs on and why: measured at start, from
    /// the cache, or configured (`pipeline.engine`).
    pub engine_choice: Option<crate::engine::calibrate::EngineChoice>,
}

impl Summary {
    /// Sums up the nodes' reports.
    pub fn new(
        cfg: &Config,
        emulator: EmulatorReport,
        receivers: Vec<ReceiverReport>,
        wall_seconds: f64,
    ) -> Summary {
        let seconds = receivers.iter().map(|r| r.seconds).fold(0.0, f64::max);
        let mut s = Summary {
            transport: cfg.transport.kind.name().into(),
            modules: cfg.detector.modules,
            receivers: receivers.len(),
            frames_sent: emulator.frames_sent,
            seconds,
            wall_seconds,
            counts_per_receiver: cfg.emulator.fanout == crate::config::Fanout::Roi
                && receivers.len() > 1,
            overrun_policy: cfg.receiver.overrun.name().into(),
            credit_wait_seconds: emulator.credit_wait_seconds,
            buffer_frames: receivers
                .iter()
                .filter_map(|r| r.buffer.map(|b| b.frames))
                .min()
                .unwrap_or(0),
            engine_choice: receivers.iter().find_map(|r| r.engine_choice.clone()),
            ..Default::default()
        };
        let mut bytes = 0u64;
        for r in &receivers {
            s.frames_complete += r.frames_complete;
            s.frames_partial += r.frames_partial;
            s.frames_lost += r.frames_lost;
            s.frames_overrun += r.frames_overrun;
            s.overruns += r.overruns;
            s.modules_lost += r.scheduler.modules_lost;
            s.dark += r.dark;
            s.kept += r.kept;
            s.rejected += r.rejected;
            s.writer_dropped += r.writer_dropped;
            s.pauses += r.flow.pauses;
            s.buffer_high_water_frames = s.buffer_high_water_frames.max(r.buffer_high_water_frames);
            bytes += r.bytes_expected * (r.frames_complete + r.frames_partial)
                / r.frames_expected.max(1);
            if let Some(f) = &r.file {
                s.files.push(f.clone());
            }
        }
        let done = s.frames_complete + s.frames_partial;
        if seconds > 0.0 {
            // With RoI slicing every receiver gets every frame: count detector frames once.
            let frames = match cfg.emulator.fanout {
                crate::config::Fanout::Time => done,
                crate::config::Fanout::Roi => done / receivers.len().max(1) as u64,
            };
            s.e2e_fps = frames as f64 / seconds;
            s.e2e_gbps = bytes as f64 / seconds / 1e9;
        }
        // Receivers count every frame they expected and never saw as lost; those the emulator
        // never sent (a stopped run) are not.
        let configured = cfg.acquisition.frames;
        if emulator.frames_sent < configured {
            s.stopped = true;
            let per = match cfg.emulator.fanout {
                crate::config::Fanout::Time => 1,
                crate::config::Fanout::Roi => receivers.len() as u64,
            };
            s.frames_not_sent = (configured - emulator.frames_sent) * per;
            s.frames_lost = s.frames_lost.saturating_sub(s.frames_not_sent);
        }
        s.emulator = emulator;
        s.receiver_reports = receivers;
        s
    }

    /// A few lines for a terminal.
    pub fn text(&self) -> String {
        let mut t = format!(
            "{} modules over {}, {} receiver(s): {} frames sent, {} complete, {} with modules masked, {} lost, {} lost to {} overrun(s)\n",
            self.modules, self.transport, self.receivers, self.frames_sent, self.frames_complete,
            self.frames_partial, self.frames_lost, self.frames_overrun, self.overruns
        );
        if self.stopped {
            t += &format!(
                "stopped early: {} frame(s) not sent\n",
                self.frames_not_sent
            );
        }
        if self.counts_per_receiver {
            t += "(RoI slicing: every receiver gets every frame, so frames are counted per receiver)\n";
        }
        t += &format!(
            "pipeline: {} dark, {} kept, {} rejected; writer dropped {}\n",
            self.dark, self.kept, self.rejected, self.writer_dropped
        );
        if let Some(c) = &self.engine_choice {
            t += &c.text();
            t += "\n";
        }
        if self.buffer_frames > 0 {
            t += &format!(
                "frame buffer: {} frames, at most {} held; overrun policy {}",
                self.buffer_frames, self.buffer_high_water_frames, self.overrun_policy
            );
            t += &match self.overrun_policy.as_str() {
                "mask" => format!(": {} frame(s) lost to overruns\n", self.frames_overrun),
                "pause" => format!(
                    ": the source paused {} time(s), waited {:.2} s\n",
                    self.pauses, self.credit_wait_seconds
                ),
                _ => format!(
                    ": the source waited {:.2} s for credits\n",
                    self.credit_wait_seconds
                ),
            };
        }
        t += &format!(
            "{:.2} s: {:.1} frames/s, {:.3} GB/s end to end\n",
            self.seconds, self.e2e_fps, self.e2e_gbps
        );
        for f in &self.files {
            t += &format!("wrote {f}\n");
        }
        if let Some(m) = &self.master {
            t += &format!("wrote {m} (the master file: one dataset for the whole run)\n");
        }
        t
    }
}
