//! `remora bench part`: the PART paper's measurements on remora's udp RC engine.
//!
//! Both ends live in this process on 127.0.0.1, so the benchmark sets the responder's residency
//! between transfers (evicting is never timed). One timed operation is one WRITE of `size`
//! bytes from a resident source into the responder's region, from the post to the requester's
//! completion. The responder's region is anonymous memory with transparent huge pages turned
//! off, so every 4 KiB page faults on its own as on the paper's platform.
//!
//! Sections: transfer latency per variant and size (transfer only; pin or touch the pages per
//! transfer, present or evicted, on an inline-fault queue pair; PART with PIO, PI4 and PIA on
//! evicted pages); the requester's fault timeout; the fraction of pages evicted; one fault of a
//! 4 KiB WRITE taken apart; and the head-of-line test (one queue pair faulting on remote-backed
//! memory while another measures latency on the same responder device).
//!
//! This file holds the arguments, the entry point and the report (tables and JSON); `measure`
//! times and counts, `setup` builds the regions and queue pairs, `sweeps` and `hol` run the
//! sections.
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use remora_fabric::{FaultMode, PageInPolicy, QpOptions, Transport};
use serde_json::{json, Value};

mod hol;
mod measure;
mod setup;
mod sweeps;
mod threads;

use hol::hol;
use measure::{Bench, Cell};
use setup::pin_check;
use sweeps::{
    frequency_sweep, latency_table, one_fault, timeout_sweep, variants, FreqRow, TimeoutRow,
    FRACTIONS, TIMEOUTS_US,
};
use threads::Role;

/// Arguments of `remora bench part`.
#[derive(Args, Clone, Debug)]
pub struct PartBenchArgs {
    /// One JSON object instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Transfer sizes, comma-separated (suffixes K, M).
    #[arg(long, value_delimiter = ',', default_value = "4K,16K,64K,256K,1M,4M", value_parser = super::parse_size)]
    pub sizes: Vec<usize>,
    /// Timed transfers per cell (median and min over them), after one untimed warm-up.
    #[arg(long, default_value_t = 30)]
    pub iters: usize,
    /// A cell stops early once it has run this long and has --min-iters samples (slow PIO
    /// cells); each cell reports how many samples it took.
    #[arg(long, default_value_t = 2.0)]
    pub cell_seconds: f64,
    /// Fewest timed transfers per cell.
    #[arg(long, default_value_t = 5)]
    pub min_iters: usize,
    /// Transport (PART is udp RC only).
    #[arg(long, default_value = "udp", value_parser = super::transport_parser())]
    pub transport: Transport,
    /// Requester window in packets (the whole default 4 MiB transfer is in flight at 1024):
    /// how much a faulting transfer sends before the responder's hold NAK can stop it.
    #[arg(long, default_value_t = QpOptions::default().window, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub window: u32,
    /// Seconds of the head-of-line test per fault mode (0 skips it).
    #[arg(long, default_value_t = 3.0)]
    pub hol_seconds: f64,
    /// Also draw the latency table as an SVG chart: median time of each variant against the
    /// transfer size, both axes logarithmic (the paper's figure).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// Responder's reorder window in packets for the PART rows (0: the paper's protocol, every
    /// fault stops the sender).
    #[arg(long, default_value_t = remora_fabric::DEFAULT_REORDER)]
    pub reorder: u32,
}

