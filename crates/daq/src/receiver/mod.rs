//! The receiver (ROMULU) with its scheduler and processing unit.
//!
//! It registers the ring ([`crate::ring`]) and publishes it (address, key, layout) to each
//! module's transmitter at connection setup. Its one receive loop (`ingest`) runs whatever
//! brings frames in: the fabric ingest (`fabric`) drains the queue pairs' completions (the
//! modules' start and end markers), feeds the [`crate::scheduler::Scheduler`] and hands each
//! global event (a stack) to the processing thread; the native ingest
//! ([`crate::native::ingest`]) reassembles the detector's packets into frame slots. The loop
//! commits results. A frame's result is kept only
//! if, once the completion queues have been drained *after* the frame was processed, no newer
//! stack has written into its half (markers travel in order with the data, so this is exact
//! unless a start marker itself is lost); a dark frame, which changes the pedestal, is copied out
//! and checked *before* it is used. The processing thread runs the pipeline on the frames where
//! they landed, with the modules that did not arrive whole overwritten by the
//! JUNGFRAU error word (flagged, never converted: masked, never stale). Results go to the writer
//! behind a bounded queue; a slow disk shows as writer drops, never as a stalled receiver.
//!
//! `processing` holds the processing threads' shared parts (frames in flight, results) and the
//! fabric's scheduler books; this file the setup, the report and the commit of results.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use remora_fabric::{Listener, QpOptions};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

use crate::access::budget::writer_queue_bytes;
use crate::calib::PedestalMaps;
use crate::config::Config;
use crate::engine::calibrate::{self, EngineChoice};
use crate::flow::BufferChoice;
use crate::model::MODULE_PIXELS;
use crate::native::ingest::NativeIngest;
use crate::pipeline::{Outcome, Pipeline};
use crate::ring::RingLayout;
use crate::setup::Setup;
use crate::tap::Tap;
use crate::writer::{FrameKind, FrameRecord, WriterThread};
use crate::{DaqError, Result};

mod fabric;
pub(crate) mod ingest;
pub(crate) mod processing;
pub(crate) mod report;

pub use report::{FrameResult, Progress, ReceiverReport};

/// What a controller hands a receiver beyond its configuration.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    /// Shared with the controller: stop, preview, pedestal.
    pub tap: Option<Arc<Tap>>,
    /// A pedestal measured by an earlier dark run, in place of the calibration's, with where it
    /// came from (written into the file's calibration source).
    pub pedestal: Option<(PedestalMaps, String)>,
    /// Average the pedestal from nothing (a dark run) instead of refining the calibration's.
    pub fresh_pedestal: bool,
}

/// A bound receiver, ready for its modules.
pub struct Receiver {
    cfg: Config,
    index: usize,
    ingest: IngestKind,
    ring: RingLayout,
    buffer: Option<BufferChoice>,
    setup: Setup,
    pipeline: Pipeline,
    engine_choice: EngineChoice,
    tap: Option<Arc<Tap>>,
}

/// Where frames come in.
enum IngestKind {
    /// A registered ring the modules WRITE into.
    Fabric {
        listener: Listener,
        region: Arc<Region>,
        pd: Arc<Pd>,
    },
    /// The detector's own UDP packets, reassembled here.
    Native(crate::native::ingest::Sockets),
}

impl Receiver {
    /// Registers the ring, loads the calibration and binds the control address.
    pub fn bind(cfg: &Config, index: usize) -> Result<Receiver> {
        Self::bind_with(cfg, index, Hooks::default())
    }

