//! Timing and counting: a cell's median, min and p99 and the engine counters per transfer
//! (`Cell`, `PerTransfer`), and the round-robin runner that times every series alike (`Bench`,
//! `Job`). Every section of the benchmark measures through it.
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use remora_fabric::{PartConfig, QpOptions, Stats};
use serde_json::{json, Value};

use super::setup::Setup;
use super::threads::{ByRole, Snapshot};

/// Median, min and p99 of one cell, in microseconds, the median CPU time the process used
/// meanwhile (every thread: both ends, the page-in worker), and what the engines counted.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Cell {
    pub(super) n: usize,
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) p99: f64,
    pub(super) cpu: f64,
    /// Median CPU time of each thread role (where the kernel has per-thread schedstat).
    pub(super) threads: Option<ByRole>,
    pub(super) per: Option<PerTransfer>,
}

/// CPU time of the whole process so far (every thread, user and system).
fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl Cell {
    pub(super) fn of(mut us: Vec<f64>) -> Cell {
        if us.is_empty() {
            return Cell::default();
        }
        let n = us.len();
        let median = median(&mut us);
        Cell {
            n,
            median,
            min: us[0],
            p99: us[((0.99 * n as f64).ceil() as usize).clamp(1, n) - 1],
            cpu: f64::NAN,
            threads: None,
            per: None,
        }
    }

    pub(super) fn json(&self) -> Value {
        let mut v = json!({"n": self.n, "median_us": self.median, "min_us": self.min,
            "p99_us": self.p99, "cpu_us": (!self.cpu.is_nan()).then_some(self.cpu)});
        if let Some(t) = &self.threads {
            v["cpu_us_by_thread"] = t.json();
        }
        if let Some(p) = &self.per {
            v["per_transfer"] = p.json();
        }
        v
    }
}

/// QpProtocol counters of a cell divided by its transfers (the warm-up included): responder
/// (faults .. held drops, packets received) and requester (ERRs received .. packets sent).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PerTransfer {
    pub(super) faults: f64,
    page_ins: f64,
    pages_in: f64,
    fault_naks: f64,
    errs_sent: f64,
    held_drops: f64,
    wave_holds: f64,
    paced_resumes: f64,
    errs_received: f64,
    fault_timeouts: f64,
    timeouts: f64,
    retransmits: f64,
    tx_packets: f64,
    rx_packets: f64,
}

impl PerTransfer {
    /// From the (responder, requester) counters before and after `n` transfers.
    fn between(before: (Stats, Stats), after: (Stats, Stats), n: usize) -> PerTransfer {
        let ((r0, q0), (r1, q1)) = (before, after);
        let n = n.max(1) as f64;
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / n;
        PerTransfer {
            faults: d(r1.faults, r0.faults),
            page_ins: d(r1.page_ins, r0.page_ins),
            pages_in: d(r1.pages_in, r0.pages_in),
            fault_naks: d(r1.fault_naks, r0.fault_naks),
            errs_sent: d(r1.errs_sent, r0.errs_sent),
            held_drops: d(r1.held_drops, r0.held_drops),
            wave_holds: d(r1.wave_holds, r0.wave_holds),
            paced_resumes: d(q1.paced_resumes, q0.paced_resumes),
            errs_received: d(q1.errs_received, q0.errs_received),
            fault_timeouts: d(q1.fault_timeouts, q0.fault_timeouts),
            timeouts: d(q1.timeouts, q0.timeouts),
            retransmits: d(q1.retransmits, q0.retransmits),
            tx_packets: d(q1.tx_packets, q0.tx_packets),
            rx_packets: d(r1.rx_packets, r0.rx_packets),
        }
    }

    fn fields(&mut self) -> [&mut f64; 14] {
        [
            &mut self.wave_holds,
            &mut self.paced_resumes,
            &mut self.faults,
            &mut self.page_ins,
            &mut self.pages_in,
            &mut self.fault_naks,
            &mut self.errs_sent,
            &mut self.held_drops,
            &mut self.errs_received,
            &mut self.fault_timeouts,
            &mut self.timeouts,
            &mut self.retransmits,
            &mut self.tx_packets,
            &mut self.rx_packets,
        ]
    }

    fn add(&mut self, o: &PerTransfer) {
        let mut o = *o;
        for (a, b) in self.fields().into_iter().zip(o.fields()) {
            *a += *b;
        }
    }

    fn scaled(mut self, k: f64) -> PerTransfer {
        for a in self.fields() {
            *a *= k;
        }
        self
    }

    fn json(&self) -> Value {
        json!({"faults": self.faults, "page_ins": self.page_ins, "pages_in": self.pages_in,
            "fault_naks": self.fault_naks, "errs_sent": self.errs_sent,
            "held_drops": self.held_drops, "wave_holds": self.wave_holds,
            "paced_resumes": self.paced_resumes, "errs_received": self.errs_received,
            "fault_timeouts": self.fault_timeouts, "timeouts": self.timeouts,
            "retransmits": self.retransmits, "requester_tx_packets": self.tx_packets,
            "responder_rx_packets": self.rx_packets})
    }
}

/// One timed run of a job.
struct Run {
    took: Duration,
    cpu: Duration,
    threads: Option<ByRole>,
    per: PerTransfer,
}

/// The benchmark's settings and its progress bar.
pub(super) struct Bench {
    /// Requester window (packets in flight).
    pub(super) window: u32,
    pub(super) iters: usize,
    pub(super) min_iters: usize,
    pub(super) cell: Duration,
    pub(super) bar: Option<indicatif::ProgressBar>,
    /// The responder's reorder window (packets) on PART queue pairs.
    pub(super) reorder: u32,
}

