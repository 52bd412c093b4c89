//! `remora match` and `remora bench match` as a user runs them, on small keypoint files written
//! here with known matches; every expectation comes from a brute-force search in this file.
mod matching_common;
use matching_common::*;

#[test]
fn text_table_equals_brute_force_for_every_input_format() {
    let t = Tmp::new("table");
    let (train, query) = pair(300, 200, 120, 5);
    let want = table(&expected(&train, &query, (3, 4), false));
    assert!(
        want.lines().count() > 100,
        "too few matches to test: {want}"
    );
    for (ext, f) in [
        ("dat", Format::MicmacV0),
        ("key", Format::LoweKey),
        ("npy", Format::Npy),
    ] {
        let a = save(&t, &format!("a.{ext}"), &train, f);
        let b = save(&t, &format!("b.{ext}"), &query, f);
        let out = ok(&remora(&t, &["match", &a, &b, "--ratio", "0.75"]));
        assert_eq!(out, want, "{ext}");
    }
    // `-o -` and a .txt output are the same table.
    let (a, b) = (t.path("a.dat"), t.path("b.dat"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    assert_eq!(
        ok(&remora(&t, &["match", a, b, "--ratio", "0.75", "-o", "-"])),
        want
    );
    ok(&remora(
        &t,
        &["match", a, b, "--ratio", "0.75", "-o", "m.txt"],
    ));
    assert_eq!(std::fs::read_to_string(t.path("m.txt")).unwrap(), want);
    // Default ratio 0.6 gives a subset; --no-ratio one match per query.
    let at_06 = ok(&remora(&t, &["match", a, b]));
    assert!(at_06.lines().count() <= want.lines().count());
    assert!(at_06.lines().all(|l| want.contains(l)));
    assert_eq!(
        ok(&remora(&t, &["match", a, b, "--no-ratio"]))
            .lines()
            .count(),
        200
    );
}

#[test]
fn every_kernel_gives_the_same_table() {
    let t = Tmp::new("kernels");
    let (train, query) = pair(250, 150, 80, 9);
    let a = save(&t, "a.dat", &train, Format::MicmacV0);
    let b = save(&t, "b.dat", &query, Format::MicmacV0);
    let want = table(&expected(&train, &query, (3, 4), false));
    for k in Kernel::available() {
        let name = format!("{k:?}").to_lowercase();
        let o = remora_in(
            &t.0,
            &["match", &a, &b, "--ratio", "0.75", "--stats"],
            &[("REMORA_MATCH_KERNEL", &name)],
        );
        assert_eq!(ok(&o), want, "{name}");
        assert!(
            text(&o.stderr).contains(&format!("kernel: {name} (u8)")),
            "{}",
            text(&o.stderr)
        );
    }
}

#[test]
fn result_v0_is_micmac_text_with_image_1_first() {
    let t = Tmp::new("result");
    // Train: three points far apart; the query is a copy of train point 1.
    let train = Keypoints {
        xy: vec![[1.5, 2.25], [100.0, 0.125], [3.0, 4.0]],
        scale: vec![1.0; 3],
        angle: vec![0.0; 3],
        dim: 2,
        descriptors: Descriptors::U8(vec![0, 0, 100, 100, 200, 200]),
    };
    let query = Keypoints {
        xy: vec![[1234.5678, 7.0], [5.0, 6.0]],
        scale: vec![1.0; 2],
        angle: vec![0.0; 2],
        dim: 2,
        descriptors: Descriptors::U8(vec![101, 99, 150, 150]),
    };
    let a = save(&t, "LBPpA.JPG.dat", &train, Format::MicmacV0);
    let b = save(&t, "LBPpB.JPG.dat", &query, Format::MicmacV0);
    ok(&remora(&t, &["match", &a, &b, "-o", "AB.result"]));
    // x1 y1 (train = FILE1) x2 y2 (query), %g: f32 1234.5678 prints as 1234.57.
    assert_eq!(
        std::fs::read(t.path("AB.result")).unwrap(),
        b"100 0.125 1234.57 7\n"
    );
    // --binary: MicMac v1, read back by the library.
    ok(&remora(
        &t,
        &["match", &a, &b, "-o", "AB.result", "--binary"],
    ));
    let v1 = formats::result::parse(&std::fs::read(t.path("AB.result")).unwrap()).unwrap();
    assert_eq!(v1, vec![[100.0, 0.125, 1234.5677490234375, 7.0]]);
    // A .result needs positions: .npy inputs are refused before any work.
    let n = save(&t, "a.npy", &train, Format::Npy);
    let err = fails_naming(&remora(&t, &["match", &n, &b, "-o", "x.result"]), "a.npy");
    assert!(err.contains("positions"), "{err}");
}

#[test]
fn npy_output_holds_query_train_rows() {
    let t = Tmp::new("npyout");
    let (train, query) = pair(200, 120, 60, 21);
    let a = save(&t, "a.key", &train, Format::LoweKey);
    let b = save(&t, "b.key", &query, Format::LoweKey);
    ok(&remora(
        &t,
        &["match", &a, &b, "--ratio", "0.75", "-o", "m.npy"],
    ));
    let arr = npy::parse(&std::fs::read(t.path("m.npy")).unwrap()).unwrap();
    assert!(matches!(arr.data, NpyData::I64(_)));
    let got = arr.index_pairs().unwrap();
    let want: Vec<[u32; 2]> = expected(&train, &query, (3, 4), false)
        .iter()
        .map(|&(q, t, _)| [q as u32, t as u32])
        .collect();
    assert_eq!(got, want);
}

#[test]
fn cross_check_keeps_mutual_best_matches() {
    let t = Tmp::new("cross");
    // Duplicate queries of one train point: only the nearer one is mutual.
    let (train, mut query) = pair(200, 150, 100, 33);
    let mut q = desc(&query).to_vec();
    let first = q[..DIM].to_vec();
    q[140 * DIM..141 * DIM].copy_from_slice(&first);
    q[140 * DIM] = q[140 * DIM].wrapping_add(9);
    query.descriptors = Descriptors::U8(q);
    let a = save(&t, "a.dat", &train, Format::MicmacV0);
    let b = save(&t, "b.dat", &query, Format::MicmacV0);
    let plain = expected(&train, &query, (3, 4), false);
    let want = expected(&train, &query, (3, 4), true);
    assert!(
        want.len() < plain.len(),
        "the test needs a non-mutual match"
    );
    let out = ok(&remora(
        &t,
        &["match", &a, &b, "--ratio", "0.75", "--cross-check"],
    ));
    assert_eq!(out, table(&want));
    // Max distance: only matches with d1 <= D.
    let limit = 20.0f64;
    let want: Vec<_> = plain
        .iter()
        .copied()
        .filter(|m| (m.2 as f64).sqrt() <= limit)
        .collect();
    let out = ok(&remora(
        &t,
        &["match", &a, &b, "--ratio", "0.75", "--max-distance", "20"],
    ));
    assert_eq!(out, table(&want));
}

#[test]
fn f32_and_u8_files_match_in_f32_with_a_note() {
    let t = Tmp::new("mixed");
    let (train, query) = pair(150, 100, 50, 41);
    let a = save(&t, "a.dat", &train, Format::MicmacV0);
    let f32q = NpyArray {
        rows: query.len(),
        cols: DIM,
        data: NpyData::F32(desc(&query).iter().map(|&x| x as f32).collect()),
    };
    std::fs::write(t.path("b.npy"), f32q.encode()).unwrap();
    let o = remora(&t, &["match", &a, "b.npy", "--ratio", "0.75", "--stats"]);
    let rows: Vec<(String, String)> = ok(&o)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_string(), f[1].to_string())
        })
        .collect();
    let want: Vec<(String, String)> = expected(&train, &query, (3, 4), false)
        .iter()
        .map(|m| (m.0.to_string(), m.1.to_string()))
        .collect();
    assert_eq!(rows, want);
    let err = text(&o.stderr);
    assert!(
        err.contains("u8 descriptors") && err.contains("a.dat"),
        "{err}"
    );
    assert!(err.contains("(f32)"), "{err}");
}

