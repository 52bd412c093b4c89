//! The receiver (ROMULU) with its scheduler and processing unit.
//!
//! It registers the ring ([`crate::ring`]) and publishes it (address, key, layout) to each
//! module's transmitter at connection setup. Its receive thread drains the queue pairs'
//! completions (the modules' start and end markers), feeds the [`Scheduler`], hands each global
//! event (a stack) to the processing thread and commits results. A frame's result is kept only
//! if, once the completion queues have been drained *after* the frame was processed, no newer
//! stack has written into its half (markers travel in order with the data, so this is exact
//! unless a start marker itself is lost); a dark frame, which changes the pedestal, is copied out
//! and checked *before* it is used. The processing thread runs the pipeline on the frames where
//! they landed, with the modules that did not arrive whole overwritten by the
//! JUNGFRAU error word (flagged, never converted: masked, never stale). Results go to the writer
//! behind a bounded queue; a slow disk shows as writer drops, never as a stalled receiver.
//!
//! `processing` holds the processing thread and the scheduler books it checks; this file the
//! setup, the receive loop and the report.
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use remora_fabric::{Listener, Qp, QpOptions, RegionInfo};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

use crate::access::budget::writer_queue_bytes;
use crate::calib::PedestalMaps;
use crate::config::Config;
use crate::engine::calibrate::{self, EngineChoice};
use crate::flow::{BufferChoice, CreditTarget};
use crate::pipeline::{Outcome, Pipeline};
use crate::ring::{packets_per_stack, RingLayout};
use crate::scheduler::{Issue, Scheduler};
use crate::setup::Setup;
use crate::tap::Tap;
use crate::writer::{FrameKind, FrameRecord, WriterThread};
use crate::{DaqError, Result};

mod processing;
mod report;

pub use report::{FrameResult, Progress, ReceiverReport};

pub(crate) use processing::{kept_image, leave_pedestal, offer_preview};
use processing::{Books, Msg, Worker};

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
    ingest: Ingest,
    ring: RingLayout,
    buffer: Option<BufferChoice>,
    setup: Setup,
    pipeline: Pipeline,
    engine_choice: EngineChoice,
    tap: Option<Arc<Tap>>,
}

