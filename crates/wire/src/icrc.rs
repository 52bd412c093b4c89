//! The invariant CRC (ICRC) that ends every RoCEv2 packet.
//!
//! CRC-32 with the zlib/Ethernet polynomial (reflected 0xEDB88320, initial value and final xor
//! 0xFFFFFFFF) over, in order: 8 bytes of 0xFF (standing in for the InfiniBand LRH); the IP
//! header with the fields routers may change set to all ones (IPv4: TOS, TTL, header checksum;
//! IPv6: traffic class, flow label, hop limit); the UDP header with its checksum set to 0xFFFF;
//! the BTH with byte 4 (FECN, BECN, reserved) set to 0xFF; and the rest of the packet up to the
//! end of the pad. The result is stored little-endian in the last 4 bytes.
//!
//! Everything is fed to `crc32fast` in pieces from stack buffers: no allocation per packet.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::{Error, Result, BTH_LEN, ICRC_LEN};

const ONES: [u8; 8] = [0xFF; 8];
/// IPv4 header length as the kernel sends it (IHL 5, no options).
pub(crate) const IPV4_HEADER_LEN: usize = 20;
/// IPv6 header length (no extension headers).
pub(crate) const IPV6_HEADER_LEN: usize = 40;
/// UDP header length.
pub(crate) const UDP_HEADER_LEN: usize = 8;
const IPPROTO_UDP: u8 = 17;

/// Sets the `(start, end)` byte ranges of `bytes` to 0xFF, clipped to its length.
fn mask(bytes: &mut [u8], ranges: &[(usize, usize)]) {
    for &(start, end) in ranges {
        let end = end.min(bytes.len());
        if start < end {
            bytes[start..end].fill(0xFF);
        }
    }
}

/// The longest IP header [`compute_raw`] gathers on the stack (IPv4 with options is up to 60).
const IP_MAX: usize = 60;

/// ICRC over raw headers as they appear on the wire. The IP version comes from the first nibble
/// of `ip_header` (4 or 6; any other value is hashed unmasked). `roce_without_icrc` is the UDP
/// payload without its last 4 bytes. Never panics, whatever the lengths.
///
/// The masked headers are gathered into one stack buffer and hashed in one call, then the rest
/// of the packet in another: feeding `crc32fast` a handful of 1- to 8-byte pieces per packet
/// cost a software responder a fifth of its time on small READs.
pub fn compute_raw(ip_header: &[u8], udp_header: &[u8], roce_without_icrc: &[u8]) -> u32 {
    let bth = &roce_without_icrc[..roce_without_icrc.len().min(BTH_LEN)];
    let mut stack = [0u8; 8 + IP_MAX + UDP_HEADER_LEN + BTH_LEN];
    let mut heap = Vec::new();
    let need = 8 + ip_header.len() + udp_header.len() + bth.len();
    // IP options beyond 60 bytes or an odd UDP header: not as remora sends, so allocating is fine.
    let pre = if need <= stack.len() {
        &mut stack[..need]
    } else {
        heap.resize(need, 0);
        &mut heap[..]
    };
    let mut n = 0;
    for (part, masks) in [
        (&ONES[..], &[][..]),
        (ip_header, ip_masks(ip_header)),
        (udp_header, &[(6, 8)][..]),
        (bth, &[(4, 5)][..]),
    ] {
        let m = &mut pre[n..n + part.len()];
        m.copy_from_slice(part);
        mask(m, masks);
        n += part.len();
    }
    if ip_header.first().map(|b| b >> 4) == Some(6) {
        pre[8] |= 0x0F;
    }
    let mut h = crc32fast::Hasher::new();
    h.update(pre);
    h.update(&roce_without_icrc[bth.len()..]);
    h.finalize()
}

