//! A run as it happens: counters fed by the receivers' frame and progress callbacks, rates over
//! the last second, the latest profile. The final figures come from the run's [`Summary`].
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Config, Fanout};
use crate::manager::Summary;
use crate::pipeline::Outcome;
use crate::receiver::{FrameResult, Progress};

use super::status::{Counters, ModuleStatus, ProfileOut, Rates, ReceiverStatus};

/// Counters of one run.
#[derive(Debug)]
pub struct LiveRun {
    started: Instant,
    ended: Option<Instant>,
    bytes_per_frame: f64,
    receivers_per_frame: u64,
    pub(crate) frames_expected: u64,
    pub(crate) counters: Counters,
    pub(crate) receivers: Vec<ReceiverStatus>,
    pub(crate) modules: Vec<ModuleStatus>,
    pub(crate) profile: Option<Arc<ProfileOut>>,
    samples: VecDeque<(Instant, u64)>,
    final_rates: Option<Rates>,
}

impl LiveRun {
    /// A run of `cfg` starting now.
    pub fn new(cfg: &Config) -> LiveRun {
        let n = cfg.receivers.len();
        let modules = cfg.detector.modules;
        // Raw bytes of one detector frame, over all receivers' regions of interest.
        let roi_bytes = |i: usize| {
            let r = cfg.roi_of(i);
            (r.width * r.height * 2 * modules) as f64
        };
        let (bytes_per_frame, receivers_per_frame) = match cfg.emulator.fanout {
            Fanout::Time => (roi_bytes(0), 1),
            Fanout::Roi => ((0..n).map(roi_bytes).sum(), n as u64),
        };
        LiveRun {
            started: Instant::now(),
            ended: None,
            bytes_per_frame,
            receivers_per_frame,
            frames_expected: (0..n).map(|i| cfg.frames_of(i)).sum(),
            counters: Counters::default(),
            receivers: (0..n)
                .map(|i| ReceiverStatus {
                    index: i,
                    frames_expected: cfg.frames_of(i),
                    ..Default::default()
                })
                .collect(),
            modules: (0..modules)
                .map(|i| ModuleStatus { index: i, lost: 0 })
                .collect(),
            profile: None,
            samples: VecDeque::new(),
            final_rates: None,
        }
    }

    /// A committed frame.
    pub fn on_frame(&mut self, receiver: usize, fr: &FrameResult) {
        let c = &mut self.counters;
        if fr.lost_modules == 0 {
            c.frames_complete += 1;
        } else {
            c.frames_partial += 1;
            c.modules_lost += u64::from(fr.lost_modules.count_ones());
            for (m, st) in self.modules.iter_mut().enumerate().take(64) {
                st.lost += fr.lost_modules >> m & 1;
            }
        }
        match &fr.outcome {
            Some(Outcome::Dark) => c.dark += 1,
            Some(Outcome::Rejected(_)) => c.rejected += 1,
            Some(Outcome::Kept { profile, .. }) => {
                c.kept += 1;
                if let Some(p) = profile {
                    self.profile = Some(Arc::new(ProfileOut {
                        frame: fr.frame,
                        title: format!("frame {} (receiver {receiver})", fr.frame),
                        unit_x: p.unit.name().into(),
                        x: p.radial.clone(),
                        y: p.intensity
                            .iter()
                            .map(|&v| v.is_finite().then_some(v))
                            .collect(),
                    }));
                }
            }
            None => {}
        }
        if let Some(r) = self.receivers.get_mut(receiver) {
            r.frames_done += 1;
            if matches!(fr.outcome, Some(Outcome::Kept { .. })) {
                r.kept += 1;
            }
        }
    }

    /// A receiver's periodic progress (overruns are only known there).
    pub fn on_progress(&mut self, receiver: usize, p: &Progress) {
        if let Some(r) = self.receivers.get_mut(receiver) {
            r.overruns = p.overruns;
            r.buffered = p.buffered;
        }
        self.counters.overruns = self.receivers.iter().map(|r| r.overruns).sum();
    }

    /// Frames the emulator has sent so far.
    pub fn on_sent(&mut self, frames: u64) {
        self.counters.frames_sent = self.counters.frames_sent.max(frames);
    }

    fn done(&self) -> u64 {
        self.counters.frames_complete + self.counters.frames_partial
    }

    /// Records a sample for the rates (called a few times a second).
    pub fn sample(&mut self, now: Instant) {
        let done = self.done();
        self.samples.push_back((now, done));
        while self
            .samples
            .front()
            .is_some_and(|&(t, _)| now.duration_since(t) > Duration::from_secs(3))
        {
            self.samples.pop_front();
        }
    }

    /// Rates over about the last second (the final average once the run ended).
    pub fn rates(&self) -> Rates {
        if let Some(r) = self.final_rates {
            return r;
        }
        let Some(&(t1, d1)) = self.samples.back() else {
            return Rates::default();
        };
        let Some(&(t0, d0)) = self
            .samples
            .iter()
            .find(|&&(t, _)| t1.duration_since(t) <= Duration::from_millis(1200))
        else {
            return Rates::default();
        };
        let dt = t1.duration_since(t0).as_secs_f64();
        if dt < 0.2 {
            return Rates::default();
        }
        let fps = (d1 - d0) as f64 / self.receivers_per_frame as f64 / dt;
        Rates {
            fps,
            gbps: fps * self.bytes_per_frame / 1e9,
        }
    }

    /// Seconds since the start (to the end once ended).
    pub fn elapsed(&self) -> f64 {
        self.ended
            .unwrap_or_else(Instant::now)
            .duration_since(self.started)
            .as_secs_f64()
    }

    /// Fraction of the frames committed.
    pub fn progress(&self) -> f64 {
        if self.ended.is_some() {
            return 1.0;
        }
        (self.done() as f64 / self.frames_expected.max(1) as f64).min(1.0)
    }

    /// The run ended: the summary's figures replace the live ones.
    pub fn finish(&mut self, s: Option<&Summary>) {
        self.ended = Some(Instant::now());
        let Some(s) = s else { return };
        let c = &mut self.counters;
        c.frames_sent = s.frames_sent;
        c.frames_complete = s.frames_complete;
        c.frames_partial = s.frames_partial;
        c.frames_lost = s.frames_lost;
        c.frames_overrun = s.frames_overrun;
        c.kept = s.kept;
        c.dark = s.dark;
        c.rejected = s.rejected;
        c.overruns = s.overruns;
        c.modules_lost = s.modules_lost;
        c.writer_dropped = s.writer_dropped;
        for r in &s.receiver_reports {
            if let Some(st) = self.receivers.get_mut(r.receiver) {
                st.frames_done = r.frames_complete + r.frames_partial;
                st.kept = r.kept;
                st.overruns = r.overruns;
            }
        }
        self.final_rates = Some(Rates {
            fps: s.e2e_fps,
            gbps: s.e2e_gbps,
        });
    }
}
