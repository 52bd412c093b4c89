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
use crate::region::Core;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

const SLOTS: usize = 64;

struct Slot {
    start: AtomicU64,
    end: AtomicU64,
    core: AtomicPtr<Core>,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicU64::new(0),
    end: AtomicU64::new(0),
    core: AtomicPtr::new(std::ptr::null_mut()),
};
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Handlers currently running (unregistering waits for them).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
static TABLE_LOCK: Mutex<()> = Mutex::new(());
static PREV: OnceLock<libc::sigaction> = OnceLock::new();

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
    if PREV.get().is_some() {
        return Ok(());
    }
    let _g = TABLE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if PREV.get().is_some() {
        return Ok(());
    }
    // SAFETY: sigaction with fully initialised structs; the handler is an `extern "C"` function
    // with the SA_SIGINFO signature.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        // SA_NODEFER: resolving a fault may read a guarded mapping whose file shrank; that
        // nested SIGBUS must reach us too, where a blocked one would end the process.
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &act, &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let _ = PREV.set(old);
    }
    Ok(())
}

/// Publishes a region's address range; returns its slot.
pub(crate) fn register(start: u64, end: u64, core: *const Core) -> std::io::Result<usize> {
    install()?;
    let _g = TABLE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    for (i, s) in TABLE.iter().enumerate() {
        if s.core.load(Ordering::Acquire).is_null() {
            s.start.store(start, Ordering::Relaxed);
            s.end.store(end, Ordering::Relaxed);
            s.core.store(core as *mut Core, Ordering::Release);
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
        .core
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
                libc::mmap(
                    page as *mut libc::c_void,
                    4096,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            return p != libc::MAP_FAILED;
        }
    }
    false
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; errno is thread-local
    // and restored before returning so the interrupted code does not see our syscalls' errors.
    let (addr, code, errno) = unsafe {
        (
            (*info).si_addr() as u64,
            (*info).si_code,
            *libc::__errno_location(),
        )
    };
    ACTIVE.fetch_add(1, Ordering::SeqCst);
    let mut handled = false;
    if code != BUS_MCEERR_AR && code != BUS_MCEERR_AO {
        for s in TABLE.iter() {
            let p = s.core.load(Ordering::SeqCst);
            if p.is_null() {
                continue;
            }
            if s.start.load(Ordering::Relaxed) <= addr && addr < s.end.load(Ordering::Relaxed) {
                // SAFETY: a published pointer stays valid until unregister() has cleared it and
                // seen ACTIVE reach zero, and we hold ACTIVE.
                handled = unsafe { (*p).on_fault(addr, true) };
                break;
            }
        }
        if !handled {
            handled = zero_served_page(addr);
        }
    }
    ACTIVE.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: restores this thread's errno (see above).
    unsafe {
        *libc::__errno_location() = errno;
    }
    if !handled {
        forward(sig, info, uctx);
    }
}

fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    let Some(prev) = PREV.get() else { return };
    let h = prev.sa_sigaction;
    if h != libc::SIG_DFL && h != libc::SIG_IGN {
        // SAFETY: calls the handler that was installed before ours, with the arguments its
        // registration asked for (three with SA_SIGINFO, one without).
        unsafe {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(h);
                f(sig, info, uctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
                f(sig);
            }
        }
        return;
    }
    // Default action: restore it; returning re-executes the access, which now ends the process.
    // SAFETY: resets SIGBUS to SIG_DFL with a zeroed, valid sigaction.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
    }
}
