//! `remora match` over lists of image pairs (MicMac's batch layouts) and `remora bench match`,
//! with the same brute-force expectations as `matching.rs`.
mod matching_common;
use matching_common::*;

/// The `.result` remora writes for one pair, as text.
fn single_result(t: &Tmp, a: &Path, b: &Path) -> String {
    ok(&remora(
        t,
        &[
            "match",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "-o",
            "one.result",
        ],
    ));
    std::fs::read_to_string(t.path("one.result")).unwrap()
}

#[test]
fn batch_text_list_writes_the_micmac_layout() {
    let t = Tmp::new("list");
    let (k1, k2) = pair(200, 150, 100, 81);
    let (_, k3) = pair(200, 170, 90, 81);
    std::fs::create_dir(t.path("kp")).unwrap();
    save(&t, "kp/a.key", &k1, Format::LoweKey);
    save(&t, "kp/b.key", &k2, Format::LoweKey);
    save(&t, "kp/c.dat", &k3, Format::MicmacV0);
    std::fs::write(
        t.path("kp/pairs.txt"),
        "# image pairs\n\na.key b.key\n  a.key   c.dat \n",
    )
    .unwrap();
    let o = remora(&t, &["match", "--pairs", "kp/pairs.txt", "-d", "out"]);
    let out = ok(&o);
    assert!(out.contains("2 pairs done, 0 failed"), "{out}");
    let ab = std::fs::read_to_string(t.path("out/Pastisa/b.result")).unwrap();
    let ac = std::fs::read_to_string(t.path("out/Pastisa/c.result")).unwrap();
    assert_eq!(
        ab,
        single_result(&t, &t.path("kp/a.key"), &t.path("kp/b.key"))
    );
    assert_eq!(
        ac,
        single_result(&t, &t.path("kp/a.key"), &t.path("kp/c.dat"))
    );
    assert!(!ab.is_empty() && !ac.is_empty());
    assert!(!t.path("out/Pastisb").exists());
}

#[test]
fn batch_micmac_xml_list_finds_pastis_files() {
    let t = Tmp::new("xml");
    let (k1, k2) = pair(200, 150, 100, 91);
    std::fs::create_dir(t.path("Pastis")).unwrap();
    save(&t, "Pastis/LBPpIMG_1.JPG.dat", &k1, Format::MicmacV0);
    save(&t, "Pastis/LBPpIMG_2.JPG.dat", &k2, Format::MicmacV0);
    std::fs::write(
        t.path("NameCple.xml"),
        "<?xml version=\"1.0\" ?>\n<SauvegardeNamedRel>\n     <Cple>IMG_1.JPG IMG_2.JPG</Cple>\n     \
         <Cple>IMG_2.JPG IMG_1.JPG</Cple>\n</SauvegardeNamedRel>\n",
    )
    .unwrap();
    ok(&remora(
        &t,
        &["match", "--pairs", "NameCple.xml", "--binary"],
    ));
    for (a, b) in [("IMG_1.JPG", "IMG_2.JPG"), ("IMG_2.JPG", "IMG_1.JPG")] {
        let p = t.path(&format!("Homol/Pastis{a}/{b}.result"));
        let v1 = formats::result::parse_v1(&std::fs::read(&p).unwrap()).unwrap();
        assert!(!v1.is_empty(), "{}", p.display());
    }
}

