//! The control service's state machine, sans I/O: which request fits which state, and why not.
//!
//! States follow what beamline control systems expect from a detector (Jungfraujoch's broker
//! has the same shape): `idle` until configured; `configured` → `running` (an acquisition) or
//! `pedestal` (a dark run) → back to `configured` when it ends, or to `error` with the reason.
//! A request that does not fit the state is refused with a [`Conflict`] naming the state and
//! what to do instead; nothing else changes.
use serde::Serialize;

/// Where the service is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// No configuration yet.
    Idle,
    /// A valid configuration is loaded; nothing runs.
    Configured,
    /// An acquisition runs.
    Running,
    /// A dark run measures the pedestal.
    Pedestal,
    /// The last run failed (the message says why); a new configuration or start clears it.
    Error,
}

impl State {
    /// The name used on the wire.
    pub fn name(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Configured => "configured",
            State::Running => "running",
            State::Pedestal => "pedestal",
            State::Error => "error",
        }
    }
}

/// What kind of run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// An acquisition.
    Acquisition,
    /// A dark run that updates the pedestal.
    Pedestal,
}

/// A request refused in the current state (HTTP 409).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Conflict(pub String);

/// The state and what goes with it.
#[derive(Debug, Clone)]
pub struct Machine {
    state: State,
    configured: bool,
    stopping: bool,
    run: u64,
    kind: Option<RunKind>,
    message: Option<String>,
}

impl Default for Machine {
    fn default() -> Self {
        Machine {
            state: State::Idle,
            configured: false,
            stopping: false,
            run: 0,
            kind: None,
            message: None,
        }
    }
}

impl Machine {
    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Runs started so far (the current or last run's number).
    pub fn run(&self) -> u64 {
        self.run
    }

    /// The current or last run's kind.
    pub fn kind(&self) -> Option<RunKind> {
        self.kind
    }

    /// The last event or error, for people.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// Whether a stop was asked for the current run.
    pub fn stopping(&self) -> bool {
        self.stopping
    }

    fn busy(&self, what: &str) -> Conflict {
        let doing = match self.kind {
            Some(RunKind::Pedestal) => "a pedestal run",
            _ => "an acquisition",
        };
        Conflict(format!(
            "{what}: {doing} is in progress (run {}, state {}); POST /stop first or wait for it",
            self.run,
            self.state.name()
        ))
    }

    fn running(&self) -> bool {
        matches!(self.state, State::Running | State::Pedestal)
    }

    /// Whether a configuration may be loaded now (nothing changes).
    pub fn check_configure(&self) -> Result<(), Conflict> {
        if self.running() {
            return Err(self.busy("config"));
        }
        Ok(())
    }

    /// A new configuration was accepted (validation happens before this).
    pub fn configure(&mut self) -> Result<(), Conflict> {
        self.check_configure()?;
        self.state = State::Configured;
        self.configured = true;
        self.message = Some("configured".into());
        Ok(())
    }

    /// Whether `kind` may start now (nothing changes).
    pub fn check_start(&self, kind: RunKind) -> Result<(), Conflict> {
        let what = match kind {
            RunKind::Acquisition => "start",
            RunKind::Pedestal => "pedestal",
        };
        if self.running() {
            return Err(self.busy(what));
        }
        if !self.configured {
            return Err(Conflict(format!(
                "{what}: no configuration yet (state idle); PUT /config first"
            )));
        }
        Ok(())
    }

    /// Starts a run of `kind`; returns its number.
    pub fn start(&mut self, kind: RunKind) -> Result<u64, Conflict> {
        self.check_start(kind)?;
        self.run += 1;
        self.kind = Some(kind);
        self.stopping = false;
        self.state = match kind {
            RunKind::Acquisition => State::Running,
            RunKind::Pedestal => State::Pedestal,
        };
        self.message = Some(format!("run {} started", self.run));
        Ok(self.run)
    }

    /// Asks the current run to stop.
    pub fn stop(&mut self) -> Result<u64, Conflict> {
        if !self.running() {
            return Err(Conflict(format!(
                "stop: nothing is running (state {})",
                self.state.name()
            )));
        }
        self.stopping = true;
        self.message = Some(format!("run {}: stopping", self.run));
        Ok(self.run)
    }

    /// The current run ended: `Err` carries the reason it failed.
    pub fn finished(&mut self, outcome: Result<String, String>) {
        self.stopping = false;
        match outcome {
            Ok(msg) => {
                self.state = State::Configured;
                self.message = Some(msg);
            }
            Err(e) => {
                self.state = State::Error;
                self.message = Some(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_that_do_not_fit_are_refused_with_the_state_named() {
        let mut m = Machine::default();
        let e = m.start(RunKind::Acquisition).unwrap_err();
        assert!(e.0.contains("PUT /config"), "{e}");
        assert!(m.stop().unwrap_err().0.contains("state idle"));
        m.configure().unwrap();
        assert_eq!(m.start(RunKind::Acquisition).unwrap(), 1);
        assert_eq!(m.state(), State::Running);
        assert!(m
            .start(RunKind::Acquisition)
            .unwrap_err()
            .0
            .contains("run 1"));
        assert!(m
            .start(RunKind::Pedestal)
            .unwrap_err()
            .0
            .starts_with("pedestal"));
        assert!(m.configure().unwrap_err().0.starts_with("config"));
        assert_eq!(m.stop().unwrap(), 1);
        assert!(m.stopping());
        m.finished(Ok("run 1 stopped".into()));
        assert_eq!(m.state(), State::Configured);
        assert!(!m.stopping());
    }

    #[test]
    fn a_failed_run_leaves_error_and_a_new_start_or_config_clears_it() {
        let mut m = Machine::default();
        m.configure().unwrap();
        m.start(RunKind::Pedestal).unwrap();
        assert_eq!(m.state(), State::Pedestal);
        m.finished(Err("receiver 0: no module connected".into()));
        assert_eq!(m.state(), State::Error);
        assert_eq!(m.message(), Some("receiver 0: no module connected"));
        assert_eq!(m.start(RunKind::Acquisition).unwrap(), 2);
        m.finished(Ok("done".into()));
        m.finished(Err("x".into()));
        m.configure().unwrap();
        assert_eq!(m.state(), State::Configured);
    }
}
