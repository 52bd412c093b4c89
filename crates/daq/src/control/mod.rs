//! The acquisition control service: what `remora daq serve` runs behind its HTTP API and live
//! view, and what `remora daq run --serve` shows during a one-shot run.
//!
//! - [`state`]: the sans-IO state machine (idle, configured, running, pedestal, error) that
//!   decides which request fits, and says why not (HTTP 409).
//! - [`service`]: configuration, start, stop, dark runs, status, waiting; runs on a thread of
//!   their own with the receivers and emulator as threads of this process.
//! - [`crate::tap`] (re-exported here): what the service shares with a running acquisition
//!   (stop gate, preview slot, pedestal); it lives below the receiver, which uses it.
//! - [`live`] and [`status`]: counters and rates while a run goes on, and the reported types.
//! - [`image`]: preview frames as PNG.
//! - `http` (feature `http`): the axum router, its OpenAPI document and the embedded page,
//!   and (`http::server`) the router on threads of its own; `auth`: the token check in front
//!   of it; `api_error`: the error answer both send; `metrics`: what `/metrics` reports.
pub mod image;
pub mod live;
pub mod service;
pub mod state;
pub mod status;

#[cfg(feature = "http")]
mod api_error;
#[cfg(feature = "http")]
mod auth;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "http")]
pub mod metrics;

pub use crate::tap::{Preview, StopGate, Tap};
pub use service::{ConfigFormat, ControlError, Service, ServiceOptions};
pub use state::{Conflict, RunKind, State};
pub use status::Status;

/// Whether this process runs as root (effective user 0): a service reachable from the network
/// then writes and reads as root, which its command line refuses unless asked.
pub fn running_as_root() -> bool {
    rustix::process::geteuid().is_root()
}