/// `4K`, `1M`: sizes as the tables name them.
fn human(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

/// Runs `remora bench part`.
pub fn part_bench(a: PartBenchArgs) -> Result<()> {
    if a.transport != Transport::Udp {
        bail!(
            "PART runs on the udp transport's RC engine; --transport {} has no fault path to \
             measure (tcp and shm populate whole messages before placing them)",
            a.transport
        );
    }
    if a.sizes.is_empty() || a.sizes.contains(&0) {
        bail!("--sizes needs at least one size, none of them 0");
    }
    if a.iters == 0 {
        bail!("--iters must be at least 1");
    }
    let mut sizes = a.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let max = *sizes.last().expect("sizes");
    if max > 1 << 30 {
        bail!("--sizes: {max} bytes exceeds this benchmark's 1 GiB limit");
    }
    let pin = pin_check(max);
    let variants = variants(pin.is_ok()).len();
    let cells = sizes.len() * (variants + (TIMEOUTS_US.len() + 1) * 2 + FRACTIONS.len() * 2) + 3;
    let hol_cells = if a.hol_seconds > 0.0 { 6 } else { 0 };
    let b = Bench {
        window: a.window,
        iters: a.iters,
        min_iters: a.min_iters.clamp(1, a.iters),
        cell: Duration::from_secs_f64(a.cell_seconds.max(0.0)),
        bar: progress(cells + hol_cells),
        reorder: a.reorder,
    };
    if let Err(why) = &pin {
        b.say(&format!("bench part: skipping the pin rows: {why}"));
    }
    let table = latency_table(&b, &sizes, pin.is_ok())?;
    let timeouts = timeout_sweep(&b, &sizes)?;
    let freq = frequency_sweep(&b, &sizes)?;
    let fault = one_fault(&b)?;
    let mut hols = Vec::new();
    if a.hol_seconds > 0.0 {
        for mode in [FaultMode::Inline, FaultMode::Part] {
            hols.push(hol(&b, mode, a.hol_seconds)?);
        }
    }
    if let Some(bar) = &b.bar {
        bar.finish_and_clear();
    }
    let r = Report {
        sizes,
        table,
        timeouts,
        freq,
        fault,
        hols,
        pin_skipped: pin.err(),
        window: a.window,
        iters: a.iters,
        min_iters: b.min_iters,
        cell_seconds: a.cell_seconds,
    };
    if let Some(path) = &a.plot {
        r.plot(path)?;
    }
    if a.json {
        println!("{}", r.json());
    } else {
        r.print();
    }
    Ok(())
}

fn progress(len: usize) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(len as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} cells {msg}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        b
    })
}

/// Everything measured, for the tables and the JSON.
struct Report {
    sizes: Vec<usize>,
    table: Vec<(String, Vec<Cell>)>,
    timeouts: Vec<TimeoutRow>,
    freq: Vec<FreqRow>,
    fault: Value,
    hols: Vec<Value>,
    pin_skipped: Option<String>,
    window: u32,
    iters: usize,
    min_iters: usize,
    cell_seconds: f64,
}

impl Report {
    /// The main table's cell of `variant` at the largest size.
    fn at_max(&self, variant: &str) -> Option<Cell> {
        let (_, cells) = self.table.iter().find(|(n, _)| n == variant)?;
        cells.last().copied()
    }

    /// The timeout sweep's cells of `policy` with fault timeout `to` (None: NTO).
    fn timeout_row(&self, policy: PageInPolicy, to: Option<u64>) -> Option<&[Cell]> {
        let (_, _, cells) = self
            .timeouts
            .iter()
            .find(|(p, t, _)| *p == policy && *t == to)?;
        Some(cells)
    }

    fn timeout_at_max(&self, policy: PageInPolicy, to: Option<u64>) -> Option<Cell> {
        self.timeout_row(policy, to)?.last().copied()
    }

    /// Headline figures at the largest size (the paper's 4 MB, every page faulting).
    fn headline(&self) -> Value {
        let m = |c: Option<Cell>| c.map(|c| c.median);
        let pia = m(self.at_max("pia"));
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        let nto = m(self.timeout_at_max(PageInPolicy::Pia, None));
        let to100 = m(self.timeout_at_max(PageInPolicy::Pia, Some(100)));
        let by_size: Vec<Value> = match (
            self.timeout_row(PageInPolicy::Pia, None),
            self.timeout_row(PageInPolicy::Pia, Some(100)),
        ) {
            (Some(n), Some(t)) => self
                .sizes
                .iter()
                .zip(n.iter().zip(t))
                .map(|(s, (n, t))| json!({"bytes": s, "ratio": n.median / t.median}))
                .collect(),
            _ => Vec::new(),
        };
        json!({
            "bytes": self.sizes.last(),
            "transfer_only_us": m(self.at_max("transfer_only")),
            "pio_us": m(self.at_max("pio")),
            "pi4_us": m(self.at_max("pi4")),
            "pia_us": pia,
            "touch_not_present_us": m(self.at_max("touch_not_present")),
            "pin_not_present_us": m(self.at_max("pin_not_present")),
            "pia_nto_us": nto,
            "pia_to100_us": to100,
            "pio_over_pia": ratio(m(self.at_max("pio")), pia),
            "pia_over_touch_not_present": ratio(pia, m(self.at_max("touch_not_present"))),
            "pia_over_pin_not_present": ratio(pia, m(self.at_max("pin_not_present"))),
            "pia_to100_over_touch_not_present": ratio(to100, m(self.at_max("touch_not_present"))),
            "pia_to100_over_transfer_only": ratio(to100, m(self.at_max("transfer_only"))),
            "pia_nto_over_to100": ratio(nto, to100),
            "pia_nto_over_to100_by_size": by_size,
            "model": self.model(),
        })
    }

