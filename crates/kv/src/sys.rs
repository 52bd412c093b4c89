//! The raw system calls that rustix does not make, each behind a small safe wrapper (the
//! `unsafe` and its reasoning live here, not in the callers). `fork` and the SIGHUP
//! disposition: rustix has them only as `unsafe` `kernel_fork`/`kernel_sigaction` in its
//! experimental `runtime` feature, meant for a libc replacement (they bypass libc's atfork and
//! signal bookkeeping). The user lookup: rustix has no name-service calls (the password
//! database is libc's NSS, not the kernel's). `setgid`/`setuid`: rustix's
//! (`thread::set_thread_uid`/`set_thread_gid`) are the raw syscalls, which Linux applies to the
//! calling thread only, while glibc's apply to every thread of the process; the server drops
//! privileges before it starts threads, but the process-wide call keeps every thread
//! unprivileged whatever started first. `getrusage`: rustix 1 has none. Everything else (socket
//! calls, poll, madvise, mlockall, dup2 over stdio, ...) goes through rustix at its call site.
//! The io_uring driver (`server/uring.rs`) gets its ring from the `io-uring` crate, whose
//! `SendMsg` takes a libc `msghdr`: [`MsgHdr`] builds that header here.

use std::ffi::CString;
use std::io;
use std::time::Duration;

use rustix::process::{Gid, Pid, Uid};

/// `fork`: the child's pid in the parent, `None` in the child. Call it only while the process
/// runs one thread ([`crate::daemon::daemonize`] checks): the child gets a copy of the calling
/// thread only.
pub(crate) fn fork() -> io::Result<Option<Pid>> {
    // SAFETY: fork takes no arguments; the caller checked that this is the only thread, so
    // the child's copy holds no lock another thread held.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        pid => Ok(Pid::from_raw(pid)),
    }
}

/// Ignores SIGHUP (the session's end), as memcached's daemon does.
pub(crate) fn ignore_sighup() -> io::Result<()> {
    // SAFETY: SIG_IGN is a valid disposition for SIGHUP; no handler code runs.
    if unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The user and group ids of the user `name` (the password database, through libc's NSS);
/// `NotFound` when there is no such user.
pub(crate) fn user_ids(name: &str) -> io::Result<(Uid, Gid)> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // getpwnam_r, not getpwnam: its strings go to our buffer, not to static storage another
    // thread's getpw* call could overwrite.
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: all-zero is a valid passwd (null pointers, zero ids); getpwnam_r fills it.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `cname` is NUL-terminated; `pw`, `buf` (with its length) and `found` are
        // ours and live for the call; the strings it writes go into `buf` only.
        let rc = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        match rc {
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            0 if found.is_null() => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no user {name}"),
                ))
            }
            0 => return Ok((Uid::from_raw(pw.pw_uid), Gid::from_raw(pw.pw_gid))),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// `setgid(gid)` then `setuid(uid)`, glibc's: for every thread of the process (Linux's raw
/// syscalls, which rustix makes, change the calling thread only).
pub(crate) fn set_ids(uid: Uid, gid: Gid) -> io::Result<()> {
    // SAFETY: plain calls on integer ids; failures are checked.
    if unsafe { libc::setgid(gid.as_raw()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::setuid(uid.as_raw()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This process's user and system CPU time (`getrusage(RUSAGE_SELF)`).
pub(crate) fn cpu_times() -> io::Result<(Duration, Duration)> {
    // SAFETY: all-zero is a valid rusage; getrusage writes into the struct we own and
    // RUSAGE_SELF is always a valid target.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return Err(io::Error::last_os_error());
        }
        ru
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Ok((time(ru.ru_utime), time(ru.ru_stime)))
}

/// The iovec array and `msghdr` of an io_uring `SendMsg` (the `io-uring` crate takes a libc
/// `msghdr`; rustix's `sendmsg` builds its own and makes the call at once). Both live on the
/// heap, so the header's address and its iovec pointer stay put when the owner moves.
pub(crate) struct MsgHdr {
    iov: Vec<libc::iovec>,
    msg: Box<libc::msghdr>,
}

impl MsgHdr {
    /// A header with room for `n` pieces and nothing to send yet.
    pub(crate) fn with_capacity(n: usize) -> MsgHdr {
        MsgHdr {
            iov: Vec::with_capacity(n),
            // SAFETY: msghdr is a plain C struct for which all-zero is valid (no name, no
            // control data, no pieces); `point_at` sets its iovec pointer before each use.
            msg: Box::new(unsafe { std::mem::zeroed() }),
        }
    }

    /// Points the header at `pieces` and returns it for the submission. The kernel reads the
    /// pieces through it when the operation runs: the caller keeps them (and `self`)
    /// unchanged until it completes.
    pub(crate) fn point_at<'a>(
        &mut self,
        pieces: impl Iterator<Item = &'a [u8]>,
    ) -> *const libc::msghdr {
        self.iov.clear();
        self.iov.extend(pieces.map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        }));
        self.msg.msg_iov = self.iov.as_mut_ptr();
        self.msg.msg_iovlen = self.iov.len() as _;
        &*self.msg
    }
}
