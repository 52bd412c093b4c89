//! Property tests: the fast engine equals the per-pixel reference on arbitrary raw words,
//! calibrations and masks, including every special word.
use proptest::prelude::*;
use remora_daq::calib::{Calibration, ConvTables};
use remora_daq::engine::{ConvOut, CpuEngine, Engine, ScalarEngine};
use remora_daq::model::Detector;

fn tables(seed: u64, mask_every: usize) -> ConvTables {
    let det = Detector::new(1).unwrap();
    let cal = Calibration::synthetic(det, seed);
    let mask: Vec<u8> = (0..det.pixels())
        .map(|i| u8::from(mask_every > 0 && i % mask_every == 3))
        .collect();
    ConvTables::new(&cal, Some(&mask)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn fast_equals_reference(
        words in proptest::collection::vec(any::<u16>(), 1..4000),
        special in proptest::collection::vec(prop_oneof![Just(0xc000u16), Just(0xffff), Just(0x4000), Just(0x8001)], 0..40),
        seed in 0u64..4,
        mask_every in 0usize..50,
        threshold in -5.0f32..200.0,
        energy in 1.0f32..30.0,
    ) {
        let t = tables(seed, mask_every);
        let n = t.pixels();
        // Mostly G0 words (the fast path), the generated words and special words sprinkled in.
        let mut raw: Vec<u16> = (0..n).map(|i| (3000 + (i * 7919) % 4000) as u16).collect();
        for (k, &w) in words.iter().enumerate() {
            raw[(k * 131) % n] = w;
        }
        for (k, &w) in special.iter().enumerate() {
            raw[(k * 104_729) % n] = w;
        }
        let fast = CpuEngine::new(2).unwrap();
        let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
        let sa = fast.convert(&raw, &t, ConvOut::Energy(&mut a), threshold).unwrap();
        let sb = ScalarEngine.convert(&raw, &t, ConvOut::Energy(&mut b), threshold).unwrap();
        prop_assert_eq!(sa, sb);
        prop_assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())));
        let (mut ca, mut cb) = (vec![0i32; n], vec![0i32; n]);
        fast.convert(&raw, &t, ConvOut::Photons { out: &mut ca, energy_kev: energy }, threshold).unwrap();
        ScalarEngine.convert(&raw, &t, ConvOut::Photons { out: &mut cb, energy_kev: energy }, threshold).unwrap();
        prop_assert_eq!(ca, cb);
    }
}
