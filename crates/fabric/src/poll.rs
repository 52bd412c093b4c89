//! Sleeping on a socket and an eventfd at once (`ppoll`): how every transport's waiting thread
//! sleeps, the udp device's and a stream queue pair's alike.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Waits until `fd` is readable, writable (when `write`), `also` (an eventfd) is readable, or
/// `timeout` passes; returns (readable, writable) for `fd`.
pub(crate) fn wait_io(
    fd: RawFd,
    write: bool,
    also: Option<RawFd>,
    timeout: Option<Duration>,
) -> io::Result<(bool, bool)> {
    let events = libc::POLLIN | if write { libc::POLLOUT } else { 0 };
    let mut pfd = [
        libc::pollfd {
            fd,
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: also.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let n = if also.is_some() { 2 } else { 1 };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `n` valid pollfds; the timespec (if any) outlives the call.
    let r = unsafe { libc::ppoll(pfd.as_mut_ptr(), n, tsp, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok((false, false));
        }
        return Err(e);
    }
    let re = pfd[0].revents;
    let hup = re & (libc::POLLHUP | libc::POLLERR) != 0;
    Ok((
        re & libc::POLLIN != 0 || hup,
        re & libc::POLLOUT != 0 || hup,
    ))
}
