//! Connection setup: a small exchange over TCP, out of band like `rdma_cm`, that agrees on the
//! transport, queue pair type, path MTU, queue pair numbers, starting PSNs and the udp receive
//! port, and carries up to 64 KiB of application "private data" each way (typically the
//! [`RegionInfo`] of the regions the peer may access).
//!
//! The hello's bytes are [`remora_wire::ctrl::setup`]'s (little-endian: `"RMRA"`, version,
//! transport, qp type, MTU, QPN, first PSN, udp port, shm rendezvous, private length, private
//! data); this module converts its plain numbers to the fabric's types. The rendezvous (accepting
//! side, `shm` only; zeros otherwise) names the unix socket where the `shm` data stream continues
//! and the secret that admits the peer there ([`crate::shm`]). Nothing in a hello enables access
//! to memory: the TCP exchange only agrees on parameters.
//!
//! The udp transport's part (its receive devices, the port the hello advertises, and the order
//! of the exchange: the accepting side's hello waits for its queue pair, the connecting side
//! sends a READY byte) is the udp driver's, [`crate::udp::UdpSetup`].
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use remora_mem::{Pd, Region};
use remora_wire::ctrl::{region, setup, RegionPacket, RegionRepr, SetupPacket, SetupRepr};
use remora_wire::{Psn, Service};

use crate::cq::Cq;
use crate::driver::Driver;
use crate::engine::EngineConfig;
use crate::error::{io_err, Error, Result};
use crate::options::{QpOptions, QpType, Transport};
use crate::qp::Qp;
use crate::shm::TOKEN_LEN;
use crate::stream::{DataPath, Sock, StreamDriver, StreamQp};
use crate::udp::{Agreed, Devices, UdpSetup};

/// Largest private data either side may send.
pub const MAX_PRIVATE: usize = setup::MAX_PRIVATE;
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Address, length and remote key of a region, as peers exchange them in private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RegionInfo {
    /// Encoded length.
    pub const LEN: usize = region::REGION_LEN;

    /// The description of a registered region.
    pub fn of(r: &Region) -> RegionInfo {
        RegionInfo {
            addr: r.addr(),
            len: r.len() as u64,
            rkey: r.rkey(),
        }
    }

    /// 20 bytes, little-endian ([`remora_wire::ctrl::region`]).
    pub fn encode(&self) -> [u8; Self::LEN] {
        RegionRepr::from(*self).to_bytes()
    }

    /// Decodes the first 20 bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<RegionInfo> {
        RegionRepr::parse(&RegionPacket::new_unchecked(b))
            .map(RegionInfo::from)
            .map_err(|e| Error::Setup(format!("region description: {e}")))
    }
}

impl From<RegionRepr> for RegionInfo {
    fn from(r: RegionRepr) -> RegionInfo {
        RegionInfo {
            addr: r.addr,
            len: r.len,
            rkey: r.rkey,
        }
    }
}

impl From<RegionInfo> for RegionRepr {
    fn from(r: RegionInfo) -> RegionRepr {
        RegionRepr {
            addr: r.addr,
            len: r.len,
            rkey: r.rkey,
        }
    }
}

/// One side's setup hello in the fabric's types (the bytes: [`remora_wire::ctrl::setup`]).
#[derive(Debug, PartialEq)]
struct Hello {
    transport: Transport,
    qp_type: QpType,
    mtu: u32,
    qpn: u32,
    psn: Psn,
    udp_port: u16,
    rendezvous: [u8; TOKEN_LEN],
    private: Vec<u8>,
}

impl Hello {
    fn write(&self, s: &mut TcpStream) -> Result<()> {
        if self.private.len() > MAX_PRIVATE {
            return Err(Error::Setup(format!(
                "private data of {} bytes exceeds {MAX_PRIVATE}",
                self.private.len()
            )));
        }
        let repr = SetupRepr {
            transport: self.transport.code(),
            service: self.qp_type.service(),
            mtu: self.mtu,
            qpn: self.qpn,
            psn: self.psn,
            udp_port: self.udp_port,
            rendezvous: self.rendezvous,
            private_len: self.private.len(),
        };
        s.write_all(&repr.to_bytes(&self.private))
            .map_err(io_err("sending the connection hello"))
    }