/// The IP header's fields routers may change, by version (any other: none).
fn ip_masks(ip_header: &[u8]) -> &'static [(usize, usize)] {
    match ip_header.first().map(|b| b >> 4) {
        // TOS (byte 1), TTL (byte 8), header checksum (bytes 10-11).
        Some(4) => &[(1, 2), (8, 9), (10, 12)],
        // Traffic class and flow label (the low nibble of byte 0, set by the caller, through
        // byte 3) and the hop limit (byte 7).
        Some(6) => &[(1, 4), (7, 8)],
        _ => &[],
    }
}

/// The addresses of one datagram. The IP and UDP headers are rebuilt as the kernel sends them
/// from an unconnected socket with `IP_PMTUDISC_DO` (IPv4: IHL 5, ID 0, DF set, protocol 17;
/// IPv6: no extension headers).
///
/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) go out as IPv4, so when both ends are IPv4 or
/// IPv4-mapped the IPv4 header is used; otherwise IPv6, with any IPv4 address mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// Sender address and UDP source port.
    pub src: SocketAddr,
    /// Receiver address and UDP destination port.
    pub dst: SocketAddr,
}

/// The IP addresses of a datagram as they go on the wire.
pub(crate) enum Family {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

fn as_v4(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(a) => Some(a),
        // Only `::ffff:a.b.c.d`, not the deprecated compatible form (`::1` is not 0.0.0.1).
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    }
}

fn as_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

impl Endpoints {
    /// Endpoints from a source and a destination.
    pub fn new(src: SocketAddr, dst: SocketAddr) -> Endpoints {
        Endpoints { src, dst }
    }

    /// The same datagram's endpoints seen from the other side (for replies).
    pub fn reversed(self) -> Endpoints {
        Endpoints {
            src: self.dst,
            dst: self.src,
        }
    }

    pub(crate) fn family(&self) -> Family {
        match (as_v4(self.src.ip()), as_v4(self.dst.ip())) {
            (Some(s), Some(d)) => Family::V4(s, d),
            _ => Family::V6(as_v6(self.src.ip()), as_v6(self.dst.ip())),
        }
    }

    /// The UDP header for a payload of `payload_len` bytes; `checksum` as given.
    pub(crate) fn udp_header(&self, payload_len: usize, checksum: u16) -> [u8; UDP_HEADER_LEN] {
        let mut u = [0u8; UDP_HEADER_LEN];
        u[0..2].copy_from_slice(&self.src.port().to_be_bytes());
        u[2..4].copy_from_slice(&self.dst.port().to_be_bytes());
        // Oversized payloads cannot be a datagram; wrap rather than panic.
        u[4..6].copy_from_slice(&((UDP_HEADER_LEN + payload_len) as u16).to_be_bytes());
        u[6..8].copy_from_slice(&checksum.to_be_bytes());
        u
    }
}

