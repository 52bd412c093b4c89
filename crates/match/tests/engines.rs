//! Every engine against the portable CPU kernel: the GPU engine's neighbours (indices and
//! squared distances) and accepted matches must be identical, ties and chunk splits included.
//!
//! The GPU tests run on whatever Vulkan device the machine has (lavapipe in CI: `make test`
//! sets `REMORA_GPU=any`, and they then fail, not skip, when no device opens). Without
//! `REMORA_GPU` they open any adapter themselves and skip, saying why, only when none exists.
#![cfg(feature = "gpu")]

use remora_accel::gpu::{Gpu, GpuPolicy};
use remora_match::{
    knn2_f32, knn2_u8, match_f32, match_u8, Error, GpuMatcher, Kernel, Match, Neighbours, Options,
    MAX_DIM,
};

/// The engine on the tests' device ([`Gpu::for_tests`]: `None` only when no adapter exists
/// and `REMORA_GPU` is unset).
fn gpu() -> Option<GpuMatcher> {
    Gpu::for_tests().map(GpuMatcher::new)
}

/// Deterministic bytes (splitmix64), drawn from `alphabet` when given.
fn bytes(n: usize, seed: u64, alphabet: Option<&[u8]>) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            match alphabet {
                Some(a) => a[(z % a.len() as u64) as usize],
                None => z as u8,
            }
        })
        .collect()
}

fn portable() -> Options {
    Options {
        kernel: Kernel::Portable,
        ..Options::default()
    }
}

fn cpu_knn(q: &[u8], t: &[u8], dim: usize) -> Vec<Neighbours<u32>> {
    knn2_u8(q, t, dim, &portable()).unwrap()
}

#[track_caller]
fn same_neighbours(g: &GpuMatcher, q: &[u8], t: &[u8], dim: usize) {
    let want = cpu_knn(q, t, dim);
    let got = g.knn2_u8(q, t, dim).unwrap();
    let (nq, nt) = (q.len() / dim, t.len() / dim);
    assert_eq!(got.len(), want.len(), "dim {dim}, {nq} x {nt}");
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a, b, "query {i}, dim {dim}, {nq} queries x {nt} train");
    }
}

#[track_caller]
fn same_matches(g: &GpuMatcher, q: &[u8], t: &[u8], dim: usize, opts: &Options) -> Vec<Match> {
    let want = match_u8(
        q,
        t,
        dim,
        &Options {
            kernel: Kernel::Portable,
            ..opts.clone()
        },
    )
    .unwrap();
    let got = g.match_u8(q, t, dim, opts).unwrap();
    assert_eq!(got, want, "dim {dim}, {:?}", opts);
    want
}

#[test]
fn gpu_neighbours_equal_the_portable_kernels_at_odd_sizes_and_dims() {
    let Some(g) = gpu() else { return };
    // Neither count a multiple of the 64-query workgroup or the 64-point train tile; dims
    // from one word to many 16-word slices, with remainders.
    for (dim, nq, nt) in [
        (1, 1, 1),
        (1, 67, 131),
        (3, 130, 65),
        (3, 1, 200),
        (64, 67, 131),
        (100, 65, 63),
        (128, 130, 131),
        (130, 17, 70),
        (MAX_DIM, 33, 70),
    ] {
        let q = bytes(nq * dim, (dim * 1000 + nq) as u64, None);
        let t = bytes(nt * dim, (dim * 1000 + nt + 7) as u64, None);
        same_neighbours(&g, &q, &t, dim);
    }
}

#[test]
fn extreme_values_stay_exact_at_the_largest_dimension() {
    let Some(g) = gpu() else { return };
    let dim = MAX_DIM;
    let q = vec![255u8; 3 * dim];
    let mut t = vec![0u8; 70 * dim];
    t[69 * dim..].fill(255);
    same_neighbours(&g, &q, &t, dim);
    let n = g.knn2_u8(&q, &t, dim).unwrap();
    assert_eq!(n[0].best.map(|b| (b.index, b.dist2)), Some((69, 0)));
    assert_eq!(
        n[0].second.map(|b| (b.index, b.dist2)),
        Some((0, 1024 * 255 * 255))
    );
}