    fn read(s: &mut TcpStream) -> Result<Hello> {
        let mut b = vec![0u8; setup::HEADER_LEN];
        s.read_exact(&mut b)
            .map_err(io_err("reading the connection hello"))?;
        // Checks magic, version and the private length before allocating for the rest.
        let total = setup::message_len(&b).map_err(refused)?;
        b.resize(total, 0);
        s.read_exact(&mut b[setup::HEADER_LEN..])
            .map_err(io_err("reading the peer's private data"))?;
        let r = SetupRepr::parse(&SetupPacket::new_unchecked(&b[..])).map_err(refused)?;
        let transport = Transport::from_code(r.transport)
            .ok_or_else(|| Error::Setup(format!("unknown transport code {}", r.transport)))?;
        let qp_type = match r.service {
            Service::Rc => QpType::Rc,
            Service::Uc => QpType::Uc,
        };
        Ok(Hello {
            transport,
            qp_type,
            mtu: r.mtu,
            qpn: r.qpn,
            psn: r.psn,
            udp_port: r.udp_port,
            rendezvous: r.rendezvous,
            private: b.split_off(setup::HEADER_LEN),
        })
    }
}

/// A peer's hello refused, in the setup's words.
fn refused(e: remora_wire::Error) -> Error {
    match e {
        remora_wire::Error::BadMagic { .. } => {
            Error::Setup("peer is not a remora fabric endpoint".into())
        }
        remora_wire::Error::UnsupportedVersion {
            found, supported, ..
        } => Error::Setup(format!(
            "peer speaks setup version {found}, this is {supported}"
        )),
        e => Error::Setup(format!("the peer's hello: {e}")),
    }
}

/// A queue pair number unique in this process and unlikely to repeat across processes.
fn next_qpn() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let base = std::process::id().wrapping_mul(0x9E37_79B1) >> 8;
    // Avoid 0 and 1 (reserved in InfiniBand).
    0x100 + (base.wrapping_add(n.wrapping_mul(7))) % (Psn::MASK - 0x100)
}

fn first_psn(qpn: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ qpn.wrapping_mul(0x85EB_CA6B)) & Psn::MASK
}

/// Accepts queue pairs; the server side of [`connect`].
pub struct Listener {
    tcp: TcpListener,
    shared: Arc<ListenerShared>,
}

/// What accepted connections need from their listener.
struct ListenerShared {
    pd: Arc<Pd>,
    opts: QpOptions,
    /// The udp receive devices, one per local address.
    udp: Devices,
    /// Descriptors every `shm` peer receives at setup ([`Listener::hand_over`]).
    handover: Mutex<Vec<OwnedFd>>,
}

/// A connection accepted by [`Listener::incoming`] whose setup has not run yet; finish it with
/// [`Incoming::establish`], typically on a thread of its own so that a slow or silent peer
/// cannot hold up the accept loop.
pub struct Incoming {
    stream: TcpStream,
    from: SocketAddr,
    shared: Arc<ListenerShared>,
}