/// One series of a round-robin measurement: what to set up (untimed) and what to time.
pub(super) struct Job<'a> {
    pub(super) what: String,
    /// Whose engine counters to attribute to the series (none for local work only).
    pub(super) setup: Option<&'a Setup>,
    pub(super) prep: Box<dyn FnMut() -> Result<()> + 'a>,
    pub(super) timed: Box<dyn FnMut() -> Result<()> + 'a>,
}

impl<'a> Job<'a> {
    pub(super) fn new(
        what: String,
        setup: Option<&'a Setup>,
        prep: impl FnMut() -> Result<()> + 'a,
        timed: impl FnMut() -> Result<()> + 'a,
    ) -> Job<'a> {
        Job {
            what,
            setup,
            prep: Box::new(prep),
            timed: Box::new(timed),
        }
    }

    /// Runs it once; returns the timed part, the process's CPU time during it (in all and
    /// per thread role) and the engine counters it caused.
    fn run(&mut self) -> Result<Run> {
        let before = self.setup.map(Setup::stats);
        (self.prep)().with_context(|| format!("{}: setting up", self.what))?;
        let threads = Snapshot::take();
        let cpu = process_cpu();
        let t = Instant::now();
        (self.timed)().with_context(|| self.what.clone())?;
        let took = t.elapsed();
        let cpu = process_cpu().saturating_sub(cpu);
        let roles = self.setup.map(Setup::roles).unwrap_or_default();
        let threads = Snapshot::take().since(&threads, &roles);
        let per = match (before, self.setup.map(Setup::stats)) {
            (Some(b), Some(a)) => PerTransfer::between(b, a, 1),
            _ => PerTransfer::default(),
        };
        Ok(Run {
            took,
            cpu,
            threads,
            per,
        })
    }
}

impl Bench {
    /// A queue pair's PART settings with the benchmark's reorder window.
    pub(super) fn part(
        &self,
        mode: remora_fabric::FaultMode,
        policy: remora_fabric::PageInPolicy,
        timeout: Option<Duration>,
    ) -> PartConfig {
        PartConfig {
            reorder: self.reorder,
            ..super::setup::part(mode, policy, timeout)
        }
    }

    /// A requester's options: `part` (its fault timeout) and the benchmark's window.
    pub(super) fn requester(&self, part: PartConfig) -> QpOptions {
        QpOptions {
            part,
            window: self.window,
            ..QpOptions::default()
        }
    }

    /// Runs the jobs in turn, one transfer each per round, so that a change in the machine's
    /// load touches every series alike: one untimed warm-up round, then rounds until each job
    /// has `iters` samples, or `min_iters` and its cell time used up.
    pub(super) fn round_robin(&self, mut jobs: Vec<Job<'_>>) -> Result<Vec<Cell>> {
        let n = jobs.len();
        let mut us: Vec<Vec<f64>> = vec![Vec::with_capacity(self.iters); n];
        let mut cpu: Vec<Vec<f64>> = vec![Vec::with_capacity(self.iters); n];
        let mut threads: Vec<Vec<ByRole>> = vec![Vec::with_capacity(self.iters); n];
        let mut spent = vec![Duration::ZERO; n];
        let mut per = vec![PerTransfer::default(); n];
        let mut done = vec![false; n];
        for (i, j) in jobs.iter_mut().enumerate() {
            let t = Instant::now();
            per[i].add(&j.run()?.per);
            spent[i] += t.elapsed();
        }
        while done.iter().any(|d| !d) {
            for (i, j) in jobs.iter_mut().enumerate() {
                if done[i] {
                    continue;
                }
                if let Some(b) = &self.bar {
                    b.set_message(j.what.clone());
                }
                let t = Instant::now();
                let r = j.run()?;
                spent[i] += t.elapsed();
                us[i].push(r.took.as_secs_f64() * 1e6);
                cpu[i].push(r.cpu.as_secs_f64() * 1e6);
                threads[i].extend(r.threads);
                per[i].add(&r.per);
                let k = us[i].len();
                if k >= self.iters || (k >= self.min_iters && spent[i] >= self.cell) {
                    done[i] = true;
                    if let Some(b) = &self.bar {
                        b.inc(1);
                    }
                }
            }
        }
        Ok(us
            .into_iter()
            .zip(per)
            .zip(&jobs)
            .zip(cpu)
            .zip(threads)
            .map(|((((us, p), j), mut cpu), threads)| {
                let mut c = Cell::of(us);
                c.cpu = median(&mut cpu);
                // Each role's own median (only where every run could read the threads).
                if !threads.is_empty() && threads.len() == c.n {
                    let mut by = ByRole::default();
                    for (k, v) in by.0.iter_mut().enumerate() {
                        let mut col: Vec<f64> = threads.iter().map(|t| t.0[k]).collect();
                        *v = median(&mut col);
                    }
                    c.threads = Some(by);
                }
                if j.setup.is_some() {
                    c.per = Some(p.scaled(1.0 / (c.n + 1) as f64));
                }
                c
            })
            .collect())
    }

    /// One job alone.
    pub(super) fn measure(&self, job: Job<'_>) -> Result<Cell> {
        Ok(self.round_robin(vec![job])?.remove(0))
    }

    pub(super) fn say(&self, line: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cell;

    #[test]
    fn cells_take_the_median_min_and_p99() {
        let c = Cell::of(vec![5.0, 1.0, 3.0, 2.0]);
        assert_eq!((c.n, c.median, c.min, c.p99), (4, 2.5, 1.0, 5.0));
        assert_eq!(Cell::of(vec![]).n, 0);
    }
}
