//! The migration gate every request passes (a freeze waits for requests under way and holds
//! new ones; a moved cache's requests are redirected), where a migration stands, and the
//! figures of `stats migration`. It does not hold the cache: the server installs what
//! `migrate begin` runs, so that the handler, which keeps a gate in its cache, and the
//! migration, which drives the cache, do not import each other.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use super::secret;

/// How long either side waits for the other on the control channel.
pub const LIVENESS: Duration = Duration::from_secs(10);

/// What `migrate begin` runs: the connection's socket and the secret shown.
pub type Begin = Box<dyn Fn(Option<RawFd>, &[u8]) -> Result<(), &'static str> + Send + Sync>;

/// A server's part in a migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Not migrating.
    #[default]
    None,
    /// Moving away.
    Source,
    /// Moving in.
    Target,
}

/// Where a migration stands (`stats migration`'s `migrate_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    /// Nothing asked.
    #[default]
    Idle,
    /// Source: `migrate to` named a target; waiting for it to ask.
    Armed,
    /// Source: requests held, the arena being handed over.
    Freezing,
    /// Source: waiting for the target to serve.
    HandingOver,
    /// Source: the target serves; pages are being copied.
    Moved,
    /// Source: the copy is complete; stopping.
    Done,
    /// Source: the target left before serving; serving again with every item.
    Aborted,
    /// Source: the target left after taking over; serving again, flushed. Target: the source
    /// left before the copy was complete.
    Failed,
    /// Target: serving while pages arrive.
    Pulling,
    /// Target: every page is here.
    Complete,
}

impl State {
    /// The name `stats migration` shows.
    pub fn name(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Armed => "armed",
            State::Freezing => "freezing",
            State::HandingOver => "handing_over",
            State::Moved => "moved",
            State::Done => "done",
            State::Aborted => "aborted",
            State::Failed => "failed",
            State::Pulling => "pulling",
            State::Complete => "complete",
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Status {
    pub(super) role: Role,
    pub(super) state: State,
    /// Source: the target clients are sent to. Target: the source.
    pub(super) peer: String,
    /// Source: from freeze to the target serving.
    pub(super) downtime: Option<Duration>,
    pub(super) started: Option<Instant>,
    /// Time from the hand-over to the full copy.
    pub(super) copy_time: Option<Duration>,
    /// Units present and in all, as the target last reported them (source side).
    pub(super) reported: (u64, u64),
    pub(super) bytes: u64,
}

/// A server's migration state: the gate every request passes, the redirect once the cache
/// moved, and the figures of `stats migration`.
#[derive(Default)]
pub struct Migration {
    /// Requests hold it shared; a freeze holds it exclusively.
    pub(super) gate: RwLock<()>,
    /// Requests are answered with `redirect` instead of being run.
    moved: AtomicBool,
    /// Target: requests wait until the source has let go (`held` under `hold`).
    holding: AtomicBool,
    pub(super) hold: Mutex<bool>,
    released: std::sync::Condvar,
    /// Target: the copy is under way (the LRU maintainer stays off the arena meanwhile).
    pub(super) copying: AtomicBool,
    redirect: Mutex<String>,
    pub(super) status: Mutex<Status>,
    /// Source: the target `migrate to` named and the secret it must show.
    armed: Mutex<Option<Armed>>,
    /// Source: `migrate begin` refused for a missing or wrong secret.
    begins_refused: AtomicU64,
    pub(super) aborts: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) redirects: AtomicU64,
    /// What `migrate begin` runs, installed by the server, which holds the cache.
    begin: OnceLock<Begin>,
    /// Target: the lazy region's figures.
    pub(super) region: OnceLock<std::sync::Arc<remora_lazy::LazyRegion>>,
}

/// Source: what `migrate to` set up.
struct Armed {
    to: String,
    secret: String,
}

/// What a request found at the gate.
pub enum Entry<'a> {
    /// Run it (the guard keeps a freeze waiting until it is done).
    Go(RwLockReadGuard<'a, ()>),
    /// The cache is not here: answer with this and close.
    Redirect(String),
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Migration {
    /// Installs what `migrate begin` runs (the server does this at start: the gate does not
    /// hold the cache it guards).
    pub fn on_begin(&self, begin: Begin) {
        let _ = self.begin.set(begin);
    }

    /// `migrate begin SECRET` on the connection whose socket is `fd`: hands the connection to
    /// the migration's controller (Ok: the connection is not the client's any more).
    pub fn begin(&self, fd: Option<RawFd>, secret: &[u8]) -> Result<(), &'static str> {
        match self.begin.get() {
            Some(begin) => begin(fd, secret),
            None => Err("SERVER_ERROR this cache cannot migrate (not run by a server)"),
        }
    }

    /// Passes the gate: waits while a freeze is under way; tells a moved cache's requests
    /// where to go.
    pub fn enter(&self) -> Entry<'_> {
        if self.holding.load(Ordering::Acquire) {
            self.wait_released();
        }
        let g = self.gate.read().unwrap_or_else(|p| p.into_inner());
        if self.moved.load(Ordering::Acquire) {
            drop(g);
            self.redirects.fetch_add(1, Ordering::Relaxed);
            return Entry::Redirect(lock(&self.redirect).clone());
        }
        Entry::Go(g)
    }

