//! The client workload of the migration tests: gets, sets and multigets on one connection,
//! following `SERVER_ERROR migrated to HOST:PORT` to the target, with a model of the last
//! acknowledged write of every key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

/// What the client thread saw.
#[derive(Default)]
pub struct ClientRun {
    /// Requests answered by the source and by the target.
    pub on_source: u64,
    pub on_target: u64,
    /// Where the source sent it.
    pub sent_to: Option<String>,
    /// Requests the target refused as `not serving yet` (and were asked again).
    pub not_yet: u64,
    /// Values that differ from the last acknowledged write (misses included).
    pub mismatches: Vec<String>,
    /// Anything else unexpected (a reply of the wrong kind, a timeout, a lost server).
    pub errors: Vec<String>,
    /// Key -> version of the last acknowledged set.
    pub model: HashMap<String, u64>,
}

pub enum Op {
    Get(usize),
    Set(usize),
    Multi(usize),
}

/// Runs get / set / 10-key multiget against `addr` until `stop`, following the source's
/// redirect (and retrying the request there); `moved` is raised on the first request the
/// target answers.
pub fn client(
    addr: String,
    n: usize,
    base: usize,
    stop: Arc<AtomicBool>,
    moved: Arc<AtomicBool>,
) -> ClientRun {
    let mut run = ClientRun {
        model: initial_model(n),
        ..ClientRun::default()
    };
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut version = 0u64;
    let mut at = addr;
    let mut conn = Conn::open(&at, Duration::from_secs(30)).ok();
    'ops: while !stop.load(Ordering::Relaxed) {
        if run.errors.len() > 20 {
            break;
        }
        let op = match rng.below(10) {
            0..=4 => Op::Get(rng.below(n)),
            5..=7 => Op::Set(rng.below(n)),
            _ => Op::Multi(rng.below(n)),
        };
        if let Op::Set(_) = op {
            version += 1;
        }
        let mut tries = 0;
        let reply = loop {
            tries += 1;
            if tries > 500 {
                run.errors
                    .push(format!("no answer from {at} after 500 tries"));
                break 'ops;
            }
            let Some(c) = conn.as_mut() else {
                std::thread::sleep(Duration::from_millis(20));
                conn = Conn::open(&at, Duration::from_secs(30)).ok();
                continue;
            };
            let r = match &op {
                Op::Get(i) => c.get(&[&key(*i)]),
                Op::Set(i) => c.set(&key(*i), &value(&key(*i), version, base)),
                Op::Multi(i) => {
                    let ks: Vec<String> = (0..10).map(|j| key((i + j * 7) % n)).collect();
                    let refs: Vec<&str> = ks.iter().map(String::as_str).collect();
                    c.get(&refs)
                }
            };
            match r {
                Reply::Redirect(to) => {
                    if run.sent_to.is_some() {
                        run.errors
                            .push(format!("redirected again, by {at}, to {to}"));
                        break 'ops;
                    }
                    run.sent_to = Some(to.clone());
                    at = to;
                    conn = Conn::open(&at, Duration::from_secs(30)).ok();
                }
                // Closed after (or instead of) the redirect line: ask the same server again.
                Reply::Closed => conn = Conn::open(&at, Duration::from_secs(30)).ok(),
                // A target that refuses clients until its source let go (rather than holding
                // them) may do so a moment after the source sent them on: ask again.
                Reply::Line(l) if run.sent_to.is_some() && l.starts_with(NOT_YET) => {
                    run.not_yet += 1;
                    std::thread::sleep(Duration::from_millis(10));
                    conn = Conn::open(&at, Duration::from_secs(30)).ok();
                }
                r => break r,
            }
        };
        if run.sent_to.is_some() {
            run.on_target += 1;
            moved.store(true, Ordering::Relaxed);
        } else {
            run.on_source += 1;
        }
        let expect = |run: &mut ClientRun, k: &str, got: Option<&Vec<u8>>| {
            let want = value(k, run.model[k], base);
            match got {
                Some(v) if *v == want => {}
                Some(v) => run.mismatches.push(format!(
                    "{k} from {at}: expected version {}, got {:?}",
                    run.model[k],
                    String::from_utf8_lossy(&v[..v.len().min(40)])
                )),
                None => run.mismatches.push(format!(
                    "{k} from {at}: miss (expected version {})",
                    run.model[k]
                )),
            }
        };
        match (op, reply) {
            (Op::Set(i), Reply::Stored) => {
                run.model.insert(key(i), version);
            }
            (Op::Get(i), Reply::Values(hits)) => {
                let k = key(i);
                if hits.len() > 1 || hits.first().is_some_and(|(hk, _)| *hk != k) {
                    run.errors.push(format!("get {k}: hits {:?}", hits.len()));
                }
                expect(&mut run, &k, hits.first().map(|(_, v)| v));
            }
            (Op::Multi(i), Reply::Values(hits)) => {
                if hits.len() > 10 {
                    run.errors
                        .push(format!("multiget: {} hits for 10 keys", hits.len()));
                }
                let got: HashMap<String, Vec<u8>> = hits.into_iter().collect();
                for j in 0..10 {
                    let k = key((i + j * 7) % n);
                    expect(&mut run, &k, got.get(&k));
                }
            }
            (_, r) => run
                .errors
                .push(format!("unexpected reply from {at}: {r:?}")),
        }
    }
    run
}

/// Waits for `flag` up to `limit`.
pub fn wait_flag(flag: &AtomicBool, limit: Duration) -> bool {
    let t0 = Instant::now();
    while !flag.load(Ordering::Relaxed) {
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}