    /// [`Receiver::bind`] with a controller's [`Hooks`].
    pub fn bind_with(cfg: &Config, index: usize, hooks: Hooks) -> Result<Receiver> {
        let mut setup = Setup::new(cfg, index)?;
        if let Some((maps, source)) = hooks.pedestal {
            if maps.detector() != setup.calibration.detector() {
                return Err(DaqError::Config(format!(
                    "the pedestal from {source} is for {} modules, detector.modules is {}",
                    maps.detector().modules(),
                    cfg.detector.modules
                )));
            }
            setup.calibration.pedestal = maps;
            setup.calibration_source =
                format!("{}; pedestal from {source}", setup.calibration_source);
        }
        let tap = hooks.tap;
        // Converted frames and images come back from a device engine for every frame only when
        // the writer keeps images; the live view's preview asks for the frames it takes, a few
        // a second, as it submits them (`Pipeline::submit_with_pixels`).
        let host_pixels = cfg.output.images;
        // Built (and, with no engine configured, the engine chosen by measuring) before the
        // control address opens: the integration matrix takes a while, and the modules start
        // sending as soon as they are connected.
        let (mut pipeline, engine_choice) =
            setup.pipeline_chosen(cfg, host_pixels, &calibrate::Options::from_env())?;
        tracing::info!(receiver = index, "{}", engine_choice.text());
        if hooks.fresh_pedestal {
            pipeline.restart_pedestal()?;
        }
        if let Some(t) = &tap {
            t.set_engine_choice(index, &engine_choice);
        }
        let listen: SocketAddr = cfg.receivers[index]
            .listen
            .parse()
            .map_err(|e| DaqError::Config(format!("receivers[{index}].listen: {e}")))?;
        let (ring, buffer) = crate::flow::ring_for(cfg, index)?;
        if cfg.transport.kind == crate::config::TransportKind::Native {
            let sockets = crate::native::ingest::Sockets::bind(listen, cfg.detector.modules)?;
            return Ok(Receiver {
                cfg: cfg.clone(),
                index,
                ingest: IngestKind::Native(sockets),
                ring,
                buffer: Some(buffer),
                setup,
                pipeline,
                engine_choice,
                tap,
            });
        }
        let pd = Arc::new(Pd::new());
        let buf = Buffer::memfd("remora-ring", ring.bytes())
            .map_err(|e| DaqError::Acquisition(format!("ring of {} bytes: {e}", ring.bytes())))?;
        let region = pd
            .register(buf, Access::ALL, Mode::OnDemand)
            .map_err(|e| DaqError::Acquisition(format!("registering the ring: {e}")))?;
        region
            .page_in_range(0, region.len())
            .map_err(|e| DaqError::Acquisition(format!("paging in the ring: {e}")))?;
        // The receiving side injects no faults; the emulator's transmit path does.
        let opts = QpOptions {
            faults: None,
            progress: cfg.transport.progress.fabric(),
            ..crate::link::qp_options(cfg, 0, index)
        };
        let listener = Listener::bind(listen, pd.clone(), opts).map_err(|e| {
            DaqError::Acquisition(format!("receivers[{index}].listen {listen}: {e}"))
        })?;
        Ok(Receiver {
            cfg: cfg.clone(),
            index,
            ingest: IngestKind::Fabric {
                listener,
                region,
                pd,
            },
            ring,
            buffer: Some(buffer),
            setup,
            pipeline,
            engine_choice,
            tap,
        })
    }

    /// The frame buffer this receiver registered (fabric transports), for the start-up line.
    pub fn buffer(&self) -> Option<BufferChoice> {
        self.buffer
    }

    /// Which engine the pipeline runs on and why.
    pub fn engine_choice(&self) -> &EngineChoice {
        &self.engine_choice
    }

    /// The control address emulators connect to.
    pub fn local_addr(&self) -> SocketAddr {
        match &self.ingest {
            IngestKind::Fabric { listener, .. } => listener.local_addr(),
            IngestKind::Native(s) => s.local_addr(),
        }
    }

    /// Accepts the modules (queue pairs, or the detector's control connection), then runs the
    /// acquisition to its end.
    pub fn run(
        self,
        on_frame: Option<&mut dyn FnMut(&FrameResult)>,
        progress: &dyn Fn(&Progress),
    ) -> Result<ReceiverReport> {
        let writer = self.writer()?;
        let mut rep = self.report();
        let tap = self.tap.clone();
        let sinks = ingest::Sinks {
            writer: writer.as_ref(),
            on_frame,
            progress,
            tap: tap.as_deref(),
            deadline: Duration::from_millis(self.cfg.acquisition.deadline_ms),
        };
        match self.ingest {
            IngestKind::Native(_) => {
                let Receiver {
                    cfg,
                    index,
                    ingest: IngestKind::Native(sockets),
                    pipeline,
                    tap,
                    ..
                } = self
                else {
                    unreachable!("matched above")
                };
                let (native, rx) = NativeIngest::start(&cfg, index, sockets, pipeline, tap)?;
                ingest::run(native, &rx, &mut rep, sinks)?;
            }
            IngestKind::Fabric { .. } => {
                let (fabric, rx) = fabric::FabricIngest::start(self)?;
                ingest::run(fabric, &rx, &mut rep, sinks)?;
            }
        }
        finish(rep, writer, progress)
    }

