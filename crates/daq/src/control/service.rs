//! The control service without its HTTP face: configuration, start, stop, dark runs, status and
//! previews. Runs go on a thread of their own ([`crate::manager::run_controlled`]: receivers
//! and emulator as threads of this process), so that the service can answer while they run and
//! read previews straight from the receivers' memory.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::access::{Access, Files, MemoryBudget};
use crate::calib::PedestalMaps;
use crate::config::Config;
use crate::manager::{run_controlled, Summary};
use crate::receiver::{FrameResult, Hooks, Progress};
use crate::DaqError;

use super::live::LiveRun;
use super::state::{Conflict, Machine, RunKind, State};
use super::status::{PedestalInfo, PreviewInfo, ProfileOut, Status};
use crate::tap::{Preview, Tap};

/// Why a control request was refused.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The request itself is wrong (HTTP 400): a bad configuration, a bad parameter.
    #[error("{0}")]
    Invalid(String),
    /// The request does not fit the state (HTTP 409).
    #[error(transparent)]
    Conflict(#[from] Conflict),
}

/// How a configuration arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    /// The TOML of `remora daq run`.
    Toml,
    /// The same schema as JSON.
    Json,
}

/// Service settings.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Shortest time between two preview images taken from the pipeline.
    pub preview_every: Duration,
    /// How often a running acquisition's status is republished.
    pub tick: Duration,
    /// What a configuration that arrives as text ([`Service::configure_text`], the HTTP API)
    /// may touch: the files beneath the operator's directories and the memory budget. Default:
    /// no files at all, half of the host's memory.
    pub access: Access,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            preview_every: Duration::from_millis(500),
            tick: Duration::from_millis(250),
            access: Access {
                files: Files::none(),
                memory: Some(MemoryBudget::half_of_host()),
            },
        }
    }
}

/// Called with the new generation on every published change.
type Watcher = Box<dyn Fn(u64) + Send + Sync>;

/// A pedestal measured by a dark run, per receiver.
struct StoredPedestal {
    maps: Vec<Option<PedestalMaps>>,
    modules: usize,
    info: PedestalInfo,
}

#[derive(Default)]
struct Shared {
    machine: Machine,
    config: Option<Config>,
    live: Option<LiveRun>,
    tap: Option<Arc<Tap>>,
    pedestal: Option<StoredPedestal>,
    summary: Option<Summary>,
}

struct Inner {
    opts: ServiceOptions,
    shared: Mutex<Shared>,
    changed: Condvar,
    generation: AtomicU64,
    watchers: Mutex<Vec<Watcher>>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic in a callback must not take the service down with it: the data stay usable.
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self) {
        let g = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        self.changed.notify_all();
        let watchers = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        for w in watchers.iter() {
            w(g);
        }
    }
}

/// The acquisition control service (cheap to clone; clones share one service).
///
/// ```no_run
/// use remora_daq::control::{ConfigFormat, Service};
/// let svc = Service::new(Default::default());
/// svc.configure_text("[detector]\nmodules = 2\n[acquisition]\nframes = 20\n", ConfigFormat::Toml)?;
/// svc.start()?;
/// let st = svc.wait(std::time::Duration::from_secs(60));
/// println!("{:?}: {} kept", st.state, st.counters.kept);
/// # Ok::<(), remora_daq::control::ControlError>(())
/// ```
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

impl Service {
    /// A service with nothing configured; starts its status ticker.
    pub fn new(opts: ServiceOptions) -> Service {
        let inner = Arc::new(Inner {
            opts,
            shared: Mutex::new(Shared::default()),
            changed: Condvar::new(),
            generation: AtomicU64::new(0),
            watchers: Mutex::new(Vec::new()),
        });
        let weak = Arc::downgrade(&inner);
        let tick = inner.opts.tick;
        std::thread::Builder::new()
            .name("daq-status".into())
            .spawn(move || {
                // Ends when the service is dropped.
                while let Some(inner) = weak.upgrade() {
                    let running = {
                        let mut s = inner.lock();
                        let running = matches!(s.machine.state(), State::Running | State::Pedestal);
                        if running {
                            if let Some(l) = s.live.as_mut() {
                                l.sample(Instant::now());
                            }
                        }
                        running
                    };
                    if running {
                        inner.publish();
                    }
                    drop(inner);
                    std::thread::sleep(tick);
                }
            })
            .expect("spawning the status ticker");
        Service { inner }
    }

