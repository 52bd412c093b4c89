//! Every file format: golden bytes, parses of handmade bytes, round trips, malformed files.

use std::path::Path;

use proptest::prelude::*;
use remora_match::formats::npy::{self, NpyArray, NpyData};
use remora_match::formats::{
    self, detect, lowe, micmac, result, Descriptors, Format, FormatError, Keypoints,
};
use remora_match::Match;

fn one_point(descriptors: Descriptors) -> Keypoints {
    Keypoints {
        xy: vec![[1.5, -2.0]],
        scale: vec![0.5],
        angle: vec![0.25],
        dim: 2,
        descriptors,
    }
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const PASTIS_V0: &str = "01000000 02000000 0000c03f 000000c0 0000003f 0000803e 07ff";
const DIGEO_V1_LE: &str = "ba 000000 00 cd13f33a 01000000 01000000 02000000
    000000000000f83f 00000000000000c0 000000000000e03f 0000 0100
    000000000000d03f 0000000000001c40 0000000000e06f40";
const DIGEO_V1_BE: &str = "ba 01 000000 3af313cd 00000001 00000001 00000002
    3ff8000000000000 c000000000000000 3fe0000000000000 0000 0001
    3fd0000000000000 401c000000000000 406fe00000000000";
const RESULT_V1_LE: &str = "ba 00 000000 bc299456 01000000 01000000
    000000000000f03f 0000000000000040 0000000000000840 0000000000001040";

#[test]
fn micmac_v0_golden_bytes() {
    let kp = one_point(Descriptors::U8(vec![7, 255]));
    assert_eq!(micmac::encode_v0(&kp).unwrap(), hex(PASTIS_V0));
    assert_eq!(micmac::parse_v0(&hex(PASTIS_V0)).unwrap(), kp);
    assert_eq!(
        detect(Path::new(""), &hex(PASTIS_V0)),
        Some(Format::MicmacV0)
    );
}

#[test]
fn micmac_v1_golden_bytes_in_both_byte_orders() {
    let kp = one_point(Descriptors::F32(vec![7.0, 255.0]));
    assert_eq!(micmac::encode_v1(&kp, false).unwrap(), hex(DIGEO_V1_LE));
    assert_eq!(micmac::encode_v1(&kp, true).unwrap(), hex(DIGEO_V1_BE));
    assert_eq!(micmac::parse_v1(&hex(DIGEO_V1_LE)).unwrap(), kp);
    assert_eq!(micmac::parse_v1(&hex(DIGEO_V1_BE)).unwrap(), kp);
    assert_eq!(
        detect(Path::new(""), &hex(DIGEO_V1_BE)),
        Some(Format::MicmacV1)
    );
    // u8 descriptors are written as f64 too.
    assert_eq!(
        micmac::encode_v1(&one_point(Descriptors::U8(vec![7, 255])), false).unwrap(),
        hex(DIGEO_V1_LE)
    );
}

#[test]
fn micmac_v1_expands_several_angles_and_drops_none() {
    let mut b = hex("ba 00 000000 cd13f33a 01000000 02000000 01000000");
    let f64s =
        |b: &mut Vec<u8>, v: &[f64]| v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    f64s(&mut b, &[1.0, 2.0, 3.0]);
    b.extend_from_slice(&[1, 0, 2, 0]); // type 1, two angles
    f64s(&mut b, &[0.1, 10.0, 0.2, 20.0]);
    f64s(&mut b, &[4.0, 5.0, 6.0]);
    b.extend_from_slice(&[0, 0, 0, 0]); // no angle
    let kp = micmac::parse_v1(&b).unwrap();
    assert_eq!(kp.xy, vec![[1.0, 2.0], [1.0, 2.0]]);
    assert_eq!(kp.angle, vec![0.1, 0.2]);
    assert_eq!(kp.descriptors, Descriptors::F32(vec![10.0, 20.0]));
}

#[test]
fn result_golden_bytes_and_text() {
    let p = [[1.0, 2.0, 3.0, 4.0]];
    assert_eq!(result::encode_v1(&p, false).unwrap(), hex(RESULT_V1_LE));
    assert_eq!(result::parse(&hex(RESULT_V1_LE)).unwrap(), p);
    let be = result::encode_v1(&p, true).unwrap();
    assert_eq!(&be[..13], &hex("ba 01 000000 5694 29bc 00000001"));
    assert_eq!(result::parse_v1(&be).unwrap(), p);
    let text = result::encode_v0(&[
        [1234.5678, 0.0001, 1e-5, 1234567.0],
        [0.0, -3.5, 100000.0, 1e6],
    ]);
    assert_eq!(
        text,
        "1234.57 0.0001 1e-05 1.23457e+06\n0 -3.5 100000 1e+06\n"
    );
    assert_eq!(
        result::parse(b"1 2 3 4\n\n 5\t6 7 8 \n").unwrap(),
        [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]
    );
    assert!(matches!(
        result::parse_v0(b"1 2 3\n"),
        Err(FormatError::Invalid { .. })
    ));
    assert!(matches!(
        result::parse_v0(b"1 2 3 x\n"),
        Err(FormatError::Invalid { .. })
    ));
}

#[test]
fn result_pairs_put_the_train_image_first() {
    let m = [Match {
        query: 1,
        train: 0,
        distance: 0.0,
        second: None,
    }];
    let p = result::pairs(&m, &[[1.0, 2.0]], &[[0.0, 0.0], [3.0, 4.0]]).unwrap();
    assert_eq!(p, [[1.0, 2.0, 3.0, 4.0]]);
    assert!(result::pairs(&m, &[], &[]).is_err());
}

#[test]
fn lowe_key_golden_text_and_any_whitespace() {
    let kp = Keypoints {
        xy: vec![[10.0, 20.5], [1.0, 2.0]],
        scale: vec![1.5, 2.0],
        angle: vec![-0.25, 3.0],
        dim: 21,
        descriptors: Descriptors::U8((0..42).collect()),
    };
    let text = lowe::encode(&kp).unwrap();
    let mut want = String::from("2 21\n20.50 10.00 1.50 -0.250\n");
    want += &(0..20).map(|v| format!(" {v}")).collect::<String>();
    want += "\n 20\n2.00 1.00 2.00 3.000\n";
    want += &(21..41).map(|v| format!(" {v}")).collect::<String>();
    want += "\n 41\n";
    assert_eq!(text, want);
    assert_eq!(lowe::parse(text.as_bytes()).unwrap(), kp);
    let squeezed = text.split_whitespace().collect::<Vec<_>>().join("\t");
    assert_eq!(lowe::parse(squeezed.as_bytes()).unwrap(), kp);
    assert_eq!(
        detect(Path::new("x.txt"), text.as_bytes()),
        Some(Format::LoweKey)
    );
    // Float descriptors load as f32.
    let f = lowe::parse(b"1 2\n5 6 1 0\n0.5 3").unwrap();
    assert_eq!(
        (f.xy[0], f.descriptors),
        ([6.0, 5.0], Descriptors::F32(vec![0.5, 3.0]))
    );
}

#[test]
fn npy_golden_bytes_and_versions() {
    let a = NpyArray {
        rows: 2,
        cols: 3,
        data: NpyData::U8(vec![1, 2, 3, 4, 5, 6]),
    };
    let b = a.encode();
    let mut want = b"\x93NUMPY\x01\x00".to_vec();
    want.extend_from_slice(&118u16.to_le_bytes());
    want.extend_from_slice(b"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }");
    want.extend_from_slice(&[b' '; 58]);
    want.push(b'\n');
    want.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
    assert_eq!(b, want);
    assert_eq!(npy::parse(&b).unwrap(), a);
    // Version 2.0 (u32 header length), double quotes, no spare spaces.
    let h = b"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (1,2)}\n";
    let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
    v2.extend_from_slice(&(h.len() as u32).to_le_bytes());
    v2.extend_from_slice(h);
    v2.extend_from_slice(&[0, 0, 128, 63, 0, 0, 0, 64]);
    assert_eq!(
        npy::parse(&v2).unwrap(),
        NpyArray {
            rows: 1,
            cols: 2,
            data: NpyData::F32(vec![1.0, 2.0])
        }
    );
}

#[test]
fn npy_match_arrays() {
    let m = [Match {
        query: 3,
        train: 9,
        distance: 0.0,
        second: None,
    }];
    let a = NpyArray::from_matches(&m);
    assert_eq!(a.data, NpyData::I64(vec![3, 9]));
    let back = npy::parse(&a.encode()).unwrap();
    assert_eq!(back.index_pairs().unwrap(), [[3, 9]]);
    for data in [NpyData::I32(vec![3, 9]), NpyData::U32(vec![3, 9])] {
        let a = NpyArray {
            rows: 1,
            cols: 2,
            data,
        };
        assert_eq!(
            npy::parse(&a.encode()).unwrap().index_pairs().unwrap(),
            [[3, 9]]
        );
    }
    assert!(NpyArray {
        rows: 1,
        cols: 2,
        data: NpyData::I64(vec![-1, 0])
    }
    .index_pairs()
    .is_err());
}

fn npy_with_header(h: &str, body: &[u8]) -> Vec<u8> {
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(h.len() as u16).to_le_bytes());
    b.extend_from_slice(h.as_bytes());
    b.extend_from_slice(body);
    b
}

