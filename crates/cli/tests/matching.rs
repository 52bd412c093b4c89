//! `remora match` and `remora bench match` as a user runs them, on small keypoint files written
//! here with known matches; every expectation comes from a brute-force search in this file.
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use remora_match::formats::npy::{self, NpyArray, NpyData};
use remora_match::formats::{self, Descriptors, Format, Keypoints};
use remora_match::Kernel;

const EXE: &str = env!("CARGO_BIN_EXE_remora");
const DIM: usize = 32;

/// A folder of its own, removed at the end of the test.
struct Tmp(PathBuf);
impl Tmp {
    fn new(name: &str) -> Tmp {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "remora-match-test-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `remora ARGS` in `dir` with the given environment additions.
fn remora_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(EXE);
    c.args(args)
        .current_dir(dir)
        .env_remove("REMORA_MATCH_KERNEL")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run remora")
}

fn remora(t: &Tmp, args: &[&str]) -> Output {
    remora_in(&t.0, args, &[])
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "remora failed: {}\n{}",
        o.status,
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// Fails with exit code 1, one message naming `file`, and no panic.
#[track_caller]
fn fails_naming(o: &Output, file: &str) -> String {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "exit code; stderr {err}");
    assert!(err.contains(file), "{file} not named in {err:?}");
    assert!(!err.contains("panicked"), "panic: {err}");
    err
}

/// Reproducible pseudo-random bytes (xorshift).
struct Rng(u64);
impl Rng {
    fn byte(&mut self) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 56) as u8
    }
}

/// Keypoints with random descriptors; point i at (10 + i, 20 + 2i).
fn random_kp(n: usize, dim: usize, seed: u64) -> Keypoints {
    let mut r = Rng(seed | 1);
    Keypoints {
        xy: (0..n)
            .map(|i| [10.0 + i as f64, 20.0 + 2.0 * i as f64])
            .collect(),
        scale: vec![1.0; n],
        angle: vec![0.0; n],
        dim,
        descriptors: Descriptors::U8((0..n * dim).map(|_| r.byte()).collect()),
    }
}

fn desc(kp: &Keypoints) -> &[u8] {
    match &kp.descriptors {
        Descriptors::U8(v) => v,
        Descriptors::F32(_) => panic!("u8 expected"),
    }
}

/// A train set and queries: the first `n_near` queries are train points (in a shuffled order)
/// with small noise, the others random.
fn pair(n_train: usize, n_query: usize, n_near: usize, seed: u64) -> (Keypoints, Keypoints) {
    let train = random_kp(n_train, DIM, seed);
    let mut query = random_kp(n_query, DIM, seed.wrapping_mul(7919) + 3);
    let mut r = Rng(seed + 11);
    let (t, mut q) = (desc(&train).to_vec(), desc(&query).to_vec());
    for i in 0..n_near {
        let j = (i * 7 + 3) % n_train;
        for k in 0..DIM {
            let noise = (r.byte() % 7) as i32 - 3;
            q[i * DIM + k] = (t[j * DIM + k] as i32 + noise).clamp(0, 255) as u8;
        }
    }
    query.descriptors = Descriptors::U8(q);
    (train, query)
}

fn d2(a: &[u8], b: &[u8]) -> u64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as i64 - y as i64).pow(2) as u64)
        .sum()
}

/// Best and second (index, squared distance) of `q` among `set`, ties to the lower index.
fn top2(q: &[u8], set: &[u8]) -> ((usize, u64), Option<(usize, u64)>) {
    let mut d: Vec<(u64, usize)> = set
        .chunks_exact(DIM)
        .enumerate()
        .map(|(i, t)| (d2(q, t), i))
        .collect();
    d.sort();
    ((d[0].1, d[0].0), d.get(1).map(|x| (x.1, x.0)))
}

/// Brute-force matches `(query, train, squared distance)` with the ratio `num/den` (exact) and
/// optionally the cross-check.
fn expected(
    train: &Keypoints,
    query: &Keypoints,
    ratio: (u64, u64),
    cross: bool,
) -> Vec<(usize, usize, u64)> {
    let (t, q) = (desc(train), desc(query));
    let mut out = Vec::new();
    for (qi, qd) in q.chunks_exact(DIM).enumerate() {
        let ((ti, d1), second) = top2(qd, t);
        let Some((_, dd2)) = second else { continue };
        // d1 < r d2  <=>  D1 · den² < num² · D2
        if d1 * ratio.1 * ratio.1 >= ratio.0 * ratio.0 * dd2 {
            continue;
        }
        if cross && top2(&t[ti * DIM..(ti + 1) * DIM], q).0 .0 != qi {
            continue;
        }
        out.push((qi, ti, d1));
    }
    out
}

fn table(m: &[(usize, usize, u64)]) -> String {
    m.iter()
        .map(|(q, t, d)| format!("{q} {t} {}\n", (*d as f64).sqrt() as f32))
        .collect()
}

fn save(t: &Tmp, name: &str, kp: &Keypoints, f: Format) -> String {
    let p = t.path(name);
    formats::save(&p, kp, f).unwrap();
    p.display().to_string()
}

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
