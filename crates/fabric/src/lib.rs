//! Queue pairs, completion queues, connection setup and the transports of the remora fabric.
//!
//! What it does: one-sided WRITE, WRITE-with-immediate and READ, and two-sided SEND, between
//! registered memory regions ([`remora_mem`]) on reliable (RC) and unreliable (UC) queue pairs,
//! over three transports with one API:
//! - `udp`: RoCEv2 datagrams (the packets a RoCE NIC would put on the wire, ICRC included) over
//!   kernel UDP sockets, with `sendmmsg`/GSO and `recvmmsg`/GRO;
//! - `shm`: same host: WRITE and READ one-sided into the memfd regions the peer granted when
//!   asked by remote key (`SCM_RIGHTS`), immediates through a shared completion ring; otherwise frames over a
//!   unix socket, a payload copied once through a memfd its owner handed over, or inline; no
//!   side ever reaches memory that was not handed over (see `docs/security.md`);
//! - `tcp`: a framed stream, the baseline.
//!
//! The RC/UC protocol is a sans-IO state machine ([`engine::QpProtocol`]): PSNs, coalesced ACKs,
//! NAKs, go-back-N with a microsecond retransmission timer and retry limits; transports are thin
//! drivers around it. Connections are set up out of band over a small TCP exchange
//! ([`Listener`], [`connect`]).
//!
//! What it does not: no kernel RDMA stack or verbs compatibility, no UD service, no atomics, no
//! congestion control beyond the RC window.
//!
//! ```no_run
//! use std::sync::Arc;
//! use remora_fabric::{connect, QpOptions, Transport};
//! use remora_mem::{Access, Buffer, Mode, Pd};
//!
//! let pd = Arc::new(Pd::new());
//! let mr = pd.register(Buffer::anonymous(1 << 20)?, Access::ALL, Mode::OnDemand)?;
//! let opts = QpOptions { transport: Transport::Udp, ..QpOptions::default() };
//! let (qp, peer) = connect("127.0.0.1:7471".parse()?, pd, opts, &[])?;
//! let remote = remora_fabric::RegionInfo::decode(&peer)?; // what the server sent at accept
//! qp.post_write(1, &mr, 0, 4096, remote.addr, remote.rkey, Some(7))?;
//! let done = qp.wait(std::time::Duration::from_secs(1))?.expect("completion");
//! assert!(done.status.is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod conn;
mod cq;
mod driver;
pub mod engine;
mod error;
mod fault;
mod options;
mod poll;
mod qp;
mod qp_stats;
mod shm;
mod stream;
mod udp;
mod wr;

pub use conn::{connect, Incoming, Listener, RegionInfo};
pub use cq::Cq;
pub use engine::{FaultMode, PageInPolicy, PageInRequest, PartConfig, Stats, DEFAULT_REORDER};
pub use error::{Error, Result};
pub use fault::Faults;
pub use options::{Progress, QpOptions, QpType, Transport};
pub use qp::Qp;
pub use qp_stats::QpStats;
pub use shm::{Credentials, MAX_HANDOVER};
pub use udp::{PAGE_IN_THREAD, RECEIVE_THREAD};
pub use wr::{Completion, RecvWr, SendWr, Status, WcOpcode, WrOp};