#[test]
fn npy_rejections_say_why() {
    let msg = |b: &[u8]| npy::parse(b).unwrap_err().to_string();
    assert!(msg(&npy_with_header(
        "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }",
        &[0; 4]
    ))
    .contains("fortran_order True"));
    assert!(msg(&npy_with_header(
        "{'descr': '>f4', 'fortran_order': False, 'shape': (1, 1), }",
        &[0; 4]
    ))
    .contains("not supported"));
    assert!(msg(&npy_with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
        &[0; 16]
    ))
    .contains("2 expected"));
    let huge = format!(
        "{{'descr': '<f8', 'fortran_order': False, 'shape': ({}, {}), }}",
        u64::MAX,
        2
    );
    assert!(msg(&npy_with_header(&huge, &[0; 16])).contains("needs"));
    assert!(msg(&npy_with_header(
        "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }",
        &[0; 3]
    ))
    .contains("needs"));
    assert!(matches!(
        npy::parse(b"\x93NUMPY\x01\x00\xff\xff{"),
        Err(FormatError::Truncated { .. })
    ));
    assert!(matches!(
        npy::parse(b"PK\x03\x04"),
        Err(FormatError::Magic { .. })
    ));
}

#[test]
fn malformed_micmac_files_are_errors_without_huge_allocations() {
    // n = u32::MAX in a 20-byte file: refused before allocating.
    let mut b = u32::MAX.to_le_bytes().to_vec();
    b.extend_from_slice(&128u32.to_le_bytes());
    b.extend_from_slice(&[0; 12]);
    assert!(matches!(
        micmac::parse_v0(&b),
        Err(FormatError::Truncated { .. })
    ));
    let mut v1 = hex("ba 00 000000 cd13f33a 01000000 ffffffff 80000000");
    v1.extend_from_slice(&[0; 7]);
    assert!(matches!(
        micmac::parse_v1(&v1),
        Err(FormatError::Truncated { .. })
    ));
    let r = hex("ba 00 000000 bc299456 01000000 ffffffff 0000");
    assert!(matches!(
        result::parse_v1(&r),
        Err(FormatError::Truncated { .. })
    ));
    // Short, wrong dimension, wrong magic, wrong version, bad byte-order flag, trailing bytes.
    assert!(matches!(
        micmac::parse_v0(&[1, 0, 0]),
        Err(FormatError::Truncated { .. })
    ));
    assert!(matches!(
        micmac::parse_v0(&hex("00000000 00000000")),
        Err(FormatError::Dimension(0))
    ));
    assert!(matches!(
        micmac::parse_v0(&hex("00000000 01040000")),
        Err(FormatError::Dimension(1025))
    ));
    let full = hex(PASTIS_V0);
    assert!(matches!(
        micmac::parse_v0(&full[..full.len() - 1]),
        Err(FormatError::Truncated { .. })
    ));
    let mut long = full.clone();
    long.push(0);
    assert!(matches!(
        micmac::parse_v0(&long),
        Err(FormatError::Trailing { n: 1, extra: 1 })
    ));
    let le = hex(DIGEO_V1_LE);
    for (at, byte) in [(0, 0xbb), (1, 2), (5, 0xce), (9, 7)] {
        let mut bad = le.clone();
        bad[at] = byte;
        assert!(
            matches!(micmac::parse_v1(&bad), Err(FormatError::Magic { .. })),
            "byte {at}"
        );
    }
    for cut in 0..le.len() {
        assert!(micmac::parse_v1(&le[..cut]).is_err());
    }
    let mut neg = le.clone();
    neg[47] = 0xff; // nbAngles = -1: bytes 47, 48 (13 header + 8 counts + 24 + 2 type)
    neg[48] = 0xff;
    assert!(matches!(
        micmac::parse_v1(&neg),
        Err(FormatError::Invalid { .. })
    ));
    assert!(matches!(
        result::parse_v1(&hex(DIGEO_V1_LE)),
        Err(FormatError::Magic { .. })
    ));
}

