//! The loss-free search of `remora bench acquisition`: from the rates to try (highest first),
//! the highest without loss for each runner, narrowed by bisection.
use std::time::{Duration, Instant};

use remora_daq::config::Config;
use remora_daq::manager::Summary;
use serde_json::json;

use super::{cpu_seconds, settings, AcqBenchArgs};

pub(super) type Found = (Config, Summary, f64);

/// The bisection stops when the highest loss-free rate is known within this fraction...
const BRACKET: f64 = 0.02;
/// ...after this many steps...
const MAX_BISECTIONS: usize = 4;
/// ...or when a search has run this long, so that it ends within a minute.
const SEARCH_BUDGET: Duration = Duration::from_secs(40);
pub(super) type Runner<'a> = (&'a str, &'a dyn Fn(&Config) -> anyhow::Result<Summary>);

pub(super) fn loss_free(s: &Summary) -> bool {
    s.frames_lost + s.frames_overrun + s.frames_partial == 0
}

/// For each runner, the highest rate of `rates` (descending) without loss, then bisection
/// towards the last rate that lost frames until the bracket is within [`BRACKET`]. Runners
/// take turns at each rate, so that each comparison is made over the same minutes on a machine
/// whose speed drifts.
pub(super) fn search(
    a: &AcqBenchArgs,
    rates: &[f64],
    runners: &[Runner<'_>],
    tries: &mut Vec<serde_json::Value>,
) -> anyhow::Result<Vec<Found>> {
    let mut try_rate = |name: &str,
                        run: &dyn Fn(&Config) -> anyhow::Result<Summary>,
                        rate: f64|
     -> anyhow::Result<Found> {
        let cfg = settings(a, rate, "mask")?;
        let (cpu0, t0) = (cpu_seconds(), Instant::now());
        let s = run(&cfg)?;
        let cores = (cpu_seconds() - cpu0) / t0.elapsed().as_secs_f64();
        let lost = s.frames_lost + s.frames_overrun + s.frames_partial;
        tries.push(json!({"runner": name, "rate_hz": rate, "lost": lost, "e2e_fps": s.e2e_fps, "cpu_cores": cores}));
        Ok((cfg, s, cores))
    };
    let started = Instant::now();
    let n = runners.len();
    let mut chosen: Vec<Option<Found>> = (0..n).map(|_| None).collect();
    let mut failed: Vec<Option<f64>> = vec![None; n];
    for (k, &rate) in rates.iter().enumerate() {
        let last = k + 1 == rates.len();
        for (i, (name, run)) in runners.iter().enumerate() {
            if chosen[i].is_some() {
                continue;
            }
            let f = try_rate(name, *run, rate)?;
            if loss_free(&f.1) || last {
                chosen[i] = Some(f);
            } else {
                failed[i] = Some(rate);
            }
        }
        if chosen.iter().all(Option::is_some) {
            break;
        }
    }
    let mut bounds: Vec<Option<(f64, f64)>> = (0..n)
        .map(|i| {
            let lo = chosen[i]
                .as_ref()
                .filter(|f| loss_free(&f.1))
                .map(|f| f.0.acquisition.rate_hz);
            failed[i].zip(lo)
        })
        .collect();
    // The bracket starts 5-15% wide; a single step left the answer up to 7.5% low, which is
    // most of the distance between a rate the receiver sustains and the goal's.
    for _ in 0..MAX_BISECTIONS {
        if started.elapsed() >= SEARCH_BUDGET {
            break;
        }
        // A bracket still wider than BRACKET.
        let open = |b: Option<(f64, f64)>| b.filter(|&(hi, lo)| hi - lo > BRACKET * lo);
        if bounds.iter().all(|&b| open(b).is_none()) {
            break;
        }
        for (i, (name, run)) in runners.iter().enumerate() {
            let Some((hi, lo)) = open(bounds[i]) else {
                continue;
            };
            let mid = (lo + hi) / 2.0;
            let f = try_rate(name, *run, mid)?;
            if loss_free(&f.1) {
                bounds[i] = Some((hi, mid));
                chosen[i] = Some(f);
            } else {
                bounds[i] = Some((mid, lo));
            }
        }
    }
    Ok(chosen
        .into_iter()
        .map(|c| c.expect("every runner ran"))
        .collect())
}
