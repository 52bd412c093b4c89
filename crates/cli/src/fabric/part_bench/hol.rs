//! The head-of-line test: one queue pair streams WRITEs into remote-backed memory (a lazy
//! region over a loopback page server) that faults, while another on the same responder
//! measures latency into resident memory.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use remora_fabric::{FaultMode, PageInPolicy, PartConfig};
use remora_mem::{Access, Buffer, Mode, Pd, Region, PAGE_SIZE};
use serde_json::{json, Value};

use super::measure::{Bench, Cell, Job};
use super::setup::{join, listen, resident_region};
use super::sweeps::Rng;

/// Size of the head-of-line test's streaming WRITEs (into remote-backed memory).
const HOL_STREAM: usize = 4 << 20;
/// Size of the head-of-line test's latency probes (into resident memory).
const HOL_PROBE: usize = 64 << 10;

/// Pseudo-random bytes, never zero (so the page server never answers with a zero page).
fn synthetic(n: usize) -> Vec<u8> {
    let mut r = Rng(0x2545_F491_4F6C_DD1D);
    (0..n).map(|_| ((r.unit() * 256.0) as u8) | 1).collect()
}

/// A page server on loopback and a lazy region over it whose faults PART's page-in worker can
/// resolve (handler-thread mode: `MADV_POPULATE_WRITE` waits for the handler's install).
fn lazy_region() -> Result<(remora_lazy::ServerHandle, remora_lazy::LazyRegion)> {
    use remora_lazy::{LazyRegion, MemorySource, Options, PageServer, TcpFetcher};
    let src = Arc::new(MemorySource::new(synthetic(HOL_STREAM)));
    let server = PageServer::bind("127.0.0.1:0".parse().expect("address"), src)?;
    let addr = server.local_addr()?;
    let handle = server.spawn()?;
    let fetcher = Arc::new(TcpFetcher::connect(addr, Duration::from_secs(5))?);
    let opts = Options {
        mode: remora_lazy::Mode::Thread { handlers: 1 },
        ..Options::default()
    };
    Ok((handle, LazyRegion::open(fetcher, opts)?))
}

/// Registers the streaming destination: the lazy region if PART's page-in can populate it,
/// anonymous memory otherwise (with the precise reason).
fn stream_region(
    pd: &Pd,
    lazy: &std::result::Result<remora_lazy::LazyRegion, String>,
) -> (Arc<Region>, String) {
    let anonymous = |why: String| -> (Arc<Region>, String) {
        let r = resident_region(pd, HOL_STREAM).expect("anonymous region");
        (r, format!("anonymous memory ({why})"))
    };
    let l = match lazy {
        Ok(l) => l,
        Err(why) => return anonymous(why.clone()),
    };
    // SAFETY: the lazy mapping outlives the region (both end in `hol`, the region first), is
    // writable, and is only written through the region while the test runs.
    let reg = unsafe { Buffer::external(l.as_ptr(), l.len()) }
        .and_then(|buf| pd.register(buf, Access::ALL, Mode::OnDemand));
    let r = match reg {
        Ok(r) => r,
        Err(e) => return anonymous(format!("registering the lazy mapping failed: {e}")),
    };
    // What PART's page-in worker will do: evict a page, then populate it.
    let probe = r
        .evict(0, PAGE_SIZE)
        .and_then(|()| r.page_in_range(0, PAGE_SIZE));
    match probe {
        Ok(_) => (r, "lazy region over a TCP page server on loopback".into()),
        Err(e) => anonymous(format!(
            "populating an evicted page of the lazy region failed: {e}"
        )),
    }
}

/// One fault mode of the head-of-line test.
pub(super) fn hol(b: &Bench, mode: FaultMode, secs: f64) -> Result<Value> {
    // The page server and the lazy mapping outlive the queue pairs and the region over it.
    let (_server, lazy) = match lazy_region() {
        Ok((h, l)) => (Some(h), Ok(l)),
        Err(e) => (None, Err(format!("opening the lazy region failed: {e:#}"))),
    };
    let pd = Arc::new(Pd::new());
    let (stream_dst, backing) = stream_region(&pd, &lazy);
    let probe_dst = resident_region(&pd, HOL_PROBE)?;
    let l = listen(pd.clone(), b.part(mode, PageInPolicy::Pia, None))?;
    let a = join(&l, b.requester(PartConfig::default()), HOL_STREAM)?;
    let p = join(&l, b.requester(PartConfig::default()), HOL_PROBE)?;
    let mut what = format!("hol {mode:?}: probe alone");
    let alone = b.measure(Job::new(
        what.clone(),
        None,
        || Ok(()),
        || p.write(&probe_dst, 0, HOL_PROBE),
    ))?;
    let stream_alone = b.measure(Job::new(
        format!("hol {mode:?}: stream alone"),
        None,
        || Ok(stream_dst.evict(0, HOL_STREAM)?),
        || a.write(&stream_dst, 0, HOL_STREAM),
    ))?;
    let stop = AtomicBool::new(false);
    let (busy, stream) = std::thread::scope(|s| {
        let streamer = s.spawn(|| -> Result<(usize, f64)> {
            let (mut n, mut t) = (0usize, 0f64);
            while !stop.load(Ordering::Acquire) {
                stream_dst.evict(0, HOL_STREAM)?;
                let t0 = Instant::now();
                a.write(&stream_dst, 0, HOL_STREAM)?;
                t += t0.elapsed().as_secs_f64();
                n += 1;
            }
            Ok((n, t))
        });
        let start = Instant::now();
        let mut us = Vec::new();
        let mut err = None;
        what = format!("hol {mode:?}: probe beside the faulting stream");
        b.say(&format!("{what} ({secs} s)"));
        while start.elapsed().as_secs_f64() < secs {
            let t = Instant::now();
            if let Err(e) = p.write(&probe_dst, 0, HOL_PROBE) {
                err = Some(e);
                break;
            }
            us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        stop.store(true, Ordering::Release);
        let stream = streamer.join().expect("stream thread");
        match err {
            Some(e) => Err(e),
            None => Ok((Cell::of(us), stream)),
        }
    })?;
    let (n, t) = stream.context("the faulting stream")?;
    if let Some(bar) = &b.bar {
        bar.inc(1);
    }
    let st = a.resp.stats().engine;
    let lazy_stats = match &lazy {
        Ok(l) => json!({"faults": l.stats().faults,
            "refetches": l.stats().refetches, "fetches": l.stats().fetches}),
        _ => Value::Null,
    };
    drop((a, p, l));
    drop((stream_dst, probe_dst, pd));
    Ok(json!({
        "mode": format!("{mode:?}").to_lowercase(),
        "stream_backing": backing,
        "probe_alone": alone.json(),
        "probe_beside_stream": busy.json(),
        "stream_alone": stream_alone.json(),
        "stream_alone_mb_per_s": HOL_STREAM as f64 / stream_alone.median,
        "stream_transfers": n,
        "stream_mb_per_s": if t > 0.0 { (n * HOL_STREAM) as f64 / t / 1e6 } else { 0.0 },
        "stream_ms_per_transfer": if n > 0 { t * 1e3 / n as f64 } else { 0.0 },
        "stream_responder": {"faults": st.faults, "page_ins": st.page_ins,
            "pages_in": st.pages_in, "fault_naks": st.fault_naks, "held_drops": st.held_drops,
            "errs_sent": st.errs_sent},
        "lazy": lazy_stats,
    }))
}