#[test]
fn malformed_key_files_are_errors() {
    assert!(matches!(
        lowe::parse(b"4294967295 128\n1 2 3 4"),
        Err(FormatError::Truncated { .. })
    ));
    assert!(matches!(
        lowe::parse(b"1 0\n"),
        Err(FormatError::Dimension(0))
    ));
    assert!(lowe::parse(b"1 2\n1 2 3 4 5").is_err());
    assert!(lowe::parse(b"1 2\n1 2 3 4 5 6 7").is_err());
    assert!(lowe::parse(b"1 2\n1 2 x 4 5 6").is_err());
    assert!(lowe::parse(b"1 2\n1 2 3 4 5 nan").is_err());
    assert!(lowe::parse(b"").is_err());
    assert!(lowe::parse(&[0xff, 0xfe]).is_err());
}

#[test]
fn load_and_save_through_files_with_detection() {
    let dir = std::env::temp_dir().join(format!("remora-match-formats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kp = one_point(Descriptors::U8(vec![7, 255]));
    for (name, f) in [
        ("a.dat", Format::MicmacV0),
        ("b.dat", Format::MicmacV1),
        ("c.key", Format::LoweKey),
        ("d.npy", Format::Npy),
    ] {
        let p = dir.join(name);
        formats::save(&p, &kp, f).unwrap();
        let back = formats::load(&p, None).unwrap();
        assert_eq!(detect(&p, &std::fs::read(&p).unwrap()), Some(f));
        assert_eq!(back.len(), 1, "{f:?}");
        match f {
            Format::MicmacV1 => assert_eq!(back.descriptors, Descriptors::F32(vec![7.0, 255.0])),
            Format::Npy => assert_eq!(back.descriptors, kp.descriptors),
            _ => assert_eq!(back, kp, "{f:?}"),
        }
    }
    assert!(matches!(
        formats::load(&dir.join("missing"), None),
        Err(FormatError::Io { .. })
    ));
    std::fs::write(dir.join("junk.bin"), b"\x01\x02junk").unwrap();
    assert!(matches!(
        formats::load(&dir.join("junk.bin"), None),
        Err(FormatError::Unknown)
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn keypoints_u8() -> impl Strategy<Value = Keypoints> {
    (1usize..40, 0usize..8).prop_flat_map(|(dim, n)| {
        (
            prop::collection::vec((-1e4f32..1e4, -1e4f32..1e4, 0f32..100.0, -4f32..4.0), n),
            prop::collection::vec(any::<u8>(), n * dim),
        )
            .prop_map(move |(p, d)| Keypoints {
                xy: p.iter().map(|p| [p.0 as f64, p.1 as f64]).collect(),
                scale: p.iter().map(|p| p.2 as f64).collect(),
                angle: p.iter().map(|p| p.3 as f64).collect(),
                dim,
                descriptors: Descriptors::U8(d),
            })
    })
}

proptest! {
    #[test]
    fn micmac_v0_round_trips(kp in keypoints_u8()) {
        prop_assert_eq!(micmac::parse_v0(&micmac::encode_v0(&kp).unwrap()).unwrap(), kp);
    }

    #[test]
    fn micmac_v1_round_trips(kp in keypoints_u8(), big in any::<bool>()) {
        let back = micmac::parse_v1(&micmac::encode_v1(&kp, big).unwrap()).unwrap();
        let Descriptors::U8(d) = &kp.descriptors else { unreachable!() };
        prop_assert_eq!(back.descriptors, Descriptors::F32(d.iter().map(|&x| x as f32).collect()));
        prop_assert_eq!((back.xy, back.scale, back.angle), (kp.xy, kp.scale, kp.angle));
    }

    #[test]
    fn npy_round_trips(kp in keypoints_u8()) {
        let a = NpyArray::from_descriptors(&kp).unwrap();
        prop_assert_eq!(npy::parse(&a.encode()).unwrap(), a);
    }

    #[test]
    fn lowe_round_trips_descriptors(kp in keypoints_u8()) {
        let back = lowe::parse(lowe::encode(&kp).unwrap().as_bytes()).unwrap();
        prop_assert_eq!(back.descriptors, kp.descriptors);
    }

    #[test]
    fn result_round_trips(p in prop::collection::vec(prop::array::uniform4(any::<f64>().prop_filter("finite", |x| x.is_finite())), 0..20), big in any::<bool>()) {
        prop_assert_eq!(result::parse_v1(&result::encode_v1(&p, big).unwrap()).unwrap(), p.clone());
        // Text keeps six significant digits.
        let back = result::parse_v0(result::encode_v0(&p).as_bytes()).unwrap();
        for (a, b) in back.iter().flatten().zip(p.iter().flatten()) {
            prop_assert!((a - b).abs() <= b.abs() * 1e-5);
        }
    }

    #[test]
    fn parsers_never_panic(b in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = micmac::parse_v0(&b);
        let _ = micmac::parse_v1(&b);
        let _ = lowe::parse(&b);
        let _ = npy::parse(&b);
        let _ = result::parse(&b);
        let _ = detect(Path::new(""), &b);
    }

    #[test]
    fn versioned_parsers_never_panic_on_damaged_headers(tail in prop::collection::vec(any::<u8>(), 0..120), big in any::<bool>()) {
        let mut b = vec![0xba, big as u8, 0, 0, 0];
        let magic = if big { 989_008_845u32.to_be_bytes() } else { 989_008_845u32.to_le_bytes() };
        b.extend_from_slice(&magic);
        b.extend_from_slice(&if big { 1u32.to_be_bytes() } else { 1u32.to_le_bytes() });
        b.extend_from_slice(&tail);
        let _ = micmac::parse_v1(&b);
    }
}
