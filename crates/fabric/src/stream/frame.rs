//! The stream transports' 32-byte frame (little-endian): kind u8, code u8, 0 u16, len u32,
//! va u64, rkey u32, imm u32, aux u64.
//!
//! A [`DATA`] frame carries one packet of the queue pair's engine: `imm` header bytes follow
//! (the RoCEv2 BTH and extension headers, exactly as on udp), then `len` payload bytes, unless
//! `code` is [`BYREF`]: the payload is then at `aux` in a memfd the sender handed over with a
//! [`MAP`] frame (shm), and not in the stream. No pad, no ICRC: the stream checks its bytes.
//! The other kinds are the shm transport's own: handing memory over and the one-sided ring.

/// Frame length.
pub(super) const HDR: usize = 32;
/// Longest header part of a DATA frame (BTH, RETH, ImmDt: 32 bytes; AETH instead: 16).
pub(super) const MAX_HEADERS: usize = 64;
/// One engine packet (see the module documentation).
pub(super) const DATA: u8 = 1;
/// shm: hands over a memfd-backed region of the sender (va = base, aux = length), read-only;
/// the memfd travels with the frame's bytes as `SCM_RIGHTS`, so the peer copies payloads out
/// of it with plain memcpy.
pub(super) const MAP: u8 = 9;
/// shm, one-sided: grants the peer, at its request, a registered memfd region (va = base, aux = length, rkey,
/// `code` = [`super::direct::GRANT_READ`] | [`super::direct::GRANT_WRITE`]); the memfd travels
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

/// One decoded frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Frame {
    pub kind: u8,
    pub code: u8,
    pub len: u32,
    pub va: u64,
    pub rkey: u32,
    pub imm: u32,
    pub aux: u64,
}

impl Frame {
    pub(super) fn encode(&self) -> [u8; HDR] {
        let mut b = [0u8; HDR];
        b[0] = self.kind;
        b[1] = self.code;
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.va.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b[20..24].copy_from_slice(&self.imm.to_le_bytes());
        b[24..32].copy_from_slice(&self.aux.to_le_bytes());
        b
    }

    pub(super) fn decode(b: &[u8; HDR]) -> Frame {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Frame {
            kind: b[0],
            code: b[1],
            len: u32_at(4),
            va: u64_at(8),
            rkey: u32_at(16),
            imm: u32_at(20),
            aux: u64_at(24),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trips_and_is_little_endian() {
        let f = Frame {
            kind: DATA,
            code: BYREF,
            len: 0x0102_0304,
            va: 0x1122_3344_5566_7788,
            rkey: 0xdead_beef,
            imm: 7,
            aux: 9,
        };
        let b = f.encode();
        assert_eq!(&b[4..8], &[4, 3, 2, 1]);
        assert_eq!(Frame::decode(&b), f);
    }
}
