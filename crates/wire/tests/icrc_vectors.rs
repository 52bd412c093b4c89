//! The invariant CRC against the RoCEv2 CNP captured on a ConnectX-4 Lx (scapy's
//! `test/contrib/roce.uts`): expected ICRC 0x2a00fd82, on the wire `82 fd 00 2a`.

use remora_wire::{icrc, Endpoints, Error};

/// The captured frame, Ethernet header included.
const FRAME: [u8; 74] = [
    0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08,
    0x00, // Ethernet
    0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, // IPv4 ...
    0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00, 0x12, 0x01, // ... 10.0.17.1 -> 10.0.18.1
    0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, // UDP 0 -> 4791, length 40
    0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, // BTH (CNP)
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // CNP padding
    0x82, 0xfd, 0x00, 0x2a, // ICRC
];

#[test]
fn captured_cnp_through_compute_raw() {
    let (ip, udp, roce) = (&FRAME[14..34], &FRAME[34..42], &FRAME[42..]);
    let crc = icrc::compute_raw(ip, udp, &roce[..roce.len() - 4]);
    assert_eq!(crc, 0x2a00_fd82);
    assert_eq!(crc.to_le_bytes(), [0x82, 0xfd, 0x00, 0x2a]);
}

#[test]
fn captured_cnp_through_rebuilt_headers() {
    let ep = Endpoints::new(
        "10.0.17.1:0".parse().unwrap(),
        "10.0.18.1:4791".parse().unwrap(),
    );
    let roce = &FRAME[42..];
    // The NIC set IP ID 0x718c; with it the rebuilt headers give the captured CRC.
    assert_eq!(
        icrc::compute_with_ip_id(&ep, 0x718c, &roce[..roce.len() - 4]),
        0x2a00_fd82
    );
    // `check` assumes ID 0 (a kernel sender with DF), so this capture cannot pass it: the
    // mismatch is reported with both values, not a panic.
    match icrc::check(&ep, roce) {
        Err(Error::BadIcrc { expected, found }) => {
            assert_eq!(found, 0x2a00_fd82);
            assert_ne!(expected, found);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_changed_invariant_byte_breaks_the_crc() {
    let (ip, udp, roce) = (&FRAME[14..34], &FRAME[34..42], &FRAME[42..74 - 4]);
    for i in 0..roce.len() {
        if i == 4 {
            continue; // FECN/BECN byte: masked
        }
        let mut r = roce.to_vec();
        r[i] ^= 0x01;
        assert_ne!(icrc::compute_raw(ip, udp, &r), 0x2a00_fd82, "byte {i}");
    }
}