/// An IPv4 header with IHL 5, the given ID, DF set, TTL 64, protocol UDP and a zero checksum.
pub(crate) fn ipv4_header(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    udp_len: usize,
    id: u16,
) -> [u8; IPV4_HEADER_LEN] {
    let mut ip = [0u8; IPV4_HEADER_LEN];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((IPV4_HEADER_LEN + udp_len) as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = IPPROTO_UDP;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    ip
}

/// An IPv6 header with no extension headers, hop limit 64, zero traffic class and flow label.
pub(crate) fn ipv6_header(src: Ipv6Addr, dst: Ipv6Addr, udp_len: usize) -> [u8; IPV6_HEADER_LEN] {
    let mut ip = [0u8; IPV6_HEADER_LEN];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    ip[6] = IPPROTO_UDP;
    ip[7] = 64;
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    ip
}

/// ICRC of a packet between `ep` (IPv4 ID 0, as the kernel sends with DF).
pub fn compute(ep: &Endpoints, roce_without_icrc: &[u8]) -> u32 {
    compute_with_ip_id(ep, 0, roce_without_icrc)
}

/// Like [`compute`] for an IPv4 datagram whose sender chose IP ID `ip_id` (captures from NICs
/// that number their datagrams). Ignored for IPv6, which has no ID.
pub fn compute_with_ip_id(ep: &Endpoints, ip_id: u16, roce_without_icrc: &[u8]) -> u32 {
    let udp_payload = roce_without_icrc.len() + ICRC_LEN;
    let udp = ep.udp_header(udp_payload, 0xFFFF);
    let udp_len = UDP_HEADER_LEN + udp_payload;
    match ep.family() {
        Family::V4(s, d) => {
            compute_raw(&ipv4_header(s, d, udp_len, ip_id), &udp, roce_without_icrc)
        }
        Family::V6(s, d) => compute_raw(&ipv6_header(s, d, udp_len), &udp, roce_without_icrc),
    }
}

/// Writes the ICRC little-endian into the last 4 bytes of `packet` (a whole UDP payload).
///
/// Panics if `packet` is shorter than [`ICRC_LEN`] (a programming error: emit first).
pub fn seal(ep: &Endpoints, packet: &mut [u8]) {
    assert!(
        packet.len() >= ICRC_LEN,
        "icrc::seal: packet shorter than the ICRC"
    );
    let body = packet.len() - ICRC_LEN;
    let crc = compute(ep, &packet[..body]);
    packet[body..].copy_from_slice(&crc.to_le_bytes());
}

/// Checks the ICRC in the last 4 bytes of `packet` (a whole UDP payload).
pub fn check(ep: &Endpoints, packet: &[u8]) -> Result<()> {
    let have = packet.len();
    if have < BTH_LEN + ICRC_LEN {
        return Err(Error::Truncated {
            need: BTH_LEN + ICRC_LEN,
            have,
        });
    }
    let body = have - ICRC_LEN;
    let mut stored = [0u8; ICRC_LEN];
    stored.copy_from_slice(&packet[body..]);
    let found = u32::from_le_bytes(stored);
    let expected = compute(ep, &packet[..body]);
    if expected == found {
        Ok(())
    } else {
        Err(Error::BadIcrc { expected, found })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RoCEv2 CNP captured on a ConnectX-4 Lx (scapy `test/contrib/roce.uts`):
    /// 10.0.17.1:0 -> 10.0.18.1:4791, IP ID 0x718c, TOS 0xc2, BECN, dest QP 0x118.
    const CX4_IP: [u8; 20] = [
        0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11,
        0x01, 0x0a, 0x00, 0x12, 0x01,
    ];
    const CX4_UDP: [u8; 8] = [0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00];
    fn cx4_roce() -> [u8; 32] {
        let mut r = [0u8; 32];
        r[..12].copy_from_slice(&[0x81, 0, 0xff, 0xff, 0x40, 0, 0x01, 0x18, 0, 0, 0, 0]);
        r[28..].copy_from_slice(&[0x82, 0xfd, 0x00, 0x2a]);
        r
    }

    #[test]
    fn connectx4_cnp_raw() {
        let roce = cx4_roce();
        assert_eq!(compute_raw(&CX4_IP, &CX4_UDP, &roce[..28]), 0x2a00_fd82);
        assert_eq!(0x2a00_fd82u32.to_le_bytes(), roce[28..]);
    }

    #[test]
    fn connectx4_cnp_rebuilt_headers() {
        let ep = Endpoints::new(
            "10.0.17.1:0".parse().unwrap(),
            "10.0.18.1:4791".parse().unwrap(),
        );
        let roce = cx4_roce();
        assert_eq!(compute_with_ip_id(&ep, 0x718c, &roce[..28]), 0x2a00_fd82);
        // The NIC numbered its datagram; with ID 0 (the kernel's choice under DF) it differs.
        assert!(matches!(
            check(&ep, &roce),
            Err(Error::BadIcrc {
                found: 0x2a00_fd82,
                ..
            })
        ));
        // The rebuilt header equals the captured one except in the masked fields.
        let mut rebuilt = ipv4_header(
            Ipv4Addr::new(10, 0, 17, 1),
            Ipv4Addr::new(10, 0, 18, 1),
            40,
            0x718c,
        );
        rebuilt[1] = 0xc2;
        rebuilt[10..12].copy_from_slice(&[0x91, 0x61]);
        assert_eq!(rebuilt, CX4_IP);
    }

    #[test]
    fn variant_fields_do_not_matter() {
        let roce = cx4_roce();
        let mut ip = CX4_IP;
        ip[1] = 0x00;
        ip[8] = 0x01;
        ip[10] = 0x12;
        let mut udp = CX4_UDP;
        udp[6] = 0x55;
        let mut body = roce;
        body[4] = 0x80; // FECN instead of BECN
        assert_eq!(compute_raw(&ip, &udp, &body[..28]), 0x2a00_fd82);
        // An invariant field does.
        ip[4] = 0;
        assert_ne!(compute_raw(&ip, &udp, &body[..28]), 0x2a00_fd82);
    }

    #[test]
    fn scapy_uc_send_only_example() {
        // scapy's computed (not captured) UC SEND Only example: ICRC wire bytes f3 53 f3 78
        // shown by scapy as the big-endian field 0x78f353f3.
        let ep = Endpoints::new(
            "192.168.0.7:49152".parse().unwrap(),
            "192.168.0.7:4791".parse().unwrap(),
        );
        let mut roce = vec![0x24, 0x60, 0xff, 0xff, 0, 0, 0, 211, 0, 0xcf, 0x17, 0x10];
        roce.extend_from_slice(b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00");
        assert_eq!(compute_with_ip_id(&ep, 1144, &roce), 0xf353_f378);
    }

    #[test]
    fn seal_then_check_v4_and_v6() {
        for (s, d) in [
            ("127.0.0.1:49153", "127.0.0.1:4791"),
            ("[::1]:49153", "[::1]:4791"),
            ("[::ffff:10.0.0.1]:5000", "10.0.0.2:4791"),
        ] {
            let ep = Endpoints::new(s.parse().unwrap(), d.parse().unwrap());
            let mut p = [0u8; 32];
            p[0] = 0x2a;
            p[12..28].copy_from_slice(b"0123456789abcdef");
            seal(&ep, &mut p);
            assert_eq!(check(&ep, &p), Ok(()));
            assert!(check(&ep.reversed(), &p).is_err() || s == d);
            p[20] ^= 1;
            assert!(matches!(check(&ep, &p), Err(Error::BadIcrc { .. })));
        }
    }

    #[test]
    fn mapped_v4_equals_plain_v4() {
        let plain = Endpoints::new(
            "10.0.0.1:5000".parse().unwrap(),
            "10.0.0.2:4791".parse().unwrap(),
        );
        let mapped = Endpoints::new(
            "[::ffff:10.0.0.1]:5000".parse().unwrap(),
            "[::ffff:10.0.0.2]:4791".parse().unwrap(),
        );
        let body = [0x0au8; 28];
        assert_eq!(compute(&plain, &body), compute(&mapped, &body));
        let v6 = Endpoints::new("[::1]:5000".parse().unwrap(), "[::1]:4791".parse().unwrap());
        assert_ne!(compute(&v6, &body), compute(&plain, &body));
    }

    #[test]
    fn short_inputs_do_not_panic() {
        assert_eq!(
            check(
                &Endpoints::new(
                    "127.0.0.1:1".parse().unwrap(),
                    "127.0.0.1:2".parse().unwrap()
                ),
                &[0; 15]
            ),
            Err(Error::Truncated { need: 16, have: 15 })
        );
        for n in 0..12 {
            let _ = compute_raw(&[0x45; 64][..n], &[0; 8][..n.min(8)], &[0; 12][..n]);
            let _ = compute_raw(&[0x60; 64][..n], &[], &[]);
        }
    }
}
