//! SIGBUS handlers: `sigaction` with `SA_SIGINFO`, and the `extern "C"` entry points the kernel
//! calls, which read the `siginfo_t`, save and restore `errno`, and pass on what the handler
//! declines (none of which rustix provides). The Rust side of a handler is a [`SigbusHandler`].
//!
//! The entry points themselves neither allocate nor lock: they read the signal's arguments and
//! `errno`, call the handler, and forward with the previous action, which is set once and only
//! read here.
use std::io;
use std::sync::OnceLock;

/// The Rust side of a SIGBUS handler. It runs in signal context, on the faulting thread.
pub trait SigbusHandler {
    /// Handles a SIGBUS at `addr` with `si_code` `code`: true if the fault was resolved (the
    /// access is retried on return), false to pass the signal on.
    fn on_sigbus(addr: u64, code: i32) -> bool;
}

/// The SIGBUS action before [`install_sigbus`]: what the signals our handler declines go to.
static PREV: OnceLock<libc::sigaction> = OnceLock::new();

/// True once [`install_sigbus`] has installed the process's handler.
pub fn sigbus_installed() -> bool {
    PREV.get().is_some()
}

/// Installs `H` as the process's SIGBUS handler, keeping the previous action: a signal `H`
/// declines goes to that handler or, if it was the default, the default is restored and the
/// access ends the process with SIGBUS. Called once (callers serialize and check
/// [`sigbus_installed`] first).
pub fn install_sigbus<H: SigbusHandler>() -> io::Result<()> {
    // SAFETY: sigaction with fully initialised structs; the handler is an `extern "C"` function
    // with the SA_SIGINFO signature.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus::<H> as *const () as usize;
        // SA_NODEFER: resolving a fault may read a guarded mapping whose file shrank; that
        // nested SIGBUS must reach us too, where a blocked one would end the process.
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &act, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        let _ = PREV.set(old);
    }
    Ok(())
}

extern "C" fn on_sigbus<H: SigbusHandler>(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    uctx: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; errno is thread-local
    // and restored before returning so the interrupted code does not see our syscalls' errors.
    let (addr, code, errno) = unsafe {
        (
            (*info).si_addr() as u64,
            (*info).si_code,
            *libc::__errno_location(),
        )
    };
    let handled = H::on_sigbus(addr, code);
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

/// The SIGBUS action [`swap_sigbus`] replaced; [`restore`](Self::restore) puts it back.
pub struct SavedSigbus(libc::sigaction);

/// Replaces the process's SIGBUS action with a bare `H` until [`SavedSigbus::restore`]: plain
/// `SA_SIGINFO`, no `errno` save, no forwarding, `H`'s answer ignored. For timing the mechanism
/// alone (the yardsticks); it displaces [`install_sigbus`]'s handler while it is in place.
pub fn swap_sigbus<H: SigbusHandler>() -> io::Result<SavedSigbus> {
    // SAFETY: installs an SA_SIGINFO handler with fully initialised structs, keeping the old
    // one to restore.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus_bare::<H> as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &act, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SavedSigbus(old))
    }
}

impl SavedSigbus {
    /// Puts the saved action back.
    pub fn restore(self) {
        // SAFETY: restores the action saved by swap_sigbus, a valid sigaction.
        unsafe { libc::sigaction(libc::SIGBUS, &self.0, std::ptr::null_mut()) };
    }
}

extern "C" fn on_sigbus_bare<H: SigbusHandler>(
    _: libc::c_int,
    info: *mut libc::siginfo_t,
    _: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let (addr, code) = unsafe { ((*info).si_addr() as u64, (*info).si_code) };
    H::on_sigbus(addr, code);
}