impl Listener {
    /// Listens for connection setup on `control` (TCP). Accepted queue pairs serve the regions
    /// of `pd`; `opts` gives this side's MTU and udp settings (transport and type follow the
    /// connecting peer).
    pub fn bind(control: SocketAddr, pd: Arc<Pd>, opts: QpOptions) -> Result<Listener> {
        let tcp = TcpListener::bind(control)
            .map_err(io_err(format!("listening for connections on {control}")))?;
        let udp = Devices::start(&opts, control.ip())?;
        Ok(Listener {
            tcp,
            shared: Arc::new(ListenerShared {
                pd,
                opts,
                udp,
                handover: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The udp receive address (RoCEv2 destination) of the device on `ip`, once bound: UDP 4791
    /// unless another process held it when the listener started.
    pub fn udp_device(&self, ip: IpAddr) -> Option<SocketAddr> {
        self.shared.udp.addr(ip)
    }

    /// Descriptors (at most [`crate::MAX_HANDOVER`]) that every `shm` peer receives with
    /// `SCM_RIGHTS` when it connects, and finds in [`Qp::take_handover`]: how a server lets
    /// same-host clients map what it serves. Only what is handed over is reachable, with the
    /// rights of the descriptor (hand over a read-only one to grant reading only).
    pub fn hand_over(&self, fds: Vec<OwnedFd>) -> Result<()> {
        if fds.len() > crate::shm::MAX_HANDOVER {
            return Err(Error::Setup(format!(
                "{} descriptors to hand over, at most {}",
                fds.len(),
                crate::shm::MAX_HANDOVER
            )));
        }
        *self
            .shared
            .handover
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = fds;
        Ok(())
    }

    /// The control address (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.tcp
            .local_addr()
            .expect("bound listener has an address")
    }

    /// Waits for one peer, completes the setup and returns the queue pair and the peer's private
    /// data; `private` goes to the peer. A peer that fails the setup is logged and skipped.
    pub fn accept(&self, private: &[u8]) -> Result<(Qp, Vec<u8>)> {
        loop {
            let inc = self.incoming()?;
            let from = inc.peer_addr();
            match inc.establish(private) {
                Ok(x) => return Ok(x),
                // A stray or broken client must not stop the server.
                Err(e) => tracing::warn!(%from, error = %e, "connection setup refused"),
            }
        }
    }

    /// Waits for the next TCP connection; the setup exchange is left to [`Incoming::establish`].
    pub fn incoming(&self) -> Result<Incoming> {
        let (stream, from) = self.tcp.accept().map_err(io_err("accept"))?;
        Ok(Incoming {
            stream,
            from,
            shared: self.shared.clone(),
        })
    }
}

impl Incoming {
    /// The peer's setup address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.from
    }

    /// Runs the setup exchange (bounded by a 10 s timeout) and returns the queue pair and the
    /// peer's private data; `private` goes to the peer.
    pub fn establish(self, private: &[u8]) -> Result<(Qp, Vec<u8>)> {
        let mut s = self.stream;
        s.set_read_timeout(Some(SETUP_TIMEOUT)).ok();
        s.set_nodelay(true).ok();
        let peer = Hello::read(&mut s)?;
        let sh = &self.shared;
        let opts = QpOptions {
            transport: peer.transport,
            qp_type: peer.qp_type,
            mtu: sh.opts.mtu.min(peer.mtu as usize),
            ..sh.opts.clone()
        };
        let local_ip = s.local_addr().map_err(io_err("local address"))?.ip();
        let udp = UdpSetup::accepting(&opts, &sh.udp, local_ip)?;
        // Duplicates, so that a slow setup does not hold the lock for the others.
        let handover = if opts.transport == Transport::Shm {
            sh.handover
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(OwnedFd::try_clone)
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(io_err("duplicating the descriptors to hand over"))?
        } else {
            Vec::new()
        };
        establish(s, sh.pd.clone(), &opts, udp, private, Some(peer), &handover)
    }
}

/// Connects to a [`Listener`] at `control` and returns the queue pair and the peer's private
/// data; `private` goes to the peer.
pub fn connect(
    control: SocketAddr,
    pd: Arc<Pd>,
    opts: QpOptions,
    private: &[u8],
) -> Result<(Qp, Vec<u8>)> {
    if !(256..=4096).contains(&opts.mtu) {
        return Err(Error::Setup(format!(
            "path MTU {} outside 256..=4096",
            opts.mtu
        )));
    }
    let s = TcpStream::connect_timeout(&control, SETUP_TIMEOUT)
        .map_err(io_err(format!("connecting to {control}")))?;
    s.set_read_timeout(Some(SETUP_TIMEOUT)).ok();
    s.set_nodelay(true).ok();
    let udp = UdpSetup::connecting(&opts, &s)?;
    establish(s, pd, &opts, udp, private, None, &[])
}

/// The engine of a stream queue pair: the agreed QPNs and first PSNs (so its packets are
/// exactly udp's), the stream's MTU and no retransmission ([`EngineConfig::stream`]); the
/// negotiated path MTU still names the queue pair ([`Qp::mtu`]).
fn stream_config(opts: &QpOptions, qpn: u32, psn: u32, peer: &Hello) -> EngineConfig {
    let mut cfg = EngineConfig::stream(opts.qp_type.service(), qpn, peer.qpn);
    cfg.send_psn = Psn::new(psn);
    cfg.recv_psn = peer.psn;
    cfg.window = opts.window.max(1);
    cfg.pkey = opts.pkey;
    cfg
}

/// Both sides: send our hello (after reading the peer's on the accepting side), read theirs,
/// build the queue pair. `udp` is the udp transport's setup (udp only), `handover` goes to an
/// `shm` peer (accepting side only).
fn establish(
    mut s: TcpStream,
    pd: Arc<Pd>,
    opts: &QpOptions,
    udp: Option<UdpSetup>,
    private: &[u8],
    peer_first: Option<Hello>,
    handover: &[OwnedFd],
) -> Result<(Qp, Vec<u8>)> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    let qpn = next_qpn();
    let psn = first_psn(qpn);
    let accepting = peer_first.is_some();
    let offer = if opts.transport == Transport::Shm && accepting {
        Some(crate::shm::Offer::new()?)
    } else {
        None
    };
    let me = Hello {
        transport: opts.transport,
        qp_type: opts.qp_type,
        mtu: opts.mtu as u32,
        qpn,
        psn: Psn::new(psn),
        udp_port: udp.as_ref().map_or(0, UdpSetup::port),
        rendezvous: offer.as_ref().map_or([0; TOKEN_LEN], |o| o.token()),
        private: private.to_vec(),
    };
    // udp, accepting side: our hello goes out only once our queue pair is attached to the
    // device (below), so no datagram of the peer can arrive for a QPN not yet known there.
    if !udp.as_ref().is_some_and(UdpSetup::hello_waits) {
        me.write(&mut s)?;
    }
    let peer = match peer_first {
        Some(p) => p,
        None => Hello::read(&mut s)?,
    };
    if peer.transport != opts.transport || peer.qp_type != opts.qp_type {
        return Err(Error::Setup(format!(
            "peer wants {}/{}, this side {}/{}",
            peer.transport, peer.qp_type, opts.transport, opts.qp_type
        )));
    }
    let mtu = opts.mtu.min(peer.mtu as usize);
    if !(256..=4096).contains(&mtu) {
        return Err(Error::Setup(format!(
            "negotiated MTU {mtu} outside 256..=4096"
        )));
    }
    s.set_read_timeout(None).ok();
    let cq = Arc::new(Cq::new());
    let driver: Box<dyn Driver> = match opts.transport {
        Transport::Udp => {
            let agreed = Agreed {
                opts,
                mtu,
                qpn,
                psn,
                peer_qpn: peer.qpn,
                peer_psn: peer.psn,
                peer_udp_port: peer.udp_port,
                deadline,
            };
            let udp = udp.expect("udp has its setup");
            udp.start(s, pd, cq.clone(), &agreed, |s| me.write(s))?
        }
        Transport::Tcp => Box::new(StreamDriver(StreamQp::start(
            Sock::Tcp(s),
            pd,
            DataPath::Inline,
            stream_config(opts, qpn, psn, &peer),
            opts.progress,
            opts.lazy_ack,
            cq.clone(),
            None,
            Vec::new(),
        )?)),
        Transport::Shm => {
            // The TCP exchange ends here; the data stream is the unix socket.
            let (unix, cred, received) = match offer {
                Some(o) => {
                    let (u, c) = o.accept(&s, deadline, handover)?;
                    (u, c, Vec::new())
                }
                None => crate::shm::join(&peer.rendezvous, SETUP_TIMEOUT)?,
            };
            tracing::debug!(pid = cred.pid, uid = cred.uid, "shm peer");
            Box::new(StreamDriver(StreamQp::start(
                Sock::unix(unix),
                pd,
                DataPath::Shm,
                stream_config(opts, qpn, psn, &peer),
                opts.progress,
                opts.lazy_ack,
                cq.clone(),
                Some(cred),
                received,
            )?))
        }
    };
    let qp = Qp::new(driver, cq, opts.transport, opts.qp_type, mtu, qpn, peer.qpn);
    Ok((qp, peer.private))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An shm UC hello is the bytes a fabric built before the codec moved to remora-wire sent.
    #[test]
    fn hellos_keep_their_golden_bytes() {
        let golden = b"RMRA\x03\x02\x01\x00\x00\x10\x00\x00\x56\x34\x12\x00\xef\xcd\xab\x00\xb7\x12\
            \x00\x00\x00\x00\x00\x00\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\
            \x04\x00\x00\x00priv";
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut a = l.accept().unwrap().0;
        let me = Hello {
            transport: Transport::Shm,
            qp_type: QpType::Uc,
            mtu: 4096,
            qpn: 0x12_3456,
            psn: Psn::new(0xab_cdef),
            udp_port: 4791,
            rendezvous: std::array::from_fn(|i| 0x10 + i as u8),
            private: b"priv".to_vec(),
        };
        me.write(&mut c).unwrap();
        let mut got = [0u8; 52];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, golden);
        c.write_all(golden).unwrap();
        assert_eq!(Hello::read(&mut a).unwrap(), me);
    }
}
