//! What a user sets and reads of a lazy region: the fault mode, the options, the counters and
//! the copy's progress.
use std::time::Duration;

use crate::prefetch::{Prefetch, WorkingSet};

/// How faults are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Handler threads read fault events from the userfaultfd.
    Thread {
        /// Number of handler threads (1 or more).
        handlers: usize,
    },
    /// `UFFD_FEATURE_SIGBUS`: the faulting thread resolves its own fault in a SIGBUS handler.
    /// Kernel accesses to missing pages (a `read()` into the region) fail with EFAULT instead.
    Sigbus,
}

impl Default for Mode {
    /// SIGBUS: about 2x faster than a handler thread on local faults, and faster on most remote
    /// rows (docs/bench/lazy.md).
    fn default() -> Mode {
        Mode::Sigbus
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    /// `thread`, `thread:N` or `sigbus`.
    fn from_str(s: &str) -> std::result::Result<Mode, String> {
        match s.split_once(':') {
            None if s == "thread" => Ok(Mode::Thread { handlers: 1 }),
            None if s == "sigbus" => Ok(Mode::Sigbus),
            Some(("thread", n)) => match n.parse() {
                Ok(h) if h >= 1 => Ok(Mode::Thread { handlers: h }),
                _ => Err(format!("mode `{s}`: handler count must be 1 or more")),
            },
            _ => Err(format!("mode `{s}`: expected thread, thread:N or sigbus")),
        }
    }
}

/// Options of a lazy region.
#[derive(Debug, Clone)]
pub struct Options {
    /// Fault unit in bytes: a power of two, 4 KB to 2 MB.
    pub unit: usize,
    /// Resolution mode.
    pub mode: Mode,
    /// Prefetch policy.
    pub prefetch: Prefetch,
    /// Stream the rest of the source in the background.
    pub push: bool,
    /// How long a fault retries an unreachable server before the unit is poisoned.
    pub deadline: Duration,
    /// Record the units faulted, in order ([`LazyRegion::working_set`](super::LazyRegion::working_set)).
    pub record: bool,
    /// A recorded working set to fetch first, in the background.
    pub working_set: Option<WorkingSet>,
    /// Most bytes per second the background push installs from fetched data (zero ranges
    /// are free); `None`: as fast as the server sends. Faults are never throttled (QEMU's
    /// `max-postcopy-bandwidth`: the bulk copy must not starve the service being moved).
    pub push_rate: Option<u64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            unit: 4096,
            mode: Mode::default(),
            prefetch: Prefetch::None,
            push: false,
            deadline: Duration::from_secs(5),
            record: false,
            working_set: None,
            push_rate: None,
        }
    }
}

/// Counters of a region (monotonic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Faults seen (uffd events or SIGBUS).
    pub faults: u64,
    /// Fetch requests on the urgent path.
    pub fetches: u64,
    /// Units installed from fetched data.
    pub units_copied: u64,
    /// Units installed as zero pages (by a fault or by the push, which counts them in
    /// `units_pushed` too).
    pub units_zero: u64,
    /// Units installed by prefetch (beyond the faulting unit).
    pub units_prefetched: u64,
    /// Units installed by the background push.
    pub units_pushed: u64,
    /// Units poisoned after a failed fetch or at close.
    pub units_poisoned: u64,
    /// Faults on units already present (a race, or pages discarded with MADV_DONTNEED).
    pub refetches: u64,
}

/// Progress of filling the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Units present.
    pub present: usize,
    /// Units poisoned.
    pub poisoned: usize,
    /// Units in the region.
    pub units: usize,
}

impl Progress {
    /// True when every unit is present.
    pub fn complete(&self) -> bool {
        self.present == self.units
    }
}