    /// What each policy should take at the largest size, from this run's own rows: the
    /// transfer alone (T, and the CPU time it used), the page-in as the page-in worker meets it
    /// (P, and its CPU time: `page_in_elsewhere`, the pages freed on another CPU; the page-in
    /// on the evicting thread, `page_in_alone`, flatters it by the kernel's per-CPU free
    /// lists), one 4 KiB WRITE (r, a round trip and a packet) and the cores the process may
    /// use.
    /// - the wave: max(T, r + P, (CPU of T + CPU of P) / cores): the transfer rides behind the
    ///   page-in, unless the page-in is slower, or both together need more CPU than there is;
    ///   on fewer than 3 cores also R + P, where R is the responder's device thread's CPU in
    ///   the transfer alone: the sender's thread holds a core for most of the transfer, so the
    ///   receive thread and the page-in worker take turns on the other (what to expect, not a
    ///   bound: the scheduler can lend them the sender's idle moments);
    /// - the paper's NTO (no window): r + P + T: the page-in, the ERR, then the whole transfer;
    /// - touching first: touch alone + the transfer into present pages.
    fn model(&self) -> Value {
        let (Some(t), Some(alone)) = (self.at_max("transfer_only"), self.at_max("page_in_alone"))
        else {
            return Value::Null;
        };
        let p = self.at_max("page_in_elsewhere").unwrap_or(alone);
        let r = self.fault["transfer_only"]["median_us"]
            .as_f64()
            .unwrap_or(f64::NAN);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let cpu = (t.cpu + p.cpu) / cores;
        let receive = t.threads.map(|b| b.get(Role::ResponderDevice));
        let shared = match receive {
            Some(rx) if cores < 3.0 => rx + p.cpu,
            _ => f64::NAN,
        };
        let (wave, bound) = [
            (t.median, "transfer"),
            (r + p.median, "page-in"),
            (cpu, "cpu"),
            (shared, "shared-core"),
        ]
        .into_iter()
        .fold((f64::MIN, ""), |a, b| if b.0 > a.0 { b } else { a });
        // What the wave's own threads used (PIA, fault timeout 100 µs): the receive thread
        // and the page-in worker, which share a core on two.
        let by = |c: Option<Cell>| c.and_then(|c| c.threads).map(|b| b.json());
        let in_wave = self.timeout_at_max(PageInPolicy::Pia, Some(100));
        let shared_in_wave = in_wave
            .and_then(|c| c.threads)
            .map(|b| b.get(Role::ResponderDevice) + b.get(Role::PageIn));
        let touch = self
            .at_max("touch_alone")
            .zip(self.at_max("touch_present"))
            .map(|(a, b)| a.median + b.median);
        json!({
            "cores": cores,
            "round_trip_us": r,
            "transfer_us": t.median,
            "transfer_cpu_us": t.cpu,
            "page_in_us": alone.median,
            "page_in_cpu_us": alone.cpu,
            "page_in_elsewhere_us": p.median,
            "page_in_elsewhere_cpu_us": p.cpu,
            "transfer_receive_cpu_us": receive,
            "shared_core_us": (!shared.is_nan()).then_some(shared),
            "wave_us": wave,
            "wave_bound": bound,
            "transfer_cpu_us_by_thread": by(Some(t)),
            "pia_to100_cpu_us_by_thread": by(in_wave),
            "pia_to100_receive_and_page_in_cpu_us": shared_in_wave,
            "paper_nto_us": r + p.median + t.median,
            "touch_not_present_us": touch,
        })
    }

