//! The byte stream under a stream queue pair: TCP for `tcp`, a unix socket for `shm`.
//!
//! On the unix socket every read is a `recvmsg`, so descriptors a peer hands over with
//! `SCM_RIGHTS` (its memfds, announced by MAP frames) are collected instead of being dropped by
//! a plain `read`. The kernel delivers a descriptor with the first read that returns the bytes
//! it was sent with, so it is queued before the frame it belongs to is parsed. The queue is
//! bounded: a peer that sends descriptors without frames loses them (closed) and cannot grow it.
use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Descriptors received but not yet claimed by a frame, at most this many.
const MAX_QUEUED_FDS: usize = 16;
/// Descriptors accepted in one `recvmsg`; more are truncated (closed) by the kernel.
const FDS_PER_READ: usize = 4;

/// One side of a stream queue pair's connection.
pub(crate) enum Sock {
    Tcp(TcpStream),
    Unix {
        s: UnixStream,
        /// Shared by the clones of this socket, so the reader's descriptors are visible to
        /// whoever parses frames.
        fds: Arc<Mutex<VecDeque<OwnedFd>>>,
    },
}

impl Sock {
    pub(crate) fn unix(s: UnixStream) -> Sock {
        Sock::Unix {
            s,
            fds: Arc::new(Mutex::new(VecDeque::new())),
        }
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.shutdown(how),
            Sock::Unix { s, .. } => s.shutdown(how),
        }
    }

    /// The oldest descriptor the peer handed over and no frame claimed yet.
    pub(crate) fn take_fd(&self) -> Option<OwnedFd> {
        match self {
            Sock::Tcp(_) => None,
            Sock::Unix { fds, .. } => fds.lock().unwrap_or_else(|e| e.into_inner()).pop_front(),
        }
    }

    /// The descriptor to wait on.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Sock::Tcp(s) => s.as_fd(),
            Sock::Unix { s, .. } => s.as_fd(),
        }
    }

    /// Reads what is there into `buf` (at most one system call): `Ok(0)` at the end of the
    /// stream, `WouldBlock` when `block` is false and nothing is waiting. Descriptors that
    /// come with the bytes (unix) are queued for [`Sock::take_fd`].
    pub(crate) fn recv_some(&self, buf: &mut [u8], block: bool) -> io::Result<usize> {
        let flags = if block {
            RecvFlags::empty()
        } else {
            RecvFlags::DONTWAIT
        };
        match self {
            Sock::Tcp(s) => loop {
                match rustix::net::recv(s, &mut *buf, flags) {
                    Ok((n, _)) => return Ok(n),
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            },
            Sock::Unix { s, fds } => {
                let (n, got) = recv_fds_with(s, buf, flags)?;
                queue_fds(fds, got);
                Ok(n)
            }
        }
    }

    /// Sends what it can of `bufs` without blocking (`WouldBlock` when nothing went), with
    /// `fd` attached to the first byte (unix only).
    pub(crate) fn send_some(
        &self,
        bufs: &[IoSlice<'_>],
        fd: Option<BorrowedFd<'_>>,
    ) -> io::Result<usize> {
        let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(io::Error::other("control buffer too small"));
        }
        let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
        let fd = match self {
            Sock::Tcp(s) => s.as_fd(),
            Sock::Unix { s, .. } => s.as_fd(),
        };
        loop {
            match sendmsg(fd, bufs, &mut cmsg, flags) {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Sends `bytes` with `fd` attached (unix only); the caller flushed what was buffered.
    #[cfg(test)]
    pub(crate) fn send_with_fd(&self, bytes: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
        let Sock::Unix { s, .. } = self else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "descriptors travel only over a unix socket",
            ));
        };
        send_fds(s, bytes, &[fd])
    }
}

/// Sends `bytes` over `s` with `fds` attached to their first byte.
pub(crate) fn send_fds(s: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other(
            "control buffer too small for the descriptors",
        ));
    }
    let n = loop {
        match sendmsg(s, &[IoSlice::new(bytes)], &mut cmsg, SendFlags::NOSIGNAL) {
            Ok(n) => break n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    // The descriptors went with the first bytes; the rest is plain data.
    (&*s).write_all(&bytes[n..])
}

/// Reads into `buf` with `recvmsg`, returning the byte count and the descriptors that came
/// with those bytes.
pub(crate) fn recv_fds(s: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    recv_fds_with(s, buf, RecvFlags::empty())
}

fn recv_fds_with(
    s: &UnixStream,
    buf: &mut [u8],
    flags: RecvFlags,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_READ))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let r = loop {
        match recvmsg(
            s,
            &mut [IoSliceMut::new(buf)],
            &mut cmsg,
            RecvFlags::CMSG_CLOEXEC | flags,
        ) {
            Ok(r) => break r,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut got = Vec::new();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            got.extend(fds);
        }
    }
    Ok((r.bytes, got))
}

/// Queues descriptors for the frames that claim them, up to the bound.
fn queue_fds(fds: &Mutex<VecDeque<OwnedFd>>, got: Vec<OwnedFd>) {
    if got.is_empty() {
        return;
    }
    let mut q = fds.lock().unwrap_or_else(|e| e.into_inner());
    for fd in got {
        if q.len() < MAX_QUEUED_FDS {
            q.push_back(fd);
        } else {
            tracing::debug!("peer sent descriptors no frame claims; closed");
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix { s, fds } => {
                let (n, got) = recv_fds(s, buf)?;
                queue_fds(fds, got);
                Ok(n)
            }
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix { s, .. } => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write_vectored(bufs),
            Sock::Unix { s, .. } => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, AsRawFd};

    #[test]
    fn a_descriptor_arrives_with_its_bytes_and_the_queue_is_bounded() {
        let (a, b) = UnixStream::pair().unwrap();
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        let tx = Sock::unix(a);
        for _ in 0..MAX_QUEUED_FDS + 5 {
            tx.send_with_fd(b"x", f.as_fd()).unwrap();
        }
        drop(tx);
        let mut rx = Sock::unix(b);
        let mut all = Vec::new();
        rx.read_to_end(&mut all).unwrap();
        assert_eq!(all.len(), MAX_QUEUED_FDS + 5);
        let mut n = 0;
        while let Some(fd) = rx.take_fd() {
            assert_ne!(fd.as_raw_fd(), f.as_raw_fd(), "a new descriptor, not ours");
            n += 1;
        }
        assert_eq!(n, MAX_QUEUED_FDS, "descriptors beyond the bound are closed");
    }

    #[test]
    fn tcp_carries_no_descriptors() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let s = Sock::Tcp(c);
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        assert!(s.send_with_fd(b"x", f.as_fd()).is_err());
        assert!(s.take_fd().is_none());
    }
}
