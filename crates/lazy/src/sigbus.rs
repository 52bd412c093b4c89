//! `UFFD_FEATURE_SIGBUS` resolution: the faulting thread gets SIGBUS and resolves its own fault in
//! a process-wide signal handler, which finds the region by address in a fixed table.
//!
//! The handler runs on the faulting thread and may take the region's locks and allocate; that is
//! sound as long as lazy memory is not touched from inside another signal handler or from inside
//! the allocator. Signals it does not own (addresses outside every region, and `BUS_MCEERR_*`
//! from poisoned units) are passed to the handler that was installed before; if that was the
//! default, the default is restored and the access ends the process with SIGBUS, as documented.
//!
//! The same handler guards the fabric page server's live file mappings: a SIGBUS inside one means
//! the file shrank below the mapped length while served. The page is replaced by a private zero
//! page, so the READ in progress completes with zeros (as `pread` past the end reads nothing)
//! instead of killing the server; the page stays zero for the server's life.
//!
//! A region is published as an untyped owner pointer with the function that resolves its
//! faults (a [`Resolver`]), so this table knows nothing of regions. The signal entry point
//! itself (`sigaction`, `siginfo_t`, `errno`) is in [`sys`](crate::sys).
use crate::sys;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

const SLOTS: usize = 64;

/// The owner of a published range (a lazy region's shared state), which resolves the faults in
/// its range from inside the SIGBUS handler.
pub(crate) trait Resolver: Sync {
    /// Resolves a fault at `addr`; false when it cannot (a poisoned unit, or an address outside
    /// its units), and the SIGBUS must go on to its default outcome.
    fn resolve(&self, addr: u64) -> bool;
}

/// [`Resolver::resolve`] of an owner held as an untyped pointer, as a slot keeps it.
type ResolveFn = unsafe fn(owner: *const (), addr: u64) -> bool;

/// # Safety
/// `owner` must point at a live `R`.
unsafe fn resolve_as<R: Resolver>(owner: *const (), addr: u64) -> bool {
    // SAFETY: the caller's guarantee.
    unsafe { (*owner.cast::<R>()).resolve(addr) }
}

struct Slot {
    start: AtomicU64,
    end: AtomicU64,
    /// The owner (null: free); published last.
    owner: AtomicPtr<()>,
    /// The owner's [`ResolveFn`], stored as a pointer.
    resolve: AtomicPtr<()>,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicU64::new(0),
    end: AtomicU64::new(0),
    owner: AtomicPtr::new(std::ptr::null_mut()),
    resolve: AtomicPtr::new(std::ptr::null_mut()),
};
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Handlers currently running (unregistering waits for them).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
static TABLE_LOCK: Mutex<()> = Mutex::new(());

/// A served file mapping (`end == 0`: free).
struct Served {
    start: AtomicU64,
    end: AtomicU64,
}
#[allow(clippy::declare_interior_mutable_const)]
const FREE: Served = Served {
    start: AtomicU64::new(0),
    end: AtomicU64::new(0),
};
static SERVED: [Served; SLOTS] = [FREE; SLOTS];

const BUS_MCEERR_AR: i32 = 4;
const BUS_MCEERR_AO: i32 = 5;

/// Installs the handler once (keeping the previous one to forward to).
fn install() -> std::io::Result<()> {
    if sys::sigbus_installed() {
        return Ok(());
    }
    let _g = TABLE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if sys::sigbus_installed() {
        return Ok(());
    }
    sys::install_sigbus::<Dispatch>()
}

/// Publishes a region's address range and its owner, which must stay valid until
/// [`unregister`] has returned; returns its slot.
pub(crate) fn register<R: Resolver>(
    start: u64,
    end: u64,
    owner: *const R,
) -> std::io::Result<usize> {
    install()?;
    let _g = TABLE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    for (i, s) in TABLE.iter().enumerate() {
        if s.owner.load(Ordering::Acquire).is_null() {
            s.start.store(start, Ordering::Relaxed);
            s.end.store(end, Ordering::Relaxed);
            let resolve: ResolveFn = resolve_as::<R>;
            s.resolve.store(resolve as *mut (), Ordering::Relaxed);
            s.owner.store(owner as *mut (), Ordering::Release);
            return Ok(i);
        }
    }
    Err(std::io::Error::other(format!(
        "at most {SLOTS} SIGBUS-mode lazy regions at a time"
    )))
}

/// Removes a slot and waits until no handler can still be using its region.
pub(crate) fn unregister(slot: usize) {
    let _g = TABLE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    TABLE[slot]
        .owner
        .store(std::ptr::null_mut(), Ordering::SeqCst);
    while ACTIVE.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
}

