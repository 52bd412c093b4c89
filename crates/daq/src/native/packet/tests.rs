//! Golden bytes (every field distinct, emitted into 0xa5-filled buffers so a forgotten field
//! shows), lengths, the packet-to-row map, and round trips over arbitrary headers and bytes.
use proptest::prelude::*;

use super::*;

/// Every field distinct and non-zero, so a field written at the wrong place shows.
static HEADER: [u8; HEADER_LEN] = [
    0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // frame number
    0x14, 0x13, 0x12, 0x11, // exposure length
    0x7f, 0x00, 0x00, 0x00, // packet number 127
    0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, // bunch id
    0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31, // timestamp
    0x42, 0x41, // module id
    0x03, 0x00, // row
    0x01, 0x00, // column
    0x52, 0x51, // detSpec2
    0x64, 0x63, 0x62, 0x61, // detSpec3
    0x72, 0x71, // detSpec4
    0x03, 0x02, // detector type, version
];

fn repr() -> Repr {
    Repr {
        frame_number: 0x0102_0304_0506_0708,
        exposure_length: 0x1112_1314,
        packet_number: 127,
        bunch_id: 0x2122_2324_2526_2728,
        timestamp: 0x3132_3334_3536_3738,
        module_id: 0x4142,
        row: 3,
        column: 1,
        det_spec2: 0x5152,
        det_spec3: 0x6162_6364,
        det_spec4: 0x7172,
        det_type: DETECTOR_JUNGFRAU,
        version: HEADER_VERSION,
    }
}

fn packet_bytes() -> Vec<u8> {
    let mut b = HEADER.to_vec();
    b.extend((0..PAYLOAD_LEN).map(|i| i as u8));
    b
}

#[test]
fn deconstruct() {
    let b = packet_bytes();
    let p = Packet::new_checked(&b[..]).unwrap();
    assert_eq!(p.frame_number(), 0x0102_0304_0506_0708);
    assert_eq!(p.exposure_length(), 0x1112_1314);
    assert_eq!(p.packet_number(), 127);
    assert_eq!(p.bunch_id(), 0x2122_2324_2526_2728);
    assert_eq!(p.timestamp(), 0x3132_3334_3536_3738);
    assert_eq!(p.module_id(), 0x4142);
    assert_eq!((p.row(), p.column()), (3, 1));
    assert_eq!(p.det_spec2(), 0x5152);
    assert_eq!(p.det_spec3(), 0x6162_6364);
    assert_eq!(p.det_spec4(), 0x7172);
    assert_eq!((p.det_type(), p.version()), (3, 2));
    assert_eq!(p.payload(), &b[HEADER_LEN..]);
}

#[test]
fn construct() {
    let mut b = vec![0xa5u8; PACKET_LEN];
    let mut p = Packet::new_unchecked(&mut b[..]);
    p.set_frame_number(0x0102_0304_0506_0708);
    p.set_exposure_length(0x1112_1314);
    p.set_packet_number(127);
    p.set_bunch_id(0x2122_2324_2526_2728);
    p.set_timestamp(0x3132_3334_3536_3738);
    p.set_module_id(0x4142);
    p.set_row(3);
    p.set_column(1);
    p.set_det_spec2(0x5152);
    p.set_det_spec3(0x6162_6364);
    p.set_det_spec4(0x7172);
    p.set_det_type(3);
    p.set_version(2);
    for (i, x) in p.payload_mut().iter_mut().enumerate() {
        *x = i as u8;
    }
    assert_eq!(b, packet_bytes());
}

#[test]
fn parse() {
    let b = packet_bytes();
    assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(repr()));
}

#[test]
fn emit_writes_every_header_byte_and_leaves_the_payload() {
    let mut b = vec![0xa5u8; PACKET_LEN];
    let r = repr();
    assert_eq!(r.buffer_len(), HEADER_LEN);
    r.emit(&mut Packet::new_unchecked(&mut b[..]));
    assert_eq!(&b[..HEADER_LEN], &HEADER[..]);
    assert!(
        b[HEADER_LEN..].iter().all(|&x| x == 0xa5),
        "payload untouched"
    );
}

#[test]
fn jungfrau_header_is_type_3_version_2_and_zeros() {
    let mut b = vec![0xa5u8; PACKET_LEN];
    Repr::jungfrau(1, 5, 2).emit(&mut Packet::new_unchecked(&mut b[..]));
    let mut want = [0u8; HEADER_LEN];
    want[0] = 1; // frame
    want[12] = 5; // packet
    want[32] = 2; // module id
    want[46] = 3; // JUNGFRAU
    want[47] = 2; // version
    assert_eq!(&b[..HEADER_LEN], &want[..]);
}

#[test]
fn only_whole_packets_are_accepted() {
    for n in [0, 1, HEADER_LEN, PACKET_LEN - 1, PACKET_LEN + 1, 9000] {
        let b = vec![0u8; n];
        assert_eq!(Packet::new_checked(&b[..]), Err(PacketError::Length(n)));
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(PacketError::Length(n))
        );
    }
}

#[test]
fn packets_cover_every_module_row_once_in_order() {
    let mut seen = vec![0u8; crate::model::MODULE_ROWS];
    for k in 0..PACKETS_PER_FRAME {
        assert_eq!(rows_of_packet(k).len(), ROWS_PER_PACKET);
        assert_eq!(words_of_packet(k).len() * 2, PAYLOAD_LEN);
        for r in rows_of_packet(k) {
            seen[r] += 1;
        }
    }
    assert!(seen.iter().all(|&s| s == 1));
    assert_eq!(rows_of_packet(0), 0..4);
    assert_eq!(rows_of_packet(127), 508..512);
}

fn any_repr() -> impl Strategy<Value = Repr> {
    (
        (any::<u64>(), any::<u32>(), any::<u32>(), any::<u64>()),
        (any::<u64>(), any::<u16>(), any::<u16>(), any::<u16>()),
        (
            any::<u16>(),
            any::<u32>(),
            any::<u16>(),
            any::<u8>(),
            any::<u8>(),
        ),
    )
        .prop_map(|((f, e, p, b), (t, m, r, c), (s2, s3, s4, ty, v))| Repr {
            frame_number: f,
            exposure_length: e,
            packet_number: p,
            bunch_id: b,
            timestamp: t,
            module_id: m,
            row: r,
            column: c,
            det_spec2: s2,
            det_spec3: s3,
            det_spec4: s4,
            det_type: ty,
            version: v,
        })
}

proptest! {
    #[test]
    fn parse_emit_round_trip(r in any_repr(), fill: u8) {
        let mut b = vec![fill; PACKET_LEN];
        r.emit(&mut Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(r));
        prop_assert!(b[HEADER_LEN..].iter().all(|&x| x == fill));
    }

    #[test]
    fn any_header_bytes_parse_and_emit_back(header in prop::collection::vec(any::<u8>(), HEADER_LEN)) {
        let mut b = header.clone();
        b.resize(PACKET_LEN, 0);
        let r = Repr::parse(&Packet::new_unchecked(&b[..])).unwrap();
        let mut out = vec![0xa5u8; PACKET_LEN];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(&out[..HEADER_LEN], &header[..]);
    }

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..9000)) {
        match Packet::new_checked(&bytes[..]) {
            Ok(p) => {
                let r = Repr::parse(&p).unwrap();
                prop_assert_eq!(r.packet_number, p.packet_number());
                prop_assert_eq!(p.payload().len(), PAYLOAD_LEN);
            }
            Err(_) => prop_assert!(Repr::parse(&Packet::new_unchecked(&bytes[..])).is_err()),
        }
    }
}
