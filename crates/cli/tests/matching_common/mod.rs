//! Shared helpers for the `remora match` tests: temporary folders, running the binary, random
//! keypoint files and the brute-force expectations.
// Each test file uses part of it.
#![allow(dead_code, unused_imports)]
pub use std::path::{Path, PathBuf};
pub use std::process::{Command, Output, Stdio};
pub use std::sync::atomic::{AtomicUsize, Ordering};

pub use remora_match::formats::npy::{self, NpyArray, NpyData};
pub use remora_match::formats::{self, Descriptors, Format, Keypoints};
pub use remora_match::Kernel;

pub const EXE: &str = env!("CARGO_BIN_EXE_remora");
pub const DIM: usize = 32;

/// A folder of its own, removed at the end of the test.
pub struct Tmp(pub PathBuf);
impl Tmp {
    pub fn new(name: &str) -> Tmp {
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
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `remora ARGS` in `dir` with the given environment additions.
pub fn remora_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
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

pub fn remora(t: &Tmp, args: &[&str]) -> Output {
    remora_in(&t.0, args, &[])
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
pub fn ok(o: &Output) -> String {
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
pub fn fails_naming(o: &Output, file: &str) -> String {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "exit code; stderr {err}");
    assert!(err.contains(file), "{file} not named in {err:?}");
    assert!(!err.contains("panicked"), "panic: {err}");
    err
}

/// Reproducible pseudo-random bytes (xorshift).
pub struct Rng(u64);
impl Rng {
    fn byte(&mut self) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 56) as u8
    }
}

/// Keypoints with random descriptors; point i at (10 + i, 20 + 2i).
pub fn random_kp(n: usize, dim: usize, seed: u64) -> Keypoints {
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

pub fn desc(kp: &Keypoints) -> &[u8] {
    match &kp.descriptors {
        Descriptors::U8(v) => v,
        Descriptors::F32(_) => panic!("u8 expected"),
    }
}

/// A train set and queries: the first `n_near` queries are train points (in a shuffled order)
/// with small noise, the others random.
pub fn pair(n_train: usize, n_query: usize, n_near: usize, seed: u64) -> (Keypoints, Keypoints) {
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

pub fn d2(a: &[u8], b: &[u8]) -> u64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as i64 - y as i64).pow(2) as u64)
        .sum()
}

/// Best and second (index, squared distance) of `q` among `set`, ties to the lower index.
pub fn top2(q: &[u8], set: &[u8]) -> ((usize, u64), Option<(usize, u64)>) {
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
pub fn expected(
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

pub fn table(m: &[(usize, usize, u64)]) -> String {
    m.iter()
        .map(|(q, t, d)| format!("{q} {t} {}\n", (*d as f64).sqrt() as f32))
        .collect()
}

pub fn save(t: &Tmp, name: &str, kp: &Keypoints, f: Format) -> String {
    let p = t.path(name);
    formats::save(&p, kp, f).unwrap();
    p.display().to_string()
}
