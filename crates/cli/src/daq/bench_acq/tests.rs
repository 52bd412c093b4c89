//! The loss-free search against a fake acquisition that loses frames above a known rate.
use clap::Parser;

use super::search::*;
use super::*;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    a: AcqBenchArgs,
}

/// A run at `rate_hz` that loses frames above `limit` and is otherwise whole.
fn fake(limit: f64) -> impl Fn(&Config) -> anyhow::Result<Summary> {
    move |cfg: &Config| {
        let rate = cfg.acquisition.rate_hz;
        Ok(Summary {
            e2e_fps: rate,
            frames_lost: if rate > limit { 3 } else { 0 },
            ..Summary::default()
        })
    }
}

#[test]
fn the_search_bisects_until_the_loss_free_rate_is_known_within_two_percent() {
    let a = Cli::parse_from(["bench", "--transport", "shm"]).a;
    let run = fake(100.0);
    let runners: Vec<Runner<'_>> = vec![("plain", &run)];
    // From a sustained 120: 120 and 102 lose, 96.9 does not.
    let rates: Vec<f64> = std::iter::once(120.0)
        .chain((0..14).map(|k| 120.0 * 0.85 * 0.95f64.powi(k)))
        .collect();
    let mut tries = Vec::new();
    let found = search(&a, &rates, &runners, &mut tries).unwrap();
    let rate = found[0].0.acquisition.rate_hz;
    assert!(
        (98.0..=100.0).contains(&rate),
        "{rate}: within 2% below the limit"
    );
    assert!(loss_free(&found[0].1));
    let tried: Vec<f64> = tries
        .iter()
        .map(|t| t["rate_hz"].as_f64().unwrap())
        .collect();
    // 120, 102, 96.9, then halves of 5.1: 99.45, 100.7 (lost), and the bracket is 1.3% wide.
    assert_eq!(tried.len(), 5, "{tried:?}");
}

#[test]
fn a_rate_loss_free_at_once_needs_no_bisection() {
    let a = Cli::parse_from(["bench"]).a;
    let run = fake(1000.0);
    let runners: Vec<Runner<'_>> = vec![("plain", &run)];
    let mut tries = Vec::new();
    let found = search(&a, &[120.0, 102.0], &runners, &mut tries).unwrap();
    assert_eq!(found[0].0.acquisition.rate_hz, 120.0);
    assert_eq!(tries.len(), 1);
}