#[test]
fn train_sets_of_zero_one_and_two_points() {
    let Some(g) = gpu() else { return };
    let dim = 5;
    for nt in [0, 1, 2] {
        for nq in [0, 1, 5, 70] {
            let q = bytes(nq * dim, nq as u64, None);
            let t = bytes(nt * dim, 100 + nt as u64, None);
            same_neighbours(&g, &q, &t, dim);
            // With the ratio test a single train point matches nothing; without it, everything.
            for ratio in [Some(0.8), None] {
                let m = same_matches(
                    &g,
                    &q,
                    &t,
                    dim,
                    &Options {
                        ratio,
                        ..Options::default()
                    },
                );
                if nt == 1 {
                    assert_eq!(m.len(), if ratio.is_some() { 0 } else { nq });
                }
            }
        }
    }
}

#[test]
fn ties_go_to_the_lower_train_index() {
    let Some(g) = gpu() else { return };
    // All zeros: every distance is 0, so best is 0 and second 1 for every query.
    let (q, t) = (vec![0u8; 70 * 3], vec![0u8; 150 * 3]);
    same_neighbours(&g, &q, &t, 3);
    for n in g.knn2_u8(&q, &t, 3).unwrap() {
        assert_eq!(n.best.map(|b| (b.index, b.dist2)), Some((0, 0)));
        assert_eq!(n.second.map(|b| (b.index, b.dist2)), Some((1, 0)));
    }
    // Five distinct descriptors repeated 200 times, queries from the same few values.
    for dim in [3, 128] {
        let distinct = bytes(5 * dim, 9, Some(&[0, 1, 255]));
        let t: Vec<u8> = distinct.iter().copied().cycle().take(1000 * dim).collect();
        let q = bytes(90 * dim, 10, Some(&[0, 1, 255]));
        same_neighbours(&g, &q, &t, dim);
        // Random values from {0, 1, 255}: equal distances everywhere.
        let t = bytes(300 * dim, 11, Some(&[0, 1, 255]));
        same_neighbours(&g, &q, &t, dim);
    }
}

#[test]
fn sets_larger_than_a_chunk_are_split_and_merged() {
    let Some(g) = gpu() else { return };
    // 128-byte rows, chunks of 50 rows: 4 query chunks x 6 train chunks, none on a tile edge.
    let dim = 128;
    let split = g.clone().with_max_chunk_bytes(50 * 128);
    let (q, t) = (
        bytes(173 * dim, 21, Some(&[0, 1, 255])),
        bytes(260 * dim, 22, Some(&[0, 1, 255])),
    );
    same_neighbours(&split, &q, &t, dim);
    assert_eq!(
        split.knn2_u8(&q, &t, dim).unwrap(),
        g.knn2_u8(&q, &t, dim).unwrap()
    );
    // Duplicates in every chunk: the first copy (lowest index, first chunk) must win.
    let t: Vec<u8> = bytes(7 * dim, 23, None)
        .iter()
        .copied()
        .cycle()
        .take(260 * dim)
        .collect();
    let q = bytes(60 * dim, 24, None);
    same_neighbours(&split, &q, &t, dim);
    // One-byte descriptors, 64-byte chunks: 10 query chunks (the 16-byte results bound them)
    // and 6 train chunks.
    let tiny = g.clone().with_max_chunk_bytes(64);
    let (q, t) = (bytes(37, 25, None), bytes(90, 26, Some(&[3, 7, 9, 200])));
    same_neighbours(&tiny, &q, &t, 1);
    // The ratio test only sees the merged result (it runs on the last train chunk).
    for ratio in [Some(0.6), Some(1.0), None] {
        let opts = Options {
            ratio,
            cross_check: true,
            ..Options::default()
        };
        same_matches(&tiny, &q, &t, 1, &opts);
        let (q, t) = near_copies(dim, 120, 200, 27);
        let m = same_matches(&split, &q, &t, dim, &opts);
        assert!(!m.is_empty());
    }
}

