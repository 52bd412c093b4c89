//! The lazy region: an anonymous mapping registered with userfaultfd whose missing units are
//! fetched from a [`PageFetcher`] and installed with `UFFDIO_COPY` / `UFFDIO_ZEROPAGE`.
//!
//! Every unit has a state (missing, in flight, present, poisoned) changed only by compare-and-
//! swap, so a unit is fetched once however many threads fault on it; whoever claims it fetches
//! and installs it, and the install wakes every thread waiting on it. Faults are resolved either
//! by handler threads reading the userfaultfd ([`Mode::Thread`]) or by the faulting thread itself
//! in a SIGBUS handler ([`Mode::Sigbus`]).
//!
//! Failure: a fetch is retried until the region's deadline; then the unit is poisoned
//! (`UFFDIO_POISON`), so a raw access raises SIGBUS (`BUS_MCEERR_AR`) instead of hanging, the
//! checked accessors return [`Error::Unavailable`], and the error is logged and kept in
//! [`LazyRegion::last_error`]. Closing a region poisons every unit still missing, with the same
//! outcome for threads still waiting on them.
use crate::error::{Error, Result};
use crate::fetch::{FetchError, Fetched, PageFetcher, PushNext};
use crate::prefetch::{Prefetch, Prefetcher, WorkingSet};
use crate::sys;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod fill;
mod options;
mod workers;

use fill::install;
pub use options::{Mode, Options, Progress, Stats};

const MISSING: u8 = 0;
const INFLIGHT: u8 = 1;
const PRESENT: u8 = 2;
const POISONED: u8 = 3;
const PAGE: u64 = 4096;
/// How long a handler thread polls the userfaultfd without sleeping after an event.
const SPIN: Duration = Duration::from_micros(50);

#[derive(Default)]
struct Counters {
    faults: AtomicU64,
    fetches: AtomicU64,
    units_copied: AtomicU64,
    units_zero: AtomicU64,
    units_prefetched: AtomicU64,
    units_pushed: AtomicU64,
    units_poisoned: AtomicU64,
    refetches: AtomicU64,
}

/// Shared state of a region (the handler threads, the push thread and the SIGBUS handler hold it).
pub(crate) struct Core {
    uffd: OwnedFd,
    map: sys::Mapping,
    base: u64,
    unit: usize,
    units: usize,
    len: u64,
    states: Box<[AtomicU8]>,
    fetcher: Arc<dyn PageFetcher>,
    prefetch: Mutex<Prefetcher>,
    deadline: Duration,
    closing: AtomicBool,
    present: AtomicUsize,
    poisoned: AtomicUsize,
    c: Counters,
    last_error: Mutex<Option<String>>,
    pool: Mutex<Vec<Vec<u8>>>,
    cv: (Mutex<()>, Condvar),
    /// Threads in wait_change (notify skips the lock when there are none).
    waiters: AtomicUsize,
    /// Whether installs must wake threads waiting in the kernel (not in SIGBUS mode, where
    /// faulting threads never wait there).
    wake: bool,
    /// False for Prefetch::None (skips the prefetcher's lock on the fault path).
    prefetching: bool,
    /// 1 + the unit of the latest fault, for the push thread (0: none).
    push_hint: AtomicU64,
    /// [`Options::push_rate`].
    push_rate: Option<u64>,
    record: Option<Mutex<Vec<usize>>>,
}

/// A lazily filled region. Reads and writes through [`as_slice`](Self::as_slice) fault units in
/// from the page server; the checked accessors report failures as errors.
pub struct LazyRegion {
    core: Arc<Core>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    slot: Option<usize>,
}

