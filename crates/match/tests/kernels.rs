//! Every u8 kernel against a naive reference, bit for bit, and the search's edge cases.

use proptest::prelude::*;
use remora_match::{knn2_f32, knn2_u8, Error, Kernel, Neighbour, Neighbours, Options};

/// Brute force with the documented tie rule (lower index first).
fn naive(q: &[u8], t: &[u8], dim: usize) -> Vec<Neighbours<u32>> {
    q.chunks_exact(dim)
        .map(|q| {
            let mut d: Vec<(u32, u32)> = t
                .chunks_exact(dim)
                .enumerate()
                .map(|(j, t)| {
                    (
                        q.iter()
                            .zip(t)
                            .map(|(&a, &b)| (a as i64 - b as i64).pow(2) as u32)
                            .sum(),
                        j as u32,
                    )
                })
                .collect();
            d.sort();
            let n = |k: usize| d.get(k).map(|&(dist2, index)| Neighbour { index, dist2 });
            Neighbours {
                best: n(0),
                second: n(1),
            }
        })
        .collect()
}

fn with(kernel: Kernel, threads: Option<usize>) -> Options {
    Options {
        kernel,
        threads,
        ..Options::default()
    }
}

fn check_all(q: &[u8], t: &[u8], dim: usize) {
    let want = naive(q, t, dim);
    for k in Kernel::available() {
        let got = knn2_u8(q, t, dim, &with(k, None)).unwrap();
        assert_eq!(
            got,
            want,
            "kernel {k:?}, dim {dim}, {} x {}",
            q.len() / dim,
            t.len() / dim
        );
    }
}

fn data(dim_choices: &'static [usize]) -> impl Strategy<Value = (usize, Vec<u8>, Vec<u8>)> {
    (
        prop::sample::select(dim_choices),
        0usize..40,
        0usize..80,
        prop::bool::ANY,
    )
        .prop_flat_map(|(dim, nq, nt, few)| {
            // `few`: values from {0, 1, 255} only, so that exact ties are frequent.
            let v = if few {
                prop::sample::select(vec![0u8, 1, 255]).boxed()
            } else {
                any::<u8>().boxed()
            };
            (
                Just(dim),
                prop::collection::vec(v.clone(), nq * dim),
                prop::collection::vec(v, nt * dim),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn kernels_agree_with_the_naive_reference((dim, q, t) in data(&[1, 2, 3, 4, 5, 7, 16, 31, 128, 130])) {
        check_all(&q, &t, dim);
    }
}

#[test]
fn kernels_are_listed_and_auto_resolves() {
    let ks = Kernel::available();
    assert!(ks.contains(&Kernel::Portable));
    // Auto is the fastest CPU kernel, or the GPU engine on a real GPU (tests/engines.rs).
    let auto = Kernel::Auto.resolve().unwrap();
    assert!(auto == ks[0] || auto == Kernel::Gpu, "{auto:?}");
    for k in [Kernel::Avx2, Kernel::Avx512] {
        if !k.is_available() {
            assert_eq!(
                knn2_u8(&[0], &[0], 1, &with(k, None)),
                Err(Error::KernelUnavailable(k))
            );
        }
    }
}

#[test]
fn extreme_values_stay_exact_at_the_largest_dimension() {
    let dim = 1024;
    let q = vec![255u8; 3 * dim];
    let mut t = vec![0u8; 70 * dim];
    t[69 * dim..].fill(255);
    check_all(&q, &t, dim);
    let n = knn2_u8(&q, &t, dim, &Options::default()).unwrap();
    assert_eq!(
        n[0].best,
        Some(Neighbour {
            index: 69,
            dist2: 0
        })
    );
    assert_eq!(
        n[0].second,
        Some(Neighbour {
            index: 0,
            dist2: 1024 * 255 * 255
        })
    );
}

#[test]
fn all_equal_train_points_tie_to_the_two_lowest_indices() {
    for dim in [1, 3, 128, 130] {
        let q: Vec<u8> = (0..50 * dim).map(|i| (i * 7) as u8).collect();
        let t = vec![9u8; 100 * dim];
        check_all(&q, &t, dim);
        for n in knn2_u8(&q, &t, dim, &Options::default()).unwrap() {
            assert_eq!((n.best.unwrap().index, n.second.unwrap().index), (0, 1));
        }
    }
}

#[test]
fn sizes_around_tile_and_block_edges() {
    let mut s = 1u32;
    let mut gen = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 24) as u8
            })
            .collect()
    };
    for (nq, nt) in [
        (1, 1),
        (5, 15),
        (6, 16),
        (7, 17),
        (8, 32),
        (9, 33),
        (49, 2049),
        (97, 4100),
    ] {
        let (q, t) = (gen(nq * 128), gen(nt * 128));
        check_all(&q, &t, 128);
    }
}

