//! The receiving end of a JUNGFRAU stream: one UDP socket per module (as a real detector sends,
//! each module to its own port), large kernel buffers, datagrams taken in batches with
//! `recvmmsg(2)` after a `poll(2)` over all the sockets. What to do with a datagram is the
//! caller's business (usually [`Reassembler::push`](super::Reassembler::push)).
//!
//! Meant for one receiver thread: [`NativeSocket::recv_batch`] blocks at most its timeout, so
//! the thread can also watch deadlines and its other work in between.
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::net::sockopt;

use super::packet::PACKET_LEN;
use super::sys::{self, Received, MAX_BATCH};

/// Kernel receive buffer asked for each socket: 64 MiB, about 60 frames of one module. Linux
/// caps it at `net.core.rmem_max` unless the process may override that (CAP_NET_ADMIN).
pub const RECV_BUFFER_WANTED: usize = 64 << 20;

/// Room for one datagram: a JUNGFRAU packet fits with a margin, so that a longer datagram
/// arrives whole (and is refused by length) rather than cut.
const DATAGRAM_CAP: usize = PACKET_LEN + 1024;

/// Counters of a [`NativeSocket`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvStats {
    /// Datagrams handed to the caller.
    pub datagrams: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Datagrams longer than a datagram buffer, cut by the kernel and not handed on.
    pub truncated: u64,
    /// `recvmmsg` calls that returned datagrams.
    pub batches: u64,
}

/// The bound sockets of one detector, one per module.
pub struct NativeSocket {
    sockets: Vec<UdpSocket>,
    ports: Vec<u16>,
    recv_buffer: usize,
    bufs: Vec<u8>,
    received: Vec<Received>,
    stats: RecvStats,
}

impl NativeSocket {
    /// Binds `modules` UDP sockets on `ip`: module `m` on `base_port + m`, or each on a port
    /// the kernel picks when `base_port` is 0 (see [`ports`](Self::ports)). Each asks for a
    /// [`RECV_BUFFER_WANTED`] receive buffer, past `rmem_max` where allowed.
    pub fn bind(ip: IpAddr, base_port: u16, modules: usize) -> io::Result<NativeSocket> {
        let mut sockets = Vec::with_capacity(modules);
        let mut ports = Vec::with_capacity(modules);
        let mut recv_buffer = usize::MAX;
        for m in 0..modules {
            let port = if base_port == 0 {
                0
            } else {
                u16::try_from(usize::from(base_port) + m).map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("port {base_port} + module {m} is past 65535"),
                    )
                })?
            };
            let s = UdpSocket::bind(SocketAddr::new(ip, port)).map_err(|e| {
                io::Error::new(e.kind(), format!("module {m} socket on {ip}:{port}: {e}"))
            })?;
            if sockopt::set_socket_recv_buffer_size_force(&s, RECV_BUFFER_WANTED).is_err() {
                // Unprivileged: as much as net.core.rmem_max allows.
                let _ = sockopt::set_socket_recv_buffer_size(&s, RECV_BUFFER_WANTED);
            }
            recv_buffer = recv_buffer.min(sockopt::socket_recv_buffer_size(&s)?);
            s.set_nonblocking(true)?;
            ports.push(s.local_addr()?.port());
            sockets.push(s);
        }
        Ok(NativeSocket {
            sockets,
            ports,
            recv_buffer: if modules == 0 { 0 } else { recv_buffer },
            bufs: vec![0u8; MAX_BATCH * DATAGRAM_CAP],
            received: vec![Received::default(); MAX_BATCH],
            stats: RecvStats::default(),
        })
    }

    /// The bound ports, module by module.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The smallest receive buffer the kernel gave a socket, in bytes, as `SO_RCVBUF` reads
    /// back (Linux reports twice what it accounts for payload).
    pub fn recv_buffer(&self) -> usize {
        self.recv_buffer
    }

    /// Waits up to `timeout` for datagrams on any module socket, then takes one batch (up to
    /// 64 datagrams) from each socket that has some and hands each to `f`. Returns how many
    /// were handed over (0 on timeout or a signal).
    pub fn recv_batch(&mut self, timeout: Duration, mut f: impl FnMut(&[u8])) -> io::Result<usize> {
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd<'_>> = self
                .sockets
                .iter()
                .map(|s| PollFd::new(s, PollFlags::IN))
                .collect();
            let ts = Timespec::try_from(timeout).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            });
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => return Ok(0),
                Err(e) => return Err(e.into()),
            }
            fds.iter().map(|p| !p.revents().is_empty()).collect()
        };
        let mut handed = 0;
        for (s, _) in self.sockets.iter().zip(ready).filter(|(_, r)| *r) {
            let n = sys::recvmmsg(s.as_fd(), &mut self.bufs, DATAGRAM_CAP, &mut self.received)?;
            if n > 0 {
                self.stats.batches += 1;
            }
            for (i, r) in self.received[..n].iter().enumerate() {
                if r.truncated {
                    self.stats.truncated += 1;
                    continue;
                }
                self.stats.datagrams += 1;
                self.stats.bytes += r.len as u64;
                handed += 1;
                f(&self.bufs[i * DATAGRAM_CAP..i * DATAGRAM_CAP + r.len]);
            }
        }
        Ok(handed)
    }

    /// Counters so far.
    pub fn stats(&self) -> RecvStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Instant;

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn binds_one_port_per_module_and_reports_the_buffer() {
        let s = NativeSocket::bind(LOCAL, 0, 3).unwrap();
        assert_eq!(s.ports().len(), 3);
        assert!(s.ports().iter().all(|&p| p != 0));
        assert!(s.recv_buffer() > 0);
        // Consecutive ports from a base: take the kernel's pick as the base and hope its
        // neighbour is free too; skip quietly when it is not.
        let base = s.ports()[0];
        drop(s);
        if let Ok(s) = NativeSocket::bind(LOCAL, base, 2) {
            assert_eq!(s.ports(), &[base, base + 1]);
        }
        assert!(NativeSocket::bind(LOCAL, u16::MAX, 2).is_err());
    }

    #[test]
    fn times_out_empty_then_hands_over_datagrams_of_every_module() {
        let mut s = NativeSocket::bind(LOCAL, 0, 2).unwrap();
        let t = Instant::now();
        assert_eq!(
            s.recv_batch(Duration::from_millis(20), |_| panic!())
                .unwrap(),
            0
        );
        assert!(
            t.elapsed() >= Duration::from_millis(15),
            "{:?}",
            t.elapsed()
        );
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"to module 0", (LOCAL, s.ports()[0])).unwrap();
        tx.send_to(&[1u8; 9000], (LOCAL, s.ports()[1])).unwrap();
        tx.send_to(&[2u8; DATAGRAM_CAP + 1], (LOCAL, s.ports()[1]))
            .unwrap();
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(5);
        while s.stats().datagrams + s.stats().truncated < 3 && Instant::now() < end {
            s.recv_batch(Duration::from_millis(100), |d| got.push(d.to_vec()))
                .unwrap();
        }
        got.sort_by_key(|d| d.len());
        assert_eq!(got, vec![b"to module 0".to_vec(), vec![1u8; 9000]]);
        let st = s.stats();
        assert_eq!((st.datagrams, st.bytes, st.truncated), (2, 9011, 1));
    }
}
