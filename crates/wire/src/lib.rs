//! RoCEv2 transport headers and remora's control frames as zero-copy views and owned
//! representations.
//!
//! What it does: encodes and decodes the InfiniBand transport headers that RoCEv2 carries in a UDP
//! datagram (BTH, RETH, ImmDt, AETH) for every RC and UC opcode remora uses, does 24-bit PSN
//! arithmetic with wrap-around, and computes and checks the invariant CRC (ICRC). It also holds
//! every control frame remora peers exchange outside RoCEv2 packets ([`ctrl`]: the fabric's setup
//! hello and stream frames, the page server's protocol, the REMU link's hello), so that each
//! byte layout is written once, pinned by golden bytes and fuzzed. [`npy`] does the same for the
//! one file format several crates share, NumPy's `.npy` header. The design follows smoltcp:
//! each header has a `Packet<T: AsRef<[u8]>>` view with getters and setters over a byte buffer,
//! and a `*Repr` with `parse` and `emit`; [`Repr`] ties a whole datagram payload together.
//!
//! What it does not: no I/O (except the small [`pcap`] file writer for tests and debugging), no
//! queue-pair state, no retransmission logic (that is `remora-fabric`), no UD/RD/XRC services, no
//! atomics, no GRH/LRH (RoCEv1 or native InfiniBand), no CNP generation. It does not depend on
//! the crates whose frames it encodes: what a code means there (a transport, a detector module, a
//! ring layout) stays a plain number here, checked by the caller.
//!
//! ```
//! use remora_wire::{icrc, BthRepr, Endpoints, Op, Opcode, Psn, Repr, RethRepr, Service};
//!
//! let repr = Repr {
//!     bth: BthRepr {
//!         opcode: Opcode::new(Service::Uc, Op::WriteOnlyImm)?,
//!         solicited: true, mig_req: false, pad_count: 0, pkey: 0xffff,
//!         fecn: false, becn: false, dest_qp: 0x12, ack_req: false, psn: Psn::new(7),
//!     },
//!     reth: Some(RethRepr { va: 0x1000, rkey: 0xabc, len: 5 }),
//!     immdt: Some(42),
//!     aeth: None,
//!     payload_len: 5,
//! };
//! let ep = Endpoints::new("127.0.0.1:49170".parse().unwrap(), "127.0.0.1:4791".parse().unwrap());
//! let mut datagram = vec![0; repr.buffer_len()];
//! repr.emit(&mut datagram, b"hello");
//! icrc::seal(&ep, &mut datagram);
//!
//! icrc::check(&ep, &datagram)?;
//! let (parsed, payload) = Repr::parse(&datagram)?;
//! assert_eq!((parsed.immdt, payload), (Some(42), &b"hello"[..]));
//! # Ok::<(), remora_wire::Error>(())
//! ```
//!
//! Panics: parsing never panics on any input; it returns [`Error`]. `new_unchecked` views panic on
//! out-of-range accessors (use `new_checked`), and `emit` panics if the output buffer is shorter than
//! `buffer_len()`, as in smoltcp: these are programming errors, not bad input.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod aeth;
pub mod bth;
pub mod ctrl;
mod error;
pub mod icrc;
pub mod immdt;
pub mod npy;
pub mod opcode;
pub mod packet;
pub mod pcap;
pub mod psn;
pub mod reth;
mod view;

pub use aeth::{AethRepr, NakCode, Syndrome};
pub use bth::BthRepr;
pub use error::Error;
pub use icrc::Endpoints;
pub use opcode::{Op, Opcode, Service};
pub use packet::Repr;
pub use psn::Psn;
pub use reth::RethRepr;

/// Result with this crate's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

/// The IANA UDP destination port of RoCEv2.
pub const ROCE_PORT: u16 = 4791;
/// Length of the Base Transport Header.
pub const BTH_LEN: usize = 12;
/// Length of the RDMA Extended Transport Header.
pub const RETH_LEN: usize = 16;
/// Length of the Immediate Data header.
pub const IMMDT_LEN: usize = 4;
/// Length of the ACK Extended Transport Header.
pub const AETH_LEN: usize = 4;
/// Length of the invariant CRC trailer.
pub const ICRC_LEN: usize = 4;
