//! What a queue pair is asked to be: its transport, service type, progress mode and the udp,
//! RC and PART settings. Kept apart from connection setup so that the transports and the setup
//! code both depend on it, not on each other.
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use remora_wire::Service;

/// Which transport carries a queue pair's traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// RoCEv2 datagrams over UDP.
    Udp,
    /// Same host: frames over a unix socket; payloads copied once through memfds the owner
    /// handed over (`SCM_RIGHTS`), inline otherwise.
    Shm,
    /// A framed TCP stream.
    Tcp,
}

impl Transport {
    pub(crate) fn code(self) -> u8 {
        match self {
            Transport::Udp => 1,
            Transport::Shm => 2,
            Transport::Tcp => 3,
        }
    }
    pub(crate) fn from_code(c: u8) -> Option<Transport> {
        Some(match c {
            1 => Transport::Udp,
            2 => Transport::Shm,
            3 => Transport::Tcp,
            _ => return None,
        })
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Udp => "udp",
            Transport::Shm => "shm",
            Transport::Tcp => "tcp",
        })
    }
}

impl FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Transport, String> {
        match s {
            "udp" => Ok(Transport::Udp),
            "shm" => Ok(Transport::Shm),
            "tcp" => Ok(Transport::Tcp),
            _ => Err(format!("unknown transport {s:?} (udp, shm or tcp)")),
        }
    }
}

/// Queue pair service type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected: acknowledged, retransmitted, READ available.
    Rc,
    /// Unreliable connected: no acknowledgements; a message with a loss is dropped.
    Uc,
}

impl QpType {
    pub(crate) fn service(self) -> Service {
        match self {
            QpType::Rc => Service::Rc,
            QpType::Uc => Service::Uc,
        }
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpType::Rc => "rc",
            QpType::Uc => "uc",
        })
    }
}

impl FromStr for QpType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<QpType, String> {
        match s {
            "rc" => Ok(QpType::Rc),
            "uc" => Ok(QpType::Uc),
            _ => Err(format!("unknown queue pair type {s:?} (rc or uc)")),
        }
    }
}

/// Options of a queue pair. The connecting side's transport and type are what the pair uses;
/// the MTU is the smaller of the two sides'.
#[derive(Clone, Debug)]
pub struct QpOptions {
    /// Transport.
    pub transport: Transport,
    /// Service type.
    pub qp_type: QpType,
    /// Path MTU (payload bytes per packet, 256..=4096; udp only).
    pub mtu: usize,
    /// udp receive port (0: a listener takes 4791 when free, else any; a connecting side any).
    pub udp_port: u16,
    /// Verify the ICRC of every received datagram (udp).
    pub icrc_check: bool,
    /// RC local ACK timeout (udp), doubled after each expiry without progress.
    pub retry_timeout: Duration,
    /// RC retries before a request fails (udp).
    pub retry_count: u32,
    /// RC: times a SEND that found no receive buffer at the peer (an RNR NAK) is sent again
    /// before it fails with `RnrRetryExceeded` (udp; 7, as verbs' largest finite count).
    /// `u32::MAX` retries without limit, as verbs' 7 does: right for a peer that posts its
    /// first receive only after the connection is up and may be slow to get there.
    pub rnr_retry: u32,
    /// RC packets in flight at most (udp).
    pub window: u32,
    /// Faults injected into this side's outgoing datagrams (udp; testing).
    pub faults: Option<crate::Faults>,
    /// Partition key (udp): sent in every BTH; packets whose P_Key does not match are dropped
    /// and counted (`bad_pkey`). Configured on both sides, not negotiated, as on a fabric.
    pub pkey: u16,
    /// Page faults in on-demand regions (udp RC): PART or inline, the page-in policy and block,
    /// and the requester's fault timeout. Each side's responder uses its own policy.
    pub part: crate::PartConfig,
    /// Who drives the queue pair's receive side and timers (each side chooses its own).
    pub progress: Progress,
    /// tcp with [`Progress::Poll`]: a busy-polling round that has nothing to send but ACKs
    /// holds them back for one call, so that the caller's next post carries them in the same
    /// system call (in a ping-pong every ACK rides on the reply: one send and one receive per
    /// message instead of two each). The held ACKs leave on the caller's next call into the
    /// queue pair (a post, a poll, a wait) and before it sleeps, so a caller that stops
    /// calling leaves its peer's last requests unacknowledged: UCX's contract (progress only
    /// in the caller's calls), not verbs' (the NIC answers on its own). Off by default.
    pub lazy_ack: bool,
}

impl Default for QpOptions {
    fn default() -> QpOptions {
        QpOptions {
            transport: Transport::Udp,
            qp_type: QpType::Rc,
            mtu: 4096,
            udp_port: 0,
            icrc_check: true,
            retry_timeout: Duration::from_millis(10),
            retry_count: 7,
            rnr_retry: 7,
            window: 1024,
            faults: None,
            pkey: crate::engine::DEFAULT_PKEY,
            part: crate::PartConfig::default(),
            progress: Progress::Thread,
            lazy_ack: false,
        }
    }
}

/// Who drives a queue pair: receives, ACKs, READ responses, retransmission timers.
///
/// `Thread` is a background progress thread per udp device (or per stream queue pair): right
/// for a responder whose application never polls. `Poll` has no thread on the data path: the
/// thread that polls or waits on the queue pair does that work itself, as `ucp_worker_progress`
/// does in UCX, which saves the wake-up of a second thread on every message. A `Poll` queue
/// pair whose application stops polling stops answering its peer (an RC peer retransmits,
/// then fails). Queue pairs that share a udp device share its progress: any of their threads
/// drives all of them. On tcp, `Poll` drives the queue pair's own socket the same way. On shm,
/// `Poll` means the caller drains the one-sided completion ring and no doorbell is rung while it
/// polls (the unix socket's progress thread still carries the copy path).
///
/// ```
/// use remora_fabric::{Progress, QpOptions};
/// let opts = QpOptions { progress: "poll".parse().unwrap(), ..QpOptions::default() };
/// assert_eq!(opts.progress, Progress::Poll);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Progress {
    /// A background thread (the default).
    #[default]
    Thread,
    /// The caller's thread, in [`crate::Qp::poll`], [`crate::Qp::wait`] and [`crate::Qp::spin`].
    Poll,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Progress::Thread => "thread",
            Progress::Poll => "poll",
        })
    }
}

impl FromStr for Progress {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Progress, String> {
        match s {
            "thread" => Ok(Progress::Thread),
            "poll" => Ok(Progress::Poll),
            _ => Err(format!("unknown progress mode {s:?} (poll or thread)")),
        }
    }
}