    /// Target: holds requests until [`release`](Self::release) (the source still owns the
    /// cache; its clients arrive once it lets go, and one that comes early waits).
    pub(super) fn hold(&self) {
        *lock(&self.hold) = true;
        self.holding.store(true, Ordering::Release);
    }

    pub(super) fn release(&self) {
        *lock(&self.hold) = false;
        self.holding.store(false, Ordering::Release);
        self.released.notify_all();
    }

    pub(super) fn wait_released(&self) {
        let mut h = lock(&self.hold);
        while *h {
            h = self
                .released
                .wait_timeout(h, LIVENESS)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Target: pages are still arriving. Background work that walks the arena (the LRU
    /// maintainer, a hash table growth) waits for the copy: under the store's lock it would
    /// fault in pages nobody asked for and hold every request up meanwhile.
    pub fn copying(&self) -> bool {
        self.copying.load(Ordering::Relaxed)
    }

    pub(super) fn set_moved(&self, reply: String) {
        *lock(&self.redirect) = reply;
        self.moved.store(true, Ordering::Release);
    }

    pub(super) fn clear_moved(&self) {
        self.moved.store(false, Ordering::Release);
    }

    pub(super) fn set_state(&self, state: State) {
        lock(&self.status).state = state;
    }

    /// Where the migration stands.
    pub fn state(&self) -> State {
        lock(&self.status).state
    }

    /// `migrate to HOST:PORT [SECRET]`: arms the source, with the operator's secret or a new
    /// one, which it returns (the target must show it in `migrate begin`). Errors say why not.
    pub fn arm(&self, to: &str, secret: Option<&str>) -> Result<String, &'static str> {
        let mut st = lock(&self.status);
        match st.state {
            State::Freezing | State::HandingOver | State::Moved | State::Done => {
                return Err("SERVER_ERROR a migration is under way")
            }
            _ if st.role == Role::Target && st.state == State::Pulling => {
                return Err("SERVER_ERROR this server is still pulling its own migration")
            }
            _ => {}
        }
        let secret = match secret {
            Some(s) => {
                secret::check(s).map_err(|_| {
                    "CLIENT_ERROR a migration secret is 32 to 128 printable characters"
                })?;
                s.to_string()
            }
            None => secret::generate().map_err(|_| "SERVER_ERROR cannot make a secret")?,
        };
        *lock(&self.armed) = Some(Armed {
            to: to.to_string(),
            secret: secret.clone(),
        });
        st.role = Role::Source;
        st.state = State::Armed;
        st.peer = to.to_string();
        Ok(secret)
    }

    /// Source: takes the armed target's address if `secret` is the armed one (it is not
    /// armed any more then); `None` (counted) otherwise.
    pub(super) fn take_armed(&self, secret: &[u8]) -> Option<String> {
        let mut a = lock(&self.armed);
        match a.as_ref() {
            Some(armed) if secret::matches(&armed.secret, secret) => a.take().map(|a| a.to),
            _ => {
                self.begins_refused.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    pub(super) fn is_armed(&self) -> bool {
        lock(&self.armed).is_some()
    }

    /// `migrate cancel`: disarms a source no target has asked yet.
    pub fn cancel(&self) -> Result<(), &'static str> {
        let mut st = lock(&self.status);
        if st.state != State::Armed {
            return Err("SERVER_ERROR no armed migration to cancel");
        }
        *lock(&self.armed) = None;
        st.state = State::Idle;
        Ok(())
    }

    /// The `stats migration` lines.
    pub fn stats(&self) -> Vec<(String, String)> {
        let st = lock(&self.status);
        let role = match st.role {
            Role::None => "none",
            Role::Source => "source",
            Role::Target => "target",
        };
        let mut v = vec![
            ("migrate_role".to_string(), role.to_string()),
            ("migrate_state".into(), st.state.name().into()),
            ("migrate_peer".into(), st.peer.clone()),
        ];
        let ms = |d: Option<Duration>| {
            d.map_or("-1".to_string(), |d| {
                format!("{:.3}", d.as_secs_f64() * 1e3)
            })
        };
        v.push(("migrate_downtime_ms".into(), ms(st.downtime)));
        v.push(("migrate_copy_ms".into(), ms(st.copy_time)));
        let (present, units) = match self.region.get() {
            Some(r) => {
                let p = r.progress();
                (p.present as u64, p.units as u64)
            }
            None => st.reported,
        };
        v.push(("migrate_units_present".into(), present.to_string()));
        v.push(("migrate_units_total".into(), units.to_string()));
        v.push(("migrate_bytes_total".into(), st.bytes.to_string()));
        if let Some(r) = self.region.get() {
            let s = r.stats();
            v.push(("migrate_unit_bytes".into(), r.unit().to_string()));
            v.push(("migrate_faults".into(), s.faults.to_string()));
            v.push(("migrate_units_fetched".into(), s.units_copied.to_string()));
            v.push(("migrate_units_zero".into(), s.units_zero.to_string()));
            v.push(("migrate_units_pushed".into(), s.units_pushed.to_string()));
        }
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
        v.push(("migrate_redirects".into(), n(&self.redirects)));
        v.push(("migrate_begins_refused".into(), n(&self.begins_refused)));
        v.push(("migrate_aborts".into(), n(&self.aborts)));
        v.push(("migrate_failures".into(), n(&self.failures)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_runs_requests_until_the_cache_moves_then_redirects_them() {
        let m = Migration::default();
        assert!(matches!(m.enter(), Entry::Go(_)));
        m.set_moved("SERVER_ERROR migrated to h:1".into());
        match m.enter() {
            Entry::Redirect(l) => assert_eq!(l, "SERVER_ERROR migrated to h:1"),
            Entry::Go(_) => panic!("a moved cache ran a request"),
        }
        assert_eq!(m.redirects.load(Ordering::Relaxed), 1);
        m.clear_moved();
        assert!(matches!(m.enter(), Entry::Go(_)));
    }

    #[test]
    fn a_freeze_waits_for_requests_under_way_and_holds_new_ones() {
        let m = std::sync::Arc::new(Migration::default());
        let Entry::Go(g) = m.enter() else {
            panic!("not moved")
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let m2 = m.clone();
        let freezer = std::thread::spawn(move || {
            let _w = m2.gate.write().unwrap();
            tx.send(()).unwrap();
            m2.set_moved("SERVER_ERROR migrated to h:1".into());
        });
        // The request under way holds the freeze off.
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        drop(g);
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        freezer.join().unwrap();
        assert!(matches!(m.enter(), Entry::Redirect(_)));
    }

    #[test]
    fn arming_and_cancelling_follow_the_state() {
        let m = Migration::default();
        assert!(m.cancel().is_err());
        let secret = m.arm("h:1", None).unwrap();
        assert_eq!(m.state(), State::Armed);
        assert_eq!(lock(&m.armed).as_ref().map(|a| a.to.as_str()), Some("h:1"));
        assert_eq!(secret.len(), 32);
        m.cancel().unwrap();
        assert_eq!(m.state(), State::Idle);
        m.set_state(State::Moved);
        assert!(m.arm("h:2", None).is_err());
        let stats: std::collections::HashMap<_, _> = m.stats().into_iter().collect();
        assert_eq!(stats["migrate_state"], "moved");
        assert_eq!(stats["migrate_role"], "source");
    }

    #[test]
    fn only_the_armed_secret_takes_the_cache_and_only_once() {
        let m = Migration::default();
        assert_eq!(m.take_armed(b""), None, "nothing armed");
        let chosen = "0123456789abcdef0123456789abcdef";
        assert_eq!(m.arm("h:1", Some(chosen)).unwrap(), chosen);
        assert_eq!(m.take_armed(b""), None);
        assert_eq!(m.take_armed(b"0123456789abcdef0123456789abcdee"), None);
        assert!(m.is_armed(), "a wrong secret does not disarm");
        assert_eq!(m.take_armed(chosen.as_bytes()).as_deref(), Some("h:1"));
        assert_eq!(m.take_armed(chosen.as_bytes()), None, "one time only");
        let stats: std::collections::HashMap<_, _> = m.stats().into_iter().collect();
        assert_eq!(stats["migrate_begins_refused"], "4");
        assert!(m.arm("h:1", Some("short")).is_err());
    }
}
