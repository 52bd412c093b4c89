//! Crate-wide system calls that rustix does not wrap, each behind a small safe fn (the native
//! receiver's `recvmmsg` has its own, [`crate::native`]'s `sys`).

/// Puts the calling thread in the idle scheduling class (`SCHED_IDLE`, priority 0): it runs
/// only on cycles other threads leave. rustix has no `sched_setscheduler`.
#[cfg(feature = "http")]
pub(crate) fn set_idle_scheduling() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads `param` only during the call; on Linux, pid 0 is the
    // calling thread (scheduling policies are per thread).
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