/// Publishes a served file mapping `[start, end)`; None when the table is full (the mapping is
/// then unguarded: a shrinking file ends the process with SIGBUS).
#[cfg_attr(not(feature = "fabric"), allow(dead_code))]
fn register_served(start: u64, end: u64) -> std::io::Result<Option<usize>> {
    install()?;
    let _g = TABLE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    for (i, s) in SERVED.iter().enumerate() {
        if s.end.load(Ordering::Acquire) == 0 {
            s.start.store(start, Ordering::Relaxed);
            s.end.store(end, Ordering::Release);
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Removes a served mapping and waits until no handler can still be replacing one of its pages
/// (the caller unmaps it next).
#[cfg_attr(not(feature = "fabric"), allow(dead_code))]
fn unregister_served(slot: usize) {
    let _g = TABLE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    SERVED[slot].end.store(0, Ordering::SeqCst);
    while ACTIVE.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
}

/// A file mapped shared and read-only, guarded by this handler: if the file shrinks under it,
/// a touched page past the new end reads as zeros instead of ending the process. Used for the
/// fabric server's live source and for a shm client's mapping of it.
#[cfg_attr(not(feature = "fabric"), allow(dead_code))]
pub(crate) struct GuardedMap {
    map: crate::sys::Mapping,
    slot: Option<usize>,
}

#[cfg_attr(not(feature = "fabric"), allow(dead_code))]
impl GuardedMap {
    /// Maps the first `len` bytes of `fd` (rounded up to whole pages).
    pub fn open(fd: std::os::fd::RawFd, len: usize) -> std::io::Result<GuardedMap> {
        let map = crate::sys::Mapping::file_shared_readonly(fd, len)?;
        let start = map.ptr() as u64;
        let slot = register_served(start, start + map.mapped_len() as u64)?;
        if slot.is_none() {
            tracing::warn!(
                "too many guarded file mappings: this one ends the process with SIGBUS \
                 if its file shrinks"
            );
        }
        Ok(GuardedMap { map, slot })
    }
    pub fn ptr(&self) -> *mut u8 {
        self.map.ptr()
    }
    /// Length in bytes (whole pages).
    pub fn mapped_len(&self) -> usize {
        self.map.mapped_len()
    }
}

impl Drop for GuardedMap {
    fn drop(&mut self) {
        // Unguard before `map` unmaps (fields drop after this).
        if let Some(s) = self.slot {
            unregister_served(s);
        }
    }
}

/// Replaces the page holding `addr` with a zero page if it lies in a served mapping.
fn zero_served_page(addr: u64) -> bool {
    for s in SERVED.iter() {
        let end = s.end.load(Ordering::SeqCst);
        if end != 0 && s.start.load(Ordering::Relaxed) <= addr && addr < end {
            let page = addr & !4095;
            // SAFETY: the page lies inside a live served mapping (it stays mapped until
            // unregister_served has seen ACTIVE reach zero, and we hold ACTIVE); the mapping is
            // read-only and its file no longer backs this page, so replacing it with zeros
            // changes nothing a reader could have seen except the SIGBUS.
            let p = unsafe {
                rustix::mm::mmap_anonymous(
                    page as *mut std::ffi::c_void,
                    4096,
                    rustix::mm::ProtFlags::READ,
                    rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::FIXED,
                )
            };
            return p.is_ok();
        }
    }
    false
}

/// The process's SIGBUS handler: the region that holds the address resolves the fault, else a
/// served mapping's page is replaced with zeros, else the signal is passed on.
struct Dispatch;

impl sys::SigbusHandler for Dispatch {
    fn on_sigbus(addr: u64, code: i32) -> bool {
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        let mut handled = false;
        if code != BUS_MCEERR_AR && code != BUS_MCEERR_AO {
            for s in TABLE.iter() {
                let p = s.owner.load(Ordering::SeqCst);
                if p.is_null() {
                    continue;
                }
                if s.start.load(Ordering::Relaxed) <= addr && addr < s.end.load(Ordering::Relaxed) {
                    // SAFETY: a published owner stays valid until unregister() has cleared it
                    // and seen ACTIVE reach zero, and we hold ACTIVE; its `resolve` was stored
                    // before it was published (register()), a `ResolveFn` for its type.
                    handled = unsafe {
                        let resolve = std::mem::transmute::<*mut (), ResolveFn>(
                            s.resolve.load(Ordering::Relaxed),
                        );
                        resolve(p, addr)
                    };
                    break;
                }
            }
            if !handled {
                handled = zero_served_page(addr);
            }
        }
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
        handled
    }
}
