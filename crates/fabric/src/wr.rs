//! Work requests and work completions: what the application posts and what it gets back.
use std::sync::Arc;

use remora_mem::{Access, Region};

use crate::error::{Error, Result};

/// Largest message (the RETH DMA length is 32 bits; verbs limit it to 2^31).
pub(crate) const MAX_MESSAGE: usize = 1 << 31;

/// `offset..offset+len` must lie inside `r`.
fn check_bounds(r: &Region, offset: usize, len: usize, what: &str) -> Result<()> {
    if offset.checked_add(len).is_none_or(|e| e > r.len()) {
        return Err(Error::Local(format!(
            "{what} {offset}+{len} bytes outside the local region of {} bytes",
            r.len()
        )));
    }
    Ok(())
}

/// What a posted send-side work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOp {
    /// One-sided WRITE into the peer's region, optionally with immediate data (which the peer sees
    /// as a completion).
    Write {
        /// Immediate data delivered with the last packet.
        imm: Option<u32>,
    },
    /// One-sided READ from the peer's region into the local one (RC only).
    Read,
    /// Two-sided SEND into a receive buffer the peer posted.
    Send {
        /// Immediate data delivered with the last packet.
        imm: Option<u32>,
    },
}

/// A send-side work request: local memory, and for WRITE/READ the remote address and key.
#[derive(Clone, Debug)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: WrOp,
    /// Local region the data comes from (WRITE, SEND) or goes to (READ).
    pub local: Arc<Region>,
    /// Offset in the local region.
    pub offset: usize,
    /// Message length in bytes.
    pub len: usize,
    /// Remote virtual address (WRITE, READ).
    pub remote_va: u64,
    /// Remote key (WRITE, READ).
    pub rkey: u32,
}

impl SendWr {
    /// The checks every transport makes at post time: size, local bounds, READ only on
    /// reliable queue pairs and into a region with local write access.
    pub(crate) fn validate(&self, reliable: bool) -> Result<()> {
        if self.len > MAX_MESSAGE {
            return Err(Error::TooLong(self.len));
        }
        check_bounds(&self.local, self.offset, self.len, "buffer")?;
        if self.op == WrOp::Read {
            if !reliable {
                return Err(Error::Unsupported {
                    op: "READ",
                    qp: "UC",
                });
            }
            if !self.local.access().contains(Access::LOCAL_WRITE) {
                return Err(Error::Local(
                    "READ needs a local region registered with LOCAL_WRITE".into(),
                ));
            }
        }
        Ok(())
    }
}

/// A receive buffer for incoming SENDs.
#[derive(Clone, Debug)]
pub struct RecvWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Region the message lands in.
    pub local: Arc<Region>,
    /// Offset in the region.
    pub offset: usize,
    /// Capacity in bytes.
    pub len: usize,
}

impl RecvWr {
    /// The buffer lies inside its region.
    pub(crate) fn validate(&self) -> Result<()> {
        check_bounds(&self.local, self.offset, self.len, "receive buffer")
    }
}

/// Outcome of a work request, named after the verbs statuses they mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Done.
    Success,
    /// The peer refused the access: unknown rkey, out of bounds or missing right (NAK 0x62).
    RemoteAccessError,
    /// The peer found the request malformed (NAK 0x61), e.g. lengths that do not add up.
    RemoteInvalidRequest,
    /// The peer failed to carry out a valid request (NAK 0x63).
    RemoteOperationalError,
    /// No acknowledgement after the retry limit.
    RetryExceeded,
    /// The peer had no receive buffer after the RNR retry limit.
    RnrRetryExceeded,
    /// The queue pair entered the error state before this request ran.
    Flushed,
    /// An incoming SEND did not fit the posted receive buffer.
    LocalLengthError,
    /// The pages of a READ's local destination could not be brought in (PART page-in failed).
    LocalPageInError,
}

impl Status {
    /// True for [`Status::Success`].
    pub fn is_ok(self) -> bool {
        self == Status::Success
    }
}

/// What a completion reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A posted WRITE finished.
    Write,
    /// A posted READ finished (data is in the local region).
    Read,
    /// A posted SEND finished.
    Send,
    /// A SEND arrived into a posted receive buffer.
    Recv,
    /// A WRITE-with-immediate arrived (responder side).
    RecvRdmaWithImm,
}

/// A work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The work request's identifier (for WRITE-with-immediate arrivals without a posted
    /// receive: 0).
    pub wr_id: u64,
    /// Outcome.
    pub status: Status,
    /// What finished.
    pub opcode: WcOpcode,
    /// Bytes moved (arrivals: message length).
    pub byte_len: u32,
    /// Immediate data, for arrivals that carried it.
    pub imm: Option<u32>,
    /// Arrivals on a UC queue pair over udp: packets accepted in sequence on this queue pair,
    /// up to and including this message's last packet, with no PSN gap or dropped packet
    /// between (saturating). A receiver that knows how many packets its peer sent since its
    /// previous event (a detector stack, say) checks that none was lost: at least that many.
    /// RC arrivals and the stream transports cannot lose a packet: `u32::MAX`. Send side: 0.
    pub in_sequence: u32,
}

impl Completion {
    pub(crate) fn send_side(wr_id: u64, op: WrOp, status: Status, len: usize) -> Completion {
        let opcode = match op {
            WrOp::Write { .. } => WcOpcode::Write,
            WrOp::Read => WcOpcode::Read,
            WrOp::Send { .. } => WcOpcode::Send,
        };
        Completion {
            wr_id,
            status,
            opcode,
            byte_len: len as u32,
            imm: None,
            in_sequence: 0,
        }
    }
}