    /// Parses, validates and loads a configuration (the schema of `remora daq run`) from a
    /// client: it gets the service's [`ServiceOptions::access`], so its paths are relative to
    /// the service's directories (and refused outside them) and its memory is checked against
    /// the budget; the message names the key.
    pub fn configure_text(&self, text: &str, format: ConfigFormat) -> Result<(), ControlError> {
        // A run going on is the first thing to report, whatever the text holds.
        self.inner.lock().machine.check_configure()?;
        let mut cfg = match format {
            ConfigFormat::Toml => Config::parse(text),
            ConfigFormat::Json => Config::parse_json(text),
        }
        .map_err(invalid)?;
        cfg.access = self.inner.opts.access.clone();
        self.configure(cfg)
    }

    /// Loads a configuration as it is (with its own [`Config::access`]: the operator's
    /// configuration given at start keeps the paths it names), validated.
    pub fn configure(&self, cfg: Config) -> Result<(), ControlError> {
        cfg.validate().map_err(invalid)?;
        let mut s = self.inner.lock();
        s.machine.configure()?;
        let stale = s.pedestal.as_ref().is_some_and(|p| {
            p.modules != cfg.detector.modules || p.maps.len() != cfg.receivers.len()
        });
        if stale {
            let p = s.pedestal.take().expect("checked");
            tracing::info!(
                "the new configuration changes the detector or receivers: the pedestal from {} no longer applies",
                p.info.source
            );
        }
        s.config = Some(cfg);
        drop(s);
        self.inner.publish();
        Ok(())
    }

    /// The loaded configuration.
    pub fn config(&self) -> Option<Config> {
        self.inner.lock().config.clone()
    }

    /// Starts an acquisition; returns its run number.
    pub fn start(&self) -> Result<u64, ControlError> {
        self.launch(RunKind::Acquisition, None)
    }

    /// Starts a dark run of `frames` frames (default: the configured pedestal window) whose
    /// pedestal the following acquisitions use; returns its run number.
    pub fn pedestal(&self, frames: Option<u64>) -> Result<u64, ControlError> {
        if frames == Some(0) {
            return Err(ControlError::Invalid(
                "frames: a dark run needs at least 1 frame".into(),
            ));
        }
        self.launch(RunKind::Pedestal, frames)
    }

    /// Asks the current run to stop after the stack in flight; returns its run number.
    pub fn stop(&self) -> Result<u64, ControlError> {
        let mut s = self.inner.lock();
        let run = s.machine.stop()?;
        if let Some(t) = &s.tap {
            t.gate.request();
        }
        drop(s);
        self.inner.publish();
        Ok(run)
    }