impl LazyRegion {
    /// Maps a region the size of the fetcher's source and starts resolving its faults.
    pub fn open(fetcher: Arc<dyn PageFetcher>, opts: Options) -> Result<LazyRegion> {
        let unit = opts.unit;
        if !unit.is_power_of_two() || !(4096..=2 << 20).contains(&unit) {
            return Err(Error::Invalid(format!(
                "fault unit {unit}: must be a power of two from 4096 to 2 MiB"
            )));
        }
        let len = fetcher.len();
        if len == 0 {
            return Err(Error::Invalid("the source is empty".into()));
        }
        let units = usize::try_from(len.div_ceil(unit as u64))
            .ok()
            .filter(|u| {
                u.checked_mul(unit)
                    .is_some_and(|b| b <= isize::MAX as usize)
            })
            .ok_or_else(|| Error::Invalid(format!("source of {len} bytes too large")))?;
        let mapped = units * unit;
        // One state byte per unit: allocate fallibly, a hostile length must not abort us.
        let mut states = Vec::new();
        states.try_reserve_exact(units).map_err(|_| {
            Error::Invalid(format!(
                "source of {len} bytes too large for {unit}-byte units"
            ))
        })?;
        states.extend((0..units).map(|_| AtomicU8::new(MISSING)));
        let states = states.into_boxed_slice();
        let sigbus = opts.mode == Mode::Sigbus;
        let supported = sys::supported_features().map_err(|e| Error::os("userfaultfd", e))?;
        if sigbus && supported & sys::FEATURE_SIGBUS == 0 {
            return Err(Error::Invalid(
                "this kernel lacks UFFD_FEATURE_SIGBUS".into(),
            ));
        }
        let want = supported & sys::FEATURE_POISON | if sigbus { sys::FEATURE_SIGBUS } else { 0 };
        let (uffd, _) = sys::open_uffd(want).map_err(|e| Error::os("userfaultfd API", e))?;
        let map = sys::Mapping::anonymous(mapped, unit).map_err(|e| Error::os("mmap", e))?;
        let base = map.ptr() as u64;
        sys::register(uffd.as_raw_fd(), base, mapped as u64)
            .map_err(|e| Error::os("UFFDIO_REGISTER", e))?;
        let core = Arc::new(Core {
            uffd,
            map,
            base,
            unit,
            units,
            len,
            states,
            fetcher,
            prefetch: Mutex::new(Prefetcher::new(opts.prefetch)),
            deadline: opts.deadline,
            closing: AtomicBool::new(false),
            present: AtomicUsize::new(0),
            poisoned: AtomicUsize::new(0),
            c: Counters::default(),
            last_error: Mutex::new(None),
            pool: Mutex::new(Vec::new()),
            cv: (Mutex::new(()), Condvar::new()),
            waiters: AtomicUsize::new(0),
            prefetching: opts.prefetch != Prefetch::None,
            wake: !sigbus,
            push_hint: AtomicU64::new(0),
            push_rate: opts.push_rate.filter(|&r| r > 0),
            record: opts.record.then(|| Mutex::new(Vec::new())),
        });
        let mut r = LazyRegion {
            core: core.clone(),
            threads: Mutex::new(Vec::new()),
            slot: None,
        };
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|e| Error::io(format!("spawn {name}"), e))
        };
        let mut threads = Vec::new();
        match opts.mode {
            Mode::Thread { handlers } => {
                for _ in 0..handlers.max(1) {
                    let c = core.clone();
                    threads.push(spawn("lazy-handler", Box::new(move || c.handler_loop()))?);
                }
            }
            Mode::Sigbus => {
                let slot = crate::sigbus::register(base, base + mapped as u64, Arc::as_ptr(&core))
                    .map_err(|e| Error::os("install SIGBUS handler", e))?;
                r.slot = Some(slot);
            }
        }
        if let Some(ws) = opts.working_set {
            let c = core.clone();
            threads.push(spawn(
                "lazy-workingset",
                Box::new(move || c.working_set_loop(ws)),
            )?);
        }
        if opts.push {
            let c = core.clone();
            threads.push(spawn("lazy-push", Box::new(move || c.push_loop()))?);
        }
        *r.threads.lock().unwrap_or_else(|p| p.into_inner()) = threads;
        Ok(r)
    }

    /// Bytes of the source (the region's logical length).
    pub fn len(&self) -> usize {
        self.core.len as usize
    }
    /// True if the region is empty (never: open refuses empty sources).
    pub fn is_empty(&self) -> bool {
        self.core.len == 0
    }
    /// The fault unit.
    pub fn unit(&self) -> usize {
        self.core.unit
    }
    /// Start address of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.core.map.ptr()
    }
    /// The region as ordinary memory; touching a missing unit faults it in. A poisoned unit (or a
    /// missing one after [`close`](Self::close)) raises SIGBUS on access.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is valid for the region's life; bytes change under the slice only
        // where a missing unit is installed, which replaces "not yet here" with the source's bytes
        // before any read of them can complete.
        unsafe { std::slice::from_raw_parts(self.core.map.ptr(), self.core.len as usize) }
    }
    /// The region as mutable memory (see [`as_slice`](Self::as_slice)).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only reference handed out.
        unsafe { std::slice::from_raw_parts_mut(self.core.map.ptr(), self.core.len as usize) }
    }
    /// Makes `[offset, offset+len)` present without touching it; errors instead of SIGBUS.
    pub fn fault_in(&self, offset: usize, len: usize) -> Result<()> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e as u64 <= self.core.len)
            .ok_or(Error::OutOfRange {
                offset: offset as u64,
                len: len as u64,
                size: self.core.len,
            })?;
        if len == 0 {
            return Ok(());
        }
        for u in offset / self.core.unit..=(end - 1) / self.core.unit {
            self.core.ensure(u)?;
        }
        Ok(())
    }
    /// Copies bytes out, fetching what is missing; errors instead of SIGBUS.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.fault_in(offset, dst.len())?;
        dst.copy_from_slice(&self.as_slice()[offset..offset + dst.len()]);
        Ok(())
    }
    /// Progress of filling the region.
    pub fn progress(&self) -> Progress {
        Progress {
            present: self.core.present.load(Ordering::Acquire),
            poisoned: self.core.poisoned.load(Ordering::Acquire),
            units: self.core.units,
        }
    }
    /// Waits until every unit is present, a unit is poisoned, or `timeout` passes; true if complete.
    pub fn wait_complete(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            let p = self.progress();
            if p.complete() {
                return true;
            }
            if p.poisoned > 0 || Instant::now() >= end {
                return false;
            }
            self.core.wait_change(Duration::from_millis(10));
        }
    }
    /// Counters.
    pub fn stats(&self) -> Stats {
        let c = &self.core.c;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            faults: l(&c.faults),
            fetches: l(&c.fetches),
            units_copied: l(&c.units_copied),
            units_zero: l(&c.units_zero),
            units_prefetched: l(&c.units_prefetched),
            units_pushed: l(&c.units_pushed),
            units_poisoned: l(&c.units_poisoned),
            refetches: l(&c.refetches),
        }
    }
    /// The last fetch failure (also logged), if any.
    pub fn last_error(&self) -> Option<String> {
        self.core
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    /// The units faulted so far in first-touch order (with `Options::record`).
    pub fn working_set(&self) -> Option<WorkingSet> {
        self.core.record.as_ref().map(|r| WorkingSet {
            unit: self.core.unit,
            units: r.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        })
    }
    /// The transport of the fetcher.
    pub fn transport(&self) -> &'static str {
        self.core.fetcher.transport()
    }
    /// Stops resolving: background threads end, and every unit still missing is poisoned, so
    /// threads waiting on one are woken with SIGBUS (raw access) or [`Error::Closed`] (checked
    /// accessors). Idempotent; returns once the background threads have ended.
    pub fn close(&self) {
        self.core.closing.store(true, Ordering::Release);
        let threads: Vec<_> = self
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for t in threads {
            let _ = t.join();
        }
        self.core.poison_missing();
        self.core.notify();
    }
}

