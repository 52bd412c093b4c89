//! The udp part of connection setup, so that the setup code (`conn.rs`) asks the transport
//! instead of knowing its devices: which receive device a queue pair goes on (the listener's,
//! one per local address, or a connecting side's own), the port the hello advertises, and the
//! order of the exchange.
//!
//! On udp the accepting side reads the peer's hello, attaches its queue pair to its device, and
//! only then answers with its own; the connecting side attaches its queue pair and then sends
//! one READY byte (0x52), which the accepting side waits for before returning. Either side's
//! first datagram therefore finds the other's queue pair in place. The hello's bytes stay the
//! setup's business; this module only says when it goes out.
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use remora_mem::Pd;
use remora_wire::Psn;

use super::driver::UdpDriver;
use super::{Device, DeviceHandle, Role, UdpQp};
use crate::cq::Cq;
use crate::driver::Driver;
use crate::engine::{EngineConfig, QpProtocol};
use crate::error::{io_err, Error, Result};
use crate::options::{Progress, QpOptions, Transport};

/// The byte a connecting udp side sends once its queue pair is attached (setup version 3).
const READY: u8 = 0x52;

/// A listener's receive devices, one per local address.
pub(crate) struct Devices {
    map: Mutex<HashMap<IpAddr, Arc<DeviceHandle>>>,
    port: u16,
    progress: Progress,
}

impl Devices {
    /// The devices of a listener with `opts` on `control`. The RoCEv2 receive socket exists
    /// from the start, as on a NIC, so that 4791 is ours before any requester on this host
    /// could take it. A wildcard control address learns its local address only per
    /// connection, so its devices are bound then.
    pub(crate) fn start(opts: &QpOptions, control: IpAddr) -> Result<Devices> {
        let d = Devices {
            map: Mutex::new(HashMap::new()),
            port: opts.udp_port,
            progress: opts.progress,
        };
        if !control.is_unspecified() {
            d.get(control)?;
        }
        Ok(d)
    }

    /// The device on `ip`, bound now if it is not yet.
    fn get(&self, ip: IpAddr) -> Result<Arc<DeviceHandle>> {
        let mut devs = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = devs.get(&ip) {
            return Ok(d.clone());
        }
        let d = Arc::new(Device::bind(ip, self.port, Role::Responder, self.progress)?);
        devs.insert(ip, d.clone());
        Ok(d)
    }

    /// The receive address of the device on `ip`, once bound.
    pub(crate) fn addr(&self, ip: IpAddr) -> Option<SocketAddr> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ip)
            .map(|d| d.dev.local_addr())
    }
}

/// A udp queue pair's setup under way: the device it goes on, and which side this is.
pub(crate) struct UdpSetup {
    dev: Arc<DeviceHandle>,
    accepting: bool,
}

impl UdpSetup {
    /// The accepting side's setup when `opts` (the peer's choice) is udp: the listener's device
    /// on `local_ip`, the address the peer reached; `None` on another transport.
    pub(crate) fn accepting(
        opts: &QpOptions,
        devices: &Devices,
        local_ip: IpAddr,
    ) -> Result<Option<UdpSetup>> {
        if opts.transport != Transport::Udp {
            return Ok(None);
        }
        Ok(Some(UdpSetup {
            dev: devices.get(local_ip)?,
            accepting: true,
        }))
    }

    /// The connecting side's setup when `opts` is udp: a device of its own on the local address
    /// of the setup connection `s`; `None` on another transport.
    pub(crate) fn connecting(opts: &QpOptions, s: &TcpStream) -> Result<Option<UdpSetup>> {
        if opts.transport != Transport::Udp {
            return Ok(None);
        }
        let ip = s.local_addr().map_err(io_err("local address"))?.ip();
        let dev = Arc::new(Device::bind(
            ip,
            opts.udp_port,
            Role::Requester,
            opts.progress,
        )?);
        Ok(Some(UdpSetup {
            dev,
            accepting: false,
        }))
    }