#[test]
fn batch_all_matches_both_ways_and_survives_a_broken_file() {
    let t = Tmp::new("all");
    let (k1, k2) = pair(200, 150, 100, 101);
    let (_, k3) = pair(200, 160, 80, 101);
    std::fs::create_dir(t.path("kp")).unwrap();
    save(&t, "kp/LBPpA.JPG.dat", &k1, Format::MicmacV0);
    save(&t, "kp/LBPpB.JPG.dat", &k2, Format::MicmacV0);
    save(&t, "kp/C.key", &k3, Format::LoweKey);
    std::fs::write(t.path("kp/notes.txt"), "not a keypoint file").unwrap();
    let o = remora(&t, &["match", "--all", "kp"]);
    let out = ok(&o);
    assert!(out.contains("6 pairs done, 0 failed"), "{out}");
    for (a, b) in [
        ("A.JPG", "B.JPG"),
        ("B.JPG", "A.JPG"),
        ("A.JPG", "C"),
        ("C", "A.JPG"),
        ("B.JPG", "C"),
        ("C", "B.JPG"),
    ] {
        assert!(
            t.path(&format!("Homol/Pastis{a}/{b}.result")).is_file(),
            "{a} {b}"
        );
    }
    // Both directions are matched, not swapped: each equals its own single run.
    let ab = std::fs::read_to_string(t.path("Homol/PastisA.JPG/B.JPG.result")).unwrap();
    assert_eq!(
        ab,
        single_result(&t, &t.path("kp/LBPpA.JPG.dat"), &t.path("kp/LBPpB.JPG.dat"))
    );
    let ba = std::fs::read_to_string(t.path("Homol/PastisB.JPG/A.JPG.result")).unwrap();
    assert_eq!(
        ba,
        single_result(&t, &t.path("kp/LBPpB.JPG.dat"), &t.path("kp/LBPpA.JPG.dat"))
    );

    // A truncated file: its 6 pairs fail and are named, the other 6 are written, exit 1.
    let bytes = formats::encode(&k1, Format::MicmacV0).unwrap();
    std::fs::write(t.path("kp/D.dat"), &bytes[..100]).unwrap();
    let o = remora(&t, &["match", "--all", "kp", "-d", "H2"]);
    let err = fails_naming(&o, "D.dat");
    assert_eq!(
        err.lines().filter(|l| l.contains("D.dat")).count(),
        6,
        "{err}"
    );
    assert!(err.contains("truncated"), "{err}");
    assert!(err.contains("6 of 12 pairs failed"), "{err}");
    assert!(
        text(&o.stdout).contains("6 pairs done, 6 failed"),
        "{}",
        text(&o.stdout)
    );
    for (a, b) in [("A.JPG", "B.JPG"), ("C", "B.JPG")] {
        assert!(
            t.path(&format!("H2/Pastis{a}/{b}.result")).is_file(),
            "{a} {b}"
        );
    }
    assert!(!t.path("H2/PastisD").exists());
}

#[test]
fn bench_without_peers_prints_the_json_keys() {
    let t = Tmp::new("bench");
    let (train, query) = pair(200, 150, 100, 111);
    let a = save(&t, "t.npy", &train, Format::Npy);
    let b = save(&t, "q.npy", &query, Format::Npy);
    let n = expected(&train, &query, (3, 4), false).len();
    // A Python that does not exist: the peers' keys are null and a warning says why.
    let o = remora(
        &t,
        &[
            "bench",
            "match",
            "--query",
            &b,
            "--train",
            &a,
            "--ratio",
            "0.75",
            "--repeat",
            "1",
            "--threads",
            "2",
            "--json",
            "--python",
            "/nonexistent/python",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(ok(&o).trim()).unwrap();
    assert_eq!(v["n_query"], 150);
    assert_eq!(v["n_ref"], 200);
    assert_eq!(v["matches"], n);
    assert!(v["seconds"].as_f64().is_some());
    for k in [
        "faiss_seconds",
        "bf_seconds",
        "flann_seconds",
        "flann_recall",
    ] {
        assert!(v[k].is_null(), "{k}: {v}");
    }
    assert!(
        text(&o.stderr).contains("peers not run"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn bench_reports_the_gpu_engines_device_work_per_call() {
    let t = Tmp::new("bench-gpu");
    let (train, query) = pair(300, 200, 128, 112);
    let a = save(&t, "t.npy", &train, Format::Npy);
    let b = save(&t, "q.npy", &query, Format::Npy);
    let args = [
        "bench",
        "match",
        "--query",
        &b,
        "--train",
        &a,
        "--engine",
        "all",
        "--no-peers",
        "--repeat",
        "2",
        "--json",
    ];
    let o = remora(&t, &args);
    let v: serde_json::Value = serde_json::from_str(ok(&o).trim()).unwrap();
    let engines = v["engines"].as_array().unwrap();
    for e in engines {
        let keys = [
            "submissions",
            "h2d_bytes",
            "d2h_bytes",
            "objects_after_warmup",
        ];
        if e["engine"] == "gpu-wgpu" {
            // One submission per call, nothing created after the warm-up call, the results
            // (16 bytes per query) and verdicts (4) down.
            assert_eq!(e["submissions"], 1.0, "{e}");
            assert_eq!(e["objects_after_warmup"], 0, "{e}");
            assert_eq!(e["d2h_bytes"], 200.0 * 20.0, "{e}");
            assert!(e["h2d_bytes"].as_f64().unwrap() > 0.0, "{e}");
            assert!(
                e["device_name"].as_str().is_some_and(|n| !n.is_empty()),
                "{e}"
            );
            assert!(e["device_ms"].is_null(), "{e}");
            assert_eq!(e["identical"], true, "{e}");
        } else {
            for k in keys.into_iter().chain(["device_name", "device_ms"]) {
                assert!(e[k].is_null(), "{k}: {e}");
            }
        }
    }
    // Without a device the GPU engine is listed as skipped, with the reason.
    let gpu_ran = engines.iter().any(|e| e["engine"] == "gpu-wgpu");
    assert!(gpu_ran || v["skipped"]["gpu-wgpu"].is_string(), "{v}");
}
