//! The UDP system calls the fast path needs and std does not offer: `sendmmsg` with UDP GSO
//! (`UDP_SEGMENT` control messages), `recvmmsg` with UDP GRO, socket options, and `ppoll` with
//! nanosecond timeouts. Written against `libc` because neither std nor rustix exposes
//! per-message control data for these calls.
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

// Not in every libc release.
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// The kernel's per-send segment limit (UDP_MAX_SEGMENTS).
pub(crate) const GSO_MAX_SEGMENTS: usize = 64;
/// The largest UDP payload one GSO send may carry.
pub(crate) const GSO_MAX_BYTES: usize = 65_000;

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `v` lives across the call and its size is passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Large socket buffers: `SO_*BUFFORCE` (root, beyond `net.core.*mem_max`), else the capped ones.
pub(crate) fn set_buffers(fd: RawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if setsockopt_int(fd, libc::SOL_SOCKET, force, v).is_err() {
            let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, v);
        }
    }
}

/// Don't fragment, so the kernel sends IPv4 ID 0 from unconnected sockets and both ends can
/// compute the ICRC over the IP header.
pub(crate) fn set_dont_fragment(fd: RawFd, v6: bool) -> io::Result<()> {
    if v6 {
        setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
    } else {
        setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
    }
}

/// Asks the kernel to hand over coalesced datagrams (one buffer, many equal-size segments).
pub(crate) fn enable_gro(fd: RawFd) -> bool {
    setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, 1).is_ok()
}

/// True if this kernel accepts UDP segmentation offload on the socket.
pub(crate) fn gso_supported(fd: RawFd) -> bool {
    setsockopt_int(fd, libc::SOL_UDP, UDP_SEGMENT, 0).is_ok()
}

/// A socket address in the C layout.
pub(crate) struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawAddr {
    pub(crate) fn new(a: &SocketAddr) -> RawAddr {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let len = match a {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
                size_of::<libc::sockaddr_in6>()
            }
        };
        RawAddr {
            storage,
            len: len as libc::socklen_t,
        }
    }

    fn to_std(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
        match storage.ss_family as libc::c_int {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
                Some(SocketAddr::V4(SocketAddrV4::new(
                    sin.sin_addr.s_addr.to_ne_bytes().into(),
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
                Some(SocketAddr::V6(SocketAddrV6::new(
                    sin6.sin6_addr.s6_addr.into(),
                    u16::from_be(sin6.sin6_port),
                    u32::from_be(sin6.sin6_flowinfo),
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// Control-message space for one `int`/`u16` option.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct CmsgBuf([u8; 32]);

/// One outgoing send: a buffer holding one datagram, or several equal-size datagrams (the last
/// may be shorter) to be split by the kernel when `segment` is non-zero.
pub(crate) struct Send<'a> {
    pub data: &'a [u8],
    pub segment: u16,
}

/// Sends every entry to `dst` with as few `sendmmsg` calls as it takes. Blocks when the socket
/// send buffer is full.
pub(crate) fn send_batch(fd: RawFd, dst: &RawAddr, sends: &[Send<'_>]) -> io::Result<()> {
    const MAX: usize = 64;
    let mut done = 0;
    while done < sends.len() {
        let chunk = &sends[done..(done + MAX).min(sends.len())];
        // SAFETY: plain C structs; all-zero is valid for them.
        let mut iov: [libc::iovec; MAX] = unsafe { zeroed() };
        let mut cmsg = [CmsgBuf([0; 32]); MAX];
        let mut msgs: [libc::mmsghdr; MAX] = unsafe { zeroed() };
        for (i, s) in chunk.iter().enumerate() {
            iov[i] = libc::iovec {
                iov_base: s.data.as_ptr() as *mut libc::c_void,
                iov_len: s.data.len(),
            };
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = &dst.storage as *const _ as *mut libc::c_void;
            h.msg_namelen = dst.len;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
            if s.segment > 0 {
                h.msg_control = cmsg[i].0.as_mut_ptr() as *mut libc::c_void;
                // SAFETY: CMSG_SPACE is a pure size computation.
                h.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
                // SAFETY: msg_control points at 32 aligned bytes, enough for one u16 cmsg; the
                // header pointer comes from CMSG_FIRSTHDR over that buffer.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, s.segment);
                }
            }
        }
        // SAFETY: every msghdr points at live iovecs, address and control buffers of this frame.
        let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), chunk.len() as libc::c_uint, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += r as usize;
    }
    Ok(())
}

/// One received buffer: `len` bytes from `src`, made of `segment`-byte datagrams when the kernel
/// coalesced several (GRO), else one datagram (`segment` 0).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Recvd {
    pub len: usize,
    pub segment: usize,
    pub src: Option<SocketAddr>,
}

/// Receives up to `bufs.len()` buffers without blocking; returns how many arrived (0 if none).
pub(crate) fn recv_batch(
    fd: RawFd,
    bufs: &mut [Vec<u8>],
    out: &mut Vec<Recvd>,
) -> io::Result<usize> {
    const MAX: usize = 64;
    let n = bufs.len().min(MAX);
    // SAFETY: plain C structs; all-zero is valid for them.
    let mut iov: [libc::iovec; MAX] = unsafe { zeroed() };
    let mut names: [libc::sockaddr_storage; MAX] = unsafe { zeroed() };
    let mut cmsg = [CmsgBuf([0; 32]); MAX];
    let mut msgs: [libc::mmsghdr; MAX] = unsafe { zeroed() };
    for i in 0..n {
        iov[i] = libc::iovec {
            iov_base: bufs[i].as_mut_ptr() as *mut libc::c_void,
            iov_len: bufs[i].len(),
        };
        let h = &mut msgs[i].msg_hdr;
        h.msg_name = &mut names[i] as *mut _ as *mut libc::c_void;
        h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = 1;
        h.msg_control = cmsg[i].0.as_mut_ptr() as *mut libc::c_void;
        h.msg_controllen = 32;
    }
    // SAFETY: every msghdr points at live buffers of this frame with their true sizes.
    let r = unsafe {
        libc::recvmmsg(
            fd,
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
    out.clear();
    for i in 0..r as usize {
        let h = &msgs[i].msg_hdr;
        let mut segment = 0;
        // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG macros walk it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                    segment =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int) as usize;
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        out.push(Recvd {
            len: msgs[i].msg_len as usize,
            segment,
            src: RawAddr::to_std(&names[i]),
        });
    }
    Ok(r as usize)
}
