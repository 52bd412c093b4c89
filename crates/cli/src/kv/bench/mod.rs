//! `remora bench migrate`: post-copy live migration of a populated cache against the
//! stop-and-copy baseline (dump every item, reload it elsewhere), in one run on one machine,
//! as a client sees it.
//!
//! Both phases start their own `remora kv serve` processes (this program, on free ports of
//! 127.0.0.1), populate a source with `--items` values of `--value-size` bytes (keys
//! `k%08d`, each value derived from its index so that every read can be checked), and run
//! the same client against it: one connection, one request at a time, 90% `get` and 10%
//! `set` of the same value on random keys, every completion instant recorded.
//!
//! 1. **Post-copy**: a target started with `--migrate-from SOURCE`, the migration armed and
//!    followed with [`kv_client::migrate`]; the client follows the source's
//!    `SERVER_ERROR migrated to HOST:PORT` to the target and retries there.
//! 2. **Stop-and-copy**: at t0 the client is held (no request in flight, none started: the
//!    copy must see no writes), every item is read from the source (multigets of 100 keys)
//!    and written to a plain target (pipelined `set ... noreply`), then the client is sent to
//!    the target.
//!
//! Downtime is the client's longest gap between two successful requests from 200 ms before
//! the migration (t0) until the copy is complete; the source's own measure of the post-copy
//! switch-over (freeze to the target serving) is reported beside it. The servers' stderr is
//! forwarded, time-stamped, to ours: their `[migrate]` lines say where the time goes.
//!
//! This file holds the arguments, the entry point, the two phases and the report (table or
//! JSON); `servers` starts, populates and copies the servers, `client` runs the client and
//! accounts for what it saw.
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use remora_kv::migrate::client::{self as kv_client, Printer, Progress};
use serde_json::json;

mod client;
pub mod onesided;
mod servers;

use client::{log_client, longest_gap, start_client, stop_client, Seen};
use servers::{copy, free_port, memory_mb, populate, server_args, settle_hash, Servers};

/// Largest value the bench accepts (memcached's default item size limit).
const MAX_VALUE: usize = 1 << 20;
/// How far before t0 the downtime window opens.
const BEFORE: Duration = Duration::from_millis(200);
/// How long the client runs before t0 and after the copy.
const SETTLE: Duration = Duration::from_millis(500);

/// Arguments of `remora bench migrate`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Items stored in the source before it moves.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    items: u64,
    /// Bytes of each value (1 to 1 MiB).
    #[arg(long, value_name = "BYTES", default_value_t = 1000)]
    value_size: usize,
    /// Worker threads (`-t`) of every server.
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: u32,
    /// Connections that populate the sources and that copy in the stop-and-copy baseline.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    conns: u32,
    /// One more `remora kv serve` flag for the post-copy target (repeatable), e.g.
    /// `--target-flag=--migrate-push-rate=200m` or `--target-flag=-o
    /// --target-flag=no_lru_maintainer`.
    #[arg(long, value_name = "FLAG", allow_hyphen_values = true)]
    target_flag: Vec<String>,
    /// Before t0, wait until the source's hash table has finished a growth under way (a
    /// source populated just before holds one: 1M items pass 1.5 per bucket of 2^19).
    #[arg(long)]
    wait_hash: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn key(i: u64) -> String {
    format!("k{i:08}")
}