    /// `--plot`: the paper's comparison from the latency table, median µs against bytes: the
    /// three page-in policies against the transfer alone and touching or pinning first.
    fn plot(&self, path: &std::path::Path) -> Result<()> {
        use crate::plot::{lines, Chart, Series};
        const SHOWN: [&str; 6] = [
            "transfer_only",
            "touch_not_present",
            "pin_not_present",
            "pia",
            "pi4",
            "pio",
        ];
        let series: Vec<Series> = SHOWN
            .iter()
            .filter_map(|v| self.table.iter().find(|(n, _)| n == v))
            .map(|(name, cells)| {
                let pts = self.sizes.iter().zip(cells);
                Series::new(
                    name.clone(),
                    pts.map(|(&s, c)| (s as f64, c.median)).collect(),
                )
            })
            .collect();
        let sizes: Vec<String> = self.sizes.iter().map(|&s| human(s)).collect();
        let chart = Chart {
            title: "PART: a one-sided WRITE into memory that is not resident".into(),
            x_label: "transfer (bytes)".into(),
            y_label: "median time (µs)".into(),
            log: true,
            x_bytes: true,
            marks: Vec::new(),
            caption: format!(
                "remora bench part --sizes {} --iters {} (udp rc, 127.0.0.1, MTU 4096)",
                sizes.join(","),
                self.iters
            ),
        };
        lines(path, &chart, &series)
    }

    fn json(&self) -> Value {
        let mut o = self.headline();
        let row = |cells: &[Cell]| -> Vec<Value> {
            self.sizes
                .iter()
                .zip(cells)
                .map(|(s, c)| {
                    let mut v = c.json();
                    v["bytes"] = json!(s);
                    v
                })
                .collect()
        };
        o["sizes"] = json!(self.sizes);
        o["latency"] = self
            .table
            .iter()
            .map(|(n, c)| json!({"variant": n, "cells": row(c)}))
            .collect();
        o["timeout_sweep"] = self
            .timeouts
            .iter()
            .map(|(p, t, c)| json!({"policy": p.to_string(), "timeout_us": t, "cells": row(c)}))
            .collect();
        o["frequency_sweep"] = self
            .freq
            .iter()
            .map(|f| {
                json!({"policy": f.policy.to_string(), "fraction": f.fraction,
                "cells": row(&f.cells)})
            })
            .collect();
        o["one_fault_4k"] = self.fault.clone();
        o["head_of_line"] = json!(self.hols);
        o["pin_skipped"] = json!(self.pin_skipped);
        o["window_packets"] = json!(self.window);
        o["iters"] = json!(self.iters);
        o["min_iters"] = json!(self.min_iters);
        o["cell_seconds"] = json!(self.cell_seconds);
        o["transport"] = json!("udp rc, 127.0.0.1, MTU 4096, 4 KiB pages (THP off)");
        o
    }

    fn print(&self) {
        let line = "-".repeat(24 + 18 * self.sizes.len());
        let head = |title: &str| {
            println!("{line}");
            println!(" {title}");
            print!(" {:<22}", "");
            for s in &self.sizes {
                print!(" {:>17}", human(*s));
            }
            println!();
        };
        let cells = |name: &str, cells: &[Cell]| {
            print!(" {name:<22}");
            for c in cells {
                print!(" {:>17}", format!("{:.1} [{:.1}]", c.median, c.min));
            }
            println!();
        };
        println!(
            " PART: one WRITE post -> completion, udp RC on 127.0.0.1 (MTU 4096, window {} \
             packets, 4 KiB pages); median [min] µs over up to {} transfers per cell (at least \
             {}, stopping after {:.1} s)",
            self.window, self.iters, self.min_iters, self.cell_seconds
        );
        head("transfer latency (evicted = every page of the destination faults)");
        for (n, c) in &self.table {
            cells(n, c);
        }
        if let Some(why) = &self.pin_skipped {
            println!(" (pin rows skipped: {why})");
        }
        head("fault timeout at the requester (every page evicted)");
        for (p, t, c) in &self.timeouts {
            let to = t.map_or("NTO".to_string(), |t| format!("TO {t} µs"));
            cells(&format!("{p} {to}"), c);
        }
        head("fraction f of the destination's pages evicted");
        for f in &self.freq {
            cells(&format!("{} f={}%", f.policy, f.fraction * 100.0), &f.cells);
        }
        head("faults per transfer in that sweep (responder)");
        for f in &self.freq {
            print!(" {:<22}", format!("{} f={}%", f.policy, f.fraction * 100.0));
            for c in &f.cells {
                print!(" {:>17.1}", c.per.map_or(f64::NAN, |p| p.faults));
            }
            println!();
        }
        println!("{line}");
        self.print_tail();
    }