    /// The report's fields known before the first frame.
    fn report(&self) -> ReceiverReport {
        let cfg = &self.cfg;
        let modules = cfg.detector.modules;
        let native = matches!(self.ingest, IngestKind::Native(_));
        let (frames, pixels) = if native {
            (cfg.acquisition.frames, MODULE_PIXELS)
        } else {
            let roi = cfg.roi_of(self.index);
            (cfg.frames_of(self.index), roi.width * roi.height)
        };
        let i = self.pipeline.engine().info();
        ReceiverReport {
            receiver: self.index,
            transport: cfg.transport.kind.name().into(),
            modules,
            frames_expected: frames,
            bytes_expected: frames * (pixels * 2 * modules) as u64,
            engine: format!("{} ({} threads, {})", i.name, i.threads, i.simd),
            engine_choice: Some(self.engine_choice.clone()),
            file: cfg.output_of(self.index).map(|p| p.display().to_string()),
            buffer: self.buffer,
            overrun_policy: cfg.receiver.overrun.name().into(),
            ..Default::default()
        }
    }

    pub(crate) fn writer(&self) -> Result<Option<WriterThread>> {
        let Some(path) = self.cfg.output_of(self.index) else {
            return Ok(None);
        };
        let info = crate::output::run_info(&self.cfg, &self.setup, self.pipeline.matrix())?;
        // Beneath the data directory when confined: created there first, then handed to HDF5
        // by its descriptor's name, which it opens before `out` closes.
        let out = self.cfg.access.files.create("output.file", &path)?;
        let l = &self.setup.layout;
        let max_bytes = writer_queue_bytes(&self.cfg, (l.rows * l.cols) as u64);
        WriterThread::spawn_bounded(out.path(), info, self.cfg.output.queue, max_bytes).map(Some)
    }
}

/// The last progress report, then the writer's summary and close: how every receiver ends.
pub(crate) fn finish(
    mut rep: ReceiverReport,
    writer: Option<WriterThread>,
    progress: &dyn Fn(&Progress),
) -> Result<ReceiverReport> {
    progress(&Progress {
        frames_expected: rep.frames_expected,
        frames_done: rep.frames_complete + rep.frames_partial,
        overruns: rep.overruns,
        kept: rep.kept,
        buffered: 0,
    });
    if let Some(w) = writer {
        let summary = serde_json::to_string(&rep).unwrap_or_default();
        let ws = w.finish(&summary)?;
        rep.writer_frames = ws.frames;
        rep.writer_dropped = ws.dropped;
    }
    Ok(rep)
}

/// Counts a committed frame, shows it to `on_frame`, then moves its results into the writer
/// (nothing is copied on the way to the file).
pub(crate) fn commit(
    rep: &mut ReceiverReport,
    fr: FrameResult,
    writer: Option<&WriterThread>,
    on_frame: &mut Option<&mut dyn FnMut(&FrameResult)>,
) {
    if fr.lost_modules == 0 {
        rep.frames_complete += 1;
    } else {
        rep.frames_partial += 1;
    }
    let (kind, spots) = match &fr.outcome {
        None => (FrameKind::Unprocessed, 0),
        Some(Outcome::Dark) => {
            rep.dark += 1;
            (FrameKind::Dark, 0)
        }
        Some(Outcome::Rejected(s)) => {
            rep.rejected += 1;
            rep.spots_total += s.above;
            (FrameKind::Rejected, s.above)
        }
        Some(Outcome::Kept { stats, sparse, .. }) => {
            rep.kept += 1;
            rep.spots_total += stats.above;
            rep.csr_entries += sparse.nnz() as u64;
            (FrameKind::Kept, stats.above)
        }
    };
    if let Some(f) = on_frame.as_mut() {
        f(&fr);
    }
    let Some(w) = writer else { return };
    let FrameResult {
        frame,
        lost_modules,
        outcome,
        image,
        raw,
        ..
    } = fr;
    let (sparse, profile) = match outcome {
        Some(Outcome::Kept {
            sparse, profile, ..
        }) => (Some(sparse), profile.map(|p| p.intensity)),
        _ => (None, None),
    };
    w.push(FrameRecord {
        frame,
        kind,
        spots,
        lost_modules,
        sparse,
        profile,
        image,
    });
    if let Some(raw) = raw {
        w.push_raw(frame, raw);
    }
}
