//! The udp driver: a queue pair's RoCEv2 engine ([`UdpQp`]) on this side's receive device, and
//! the setup connection kept open so either side notices the other leaving.
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::net::RecvFlags;

use super::{DeviceHandle, UdpQp};
use crate::cq::Cq;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::qp_stats::QpStats;
use crate::wr::{Completion, RecvWr, SendWr};

pub(crate) struct UdpDriver {
    qp: Arc<UdpQp>,
    dev: Arc<DeviceHandle>,
    control: TcpStream,
    qpn: u32,
}

impl UdpDriver {
    /// The driver of queue pair `qpn`, already attached to `dev`.
    pub(crate) fn new(
        qp: Arc<UdpQp>,
        dev: Arc<DeviceHandle>,
        control: TcpStream,
        qpn: u32,
    ) -> UdpDriver {
        UdpDriver {
            qp,
            dev,
            control,
            qpn,
        }
    }

    /// The device this queue pair must drive itself ([`crate::Progress::Poll`]), if any.
    fn polled_device(&self) -> Option<&super::Device> {
        self.dev.dev.polled().then_some(&self.dev.dev)
    }
}

impl Driver for UdpDriver {
    fn post_send(&self, wr: SendWr) -> Result<()> {
        self.qp.post_send(wr)
    }

    fn post_sends(&self, wrs: Vec<SendWr>) -> Result<()> {
        self.qp.post_sends(wrs)
    }

    fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.qp.post_recv(wr)
    }

    fn progress_now(&self) -> Result<()> {
        if let Some(dev) = self.polled_device() {
            dev.progress(Duration::ZERO, None)?;
        }
        Ok(())
    }

    fn wait(&self, cq: &Cq, timeout: Duration) -> Result<Option<Completion>> {
        let Some(dev) = self.polled_device() else {
            return Ok(cq.wait(timeout));
        };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = cq.pop() {
                return Ok(Some(c));
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Ok(None);
            };
            let sleeping = cq.sleep_fd();
            if let Some(c) = cq.pop() {
                return Ok(Some(c));
            }
            if !dev.progress(left, sleeping.fd())? {
                // Another thread is driving the device; its work reaches our queue.
                drop(sleeping);
                if let Some(c) = cq.wait(left.min(Duration::from_millis(1))) {
                    return Ok(Some(c));
                }
            }
        }
    }

    fn progress(&self, wait: Duration) -> Result<()> {
        if let Some(dev) = self.polled_device() {
            if !dev.progress(wait, None)? && !wait.is_zero() {
                // Another thread drives the device: do not spin against it.
                std::thread::sleep(wait.min(Duration::from_micros(200)));
            }
        }
        Ok(())
    }

    fn stats(&self) -> QpStats {
        QpStats {
            engine: self.qp.stats(),
            icrc_errors: self.dev.dev.stats.icrc_errors.load(Ordering::Relaxed),
            unknown_qp: self.dev.dev.stats.unknown_qp.load(Ordering::Relaxed),
        }
    }

    fn is_closed(&self) -> bool {
        let mut b = [0u8; 1];
        // MSG_PEEK leaves the byte for readers and MSG_DONTWAIT never blocks.
        match rustix::net::recv(&self.control, &mut b, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
            Ok((_, n)) => n == 0,
            Err(e) => e != rustix::io::Errno::WOULDBLOCK,
        }
    }

    fn wait_disconnect(&self, timeout: Option<Duration>) -> Result<()> {
        let mut c = self.control.try_clone().map_err(|_| Error::Disconnected)?;
        c.set_read_timeout(timeout).ok();
        let mut b = [0u8; 64];
        loop {
            match c.read(&mut b) {
                Ok(0) => return Ok(()),
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(Error::Timeout)
                }
                Err(_) => return Ok(()),
            }
        }
    }

    fn stop(&self) {
        self.dev.dev.detach(self.qpn);
        let _ = self.control.shutdown(std::net::Shutdown::Both);
    }

    fn udp_peer(&self) -> Option<SocketAddr> {
        Some(self.qp.peer_addr())
    }

    fn udp_source(&self) -> Option<SocketAddr> {
        Some(self.qp.local_addr())
    }

    fn udp_device(&self) -> Option<SocketAddr> {
        Some(self.dev.dev.local_addr())
    }
}