#[test]
fn empty_and_one_point_sets() {
    let o = Options::default();
    assert!(knn2_u8(&[], &[1, 2], 2, &o).unwrap().is_empty());
    let n = knn2_u8(&[1, 2, 3, 4], &[], 2, &o).unwrap();
    assert_eq!(
        n,
        vec![
            Neighbours {
                best: None,
                second: None
            };
            2
        ]
    );
    let n = knn2_u8(&[1, 2], &[4, 6], 2, &o).unwrap();
    assert_eq!(
        n[0].best,
        Some(Neighbour {
            index: 0,
            dist2: 25
        })
    );
    assert_eq!(n[0].second, None);
}

#[test]
fn bad_arguments_are_errors() {
    let o = Options::default();
    assert_eq!(knn2_u8(&[1], &[1], 0, &o), Err(Error::Dimension(0)));
    assert_eq!(knn2_u8(&[1], &[1], 1025, &o), Err(Error::Dimension(1025)));
    assert!(matches!(
        knn2_u8(&[1, 2, 3], &[1, 2], 2, &o),
        Err(Error::Length { which: "query", .. })
    ));
    assert!(matches!(
        knn2_u8(&[1, 2], &[1, 2, 3], 2, &o),
        Err(Error::Length { which: "train", .. })
    ));
    assert!(matches!(
        knn2_u8(&[1], &[1], 1, &with(Kernel::Auto, Some(0))),
        Err(Error::Threads(_))
    ));
    assert!(matches!(
        knn2_f32(&[f32::NAN], &[1.0], 1, &o),
        Err(Error::NotFinite {
            which: "query",
            index: 0
        })
    ));
    assert!(matches!(
        knn2_f32(&[1.0], &[0.0, f32::INFINITY], 1, &o),
        Err(Error::NotFinite {
            which: "train",
            index: 1
        })
    ));
}

#[test]
fn u8_results_do_not_depend_on_threads() {
    let q: Vec<u8> = (0..300 * 128).map(|i| ((i * 31) % 251) as u8).collect();
    let t: Vec<u8> = (0..500 * 128).map(|i| ((i * 17) % 253) as u8).collect();
    let one = knn2_u8(&q, &t, 128, &with(Kernel::Auto, Some(1))).unwrap();
    for th in [2, 3, 5] {
        assert_eq!(
            knn2_u8(&q, &t, 128, &with(Kernel::Auto, Some(th))).unwrap(),
            one
        );
    }
}

/// The f32 distance in its documented order: eight lanes, then a fixed tree.
fn dist_f32_reference(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        acc[i % 8] += (x - y) * (x - y);
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

#[test]
fn f32_results_are_deterministic_across_threads_and_kernels() {
    let dim = 130;
    let mut s = 7u64;
    let mut gen = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 0.3
            })
            .collect()
    };
    let (q, t) = (gen(200 * dim), gen(333 * dim));
    let base = knn2_f32(&q, &t, dim, &with(Kernel::Portable, Some(1))).unwrap();
    for k in Kernel::available() {
        for th in [1, 2, 3] {
            assert_eq!(
                knn2_f32(&q, &t, dim, &with(k, Some(th))).unwrap(),
                base,
                "{k:?} {th}"
            );
        }
    }
    for (qi, n) in q.chunks_exact(dim).zip(&base) {
        let mut d: Vec<(f32, u32)> = t
            .chunks_exact(dim)
            .enumerate()
            .map(|(j, t)| (dist_f32_reference(qi, t), j as u32))
            .collect();
        d.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert_eq!(
            n.best,
            Some(Neighbour {
                index: d[0].1,
                dist2: d[0].0
            })
        );
        assert_eq!(
            n.second,
            Some(Neighbour {
                index: d[1].1,
                dist2: d[1].0
            })
        );
    }
}

#[test]
fn f32_overflow_to_infinity_still_finds_neighbours() {
    let n = knn2_f32(&[3e38], &[-3e38, -3e38], 1, &Options::default()).unwrap();
    assert_eq!(
        n[0].best.map(|b| (b.index, b.dist2)),
        Some((0, f32::INFINITY))
    );
    assert_eq!(n[0].second.map(|b| b.index), Some(1));
}
