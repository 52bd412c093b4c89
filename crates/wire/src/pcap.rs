//! A minimal pcap writer for RoCEv2 datagrams, so tests and debugging sessions can hand what remora
//! sent to Wireshark or tshark (which decode UDP port 4791 as "RRoCE").
//!
//! Each record is Ethernet / IPv4 or IPv6 / UDP around one UDP payload, with headers built as the
//! kernel would send them (IPv4: ID 0, DF, TTL 64, correct header checksum, UDP checksum 0;
//! IPv6: hop limit 64, correct UDP checksum). MAC addresses are fixed locally administered values.
//! Timestamps are synthetic: record `i` is stamped `i` microseconds after the epoch.

use std::io::{self, Write};
use std::path::Path;

use crate::icrc::{ipv4_header, ipv6_header, Endpoints, Family, UDP_HEADER_LEN};

const LINKTYPE_ETHERNET: u32 = 1;
const SNAPLEN: u32 = 65_535;
const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// Internet checksum (RFC 1071) over the concatenation of `chunks`.
pub(crate) fn inet_checksum(chunks: &[&[u8]]) -> u16 {
    let mut sum: u64 = 0;
    let mut odd: Option<u8> = None;
    for chunk in chunks {
        for &b in *chunk {
            match odd.take() {
                Some(hi) => sum += u64::from(u16::from_be_bytes([hi, b])),
                None => odd = Some(b),
            }
        }
    }
    if let Some(hi) = odd {
        sum += u64::from(u16::from_be_bytes([hi, 0]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes one Ethernet frame carrying `payload` as a UDP datagram between `ep`.
fn frame(ep: &Endpoints, payload: &[u8]) -> io::Result<Vec<u8>> {
    let udp_len = UDP_HEADER_LEN + payload.len();
    let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "datagram exceeds 65535 bytes");
    let mut f = Vec::with_capacity(14 + 40 + udp_len);
    f.extend_from_slice(&DST_MAC);
    f.extend_from_slice(&SRC_MAC);
    match ep.family() {
        Family::V4(s, d) => {
            if udp_len + 20 > 0xFFFF {
                return Err(too_big());
            }
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let mut ip = ipv4_header(s, d, udp_len, 0);
            let sum = inet_checksum(&[&ip]);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            f.extend_from_slice(&ip);
            f.extend_from_slice(&ep.udp_header(payload.len(), 0));
        }
        Family::V6(s, d) => {
            if udp_len > 0xFFFF {
                return Err(too_big());
            }
            f.extend_from_slice(&0x86DDu16.to_be_bytes());
            f.extend_from_slice(&ipv6_header(s, d, udp_len));
            // Pseudo-header: addresses, upper-layer length, next header.
            let pseudo_len = (udp_len as u32).to_be_bytes();
            let udp0 = ep.udp_header(payload.len(), 0);
            let sum = match inet_checksum(&[
                &s.octets(),
                &d.octets(),
                &pseudo_len,
                &[0, 0, 0, 17],
                &udp0,
                payload,
            ]) {
                0 => 0xFFFF, // zero means "no checksum", which IPv6 forbids
                x => x,
            };
            f.extend_from_slice(&ep.udp_header(payload.len(), sum));
        }
    }
    f.extend_from_slice(payload);
    Ok(f)
}

/// Writes a pcap stream (microsecond timestamps, Ethernet link type) holding one record per
/// `(endpoints, UDP payload)` pair.
pub fn write_pcap_to<W: Write>(mut out: W, packets: &[(Endpoints, &[u8])]) -> io::Result<()> {
    let mut hdr = Vec::with_capacity(24);
    hdr.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    hdr.extend_from_slice(&2u16.to_le_bytes());
    hdr.extend_from_slice(&4u16.to_le_bytes());
    hdr.extend_from_slice(&0i32.to_le_bytes()); // thiszone
    hdr.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    hdr.extend_from_slice(&SNAPLEN.to_le_bytes());
    hdr.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    out.write_all(&hdr)?;
    for (i, (ep, payload)) in packets.iter().enumerate() {
        let f = frame(ep, payload)?;
        let len = f.len() as u32;
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&((i / 1_000_000) as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&((i % 1_000_000) as u32).to_le_bytes());
        rec[8..12].copy_from_slice(&len.to_le_bytes());
        rec[12..16].copy_from_slice(&len.to_le_bytes());
        out.write_all(&rec)?;
        out.write_all(&f)?;
    }
    out.flush()
}

/// Writes a pcap file at `path` (see [`write_pcap_to`]).
pub fn write_pcap(path: impl AsRef<Path>, packets: &[(Endpoints, &[u8])]) -> io::Result<()> {
    let file = std::fs::File::create(path)?;
    write_pcap_to(io::BufWriter::new(file), packets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_checksum_matches_scapy_example() {
        // scapy's UC SEND Only example: TOS 1, ID 1144, DF, TTL 64, 192.168.0.7 both ways.
        let ip = [
            0x45, 0x01, 0x00, 0x40, 0x04, 0x78, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 192, 168, 0, 7,
            192, 168, 0, 7,
        ];
        assert_eq!(inet_checksum(&[&ip]), 0xb4d5);
        // Split at an odd offset: the carry byte must join the next chunk.
        assert_eq!(inet_checksum(&[&ip[..3], &ip[3..]]), 0xb4d5);
    }

    #[test]
    fn udp_checksum_matches_scapy_example() {
        // Same example's UDP checksum over the IPv4 pseudo-header and the sealed packet (scapy
        // appends its ICRC before the UDP layer sums the datagram).
        let mut payload = vec![0x24, 0x60, 0xff, 0xff, 0, 0, 0, 211, 0, 0xcf, 0x17, 0x10];
        payload.extend_from_slice(b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00");
        payload.extend_from_slice(&0xf353_f378u32.to_le_bytes());
        let udp = [0xc0, 0x00, 0x12, 0xb7, 0x00, 44, 0, 0];
        let pseudo = [192, 168, 0, 7, 192, 168, 0, 7, 0, 17, 0, 44];
        assert_eq!(inet_checksum(&[&pseudo, &udp, &payload]), 0xaca2);
    }

    #[test]
    fn layout() {
        let ep = Endpoints::new(
            "127.0.0.1:49152".parse().unwrap(),
            "127.0.0.1:4791".parse().unwrap(),
        );
        let mut out = Vec::new();
        write_pcap_to(&mut out, &[(ep, &[1, 2, 3, 4][..])]).unwrap();
        assert_eq!(out.len(), 24 + 16 + 14 + 20 + 8 + 4);
        assert_eq!(out[..4], [0xd4, 0xc3, 0xb2, 0xa1]);
        let frame = &out[40..];
        assert_eq!(frame[12..14], [0x08, 0x00]);
        assert_eq!(
            inet_checksum(&[&frame[14..34]]),
            0,
            "IPv4 header checksum verifies"
        );
        assert_eq!(frame[36..38], 4791u16.to_be_bytes());
    }
}
