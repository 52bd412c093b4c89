//! CPU time per thread role during a timed transfer, from `/proc/self/task/*/schedstat`
//! (nanoseconds on a CPU, per thread): the poster (the benchmark's own thread, which packs and
//! sends the WRITE's packets), the requester's device thread (ACKs in, the rest of the window
//! out), the responder's device thread (receives and places, holds packets behind a wave) and
//! the page-in workers. The process's total CPU says whether a wave is CPU-bound; these say
//! which core ran out, which is what the model needs to explain a miss.
//!
//! Linux's schedstat is the only per-thread clock that covers other threads without
//! `perf_event_open` rights; no crate wraps it, so it is read here directly.
use std::collections::HashMap;
use std::fs;

/// What a thread does in a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    Poster,
    RequesterDevice,
    ResponderDevice,
    PageIn,
    Other,
}

impl Role {
    pub(super) const ALL: [Role; 5] = [
        Role::Poster,
        Role::RequesterDevice,
        Role::ResponderDevice,
        Role::PageIn,
        Role::Other,
    ];

    /// Its place in [`Role::ALL`] and in [`ByRole`].
    fn index(self) -> usize {
        self as usize
    }

    pub(super) fn key(self) -> &'static str {
        match self {
            Role::Poster => "poster",
            Role::RequesterDevice => "requester_device",
            Role::ResponderDevice => "responder_device",
            Role::PageIn => "page_in",
            Role::Other => "other",
        }
    }
}

/// The thread names that tell the roles apart: the two ends' udp device threads are named
/// after their device ports (`remora-rx-PORT`), every page-in worker `remora-pi-PORT` (both fit
/// the kernel's 15 bytes of a thread name with a five-digit port).
#[derive(Clone, Debug, Default)]
pub(super) struct Roles {
    pub(super) requester: Option<String>,
    pub(super) responder: Option<String>,
}

impl Roles {
    fn of(&self, tid: i32, own: i32, comm: &str) -> Role {
        if tid == own {
            Role::Poster
        } else if self.requester.as_deref() == Some(comm) {
            Role::RequesterDevice
        } else if self.responder.as_deref() == Some(comm) {
            Role::ResponderDevice
        } else if comm.starts_with(remora_fabric::PAGE_IN_THREAD) {
            Role::PageIn
        } else {
            Role::Other
        }
    }
}

/// Nanoseconds on a CPU per thread of this process, with the thread's name, and the calling
/// thread's own CPU clock before and after reading them (so that reading is never counted).
pub(super) struct Snapshot {
    threads: HashMap<i32, (String, u64)>,
    own_start: u64,
    own_end: u64,
}

impl Snapshot {
    /// Reads every thread's schedstat; threads that end meanwhile are skipped. Empty where
    /// the kernel has no schedstat (CONFIG_SCHED_INFO off).
    pub(super) fn take() -> Snapshot {
        let mut m = HashMap::new();
        let own = || {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        };
        let start = own();
        let Ok(dir) = fs::read_dir("/proc/self/task") else {
            return Snapshot {
                threads: m,
                own_start: start,
                own_end: own(),
            };
        };
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let path = e.path();
            let (Ok(stat), Ok(comm)) = (
                fs::read_to_string(path.join("schedstat")),
                fs::read_to_string(path.join("comm")),
            ) else {
                continue;
            };
            if let Some(ns) = stat.split_whitespace().next().and_then(|s| s.parse().ok()) {
                m.insert(tid, (comm.trim_end().to_string(), ns));
            }
        }
        Snapshot {
            threads: m,
            own_start: start,
            own_end: own(),
        }
    }

    /// Microseconds each role ran since `before` (threads born meanwhile count from 0).
    pub(super) fn since(&self, before: &Snapshot, roles: &Roles) -> Option<ByRole> {
        if self.threads.is_empty() {
            return None;
        }
        let own = rustix::thread::gettid().as_raw_nonzero().get();
        let mut out = ByRole::default();
        for (tid, (comm, ns)) in &self.threads {
            let was = before.threads.get(tid).map_or(0, |(_, n)| *n);
            // The running thread's schedstat lags by its current slice: its own clock does not.
            let (ns, was) = if *tid == own {
                (self.own_start, before.own_end)
            } else {
                (*ns, was)
            };
            let role = roles.of(*tid, own, comm);
            out.0[role.index()] += ns.saturating_sub(was) as f64 / 1e3;
        }
        Some(out)
    }
}

/// Microseconds of CPU per role, in [`Role::ALL`]'s order.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ByRole(pub(super) [f64; 5]);

impl ByRole {
    pub(super) fn get(&self, r: Role) -> f64 {
        self.0[r.index()]
    }

    /// `{"poster": µs, "requester_device": µs, ...}`.
    pub(super) fn json(&self) -> serde_json::Value {
        Role::ALL
            .iter()
            .map(|r| (r.key().to_string(), serde_json::json!(self.get(*r))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Burns `ms` milliseconds of this thread's own CPU time, however busy the machine.
    fn burn(ms: u64) {
        let cpu = || {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        };
        let end = cpu() + ms * 1_000_000;
        let mut x = 0u64;
        while cpu() < end {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[test]
    fn roles_sit_in_their_order() {
        for (k, r) in Role::ALL.iter().enumerate() {
            assert_eq!(r.index(), k);
        }
    }

    #[test]
    fn a_busy_thread_shows_under_its_role() {
        let roles = Roles {
            requester: Some("part-test-req".into()),
            responder: None,
        };
        let before = Snapshot::take();
        if before.threads.is_empty() {
            return; // no schedstat on this kernel: nothing to attribute
        }
        let (burnt, wait) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("part-test-req".into())
            .spawn(move || {
                burn(20);
                burnt.send(()).unwrap();
                // Stay alive until read: an ended thread leaves /proc/self/task.
                let _ = stopped.recv();
            })
            .unwrap();
        burn(10);
        wait.recv().unwrap();
        let after = Snapshot::take();
        stop.send(()).unwrap();
        t.join().unwrap();
        let by = after.since(&before, &roles).unwrap();
        assert!(by.get(Role::Poster) >= 10_000.0, "{by:?}");
        assert!(by.get(Role::RequesterDevice) >= 20_000.0, "{by:?}");
        assert_eq!(by.get(Role::ResponderDevice), 0.0, "{by:?}");
    }
}
