//! OPERA's fault micro-benchmark (`remora lazy bench`): trials of N faults on a fresh lazy region
//! each, timing every access that faults a unit in, beside the kernel's own costs
//! ([`remora_lazy::yardstick`]). Timings are never asserted by tests.
use std::sync::Arc;
use std::time::Instant;

use remora_lazy::yardstick::{
    bare_install_ms, bare_sigbus_fault_us, kernel_fault_us, mean_std, memcpy_yardsticks, shuffle,
};
use remora_lazy::{LazyRegion, Mode, Options, PageFetcher, Prefetch, Result};

/// Access order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Units in address order.
    Seq,
    /// A random permutation of the units (different each trial).
    Random,
}

impl std::str::FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Pattern, String> {
        match s {
            "seq" => Ok(Pattern::Seq),
            "random" => Ok(Pattern::Random),
            _ => Err(format!("pattern `{s}`: expected seq or random")),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Fault unit (bytes).
    pub unit: usize,
    /// Accesses per trial, one per unit.
    pub faults: usize,
    /// Trials (each on a fresh region).
    pub trials: usize,
    /// Access order.
    pub pattern: Pattern,
    /// Prefetch policy.
    pub prefetch: Prefetch,
    /// Resolution mode.
    pub mode: Mode,
    /// Background push while the trial runs.
    pub push: bool,
}

/// Results, in microseconds per access unless named otherwise.
#[derive(Debug, Clone)]
pub struct Report {
    /// Transport name.
    pub transport: &'static str,
    /// Mean over all accesses of all trials.
    pub mean_us: f64,
    /// Standard deviation over all accesses.
    pub std_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Standard deviation of the per-trial means.
    pub trial_std_us: f64,
    /// Mean wall time of one trial's scan (all accesses), milliseconds.
    pub scan_ms: f64,
    /// Mean time of a local memcpy of the same bytes into memory already touched (no page
    /// faults: the bandwidth ceiling), milliseconds.
    pub memcpy_ms: f64,
    /// Mean time of a local memcpy of the same bytes into a fresh mapping of 4 KB pages (each
    /// first touch faults, as memory that receives the bytes would), milliseconds.
    pub memcpy_fresh_ms: f64,
    /// Faults taken per trial (fewer than accesses with prefetch).
    pub faults_per_trial: f64,
    /// Mean time of the kernel's own anonymous zero-fill fault on this machine (µs), measured
    /// the same way, for scale.
    pub kernel_fault_us: f64,
    /// Mean time of a random 4 KB fault resolved by a bare SIGBUS handler doing one
    /// `UFFDIO_COPY` ([`bare_sigbus_fault_us`]); NaN unless the run was in SIGBUS mode.
    pub bare_sigbus_fault_us: f64,
    /// [`bare_install_ms`] of the bytes a trial touches: the floor under any scan.
    pub bare_install_ms: f64,
}

/// Runs the benchmark against `fetcher`, whose source must hold `faults * unit` bytes.
pub fn run(fetcher: Arc<dyn PageFetcher>, cfg: &Config) -> Result<Report> {
    let bytes = cfg.faults * cfg.unit;
    if fetcher.len() < bytes as u64 {
        return Err(remora_lazy::Error::Invalid(format!(
            "the server serves {} bytes; the benchmark needs {bytes}",
            fetcher.len()
        )));
    }
    let mut all = Vec::with_capacity(cfg.faults * cfg.trials);
    let mut trial_means = Vec::new();
    let mut scans = Vec::new();
    let mut faults = 0u64;
    let mut rng = 0x2545f4914f6cdd1du64;
    let mut order: Vec<usize> = (0..cfg.faults).collect();
    for _ in 0..cfg.trials {
        let r = LazyRegion::open(
            fetcher.clone(),
            Options {
                unit: cfg.unit,
                mode: cfg.mode,
                prefetch: cfg.prefetch,
                push: cfg.push,
                ..Options::default()
            },
        )?;
        if cfg.pattern == Pattern::Random {
            shuffle(&mut order, &mut rng);
        }
        let p = r.as_ptr();
        let mut lat = Vec::with_capacity(cfg.faults);
        let t0 = Instant::now();
        for &u in &order {
            let t = Instant::now();
            // SAFETY: u < faults, so the byte lies inside the region's mapping.
            std::hint::black_box(unsafe { std::ptr::read_volatile(p.add(u * cfg.unit)) });
            lat.push(t.elapsed().as_nanos() as f64 / 1000.0);
        }
        scans.push(t0.elapsed().as_secs_f64() * 1000.0);
        faults += r.stats().faults;
        trial_means.push(mean_std(&lat).0);
        all.extend(lat);
        drop(r);
    }
    let (mean_us, std_us) = mean_std(&all);
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let pct = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    let (memcpy_ms, memcpy_fresh_ms) = memcpy_yardsticks(bytes, cfg.trials.clamp(1, 20));
    Ok(Report {
        transport: fetcher.transport(),
        mean_us,
        std_us,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        trial_std_us: mean_std(&trial_means).1,
        scan_ms: mean_std(&scans).0,
        memcpy_ms,
        memcpy_fresh_ms,
        faults_per_trial: faults as f64 / cfg.trials.max(1) as f64,
        kernel_fault_us: kernel_fault_us(cfg.faults.min(1000), cfg.trials.clamp(1, 10)),
        bare_install_ms: bare_install_ms(bytes, cfg.trials.clamp(1, 20)),
        bare_sigbus_fault_us: if cfg.mode == Mode::Sigbus {
            bare_sigbus_fault_us(cfg.faults.min(1000), cfg.trials.clamp(1, 20))
        } else {
            f64::NAN
        },
    })
}