    /// The port our hello advertises: where the peer's datagrams go.
    pub(crate) fn port(&self) -> u16 {
        self.dev.dev.local_addr().port()
    }

    /// Whether our hello waits until our queue pair is attached ([`UdpSetup::start`]): on the
    /// accepting side, so that no datagram of the peer can arrive for a QPN not yet known there.
    pub(crate) fn hello_waits(&self) -> bool {
        self.accepting
    }

    /// Builds the queue pair the hellos agreed on over `s`, attaches it to the device and
    /// finishes the exchange: the accepting side sends its hello (`hello`) and waits for the
    /// READY byte, the connecting side sends it.
    pub(crate) fn start(
        self,
        mut s: TcpStream,
        pd: Arc<Pd>,
        cq: Arc<Cq>,
        agreed: &Agreed,
        hello: impl FnOnce(&mut TcpStream) -> Result<()>,
    ) -> Result<Box<dyn Driver>> {
        let dev = self.dev;
        let opts = agreed.opts;
        let peer_ip = s.peer_addr().map_err(io_err("peer address"))?.ip();
        let mut cfg = EngineConfig::new(
            opts.qp_type.service(),
            agreed.qpn,
            agreed.peer_qpn,
            agreed.mtu,
        );
        cfg.send_psn = Psn::new(agreed.psn);
        cfg.recv_psn = agreed.peer_psn;
        cfg.retry_timeout = opts.retry_timeout;
        cfg.retry_count = opts.retry_count;
        cfg.rnr_retry = opts.rnr_retry;
        cfg.window = opts.window.max(1);
        cfg.part = opts.part;
        cfg.pkey = opts.pkey;
        let engine = QpProtocol::new(cfg, pd);
        let local_ip = dev.dev.local_addr().ip();
        let qp = UdpQp::new(
            engine,
            local_ip,
            SocketAddr::new(peer_ip, agreed.peer_udp_port),
            opts.icrc_check,
            opts.faults,
            cq,
        )?;
        dev.dev.attach(qp.clone());
        // Then the READY byte: the connecting side attaches before sending it, and the
        // accepting side returns only after it, so the first message of either side's
        // application finds the other's queue pair in place (UC does not retransmit).
        let ready = if self.accepting {
            hello(&mut s).and_then(|()| read_ready(&mut s, agreed.deadline))
        } else {
            s.write_all(&[READY])
                .map_err(io_err("sending the setup's ready byte"))
        };
        if let Err(e) = ready {
            dev.dev.detach(agreed.qpn);
            return Err(e);
        }
        s.set_read_timeout(None).ok();
        Ok(Box::new(UdpDriver::new(qp, dev, s, agreed.qpn)))
    }
}

/// What the two hellos agreed on, for the queue pair [`UdpSetup::start`] builds.
pub(crate) struct Agreed<'a> {
    /// This side's options, with the transport and type both sides share.
    pub(crate) opts: &'a QpOptions,
    /// The negotiated path MTU.
    pub(crate) mtu: usize,
    /// Our queue pair number and first PSN.
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    /// The peer's queue pair number, first PSN and receive port.
    pub(crate) peer_qpn: u32,
    pub(crate) peer_psn: Psn,
    pub(crate) peer_udp_port: u16,
    /// When the setup gives up.
    pub(crate) deadline: Instant,
}

/// Waits (until `deadline`) for the connecting side's READY byte.
fn read_ready(s: &mut TcpStream, deadline: Instant) -> Result<()> {
    let left = deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Error::Setup("setup timed out before the peer was ready".into()))?;
    s.set_read_timeout(Some(left)).ok();
    let mut b = [0u8; 1];
    s.read_exact(&mut b)
        .map_err(io_err("waiting for the peer's ready byte"))?;
    if b[0] != READY {
        return Err(Error::Setup(format!(
            "peer sent {:#04x} where the ready byte belongs",
            b[0]
        )));
    }
    Ok(())
}
