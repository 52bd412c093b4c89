//! What a queue pair needs of its transport, behind one trait: the udp driver (the RoCEv2
//! engine on a receive device, `udp/driver.rs`) and the stream driver (tcp and shm,
//! `stream/driver.rs`) implement it, so [`crate::Qp`] is the same code for every transport
//! and the connection setup only picks which driver to start (quinn splits its protocol and
//! its udp sockets the same way).
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::cq::Cq;
use crate::error::Result;
use crate::qp_stats::QpStats;
use crate::wr::{Completion, RecvWr, SendWr};

pub(crate) trait Driver: Send + Sync {
    /// Queues a send-side request (WRITE, READ, SEND).
    fn post_send(&self, wr: SendWr) -> Result<()>;
    /// Queues several send-side requests in order; a transport that can sends them together
    /// (udp: one `sendmmsg` for the lot instead of one per request).
    fn post_sends(&self, wrs: Vec<SendWr>) -> Result<()> {
        wrs.into_iter().try_for_each(|wr| self.post_send(wr))
    }
    /// Queues a receive buffer.
    fn post_recv(&self, wr: RecvWr) -> Result<()>;
    /// One round of progress without waiting, where the caller drives it
    /// ([`crate::Progress::Poll`]); shm also drains its completion ring here.
    fn progress_now(&self) -> Result<()>;
    /// The next completion of `cq` (this queue pair's), waiting up to `timeout`, doing the
    /// receive work meanwhile where the caller drives it.
    fn wait(&self, cq: &Cq, timeout: Duration) -> Result<Option<Completion>>;
    /// Drives the queue pair once, sleeping up to `wait` until something arrives, where the
    /// caller drives it; returns at once otherwise.
    fn progress(&self, wait: Duration) -> Result<()>;
    /// Counters.
    fn stats(&self) -> QpStats;
    /// The peer has closed the connection (does not block).
    fn is_closed(&self) -> bool;
    /// Blocks until the peer closes the connection, or `Err(Timeout)`.
    fn wait_disconnect(&self, timeout: Option<Duration>) -> Result<()>;
    /// The queue pair is dropped: stop and let go of shared resources.
    fn stop(&self);
    /// udp: where datagrams go (the peer device).
    fn udp_peer(&self) -> Option<SocketAddr> {
        None
    }
    /// udp: the source address datagrams leave from.
    fn udp_source(&self) -> Option<SocketAddr> {
        None
    }
    /// udp: this side's receive device address.
    fn udp_device(&self) -> Option<SocketAddr> {
        None
    }
    /// shm: the peer process's kernel-checked identity.
    fn peer_credentials(&self) -> Option<crate::Credentials> {
        None
    }
    /// shm: the descriptors the listener handed over at setup (taken once).
    fn take_handover(&self) -> Vec<OwnedFd> {
        Vec::new()
    }
}