impl Drop for LazyRegion {
    fn drop(&mut self) {
        self.close();
        if let Some(slot) = self.slot.take() {
            crate::sigbus::unregister(slot);
        }
        let _ = sys::unregister(
            self.core.uffd.as_raw_fd(),
            self.core.base,
            (self.core.units * self.core.unit) as u64,
        );
    }
}

/// In SIGBUS mode the SIGBUS handler hands each fault in the region to its core.
impl crate::sigbus::Resolver for Core {
    fn resolve(&self, addr: u64) -> bool {
        self.on_fault(addr, true)
    }
}

impl Core {
    fn state(&self, u: usize) -> u8 {
        self.states[u].load(Ordering::Acquire)
    }
    fn claim(&self, u: usize) -> bool {
        self.states[u]
            .compare_exchange(MISSING, INFLIGHT, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
    fn notify(&self) {
        if self.waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        let _g = self.cv.0.lock().unwrap_or_else(|p| p.into_inner());
        self.cv.1.notify_all();
    }
    /// Waits for a state change or `t` (a change missed between the caller's check and the wait
    /// costs at most `t`).
    fn wait_change(&self, t: Duration) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let g = self.cv.0.lock().unwrap_or_else(|p| p.into_inner());
        let _ = self.cv.1.wait_timeout(g, t);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
    fn addr(&self, u: usize) -> u64 {
        self.base + (u * self.unit) as u64
    }
    fn record_error(&self, msg: String) {
        tracing::error!("lazy region: {msg}");
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(msg);
    }

    /// Resolves a fault at `addr`. Returns false only when the unit is poisoned (or outside the
    /// region), in which case the SIGBUS must go on to its default outcome.
    pub(crate) fn on_fault(&self, addr: u64, sigbus: bool) -> bool {
        if addr < self.base {
            return false;
        }
        let u = ((addr - self.base) / self.unit as u64) as usize;
        if u >= self.units {
            return false;
        }
        self.c.faults.fetch_add(1, Ordering::Relaxed);
        self.push_hint.store(u as u64 + 1, Ordering::Release);
        loop {
            match self.state(u) {
                MISSING => {
                    if !self.claim(u) {
                        continue;
                    }
                    if let Some(r) = &self.record {
                        r.lock().unwrap_or_else(|p| p.into_inner()).push(u);
                    }
                    return self.resolve_claimed(u).is_ok();
                }
                INFLIGHT => {
                    if !sigbus {
                        // The claimant's install wakes the faulting thread.
                        return true;
                    }
                    self.wait_inflight(u);
                    continue;
                }
                PRESENT => {
                    // The page is gone (discarded) or this fault raced with its install:
                    // install again, tolerating EEXIST, which also wakes the waiter.
                    if self.states[u]
                        .compare_exchange(PRESENT, INFLIGHT, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        continue;
                    }
                    self.c.refetches.fetch_add(1, Ordering::Relaxed);
                    return self.fill_run(u, 1, true).is_ok();
                }
                _ => return false,
            }
        }
    }

    fn wait_inflight(&self, u: usize) {
        // Bounded: the claimant either installs or poisons within its deadline.
        let end = Instant::now() + self.deadline + Duration::from_secs(1);
        let mut spins = 0u32;
        while self.state(u) == INFLIGHT && Instant::now() < end {
            if spins < 200 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Fetches a claimed unit together with the prefetch policy's units.
    fn resolve_claimed(&self, u: usize) -> Result<()> {
        if !self.prefetching {
            return self.fill_run(u, 1, false);
        }
        let mut want = Vec::new();
        self.prefetch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .on_fault(u, self.units, &mut want);
        // Units right after the fault go in the same request; the others in their own.
        let mut end = u + 1;
        let mut rest = Vec::new();
        for p in want {
            if p == end && self.claim(p) {
                end += 1;
            } else if p != u {
                rest.push(p);
            }
        }
        let r = self.fill_run(u, end - u, false);
        self.c
            .units_prefetched
            .fetch_add((end - u - 1) as u64, Ordering::Relaxed);
        for p in rest {
            if self.claim(p) && self.fill_run(p, 1, false).is_ok() {
                self.c.units_prefetched.fetch_add(1, Ordering::Relaxed);
            }
        }
        r
    }

    /// Makes unit `u` present from a checked accessor (no fault involved).
    fn ensure(&self, u: usize) -> Result<()> {
        let end = Instant::now() + self.deadline + Duration::from_secs(1);
        loop {
            match self.state(u) {
                PRESENT => return Ok(()),
                POISONED if self.closing.load(Ordering::Acquire) => return Err(Error::Closed),
                POISONED => {
                    return Err(Error::Poisoned {
                        offset: (u * self.unit) as u64,
                    })
                }
                MISSING => {
                    if self.claim(u) {
                        return self.fill_run(u, 1, false);
                    }
                }
                _ => {
                    if self.closing.load(Ordering::Acquire) && Instant::now() >= end {
                        return Err(Error::Closed);
                    }
                    if Instant::now() >= end {
                        return Err(Error::Unavailable {
                            offset: (u * self.unit) as u64,
                            waited: self.deadline,
                            last: "another thread's fetch of this unit did not finish".into(),
                        });
                    }
                    self.wait_change(Duration::from_millis(5));
                }
            }
        }
    }
}