/// `nt` random train points and `nq` queries that are noisy copies of some of them, so that
/// many pass the ratio test.
fn near_copies(dim: usize, nq: usize, nt: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let t = bytes(nt * dim, seed, None);
    let noise = bytes(nq * dim, seed + 1, None);
    let q = (0..nq * dim)
        .map(|i| {
            let src = (i / dim * 7919) % nt;
            let v = t[src * dim + i % dim] as i32 + (noise[i] % 9) as i32 - 4;
            v.clamp(0, 255) as u8
        })
        .collect();
    (q, t)
}

#[test]
fn accepted_matches_with_the_fused_ratio_test_equal_the_cpus() {
    let Some(g) = gpu() else { return };
    let (q, t) = near_copies(128, 150, 220, 31);
    let (rq, rt) = (bytes(90 * 64, 32, None), bytes(140 * 64, 33, None));
    for ratio in [Some(0.6), Some(0.8), Some(1.0), None] {
        for cross_check in [false, true] {
            for max_distance in [None, Some(150.0)] {
                let opts = Options {
                    ratio,
                    cross_check,
                    max_distance,
                    ..Options::default()
                };
                let m = same_matches(&g, &q, &t, 128, &opts);
                assert!(!m.is_empty(), "{opts:?}");
                same_matches(&g, &rq, &rt, 64, &opts);
            }
        }
    }
}

#[test]
fn the_fused_ratio_test_is_exact_at_its_boundary() {
    let Some(g) = gpu() else { return };
    // 2-D train points and a grid of queries: thousands of different (d1, d2) pairs.
    let t = bytes(2 * 24, 41, None);
    let q: Vec<u8> = (0..64u32)
        .flat_map(|y| (0..64u32).flat_map(move |x| [x as u8 * 4, y as u8 * 4]))
        .collect();
    let nb = cpu_knn(&q, &t, 2);
    // Ratios exactly at sqrt(d1 / d2) for some queries (rounded to f32), one ulp either side,
    // exact squares (0.5, 0.75: d1 = r² d2 must fail), 1, and tiny ratios where only d1 = 0
    // can pass.
    let mut ratios = vec![
        0.5f32,
        0.75,
        0.6,
        0.8,
        1.0,
        1e-30,
        f32::from_bits(1),
        f32::MIN_POSITIVE,
    ];
    // A query with d1 = 1, d2 = 2 · 255² (small ratios: r² = m / 2^s with s in 60..75).
    let (q_far, t_far) = ([0u8, 0], [1u8, 0, 255, 255]);
    let pairs = nb
        .iter()
        .step_by(97)
        .map(|n| (n.best.unwrap().dist2, n.second.unwrap().dist2))
        .chain([(1, 2 * 255 * 255), (2, 2 * 255 * 255)]);
    for (d1, d2) in pairs {
        if d1 > 0 && d1 < d2 {
            let r = ((d1 as f64) / (d2 as f64)).sqrt() as f32;
            ratios.extend([
                f32::from_bits(r.to_bits() - 1),
                r,
                f32::from_bits(r.to_bits() + 1),
            ]);
        }
    }
    ratios.retain(|r| *r > 0.0 && *r <= 1.0);
    // Queries at train points (d1 = 0), and 1-D sets where the query 0 has d1 = r² d2
    // exactly for r = 0.5 (1, 4) and 0.75 (9, 16).
    let q_on: Vec<u8> = t[..20].to_vec();
    let q1 = [0u8, 255, 8];
    for r in ratios {
        let opts = Options {
            ratio: Some(r),
            ..Options::default()
        };
        same_matches(&g, &q, &t, 2, &opts);
        same_matches(&g, &q_on, &t, 2, &opts);
        same_matches(&g, &q_far, &t_far, 2, &opts);
        // d1 = d2 = 0 (a duplicated train point): never accepted.
        assert!(same_matches(&g, &[5, 5], &[5, 5, 5, 5, 9, 9], 2, &opts).is_empty());
        for t1 in [[1u8, 2], [3, 4], [6, 10]] {
            same_matches(&g, &q1, &t1, 1, &opts);
        }
    }
}

