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
    let mut v = Vec::new();
    datagrams(request_id, payload.len(), [payload], |d| v.push(d.to_vec()));
    v
}

/// Cuts a response of `len` bytes, given as `pieces` in order, into datagrams of at most
/// [`MAX_DATAGRAM`] bytes with their headers, handing each to `send` as it fills: one
/// datagram's buffer, whatever the response's size. Like memcached's 16-bit count, a response
/// is cut after 65535 datagrams.
pub fn datagrams<'a>(
    request_id: u16,
    len: usize,
    pieces: impl IntoIterator<Item = &'a [u8]>,
    mut send: impl FnMut(&[u8]),
) {
    let chunk = MAX_DATAGRAM - HEADER_LEN;
    let total = len.div_ceil(chunk).clamp(1, u16::MAX as usize) as u16;
    let header = |seq: u16| {
        Frame {
            request_id,
            seq,
            total,
        }
        .encode()
    };
    let mut d = Vec::with_capacity(MAX_DATAGRAM);
    let mut seq = 0u16;
    d.extend_from_slice(&header(seq));
    for mut p in pieces {
        while !p.is_empty() {
            let k = (MAX_DATAGRAM - d.len()).min(p.len());
            d.extend_from_slice(&p[..k]);
            p = &p[k..];
            if d.len() == MAX_DATAGRAM {
                send(&d);
                seq += 1;
                if seq == total {
                    return;
                }
                d.clear();
                d.extend_from_slice(&header(seq));
            }
        }
    }
    if d.len() > HEADER_LEN || seq == 0 {
        send(&d);
    }
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
        assert_eq!(split(1, &p[..2 * (MAX_DATAGRAM - HEADER_LEN)]).len(), 2);
    }

    #[test]
    fn pieces_pack_like_one_payload() {
        let p: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let mut got = Vec::new();
        let parts = [&p[..1], &p[1..1391], &p[1391..1392], &p[1392..]];
        datagrams(7, p.len(), parts, |d| got.push(d.to_vec()));
        assert_eq!(got, split(7, &p));
    }
}
