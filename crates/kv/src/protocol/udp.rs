//! The UDP frame header memcached puts before each datagram: request id, sequence number,
//! datagram count, reserved (all big-endian u16).

/// Header length.
pub const HEADER_LEN: usize = 8;
/// Largest datagram memcached sends, header included.
pub const MAX_DATAGRAM: usize = 1400;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Echoed request id.
    pub request_id: u16,
    /// Sequence number of this datagram.
    pub seq: u16,
    /// Total datagrams in the message.
    pub total: u16,
}

impl Frame {
    /// Decodes the header; `None` if the datagram is too short.
    pub fn decode(b: &[u8]) -> Option<Frame> {
        if b.len() < HEADER_LEN {
            return None;
        }
        Some(Frame {
            request_id: u16::from_be_bytes([b[0], b[1]]),
            seq: u16::from_be_bytes([b[2], b[3]]),
            total: u16::from_be_bytes([b[4], b[5]]),
        })
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..2].copy_from_slice(&self.request_id.to_be_bytes());
        h[2..4].copy_from_slice(&self.seq.to_be_bytes());
        h[4..6].copy_from_slice(&self.total.to_be_bytes());
        h
    }
}

/// Splits a response into datagrams of at most [`MAX_DATAGRAM`] bytes, each with its header.
pub fn split(request_id: u16, payload: &[u8]) -> Vec<Vec<u8>> {
    let chunk = MAX_DATAGRAM - HEADER_LEN;
    let n = payload.len().div_ceil(chunk).max(1);
    let total = n.min(u16::MAX as usize) as u16;
    (0..n.min(u16::MAX as usize))
        .map(|i| {
            let part =
                &payload[(i * chunk).min(payload.len())..((i + 1) * chunk).min(payload.len())];
            let mut d = Vec::with_capacity(HEADER_LEN + part.len());
            d.extend_from_slice(
                &Frame {
                    request_id,
                    seq: i as u16,
                    total,
                }
                .encode(),
            );
            d.extend_from_slice(part);
            d
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_sizes() {
        let p = vec![b'x'; 3000];
        let d = split(0x1234, &p);
        assert_eq!(d.len(), 3);
        assert!(d.iter().all(|x| x.len() <= MAX_DATAGRAM));
        assert_eq!(&d[0][..8], &[0x12, 0x34, 0, 0, 0, 3, 0, 0]);
        assert_eq!(&d[2][..8], &[0x12, 0x34, 0, 2, 0, 3, 0, 0]);
        let back: Vec<u8> = d.iter().flat_map(|x| x[8..].to_vec()).collect();
        assert_eq!(back, p);
        assert_eq!(split(1, b"").len(), 1);
    }
}
