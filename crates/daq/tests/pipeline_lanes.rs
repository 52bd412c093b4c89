//! Frame-level parallelism on a host engine: frames gathered into lanes and processed side by
//! side give, frame by frame and in order, the results and pixels of one frame at a time, dark
//! frames (which change the pedestal) included.
use std::sync::Arc;

use remora_daq::azint::AzConfig;
use remora_daq::engine::CpuEngine;
use remora_daq::pedestal::DarkPattern;
use remora_daq::pipeline::{Outcome, Pipeline, PipelineConfig};
use remora_daq::synth::{Synth, SynthConfig};

fn pipeline(s: &Synth, lanes: usize) -> Pipeline {
    let cfg = PipelineConfig {
        dark: DarkPattern::new(5, 0).unwrap(),
        veto_min_pixels: 5,
        integrate: Some((
            s.config().poni,
            AzConfig {
                bins: 100,
                ..Default::default()
            },
        )),
        ..Default::default()
    };
    let e = Arc::new(CpuEngine::new(2).unwrap());
    let mut p = Pipeline::new(e, s.calibration(), s.layout(), None, cfg).unwrap();
    p.set_lanes(lanes);
    p
}

fn same(a: &Outcome, b: &Outcome) -> bool {
    match (a, b) {
        (Outcome::Dark, Outcome::Dark) => true,
        (Outcome::Rejected(x), Outcome::Rejected(y)) => x == y,
        (
            Outcome::Kept {
                stats: sa,
                sparse: ca,
                profile: pa,
            },
            Outcome::Kept {
                stats: sb,
                sparse: cb,
                profile: pb,
            },
        ) => {
            let bits = |p: &Option<remora_daq::azint::Profile>| {
                p.as_ref()
                    .map(|p| p.intensity.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
            };
            sa == sb && ca == cb && bits(pa) == bits(pb)
        }
        _ => false,
    }
}

#[test]
fn lanes_give_the_results_and_pixels_of_one_frame_at_a_time() {
    let mut cfg = SynthConfig::new(1).unwrap();
    cfg.dark = DarkPattern::new(5, 0).unwrap();
    let s = Synth::new(cfg).unwrap();
    let raws: Vec<Vec<u16>> = (0..13).map(|n| s.frame(n).raw).collect();
    let mut one = pipeline(&s, 1);
    let want: Vec<(Outcome, Vec<f32>, Vec<f32>)> = raws
        .iter()
        .enumerate()
        .map(|(n, r)| {
            let o = one.process(n as u64, r).unwrap();
            (o, one.energy().to_vec(), one.image().to_vec())
        })
        .collect();
    for lanes in [2, 3, 4] {
        let mut p = pipeline(&s, lanes);
        assert_eq!(p.depth(), lanes);
        let mut got = Vec::new();
        for (n, r) in raws.iter().enumerate() {
            p.submit(n as u64, r).unwrap();
            while p.in_flight() >= p.depth() {
                let (k, o) = p.collect().unwrap().unwrap();
                got.push((k, o, p.energy().to_vec(), p.image().to_vec()));
            }
        }
        while let Some((k, o)) = p.collect().unwrap() {
            got.push((k, o, p.energy().to_vec(), p.image().to_vec()));
        }
        assert_eq!(got.len(), raws.len(), "{lanes} lanes");
        for (k, (n, o, e, i)) in got.iter().enumerate() {
            assert_eq!(*n, k as u64, "{lanes} lanes: frames in order");
            let (wo, we, wi) = &want[k];
            assert!(same(o, wo), "{lanes} lanes, frame {k}: {o:?} vs {wo:?}");
            if !matches!(o, Outcome::Dark) {
                assert!(e.iter().zip(we).all(|(x, y)| x.to_bits() == y.to_bits()));
                if matches!(o, Outcome::Kept { .. }) {
                    assert!(i.iter().zip(wi).all(|(x, y)| x.to_bits() == y.to_bits()));
                }
            }
        }
    }
}