    fn print_tail(&self) {
        let f = &self.fault;
        let us = |v: &Value| v["median_us"].as_f64().unwrap_or(f64::NAN);
        println!(
            " one 4 KiB WRITE into one evicted page (PIA, NTO), medians: total {:.1} µs = \
             transfer {:.1} + page-in {:.1} + NAK/ERR/resend {:.1}",
            us(&f["total"]),
            us(&f["transfer_only"]),
            us(&f["page_in"]),
            f["remainder_us"].as_f64().unwrap_or(f64::NAN)
        );
        println!(" per transfer: {}", f["total"]["per_transfer"]);
        for h in &self.hols {
            println!(
                " head-of-line, responder {}: 64 KiB probe median {:.1} µs p99 {:.1} (alone \
                 {:.1} / {:.1}, n={}) beside 4 MiB WRITEs into {} at {:.1} MB/s ({} transfers; \
                 alone {:.1} MB/s)",
                h["mode"].as_str().unwrap_or("?"),
                us(&h["probe_beside_stream"]),
                h["probe_beside_stream"]["p99_us"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                us(&h["probe_alone"]),
                h["probe_alone"]["p99_us"].as_f64().unwrap_or(f64::NAN),
                h["probe_beside_stream"]["n"],
                h["stream_backing"].as_str().unwrap_or("?"),
                h["stream_mb_per_s"].as_f64().unwrap_or(0.0),
                h["stream_transfers"],
                h["stream_alone_mb_per_s"].as_f64().unwrap_or(0.0),
            );
        }
        let hl = self.headline();
        println!(
            " at {}: PIO/PIA {:.2}x, PIA/touch_not_present {:.2}x (PIA with TO 100 µs: {:.2}x), \
             PIA NTO/TO 100 µs {:.2}x",
            human(self.sizes.last().copied().unwrap_or(0)),
            hl["pio_over_pia"].as_f64().unwrap_or(f64::NAN),
            hl["pia_over_touch_not_present"]
                .as_f64()
                .unwrap_or(f64::NAN),
            hl["pia_to100_over_touch_not_present"]
                .as_f64()
                .unwrap_or(f64::NAN),
            hl["pia_nto_over_to100"].as_f64().unwrap_or(f64::NAN),
        );
        let md = &hl["model"];
        let f = |k: &str| md[k].as_f64().unwrap_or(f64::NAN);
        println!(
            " model at {} ({} cores): wave max(transfer {:.0}, round trip {:.0} + page-in elsewhere {:.0}, cpu ({:.0} + {:.0}) / cores) = {:.0} µs, {}-bound (measured PIA TO 100 µs {:.0}, NTO {:.0}); paper's NTO {:.0} µs; touch first {:.0} µs (measured {:.0})",
            human(self.sizes.last().copied().unwrap_or(0)),
            f("cores"),
            f("transfer_us"),
            f("round_trip_us"),
            f("page_in_elsewhere_us"),
            f("transfer_cpu_us"),
            f("page_in_elsewhere_cpu_us"),
            f("wave_us"),
            md["wave_bound"].as_str().unwrap_or("?"),
            hl["pia_to100_us"].as_f64().unwrap_or(f64::NAN),
            hl["pia_nto_us"].as_f64().unwrap_or(f64::NAN),
            f("paper_nto_us"),
            f("touch_not_present_us"),
            hl["touch_not_present_us"].as_f64().unwrap_or(f64::NAN),
        );
        if !f("shared_core_us").is_nan() {
            println!(
                " on {} cores the receive thread ({:.0} µs of CPU in the transfer alone) and the \
                 page-in worker ({:.0}) share the core the sender leaves: {:.0} µs; in PIA TO \
                 100 µs they used {:.0} µs",
                f("cores"),
                f("transfer_receive_cpu_us"),
                f("page_in_elsewhere_cpu_us"),
                f("shared_core_us"),
                f("pia_to100_receive_and_page_in_cpu_us"),
            );
        }
        for (what, k) in [
            ("transfer only", "transfer_cpu_us_by_thread"),
            ("PIA TO 100 µs", "pia_to100_cpu_us_by_thread"),
        ] {
            if let Some(o) = md[k].as_object() {
                let parts: Vec<String> = o
                    .iter()
                    .map(|(r, v)| format!("{r} {:.0}", v.as_f64().unwrap_or(f64::NAN)))
                    .collect();
                println!(
                    " CPU µs by thread at {}, {what}: {}",
                    human(self.sizes.last().copied().unwrap_or(0)),
                    parts.join(", ")
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn sizes_are_named_in_binary_units() {
        assert_eq!(human(4096), "4K");
        assert_eq!(human(4 << 20), "4M");
        assert_eq!(human(1000), "1000");
    }
}
