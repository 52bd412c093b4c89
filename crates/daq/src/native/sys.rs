//! The one system call rustix does not wrap: `recvmmsg(2)`, many datagrams in one call.
//! All of this module's `unsafe` is here.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Most datagrams one call takes.
pub(super) const MAX_BATCH: usize = 64;

/// One received datagram: its length in its buffer, and whether the kernel cut it to fit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Received {
    pub len: usize,
    pub truncated: bool,
}

/// Receives up to `out.len()` (at most [`MAX_BATCH`]) datagrams from `fd` without blocking,
/// datagram `i` into `bufs[i * cap..(i + 1) * cap]`. Returns how many came (0 when none was
/// waiting or a signal interrupted).
pub(super) fn recvmmsg(
    fd: BorrowedFd<'_>,
    bufs: &mut [u8],
    cap: usize,
    out: &mut [Received],
) -> io::Result<usize> {
    let n = out.len().min(MAX_BATCH).min(bufs.len() / cap.max(1));
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: `iovec` and `mmsghdr` are plain C structs for which all-zero bytes are a valid
    // value (null pointers, zero lengths).
    let mut iov: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    for (i, (v, chunk)) in iov
        .iter_mut()
        .zip(bufs.chunks_exact_mut(cap))
        .take(n)
        .enumerate()
    {
        v.iov_base = chunk.as_mut_ptr().cast();
        v.iov_len = cap;
        msgs[i].msg_hdr.msg_iov = v;
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `msgs[..n]` each point at one `iovec` of `iov`, which points at a distinct
    // `cap`-byte chunk of `bufs`; all three outlive the call and nothing else touches them
    // during it. No source address is asked for (`msg_name` null), no control data, no
    // timeout. The kernel writes only inside those buffers and the `mmsghdr`s.
    let r = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    let got = r as usize;
    for (o, m) in out.iter_mut().zip(&msgs[..got]) {
        *o = Received {
            len: (m.msg_len as usize).min(cap),
            truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        };
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn receives_a_batch_and_flags_truncation() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let cap = 16;
        let mut bufs = vec![0u8; 4 * cap];
        let mut out = [Received::default(); 4];
        assert_eq!(recvmmsg(rx.as_fd(), &mut bufs, cap, &mut out).unwrap(), 0);
        tx.send(b"one").unwrap();
        tx.send(&[7u8; 40]).unwrap();
        tx.send(b"").unwrap();
        // Loopback delivers at once, but give the kernel a moment anyway.
        let mut got = 0;
        for _ in 0..100 {
            got += recvmmsg(rx.as_fd(), &mut bufs[got * cap..], cap, &mut out[got..]).unwrap();
            if got == 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got, 3);
        assert_eq!(&bufs[..3], b"one");
        assert_eq!(
            out[0],
            Received {
                len: 3,
                truncated: false
            }
        );
        assert_eq!(
            out[1],
            Received {
                len: 16,
                truncated: true
            }
        );
        assert_eq!(&bufs[cap..2 * cap], &[7u8; 16]);
        assert_eq!(
            out[2],
            Received {
                len: 0,
                truncated: false
            }
        );
    }
}