#[test]
fn stats_report_counts_kernel_and_seconds() {
    let t = Tmp::new("stats");
    let (train, query) = pair(120, 80, 40, 51);
    let a = save(&t, "a.dat", &train, Format::MicmacV0);
    let b = save(&t, "b.key", &query, Format::LoweKey);
    let o = remora(
        &t,
        &["match", &a, &b, "--ratio", "0.75", "--stats", "-o", "m.npy"],
    );
    ok(&o);
    let err = text(&o.stderr);
    let n = expected(&train, &query, (3, 4), false).len();
    for want in [
        "FILE1 (train)",
        "120 points",
        "80 points",
        "micmac",
        "key",
        &format!("matches: {n}"),
        "kernel: ",
        "seconds: load ",
        "search ",
        "write ",
    ] {
        assert!(err.contains(want), "{want:?} not in {err}");
    }
}

#[test]
fn malformed_inputs_fail_with_one_line_naming_the_file() {
    let t = Tmp::new("bad");
    let (train, query) = pair(50, 40, 10, 61);
    let good = save(&t, "good.dat", &train, Format::MicmacV0);
    let q = save(&t, "q.dat", &query, Format::MicmacV0);
    // Truncated v0.
    let bytes = formats::encode(&train, Format::MicmacV0).unwrap();
    std::fs::write(t.path("short.dat"), &bytes[..bytes.len() - 7]).unwrap();
    let err = fails_naming(&remora(&t, &["match", "short.dat", &q]), "short.dat");
    assert!(err.contains("truncated"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Wrong magic in a versioned (Digeo v1) header.
    let mut v1 = formats::encode(&train, Format::MicmacV1).unwrap();
    v1[5] ^= 0xff;
    std::fs::write(t.path("magic.dat"), &v1).unwrap();
    let err = fails_naming(&remora(&t, &["match", &good, "magic.dat"]), "magic.dat");
    assert!(err.contains("magic"), "{err}");
    // Dimension mismatch between the two files.
    let small = random_kp(30, 16, 3);
    let s = save(&t, "small.dat", &small, Format::MicmacV0);
    let err = fails_naming(&remora(&t, &["match", &good, &s]), "small.dat");
    assert!(
        err.contains("good.dat") && err.contains("dimension"),
        "{err}"
    );
    // Missing file; garbage with an unknown extension.
    fails_naming(&remora(&t, &["match", &good, "nope.dat"]), "nope.dat");
    std::fs::write(t.path("junk.bin"), b"hello").unwrap();
    let err = fails_naming(&remora(&t, &["match", &good, "junk.bin"]), "junk.bin");
    assert!(err.contains("--format"), "{err}");
    // Neighbour filter on .npy descriptor arrays: no positions.
    let n = save(&t, "n.npy", &query, Format::Npy);
    let err = fails_naming(
        &remora(&t, &["match", &good, &n, "--neighbour-filter"]),
        "n.npy",
    );
    assert!(err.contains("positions"), "{err}");
    // Bad options.
    let o = remora(&t, &["match", &good, &q, "--ratio", "1.5"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("--ratio"));
}

#[test]
fn neighbour_filter_runs_on_keypoint_files() {
    let t = Tmp::new("nf");
    let (train, query) = pair(300, 200, 150, 71);
    let a = save(&t, "a.dat", &train, Format::MicmacV0);
    let b = save(&t, "b.dat", &query, Format::MicmacV0);
    let all = ok(&remora(&t, &["match", &a, &b, "--ratio", "0.75"]));
    let kept = ok(&remora(
        &t,
        &["match", &a, &b, "--ratio", "0.75", "--neighbour-filter"],
    ));
    // The filter keeps a subset, in order.
    assert!(kept.lines().count() <= all.lines().count());
    let mut it = all.lines();
    assert!(kept.lines().all(|l| it.any(|m| m == l)));
}