    fn launch(&self, kind: RunKind, frames: Option<u64>) -> Result<u64, ControlError> {
        let mut s = self.inner.lock();
        s.machine.check_start(kind)?;
        let mut cfg = s.config.clone().expect("configured, so a config is loaded");
        let tap = Arc::new(Tap::new(
            self.inner.opts.preview_every,
            kind == RunKind::Pedestal,
        ));
        let mut hooks = vec![
            Hooks {
                tap: Some(tap.clone()),
                ..Hooks::default()
            };
            cfg.receivers.len()
        ];
        match kind {
            RunKind::Pedestal => {
                cfg.acquisition.frames =
                    frames.unwrap_or(u64::from(cfg.pipeline.pedestal_window).max(1));
                cfg.acquisition.dark_every = 1;
                cfg.acquisition.dark_phase = 0;
                cfg.output.file = None;
                cfg.validate()
                    .map_err(|e| ControlError::Invalid(e.to_string()))?;
                for h in &mut hooks {
                    h.fresh_pedestal = true;
                }
            }
            RunKind::Acquisition => {
                if let Some(p) = &s.pedestal {
                    for (h, m) in hooks.iter_mut().zip(&p.maps) {
                        h.pedestal = m.clone().map(|m| (m, p.info.source.clone()));
                    }
                }
            }
        }
        let run = s.machine.start(kind)?;
        s.live = Some(LiveRun::new(&cfg));
        s.tap = Some(tap.clone());
        drop(s);
        self.inner.publish();
        let inner = self.inner.clone();
        std::thread::Builder::new()
            .name(format!("daq-run-{run}"))
            .spawn(move || run_thread(inner, cfg, hooks, tap, kind, run))
            .map_err(|e| ControlError::Invalid(format!("starting the run: {e}")))?;
        Ok(run)
    }

    /// What the service reports now.
    pub fn status(&self) -> Status {
        let generation = self.inner.generation.load(Ordering::SeqCst);
        let s = self.inner.lock();
        let live = s.live.as_ref();
        let preview = s.tap.as_ref().and_then(|t| t.preview());
        Status {
            state: s.machine.state(),
            message: s.machine.message().map(str::to_owned),
            run: s.machine.run(),
            kind: s.machine.kind(),
            stopping: s.machine.stopping(),
            progress: live.map_or(0.0, LiveRun::progress),
            elapsed_s: live.map_or(0.0, LiveRun::elapsed),
            frames_expected: live.map_or(0, |l| l.frames_expected),
            counters: live.map(|l| l.counters.clone()).unwrap_or_default(),
            rates: live.map(LiveRun::rates).unwrap_or_default(),
            receivers: live.map(|l| l.receivers.clone()).unwrap_or_default(),
            modules: live.map(|l| l.modules.clone()).unwrap_or_default(),
            pedestal: s.pedestal.as_ref().map(|p| p.info.clone()),
            preview: preview.map(|p| PreviewInfo {
                frame: p.frame,
                width: p.width,
                height: p.height,
            }),
            profile_frame: live.and_then(|l| l.profile.as_ref()).map(|p| p.frame),
            // The current (or last) run's tap: it holds the choice once the first receiver
            // has bound.
            engine_choice: match &s.tap {
                Some(t) => t.engine_choice(),
                None => s.summary.as_ref().and_then(|x| x.engine_choice.clone()),
            },
            summary: s
                .summary
                .as_ref()
                .and_then(|x| serde_json::to_value(x).ok()),
            generation,
        }
    }

    /// Increases with every published change (the status stream sends on change).
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::SeqCst)
    }

    /// Calls `f` with the new generation on every published change, from whichever thread
    /// publishes it (a status tick, a run's end, a request): `f` must be quick and must not
    /// call back into the service. What an asynchronous server waits on instead of a thread.
    pub fn on_change(&self, f: impl Fn(u64) + Send + Sync + 'static) {
        self.inner
            .watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(f));
    }

    /// Whether a run (an acquisition or a dark run) is going on.
    pub fn running(&self) -> bool {
        matches!(
            self.inner.lock().machine.state(),
            State::Running | State::Pedestal
        )
    }

    /// What configurations from clients may touch.
    pub fn access(&self) -> &Access {
        &self.inner.opts.access
    }

    /// Waits until no run is going on (or `timeout`), then reports.
    pub fn wait(&self, timeout: Duration) -> Status {
        let end = Instant::now() + timeout;
        let mut s = self.inner.lock();
        while matches!(s.machine.state(), State::Running | State::Pedestal) {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = self
                .inner
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(s);
        self.status()
    }

    /// The latest converted frame.
    pub fn preview(&self) -> Option<Arc<Preview>> {
        self.inner.lock().tap.as_ref().and_then(|t| t.preview())
    }

    /// The latest profile.
    pub fn profile(&self) -> Option<Arc<ProfileOut>> {
        self.inner
            .lock()
            .live
            .as_ref()
            .and_then(|l| l.profile.clone())
    }

    /// The last finished run's summary.
    pub fn summary(&self) -> Option<Summary> {
        self.inner.lock().summary.clone()
    }
}