/// Where frames come in.
enum Ingest {
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
        // Converted frames and images come back from a device engine only when something reads
        // them: the writer's image datasets or the live view's preview.
        let host_pixels = cfg.output.images || tap.is_some();
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
                ingest: Ingest::Native(sockets),
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
            ingest: Ingest::Fabric {
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
            Ingest::Fabric { listener, .. } => listener.local_addr(),
            Ingest::Native(s) => s.local_addr(),
        }
    }

    /// Accepts one queue pair per module, then runs the acquisition to its end.
    pub fn run(
        self,
        mut on_frame: Option<&mut dyn FnMut(&FrameResult)>,
        progress: &dyn Fn(&Progress),
    ) -> Result<ReceiverReport> {
        let writer = self.writer()?;
        let (region, pd) = match &self.ingest {
            Ingest::Fabric { region, pd, .. } => (region.clone(), pd.clone()),
            Ingest::Native(_) => {
                let Ingest::Native(sockets) = self.ingest else {
                    unreachable!("matched above")
                };
                return crate::native::ingest::run(
                    &self.cfg,
                    self.index,
                    sockets,
                    self.pipeline,
                    self.engine_choice,
                    self.tap,
                    writer,
                    on_frame,
                    progress,
                );
            }
        };
        let (qps, targets) = self.accept_modules()?;
        let cfg = &self.cfg;
        let policy = cfg.receiver.overrun;
        let mut credits = crate::flow::CreditSender::new(policy, &self.ring, &pd, targets)?;
        let frames = cfg.frames_of(self.index);
        let bunch = self.ring.bunch as u64;
        let stacks = frames.div_ceil(bunch);
        let roi = cfg.roi_of(self.index);
        let mtu = qps[0].mtu();
        let deadline = Duration::from_millis(cfg.acquisition.deadline_ms);
        let books = Arc::new(Mutex::new(Books {
            sched: {
                let s = Scheduler::new(cfg.detector.modules, deadline, self.ring.stacks);
                // A source that waits never overwrites, and its links are reliable; one that
                // does not, past the rate the receiver keeps up with, costs whole stacks rather
                // than wasted work.
                match policy {
                    crate::flow::OverrunPolicy::Mask => s.skipping_doomed(),
                    _ => s.reliable_links(),
                }
            },
            per_frame: (packets_per_stack(&self.ring, &roi, mtu) - 1) / bunch,
            frames,
            bunch,
            qps,
            comps: Vec::with_capacity(256),
            started: None,
        }));
        let (to_worker, worker_rx) = mpsc::sync_channel::<Issue>(2);
        let (worker_tx, from_worker) = mpsc::channel::<Msg>();
        let pipeline = self.pipeline;
        let engine = {
            let i = pipeline.engine().info();
            format!("{} ({} threads, {})", i.name, i.threads, i.simd)
        };
        let tap = self.tap.clone();
        let stopping = || tap.as_ref().is_some_and(|t| t.gate.requested());
        let worker = Worker {
            cfg: cfg.clone(),
            index: self.index,
            ring: self.ring,
            region,
            pipeline,
            books: books.clone(),
            tap: self.tap.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("rpu-{}", self.index))
            .spawn(move || worker.run(worker_rx, worker_tx))
            .map_err(|e| DaqError::Acquisition(format!("starting the processing thread: {e}")))?;

        let mut rep = ReceiverReport {
            receiver: self.index,
            transport: cfg.transport.kind.name().into(),
            modules: cfg.detector.modules,
            frames_expected: frames,
            bytes_expected: frames * (roi.width * roi.height * 2 * cfg.detector.modules) as u64,
            engine,
            engine_choice: Some(self.engine_choice.clone()),
            file: cfg.output_of(self.index).map(|p| p.display().to_string()),
            buffer: self.buffer,
            overrun_policy: policy.name().into(),
            ..Default::default()
        };
        let mut last_commit = Instant::now();
        let mut in_worker = 0usize;
        let mut issued = 0u64;
        let mut closed_at: Option<Instant> = None;
        let mut flushed = false;
        let mut last_progress = Instant::now();
        let mut last_arrival = Instant::now();
        let mut pipeline_seconds = 0.0;
        loop {
            let mut busy = false;
            {
                let mut b = books.lock().expect("books");
                if b.drain(Instant::now()) {
                    busy = true;
                    last_arrival = Instant::now();
                }
                while in_worker < 2 {
                    let Some(issue) = b.sched.poll(Instant::now()) else {
                        break;
                    };
                    if issue.stack >= stacks {
                        // A hostile or misconfigured source: no such stack in this acquisition.
                        b.sched.finish(issue.stack, Instant::now());
                        continue;
                    }
                    in_worker += 1;
                    issued += 1;
                    if to_worker.send(issue).is_err() {
                        break;
                    }
                }
                let mut all_closed = true;
                for m in 0..b.qps.len() {
                    if b.qps[m].is_closed() {
                        b.sched.link_closed(m);
                    } else {
                        all_closed = false;
                    }
                }
                if closed_at.is_none() && all_closed {
                    closed_at = Some(Instant::now());
                }
                // A stopped emulator ends on whole stacks: once what it sent has landed (the
                // closed connection can overtake the last datagrams), nothing more is coming.
                let grace = closed_at.is_some_and(|t| {
                    (stopping() && last_arrival.elapsed() >= Duration::from_millis(200))
                        || t.elapsed() >= deadline.min(Duration::from_secs(2))
                });
                if grace && !flushed {
                    b.sched.flush(Instant::now());
                    flushed = true;
                }
                let all_issued = issued + b.sched.stats().stacks_dropped >= stacks;
                if in_worker == 0 && (all_issued || (flushed && b.sched.in_flight() == 0)) {
                    break;
                }
                let (released, newest) = (b.sched.released(), b.sched.newest());
                credits.update(&b.qps, released, newest);
            }
            while let Ok(msg) = from_worker.try_recv() {
                busy = true;
                match msg {
                    Msg::Frame(fr, secs) => {
                        pipeline_seconds += secs;
                        commit(&mut rep, *fr, writer.as_ref(), &mut on_frame);
                        last_commit = Instant::now();
                    }
                    Msg::Overrun(secs) => {
                        pipeline_seconds += secs;
                        rep.frames_overrun += 1;
                        last_commit = Instant::now();
                    }
                    Msg::StackDone(stack) => {
                        books
                            .lock()
                            .expect("books")
                            .sched
                            .finish(stack, Instant::now());
                        in_worker -= 1;
                    }
                    Msg::Failed(e) => return Err(e),
                }
            }
            if last_progress.elapsed() >= Duration::from_millis(200) {
                last_progress = Instant::now();
                let b = books.lock().expect("books");
                let held = b
                    .sched
                    .newest()
                    .map_or(0, |n| (n + 1).saturating_sub(b.sched.released()));
                progress(&Progress {
                    frames_expected: frames,
                    frames_done: rep.frames_complete + rep.frames_partial,
                    overruns: b.sched.stats().overruns,
                    kept: rep.kept,
                    buffered: held * bunch,
                });
            }
            if !busy {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        drop(to_worker);
        let _ = handle.join();
        let b = books.lock().expect("books");
        let st = b.sched.stats();
        rep.scheduler = st;
        rep.overruns = st.overruns;
        rep.buffer_high_water_frames = st.high_water_stacks * bunch;
        rep.flow = credits.finish();
        rep.frames_overrun += (st.stacks_dropped + st.stacks_skipped) * bunch;
        rep.frames_overrun = rep.frames_overrun.min(frames);
        rep.frames_lost =
            frames.saturating_sub(rep.frames_complete + rep.frames_partial + rep.frames_overrun);
        rep.pipeline_seconds = pipeline_seconds;
        rep.seconds = b.started.map_or(0.0, |t| {
            last_commit.saturating_duration_since(t).as_secs_f64()
        });
        rep.packets_out_of_sequence = b.qps.iter().map(|q| q.stats().engine.out_of_sequence).sum();
        drop(b);
        finish(rep, writer, progress)
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

    /// One queue pair per module, in module order, with where each module wants its ring
    /// credits written (when it asked for them).
    fn accept_modules(&self) -> Result<(Vec<Qp>, Vec<Option<CreditTarget>>)> {
        let modules = self.cfg.detector.modules;
        let Ingest::Fabric {
            listener, region, ..
        } = &self.ingest
        else {
            unreachable!("only the fabric ingest accepts queue pairs")
        };
        let private = crate::link::Announce {
            region: RegionInfo::of(region),
            ring: self.ring,
        }
        .encode();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<(usize, Qp, Option<CreditTarget>)>();
        let listener_addr = self.local_addr();
        std::thread::scope(|sc| {
            let stop2 = stop.clone();
            sc.spawn(move || accept_loop(listener, &private, modules, &stop2, tx));
            let mut qps: Vec<Option<Qp>> = (0..modules).map(|_| None).collect();
            let mut targets: Vec<Option<CreditTarget>> = vec![None; modules];
            let wait = Duration::from_millis(self.cfg.acquisition.connect_timeout_ms);
            let end = Instant::now() + wait;
            let mut got = 0;
            let res = loop {
                if got == modules {
                    break Ok(());
                }
                match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
                    Ok((m, qp, credit)) => {
                        if qps[m].is_none() {
                            got += 1;
                        }
                        qps[m] = Some(qp);
                        targets[m] = credit;
                    }
                    Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                        let missing: Vec<usize> =
                            (0..modules).filter(|&m| qps[m].is_none()).collect();
                        break Err(DaqError::Acquisition(format!(
                            "receiver {}: modules {missing:?} did not connect within {:.1} s \
                             (acquisition.connect_timeout_ms)",
                            self.index,
                            wait.as_secs_f64()
                        )));
                    }
                }
            };
            stop.store(true, Ordering::Relaxed);
            // Wakes the accept loop if it is still waiting.
            let _ = TcpStream::connect_timeout(&listener_addr, Duration::from_secs(1));
            res.map(|()| {
                let qps = qps.into_iter().map(|q| q.expect("all connected")).collect();
                (qps, targets)
            })
        })
    }
}

fn accept_loop(
    listener: &Listener,
    private: &[u8],
    modules: usize,
    stop: &AtomicBool,
    tx: mpsc::Sender<(usize, Qp, Option<CreditTarget>)>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(inc) = listener.incoming() else {
            return;
        };
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let from = inc.peer_addr();
        match inc.establish(private) {
            Ok((qp, hello)) => match crate::link::Hello::decode(&hello, modules) {
                Some(h) => {
                    if tx.send((h.module, qp, h.credit)).is_err() {
                        return;
                    }
                }
                None => {
                    tracing::warn!(%from, "not a module of this detector; connection dropped")
                }
            },
            Err(e) => tracing::warn!(%from, error = %e, "connection setup refused"),
        }
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