#[test]
fn the_fused_ratio_test_is_exact_for_tiny_ratios_and_huge_distances() {
    let Some(g) = gpu() else { return };
    // d1 = 2²³ (129 × 255² + 19² + 4² + 2² + 1 + 1), d2 = 256 × 255², and r = (2²¹ + 1) · 2⁻³⁷:
    // r² = m / 2⁷⁴, so d1 · 2⁷⁴ reaches past 96 bits while m · d2 < 2⁷⁵; rejected.
    let dim = 256;
    let mut a = vec![255u8; 129];
    a.extend([19, 4, 2, 1, 1]);
    a.resize(dim, 0);
    let mut t = a.clone();
    t.extend(vec![255u8; dim]);
    let q = vec![0u8; dim];
    let n = g.knn2_u8(&q, &t, dim).unwrap();
    assert_eq!(n[0].best.map(|b| b.dist2), Some(1 << 23));
    let r = (((1 << 21) + 1) as f32) * 2f32.powi(-37);
    for ratio in [r, 1e-3, 0.7, 0.72, 1.0] {
        let opts = Options {
            ratio: Some(ratio),
            ..Options::default()
        };
        same_matches(&g, &q, &t, dim, &opts);
    }
}

#[test]
fn every_engine_of_the_registry_gives_the_same_matches() {
    let (q, t) = near_copies(128, 100, 150, 51);
    let want = match_u8(&q, &t, 128, &portable()).unwrap();
    let engines = Kernel::engines();
    assert!(engines.contains(&Kernel::Portable));
    for k in engines {
        let opts = Options {
            kernel: k,
            cross_check: true,
            ..Options::default()
        };
        assert_eq!(match_u8(&q, &t, 128, &opts).unwrap(), want, "{}", k.name());
        assert_eq!(
            knn2_u8(&q, &t, 128, &opts).unwrap(),
            cpu_knn(&q, &t, 128),
            "{}",
            k.name()
        );
    }
}

#[test]
fn kernel_gpu_uses_the_shared_device_or_says_why() {
    let (q, t) = (bytes(20 * 16, 61, None), bytes(30 * 16, 62, None));
    let opts = Options {
        kernel: Kernel::Gpu,
        ..Options::default()
    };
    let got = knn2_u8(&q, &t, 16, &opts);
    let any = std::env::var("REMORA_GPU")
        .is_ok_and(|v| matches!(GpuPolicy::parse(&v), Ok(GpuPolicy::Any)));
    match GpuMatcher::shared() {
        Ok(_) => {
            assert_eq!(got.unwrap(), cpu_knn(&q, &t, 16));
            assert!(Kernel::engines().contains(&Kernel::Gpu));
        }
        Err(e) => {
            assert!(!any, "REMORA_GPU=any but no device opened: {e}");
            assert!(matches!(e, Error::Gpu(_)), "{e}");
            assert_eq!(got.unwrap_err(), e);
            assert_eq!(match_u8(&q, &t, 16, &opts).unwrap_err(), e);
            assert!(!Kernel::engines().contains(&Kernel::Gpu));
        }
    }
}

#[test]
fn auto_takes_the_gpu_only_when_it_is_a_real_one() {
    let want = match GpuMatcher::shared() {
        Ok(g) if g.info().kind != "cpu" => Kernel::Gpu,
        _ => Kernel::available()[0],
    };
    assert_eq!(Kernel::Auto.resolve().unwrap(), want);
    assert_eq!(Kernel::Gpu.name(), "gpu-wgpu");
}

#[test]
fn f32_descriptors_with_the_gpu_kernel_are_an_error_and_auto_stays_on_the_cpu() {
    let (q, t) = ([0.5f32, 1.0], [0.0f32, 0.0, 1.0, 1.0]);
    let gpu = Options {
        kernel: Kernel::Gpu,
        ..Options::default()
    };
    for e in [
        knn2_f32(&q, &t, 2, &gpu).unwrap_err(),
        match_f32(&q, &t, 2, &gpu).unwrap_err(),
    ] {
        assert!(matches!(&e, Error::Gpu(m) if m.contains("u8")), "{e}");
    }
    let auto = knn2_f32(&q, &t, 2, &Options::default()).unwrap();
    assert_eq!(auto[0].best.unwrap().index, 1);
}

