//! The stream transports' 32-byte frame: its bytes are [`remora_wire::ctrl::stream`]'s
//! (little-endian: kind u8, code u8, 0 u16, len u32, va u64, rkey u32, imm u32, aux u64); this
//! module says what the kinds and codes mean.
//!
//! A [`DATA`] frame carries one packet of the queue pair's engine: `imm` header bytes follow
//! (the RoCEv2 BTH and extension headers, exactly as on udp), then `len` payload bytes, unless
//! `code` is [`BYREF`]: the payload is then at `aux` in a memfd the sender handed over with a
//! [`MAP`] frame (shm), and not in the stream. No pad, no ICRC: the stream checks its bytes.
//! The other kinds are the shm transport's own: handing memory over and the one-sided ring.

pub(super) use remora_wire::ctrl::stream::FRAME_LEN as HDR;
pub(super) use remora_wire::ctrl::{FramePacket, FrameRepr as Frame};

/// Longest header part of a DATA frame (BTH, RETH, ImmDt: 32 bytes; AETH instead: 16).
pub(super) const MAX_HEADERS: usize = 64;
/// One engine packet (see the module documentation).
pub(super) const DATA: u8 = 1;
/// shm: hands over a memfd-backed region of the sender (va = base, aux = length), read-only;
/// the memfd travels with the frame's bytes as `SCM_RIGHTS`, so the peer copies payloads out
/// of it with plain memcpy.
pub(super) const MAP: u8 = 9;
/// shm, one-sided: grants the peer, at its request, a registered memfd region (va = base, aux = length, rkey,
/// `code` = [`super::grant::GRANT_READ`] | [`super::grant::GRANT_WRITE`]); the memfd travels
/// as `SCM_RIGHTS`, read-only without write rights.
pub(super) const GRANT: u8 = 10;
/// shm, one-sided: asks the peer to grant its region `rkey` (answered by a GRANT, or by
/// nothing when the key names no region that can be granted).
pub(super) const GRANT_REQ: u8 = 13;
/// shm, one-sided: hands the peer the completion ring it fills (the memfd as `SCM_RIGHTS`).
pub(super) const RING: u8 = 11;
/// shm, one-sided: the ring has entries and its consumer asked to be woken, or (the other
/// way) statuses of the receiver's SENDs are in the ring it produces into.
pub(super) const DOORBELL: u8 = 12;
/// `code` of a DATA frame whose payload is at `aux` in a handed-over memfd, not in the stream.
pub(super) const BYREF: u8 = 1;