/// A configuration refused: its own message (`key: why`) without the error type's prefix.
fn invalid(e: DaqError) -> ControlError {
    match e {
        DaqError::Config(m) => ControlError::Invalid(m),
        other => ControlError::Invalid(other.to_string()),
    }
}

fn run_thread(
    inner: Arc<Inner>,
    cfg: Config,
    hooks: Vec<Hooks>,
    tap: Arc<Tap>,
    kind: RunKind,
    run: u64,
) {
    let on_frame = |i: usize, fr: &FrameResult| {
        if let Some(l) = inner.lock().live.as_mut() {
            l.on_frame(i, fr);
        }
    };
    let progress = |i: usize, p: &Progress| {
        if let Some(l) = inner.lock().live.as_mut() {
            l.on_progress(i, p);
        }
    };
    let sent = |n: u64| {
        if let Some(l) = inner.lock().live.as_mut() {
            l.on_sent(n);
        }
    };
    // A panic inside the run is a failed run, not a dead service.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_controlled(&cfg, hooks, Some(&on_frame), &progress, &sent)
    }))
    .unwrap_or_else(|_| Err(DaqError::Acquisition("the run panicked".into())));
    let mut s = inner.lock();
    let outcome = match &result {
        Ok(sum) => {
            if let Some(l) = s.live.as_mut() {
                l.finish(Some(sum));
            }
            s.summary = Some(sum.clone());
            if kind == RunKind::Pedestal {
                store_pedestal(&mut s, &cfg, &tap, sum, run)
            } else {
                Ok(finished_text(run, sum))
            }
        }
        Err(e) => {
            if let Some(l) = s.live.as_mut() {
                l.finish(None);
            }
            Err(format!("run {run} failed: {e}"))
        }
    };
    match &outcome {
        Ok(m) => tracing::info!("{m}"),
        Err(e) => tracing::warn!("{e}"),
    }
    s.machine.finished(outcome);
    drop(s);
    inner.publish();
}

fn finished_text(run: u64, s: &Summary) -> String {
    let how = if s.stopped { "stopped" } else { "finished" };
    format!(
        "run {run} {how}: {} frames sent, {} complete, {} with modules masked, {} lost, {} overruns, {} kept",
        s.frames_sent, s.frames_complete, s.frames_partial, s.frames_lost, s.overruns, s.kept
    )
}

fn store_pedestal(
    s: &mut Shared,
    cfg: &Config,
    tap: &Tap,
    sum: &Summary,
    run: u64,
) -> Result<String, String> {
    let mut maps: Vec<Option<PedestalMaps>> = vec![None; cfg.receivers.len()];
    for (i, m) in tap.take_pedestals() {
        if let Some(slot) = maps.get_mut(i) {
            *slot = Some(m);
        }
    }
    if sum.dark == 0 || maps.iter().any(Option::is_none) {
        return Err(format!(
            "pedestal run {run}: {} dark frames processed; the pedestal is unchanged",
            sum.dark
        ));
    }
    let info = PedestalInfo {
        source: format!("dark run {run} ({} frames)", sum.dark),
        frames: sum.dark,
    };
    let text = format!(
        "pedestal run {run}: {} dark frames averaged; the following runs use it",
        sum.dark
    );
    s.pedestal = Some(StoredPedestal {
        maps,
        modules: cfg.detector.modules,
        info,
    });
    Ok(text)
}
