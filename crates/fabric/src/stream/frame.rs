//! The stream transports' 32-byte frame (little-endian): kind u8, code u8, 0 u16, len u32,
//! va u64, rkey u32, imm u32, aux u64. In requests and READ responses `code` is [`BYREF`] when
//! the payload moves through a memfd the requester handed over (shm) instead of the stream;
//! in a NAK it is the syndrome.
use remora_wire::NakCode;

/// Frame length.
pub(super) const HDR: usize = 32;
// Kinds. ACK carries the number of requests acknowledged in `len`, NAK the syndrome in `code`.
pub(super) const WRITE: u8 = 1;
pub(super) const WRITE_IMM: u8 = 2;
pub(super) const SEND: u8 = 3;
pub(super) const SEND_IMM: u8 = 4;
pub(super) const READ_REQ: u8 = 5;
pub(super) const READ_RESP: u8 = 6;
pub(super) const ACK: u8 = 7;
pub(super) const NAK: u8 = 8;
/// shm: hands over a memfd-backed region of the requester (va = base, aux = length); the memfd
/// travels with the frame's bytes as `SCM_RIGHTS`, so the responder can map it and copy with
/// plain memcpy.
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
/// shm, one-sided: the ring has entries and its consumer asked to be woken.
pub(super) const DOORBELL: u8 = 12;
/// `code` of a request whose payload is at `aux` in a handed-over memfd, not in the stream.
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

pub(super) fn nak_byte(c: NakCode) -> u8 {
    match c {
        NakCode::PsnSequenceError => 0x60,
        NakCode::InvalidRequest => 0x61,
        NakCode::RemoteAccessError => 0x62,
        NakCode::RemoteOperationalError => 0x63,
        NakCode::InvalidRdRequest => 0x64,
    }
}

pub(super) fn nak_code(b: u8) -> Option<NakCode> {
    Some(match b {
        0x60 => NakCode::PsnSequenceError,
        0x61 => NakCode::InvalidRequest,
        0x62 => NakCode::RemoteAccessError,
        0x63 => NakCode::RemoteOperationalError,
        0x64 => NakCode::InvalidRdRequest,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trips_and_is_little_endian() {
        let f = Frame {
            kind: WRITE_IMM,
            code: 0x62,
            len: 0x0102_0304,
            va: 0x1122_3344_5566_7788,
            rkey: 0xdead_beef,
            imm: 7,
            aux: 9,
        };
        let b = f.encode();
        assert_eq!(&b[4..8], &[4, 3, 2, 1]);
        assert_eq!(Frame::decode(&b), f);
        for c in [0x60u8, 0x61, 0x62, 0x63, 0x64] {
            assert_eq!(nak_byte(nak_code(c).unwrap()), c);
        }
        assert!(nak_code(0x65).is_none());
    }
}