#[test]
fn neighbours_equal_the_cpus_around_the_128_point_blocks_and_splits() {
    let Some(g) = gpu() else { return };
    // The search takes 128 queries and tiles of 128 train points, and cuts the train set into
    // splits of whole tiles: one less, exactly, one more, and a single point of each.
    let dim = 128;
    for (nq, nt) in [
        (1, 1),
        (127, 1),
        (1, 129),
        (128, 128),
        (129, 127),
        (129, 129),
        (257, 383),
        (5, 1000),
    ] {
        let q = bytes(nq * dim, (nq * 31 + nt) as u64, None);
        let t = bytes(nt * dim, (nt * 17 + nq) as u64, None);
        same_neighbours(&g, &q, &t, dim);
        // Few distinct values: ties everywhere, across invocations, tiles and splits.
        let q = bytes(nq * dim, nq as u64, Some(&[0, 255]));
        let t = bytes(nt * dim, nt as u64 + 1, Some(&[0, 255]));
        same_neighbours(&g, &q, &t, dim);
    }
}

#[test]
fn duplicates_in_every_split_keep_the_lowest_index() {
    let Some(g) = gpu() else { return };
    // 3 distinct points repeated over 600 train points (5 tiles, one split each): every
    // query's best and second best are copies, and the first copies must win.
    let dim = 128;
    let distinct = bytes(3 * dim, 71, None);
    let t: Vec<u8> = distinct.iter().copied().cycle().take(600 * dim).collect();
    let mut q = distinct.clone();
    q.extend(bytes(40 * dim, 72, None));
    same_neighbours(&g, &q, &t, dim);
    let n = g.knn2_u8(&q, &t, dim).unwrap();
    for (i, n) in n.iter().take(3).enumerate() {
        assert_eq!(n.best.map(|b| (b.index, b.dist2)), Some((i as u32, 0)));
        assert_eq!(
            n.second.map(|b| (b.index, b.dist2)),
            Some((i as u32 + 3, 0))
        );
    }
}

#[test]
fn a_steady_stream_of_calls_submits_once_each_and_creates_nothing() {
    let Some(shared) = Gpu::for_tests() else {
        return;
    };
    // A device of its own: the other tests' work would show in the shared one's counters.
    let policy = match shared.info().kind {
        "cpu" => GpuPolicy::Any,
        _ => GpuPolicy::Hardware,
    };
    let dev = Gpu::open(policy).unwrap();
    let g = GpuMatcher::new(dev.clone());
    let (q, t) = near_copies(128, 300, 500, 81);
    let opts = Options {
        ratio: Some(0.8),
        ..Options::default()
    };
    let want = match_u8(&q, &t, 128, &portable_with(&opts)).unwrap();
    // Warm-up: pipelines, buffers and bind groups are made here.
    assert_eq!(g.match_u8(&q, &t, 128, &opts).unwrap(), want);
    let before = dev.counters();
    for _ in 0..3 {
        assert_eq!(g.match_u8(&q, &t, 128, &opts).unwrap(), want);
        // Smaller inputs fit the same workspace.
        same_neighbours(&g, &q[..77 * 128], &t[..130 * 128], 128);
    }
    let d = dev.counters().since(&before);
    assert_eq!(d.objects(), 0, "{d:?}");
    assert_eq!(d.submissions, 6, "{d:?}");
    // Descriptors and norms up, parameters; results and verdicts down.
    let up = (300 + 500) * (128 + 4) + 512 * 4 + 2 * 32;
    assert!(d.h2d_bytes >= 3 * up as u64, "{d:?}");
    assert_eq!(d.d2h_bytes, 3 * (300 * 20 + 77 * 16), "{d:?}");
}

fn portable_with(opts: &Options) -> Options {
    Options {
        kernel: Kernel::Portable,
        ..opts.clone()
    }
}
