//! Acceptance of matches: ratio test, one-point train sets, maximum distance, cross-check,
//! and the neighbour filter.

use remora_match::{
    match_f32, match_u8, neighbour_filter, Error, Kernel, Match, NeighbourFilter, Options,
};

fn opts(ratio: Option<f32>) -> Options {
    Options {
        ratio,
        ..Options::default()
    }
}

#[test]
fn ratio_test_is_strict_on_plain_distances() {
    // Train points at distance 3 and 6 from the query: d1 = 0.5 · d2 exactly.
    let train = [3u8, 6];
    assert!(match_u8(&[0], &train, 1, &opts(Some(0.5)))
        .unwrap()
        .is_empty());
    let m = match_u8(&[0], &train, 1, &opts(Some(0.5001))).unwrap();
    assert_eq!(
        m,
        vec![Match {
            query: 0,
            train: 0,
            distance: 3.0,
            second: Some(6.0)
        }]
    );
    // MicMac's default 0.6: 3 < 0.6 · 6 = 3.6.
    assert_eq!(
        match_u8(&[0], &train, 1, &Options::default())
            .unwrap()
            .len(),
        1
    );
    // d1 = d2 never passes, even at ratio 1.
    assert!(match_u8(&[0], &[3, 3], 1, &opts(Some(1.0)))
        .unwrap()
        .is_empty());
}

#[test]
fn invalid_ratio_and_max_distance_are_errors() {
    for r in [0.0, -0.5, 1.5, f32::NAN] {
        assert!(matches!(
            match_u8(&[0], &[1], 1, &opts(Some(r))),
            Err(Error::Ratio(_))
        ));
    }
    for d in [-1.0, f32::INFINITY, f32::NAN] {
        let o = Options {
            max_distance: Some(d),
            ..Options::default()
        };
        assert!(matches!(
            match_u8(&[0], &[1], 1, &o),
            Err(Error::MaxDistance(_))
        ));
    }
}

#[test]
fn a_one_point_train_set_is_rejected_by_the_ratio_test_only() {
    assert!(match_u8(&[0, 0], &[1, 1], 2, &Options::default())
        .unwrap()
        .is_empty());
    let m = match_u8(&[0, 0], &[1, 1], 2, &opts(None)).unwrap();
    assert_eq!(
        m,
        vec![Match {
            query: 0,
            train: 0,
            distance: 2f32.sqrt(),
            second: None
        }]
    );
    assert!(match_u8(&[0, 0], &[], 2, &opts(None)).unwrap().is_empty());
    assert!(match_u8(&[], &[1, 1], 2, &opts(None)).unwrap().is_empty());
}

#[test]
fn max_distance_is_inclusive() {
    let o = |d| Options {
        ratio: None,
        max_distance: Some(d),
        ..Options::default()
    };
    assert_eq!(match_u8(&[0], &[5], 1, &o(5.0)).unwrap().len(), 1);
    assert!(match_u8(&[0], &[5], 1, &o(4.999)).unwrap().is_empty());
    assert_eq!(match_f32(&[0.0], &[0.5], 1, &o(0.5)).unwrap().len(), 1);
}

#[test]
fn cross_check_keeps_mutual_best_only() {
    // Train 0 at 10; queries at 9 and 12 both have train 0 as best; train 0's best query is 0.
    let train = [10u8, 200];
    let query = [9u8, 12, 199];
    let no = match_u8(&query, &train, 1, &opts(None)).unwrap();
    assert_eq!(
        no.iter().map(|m| (m.query, m.train)).collect::<Vec<_>>(),
        [(0, 0), (1, 0), (2, 1)]
    );
    for k in Kernel::available() {
        let o = Options {
            ratio: None,
            cross_check: true,
            kernel: k,
            ..Options::default()
        };
        let yes = match_u8(&query, &train, 1, &o).unwrap();
        assert_eq!(
            yes.iter().map(|m| (m.query, m.train)).collect::<Vec<_>>(),
            [(0, 0), (2, 1)]
        );
    }
    // A tie between two queries goes to the lower query index.
    let o = Options {
        ratio: None,
        cross_check: true,
        ..Options::default()
    };
    let m = match_u8(&[8, 12], &[10], 1, &o).unwrap();
    assert_eq!(m.iter().map(|m| m.query).collect::<Vec<_>>(), [0]);
    let m = match_f32(&[8.0, 12.0], &[10.0], 1, &o).unwrap();
    assert_eq!(m.iter().map(|m| m.query).collect::<Vec<_>>(), [0]);
}

#[test]
fn match_f32_agrees_with_match_u8_on_integer_descriptors() {
    let q: Vec<u8> = (0..100 * 16).map(|i| ((i * 37) % 256) as u8).collect();
    let t: Vec<u8> = (0..150 * 16).map(|i| ((i * 91 + 5) % 256) as u8).collect();
    let f = |v: &[u8]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    for o in [
        opts(Some(0.8)),
        opts(None),
        Options {
            cross_check: true,
            ratio: Some(0.9),
            ..Options::default()
        },
    ] {
        assert_eq!(
            match_u8(&q, &t, 16, &o).unwrap(),
            match_f32(&f(&q), &f(&t), 16, &o).unwrap()
        );
    }
}

#[test]
fn neighbour_filter_removes_an_inconsistent_match() {
    // A 6 × 6 grid in the train image, shifted and slightly rotated in the query image; match 14
    // points to a place far from its neighbours.
    let train: Vec<[f64; 2]> = (0..36)
        .map(|i| [(i % 6) as f64 * 10.0, (i / 6) as f64 * 10.0])
        .collect();
    let mut query: Vec<[f64; 2]> = train
        .iter()
        .map(|p| [p[0] * 0.99 + 0.1 * p[1] + 100.0, p[1] + 50.0])
        .collect();
    query[14] = [1000.0, -300.0];
    let matches: Vec<Match> = (0..36)
        .map(|i| Match {
            query: i,
            train: i,
            distance: 1.0,
            second: None,
        })
        .collect();
    let kept = neighbour_filter(&matches, &query, &train, &NeighbourFilter::default()).unwrap();
    assert_eq!(kept.len(), 35);
    assert!(kept.iter().all(|m| m.query != 14));
    // Without an outlier everything stays.
    query[14] = [
        train[14][0] * 0.99 + 0.1 * train[14][1] + 100.0,
        train[14][1] + 50.0,
    ];
    assert_eq!(
        neighbour_filter(&matches, &query, &train, &NeighbourFilter::default())
            .unwrap()
            .len(),
        36
    );
    // Too few matches to have 5 neighbours in common.
    assert!(
        neighbour_filter(&matches[..5], &query, &train, &NeighbourFilter::default())
            .unwrap()
            .is_empty()
    );
    // Indices outside the coordinates are an error, not a panic.
    assert!(matches!(
        neighbour_filter(&matches, &query[..3], &train, &NeighbourFilter::default()),
        Err(Error::Coordinates { which: "query", .. })
    ));
}
