//! Sleeping on a socket and an eventfd at once (`ppoll`): how every transport's waiting thread
//! sleeps, the udp device's and a stream queue pair's alike.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};

/// Waits until `fd` is readable, writable (when `write`), `also` (an eventfd) is readable, or
/// `timeout` passes; returns (readable, writable) for `fd`.
pub(crate) fn wait_io(
    fd: BorrowedFd<'_>,
    write: bool,
    also: Option<BorrowedFd<'_>>,
    timeout: Option<Duration>,
) -> io::Result<(bool, bool)> {
    let events = PollFlags::IN
        | if write {
            PollFlags::OUT
        } else {
            PollFlags::empty()
        };
    // `also`'s slot repeats `fd` when there is no eventfd; only the first `n` are polled.
    let mut pfd = [
        PollFd::from_borrowed_fd(fd, events),
        PollFd::from_borrowed_fd(also.unwrap_or(fd), PollFlags::IN),
    ];
    let n = if also.is_some() { 2 } else { 1 };
    let ts = timeout.map(|t| Timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: t.subsec_nanos().into(),
    });
    match rustix::event::poll(&mut pfd[..n], ts.as_ref()) {
        Ok(_) => {}
        Err(rustix::io::Errno::INTR) => return Ok((false, false)),
        Err(e) => return Err(e.into()),
    }
    let re = pfd[0].revents();
    let hup = re.intersects(PollFlags::HUP | PollFlags::ERR);
    Ok((
        re.contains(PollFlags::IN) || hup,
        re.contains(PollFlags::OUT) || hup,
    ))
}