/// The value of item `i`: its index, then letters from a generator seeded by it.
fn value(i: u64, size: usize, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(size);
    out.extend(format!("{i:08}:").bytes().take(size));
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = (size - out.len()).min(8);
        out.extend(x.to_le_bytes()[..n].iter().map(|b| b'a' + b % 26));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Phase {
    downtime: Duration,
    total: Duration,
    seen: Seen,
}

/// What post-copy reports beside the client's figures.
struct PostCopy {
    switchover_ms: Option<f64>,
    faults: u64,
    /// The source's hash table was growing when the bench settled before t0.
    hash_growing: bool,
}

/// Phase 1: post-copy live migration. Returns the phase and what post-copy reports beside it.
fn post_copy(a: &BenchArgs, mb: u64, t_start: Instant) -> Result<(Phase, PostCopy)> {
    let mut servers = Servers::new(t_start);
    let (sp, tp) = (free_port()?, free_port()?);
    let (src, tgt) = (format!("127.0.0.1:{sp}"), format!("127.0.0.1:{tp}"));
    let mut args = server_args(sp, mb, a.threads);
    args.push("-A".into());
    servers.spawn("post-copy source", &args)?;
    servers.wait_listening("post-copy source", &src)?;
    eprintln!(
        "post-copy: populating the source {src} (-m {mb}) with {} items of {} bytes",
        a.items, a.value_size
    );
    let took = populate(&src, a.items, a.value_size, a.conns)?;
    eprintln!("post-copy: populated in {:.2} s", took.as_secs_f64());
    let growing = settle_hash("post-copy", &src, a.wait_hash)?;
    let (shared, client) = start_client(&src, a, 0x5EED_0001)?;
    std::thread::sleep(SETTLE);
    let mut args = server_args(tp, mb, a.threads);
    let secret = remora_kv::migrate::secret::generate()?;
    args.push("--migrate-from".into());
    args.push(src.clone());
    args.push("--migrate-secret".into());
    args.push(secret.clone());
    args.extend(a.target_flag.iter().cloned());
    servers.spawn("post-copy target", &args)?;
    let mut printer = Printer::new();
    let mut report = |p: &Progress| {
        if let Some(l) = printer.line(p) {
            eprintln!("post-copy: {l}");
        }
        std::ops::ControlFlow::Continue(())
    };
    let t0 = Instant::now();
    let summary = kv_client::migrate(
        &src,
        &tgt,
        Some(&secret),
        Duration::from_secs(60),
        &mut report,
    );
    let t1 = Instant::now();
    let summary = match summary {
        Ok(s) => s,
        Err(e) => {
            let _ = stop_client(&shared, client);
            return Err(e).with_context(|| format!("post-copy migration of {src} to {tgt}"));
        }
    };
    std::thread::sleep(SETTLE);
    let seen = stop_client(&shared, client)?;
    let faults = kv_client::stats(&tgt)
        .ok()
        .and_then(|m| m.get("migrate_faults").and_then(|v| v.parse::<u64>().ok()))
        .unwrap_or(0);
    let gap = longest_gap(&seen.done, t0 - BEFORE, t1);
    log_client("post-copy", &seen, (t0 - BEFORE, t1), t0);
    eprintln!(
        "post-copy: the copy was complete {:.1} ms after t0 (migrate called); switch-over \
         (source-measured) {}",
        ms(t1 - t0),
        summary
            .downtime_ms
            .map_or("unknown".into(), |d| format!("{d:.2} ms"))
    );
    let phase = Phase {
        downtime: gap.map_or(Duration::ZERO, |g| g.0),
        total: t1 - t0,
        seen,
    };
    Ok((
        phase,
        PostCopy {
            switchover_ms: summary.downtime_ms,
            faults,
            hash_growing: growing,
        },
    ))
}

/// Phase 2: stop-and-copy (dump and reload).
fn stop_and_copy(a: &BenchArgs, mb: u64, t_start: Instant) -> Result<Phase> {
    let mut servers = Servers::new(t_start);
    let (sp, tp) = (free_port()?, free_port()?);
    let (src, tgt) = (format!("127.0.0.1:{sp}"), format!("127.0.0.1:{tp}"));
    servers.spawn("stop-copy source", &server_args(sp, mb, a.threads))?;
    servers.spawn("stop-copy target", &server_args(tp, mb, a.threads))?;
    servers.wait_listening("stop-copy source", &src)?;
    servers.wait_listening("stop-copy target", &tgt)?;
    eprintln!(
        "stop-and-copy: populating the source {src} (-m {mb}) with {} items of {} bytes",
        a.items, a.value_size
    );
    let took = populate(&src, a.items, a.value_size, a.conns)?;
    eprintln!("stop-and-copy: populated in {:.2} s", took.as_secs_f64());
    settle_hash("stop-and-copy", &src, a.wait_hash)?;
    let (shared, client) = start_client(&src, a, 0x5EED_0002)?;
    std::thread::sleep(SETTLE);
    let t0 = Instant::now();
    shared.hold();
    eprintln!(
        "stop-and-copy: client held after {:.2} ms; dumping {src} into {tgt}",
        ms(t0.elapsed())
    );
    let copied = match copy(&src, &tgt, a.items, a.conns) {
        Ok(c) => c,
        Err(e) => {
            shared.point(&src);
            let _ = stop_client(&shared, client);
            return Err(e).with_context(|| format!("copying {src} to {tgt}"));
        }
    };
    let t1 = Instant::now();
    shared.point(&tgt);
    eprintln!(
        "stop-and-copy: {copied} items dumped and reloaded in {:.1} ms; client sent to {tgt}",
        ms(t1 - t0)
    );
    std::thread::sleep(SETTLE);
    let seen = stop_client(&shared, client)?;
    let gap = longest_gap(&seen.done, t0 - BEFORE, t1);
    log_client("stop-and-copy", &seen, (t0 - BEFORE, t1), t0);
    ensure!(
        copied == a.items,
        "stop-and-copy: {copied} of the {} items were found at the source",
        a.items
    );
    Ok(Phase {
        downtime: gap.map_or(Duration::ZERO, |g| g.0),
        total: t1 - t0,
        seen,
    })
}

/// Runs `remora bench migrate`.
pub fn run(a: BenchArgs) -> Result<()> {
    ensure!(a.items > 0, "--items must be at least 1");
    ensure!(
        a.items <= 100_000_000,
        "--items {}: at most 100000000 (keys are k%08d)",
        a.items
    );
    ensure!(
        (1..=MAX_VALUE).contains(&a.value_size),
        "--value-size {}: expected 1 to {MAX_VALUE} bytes (1 MiB, memcached's item limit)",
        a.value_size
    );
    let mb = memory_mb(a.items, a.value_size);
    let t_start = Instant::now();
    eprintln!(
        "migrate bench: {} items of {} bytes ({} MiB of values), servers -m {mb} -t {}",
        a.items,
        a.value_size,
        (a.items * a.value_size as u64) >> 20,
        a.threads
    );
    let (post, pc) = post_copy(&a, mb, t_start)?;
    let (switchover, faults) = (pc.switchover_ms, pc.faults);
    let stop = stop_and_copy(&a, mb, t_start)?;
    let bytes = a.items * a.value_size as u64;
    let (pd, sd) = (ms(post.downtime), ms(stop.downtime));
    let ratio = if sd > 0.0 { pd / sd } else { f64::NAN };
    let failed = (post.seen.failed.len() + stop.seen.failed.len()) as u64;
    let failed_beyond = post.seen.failed_beyond_switch() + stop.seen.failed_beyond_switch();
    let requests = (post.seen.done.len() + stop.seen.done.len()) as u64;
    let round = |x: f64| (x * 1e3).round() / 1e3;
    if a.json {
        let v = json!({
            "items": a.items,
            "bytes": bytes,
            "value_size": a.value_size,
            "postcopy_downtime_ms": round(pd),
            "postcopy_switchover_ms": switchover.map(round),
            "postcopy_total_ms": round(ms(post.total)),
            "postcopy_faults": faults,
            "stopcopy_downtime_ms": round(sd),
            "stopcopy_total_ms": round(ms(stop.total)),
            "requests_failed": failed,
            "requests_failed_beyond_switchover": failed_beyond,
            "requests": requests,
            "downtime_ratio": if ratio.is_finite() { Some((ratio * 1e5).round() / 1e5) } else { None },
            "memory_mb": mb,
            "threads": a.threads,
            "postcopy_redirects": post.seen.redirects,
            "postcopy_hash_growing": pc.hash_growing,
            "wait_hash": a.wait_hash,
            "target_flags": a.target_flag,
        });
        println!("{v}");
    } else {
        let sw = switchover.map_or("unknown".into(), |d| format!("{d:.2}"));
        println!(
            "{} items of {} bytes ({} MiB), servers -m {mb} -t {}",
            a.items,
            a.value_size,
            bytes >> 20,
            a.threads
        );
        println!("| | post-copy | stop-and-copy | post / stop |");
        println!("| --- | ---: | ---: | ---: |");
        println!("| downtime seen by the client (ms) | {pd:.2} | {sd:.2} | {ratio:.4}x |");
        println!("| switch-over, source-measured (ms) | {sw} | – | |");
        println!(
            "| time to full copy (ms) | {:.1} | {:.1} | {:.2}x |",
            ms(post.total),
            ms(stop.total),
            ms(post.total) / ms(stop.total).max(1e-9)
        );
        println!("| page faults on the target | {faults} | – | |");
        println!(
            "| source hash table growing at t0 | {} | – | |",
            if pc.hash_growing { "yes" } else { "no" }
        );
        println!(
            "| requests ok / failed | {} / {} | {} / {} | |",
            post.seen.done.len(),
            post.seen.failed.len(),
            stop.seen.done.len(),
            stop.seen.failed.len()
        );
        println!(
            "| failed beyond the switch-over | {} | {} | |",
            post.seen.failed_beyond_switch(),
            stop.seen.failed_beyond_switch()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_differ_by_index_and_keep_their_size() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        value(1, 100, &mut a);
        value(2, 100, &mut b);
        assert_eq!(a.len(), 100);
        assert_ne!(a, b);
        value(1, 100, &mut b);
        assert_eq!(a, b);
        value(7, 3, &mut a);
        assert_eq!(a, b"000");
    }
}
