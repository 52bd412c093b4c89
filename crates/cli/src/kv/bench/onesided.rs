//! `remora bench kv-onesided`: GETs by one-sided READs of `remora kv serve --one-sided`'s arena
//! against memcached's single GETs, in one run on one machine, with the same client threads,
//! keys and value sizes.
//!
//! Both servers (`-t 2` by default) are populated with `--items` values of `--value-size`
//! bytes (keys `k%08d`, each value derived from its index). Then, for `--seconds` each:
//! 1. remora: every client thread connects to the grant listener over `--transport` (shm or
//!    udp) and looks random keys up `--batch` at a time with [`Reader::get_many`] (one key:
//!    [`Reader::get`]); a `Got::Fallback` is completed by a text `get` on the server's port, as
//!    a client falls back to the protocol;
//! 2. memcached: every client thread sends `get KEY` on its own connection and reads the reply;
//! 3. with `--batch` above 1, memcached again with the same batches as one `get K1 K2 ...`.
//!
//! Every value is checked against what was stored; a miss counts as a wrong value (nothing is
//! deleted or evicted). Server CPU per GET is the server process's user + system time
//! (`/proc/PID/stat`) over the phase divided by its GETs.
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use remora_fabric::Transport;
use remora_kv::arena::remote::{Got, Reader};
use remora_kv::onesided::FabricFetch;
use serde_json::json;

use super::client::{request, Conn, Reply};
use super::servers::{free_port, memory_mb, populate, server_args, Servers};
use super::{key, value};

/// Arguments of `remora bench kv-onesided`.
#[derive(clap::Args)]
pub struct OnesidedArgs {
    /// How remora's readers reach the arena: `shm` (same host) or `udp` (RoCEv2).
    #[arg(long, value_name = "shm|udp", default_value = "shm", value_parser = parse_transport)]
    transport: Transport,
    /// Client threads (each its own queue pair, or its own memcached connection).
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: u32,
    /// Items stored in each server.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    items: u64,
    /// Bytes of each value (1 to 64 KiB).
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    value_size: usize,
    /// Seconds of GETs per server.
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    seconds: f64,
    /// Keys per lookup: remora walks them together (`Reader::get_many`, one round trip per
    /// step for the whole batch), memcached gets them as one multi-key `get` in a third phase.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    batch: u32,
    /// Worker threads (`-t`) of both servers.
    #[arg(long, value_name = "N", default_value_t = 2)]
    server_threads: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_transport(s: &str) -> Result<Transport, String> {
    match s {
        "shm" => Ok(Transport::Shm),
        "udp" => Ok(Transport::Udp),
        _ => Err(format!("{s}: shm or udp")),
    }
}

/// What one side's phase counted.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    gets: u64,
    wrong: u64,
    fallbacks: u64,
    retries: u64,
    rounds: u64,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.gets += o.gets;
        self.wrong += o.wrong;
        self.fallbacks += o.fallbacks;
        self.retries += o.retries;
        self.rounds += o.rounds;
    }
}

/// User + system CPU seconds of process `pid` so far.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').context("a /proc stat line")? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 after the name and state.
    // In USER_HZ, which Linux fixes at 100 for what it reports to user space.
    Ok((ticks(11) + ticks(12)) / 100.0)
}

/// A uniform key index from a per-thread generator.
fn next(x: &mut u64, items: u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x % items
}

/// One remora client thread: one-sided GETs `--batch` keys at a time, text GETs for what falls
/// back.
fn remora_client(a: &OnesidedArgs, grant: &str, text: &str, seed: u64) -> Result<Tally> {
    let addr = grant.parse().context("grant address")?;
    let mut f = FabricFetch::connect(addr, a.transport).context("connecting to the grant")?;
    let mut r = Reader::open(&mut f).context("opening the granted arena")?;
    let mut c = Conn::open(text, Duration::from_secs(10))?;
    let now = r.now();
    let (mut t, mut want, mut line, mut x) = (Tally::default(), Vec::new(), Vec::new(), seed);
    let end = Instant::now() + Duration::from_secs_f64(a.seconds);
    while Instant::now() < end {
        let idx: Vec<u64> = (0..a.batch).map(|_| next(&mut x, a.items)).collect();
        let keys: Vec<String> = idx.iter().map(|&i| key(i)).collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let got = if a.batch == 1 {
            vec![r.get(&mut f, refs[0], now)?]
        } else {
            r.get_many(&mut f, &refs, now)?
        };
        for ((&i, k), got) in idx.iter().zip(&keys).zip(got) {
            value(i, a.value_size, &mut want);
            match got {
                Got::Hit(it) => t.wrong += u64::from(it.value != want),
                Got::Miss => t.wrong += 1,
                Got::Fallback(_) => {
                    t.fallbacks += 1;
                    t.wrong += u64::from(!matches!(
                        request(&mut c, k, false, &want, &mut line),
                        Reply::Ok
                    ));
                }
            }
            t.gets += 1;
        }
    }
    t.retries = r.retries;
    t.rounds = r.rounds;
    Ok(t)
}

/// One memcached client thread: `get` on its own connection, one at a time.
fn memcached_client(a: &OnesidedArgs, text: &str, seed: u64) -> Result<Tally> {
    let mut c = Conn::open(text, Duration::from_secs(10))?;
    let (mut t, mut want, mut line, mut x) = (Tally::default(), Vec::new(), Vec::new(), seed);
    let end = Instant::now() + Duration::from_secs_f64(a.seconds);
    while Instant::now() < end {
        let i = next(&mut x, a.items);
        value(i, a.value_size, &mut want);
        match request(&mut c, &key(i), false, &want, &mut line) {
            Reply::Ok => {}
            Reply::Lost => bail!("memcached closed the connection"),
            _ => t.wrong += 1,
        }
        t.gets += 1;
    }
    Ok(t)
}

/// One memcached client thread: `get K1 K2 ...` of `--batch` keys on its own connection.
fn memcached_multiget(a: &OnesidedArgs, text: &str, seed: u64) -> Result<Tally> {
    use std::io::{Read, Write};
    let mut c = Conn::open(text, Duration::from_secs(10))?;
    let (mut t, mut want, mut line, mut x) = (Tally::default(), Vec::new(), Vec::new(), seed);
    let mut req = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(a.seconds);
    while Instant::now() < end {
        let idx: Vec<u64> = (0..a.batch).map(|_| next(&mut x, a.items)).collect();
        req.clear();
        req.extend_from_slice(b"get");
        for &i in &idx {
            req.push(b' ');
            req.extend_from_slice(key(i).as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        c.w.write_all(&req)
            .context("memcached closed the connection")?;
        // Hits come back in request order; a key asked twice is answered twice.
        for &i in &idx {
            c.line(&mut line)?;
            let l = String::from_utf8_lossy(&line).into_owned();
            let mut f = l.split(' ');
            let k = key(i);
            let n = match (f.next(), f.next(), f.nth(1)) {
                (Some("VALUE"), Some(kk), Some(n)) if kk == k => n.parse::<usize>().ok(),
                _ => None,
            };
            let Some(n) = n else {
                bail!("memcached: `{l}` for {k}");
            };
            let mut data = vec![0; n + 2];
            c.r.read_exact(&mut data)?;
            value(i, a.value_size, &mut want);
            t.wrong += u64::from(data[..n] != want[..]);
            t.gets += 1;
        }
        c.line(&mut line)?;
        ensure!(
            line == b"END",
            "memcached: a multi-get reply without its END"
        );
    }
    Ok(t)
}

/// Runs `client` on every thread for the phase; the server's CPU seconds over it.
fn phase(
    a: &OnesidedArgs,
    pid: u32,
    client: impl Fn(u64) -> Result<Tally> + Sync,
) -> Result<(Tally, f64, f64)> {
    let (cpu0, t0) = (cpu_seconds(pid)?, Instant::now());
    let tallies: Vec<Result<Tally>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..u64::from(a.threads))
            .map(|k| {
                let client = &client;
                s.spawn(move || client(0x2545_f491_4f6c_dd1d ^ (k + 1)))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| bail!("a client thread panicked"))
            })
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid)? - cpu0;
    let mut total = Tally::default();
    for t in tallies {
        total.add(t?);
    }
    Ok((total, secs, cpu))
}

/// `remora bench kv-onesided`.
pub fn run(a: OnesidedArgs) -> Result<()> {
    ensure!(
        (1..=64 << 10).contains(&a.value_size),
        "--value-size {}: 1 to 65536 bytes",
        a.value_size
    );
    ensure!(
        a.items > 0 && a.seconds > 0.0,
        "--items and --seconds must be positive"
    );
    let memcached = which("memcached").context(
        "memcached is not installed (apt-get install memcached): the bench runs it beside remora",
    )?;
    let mb = memory_mb(a.items, a.value_size);
    let (rport, mport, gport) = (free_port()?, free_port()?, free_port()?);
    let (rtext, mtext, grant) = (
        format!("127.0.0.1:{rport}"),
        format!("127.0.0.1:{mport}"),
        format!("127.0.0.1:{gport}"),
    );
    let mut servers = Servers::new(Instant::now());
    let mut rargs = server_args(rport, mb, a.server_threads);
    rargs.extend(["--one-sided".to_string(), grant.clone()]);
    servers.spawn("remora", &rargs)?;
    servers.spawn_program(
        "memcached",
        &memcached,
        &server_args(mport, mb, a.server_threads),
    )?;
    servers.wait_listening("remora", &rtext)?;
    servers.wait_listening("memcached", &mtext)?;
    populate(&rtext, a.items, a.value_size, 4)?;
    populate(&mtext, a.items, a.value_size, 4)?;

    let (r, rsecs, rcpu) = phase(&a, servers.pid("remora")?, |seed| {
        remora_client(&a, &grant, &rtext, seed)
    })?;
    let (m, msecs, mcpu) = phase(&a, servers.pid("memcached")?, |seed| {
        memcached_client(&a, &mtext, seed)
    })?;
    let multi = if a.batch > 1 {
        Some(phase(&a, servers.pid("memcached")?, |seed| {
            memcached_multiget(&a, &mtext, seed)
        })?)
    } else {
        None
    };
    let per_s = |t: Tally, s: f64| t.gets as f64 / s;
    let us_per = |cpu: f64, t: Tally| cpu * 1e6 / t.gets.max(1) as f64;
    let transport = match a.transport {
        Transport::Shm => "shm",
        _ => "udp",
    };
    let report = json!({
        "transport": transport,
        "threads": a.threads,
        "items": a.items,
        "value_size": a.value_size,
        "seconds": a.seconds,
        "gets_per_s": per_s(r, rsecs),
        "server_cpu_us_per_get": us_per(rcpu, r),
        "memcached_gets_per_s": per_s(m, msecs),
        "memcached_cpu_us_per_get": us_per(mcpu, m),
        "batch": a.batch,
        "memcached_multiget_gets_per_s": multi.map(|(t, s, _)| per_s(t, s)),
        "memcached_multiget_cpu_us_per_get": multi.map(|(t, _, c)| us_per(c, t)),
        "rounds_per_get": r.rounds as f64 / r.gets.max(1) as f64,
        "torn_retries": r.retries,
        "fallbacks": r.fallbacks,
        "wrong_values": r.wrong + m.wrong + multi.map_or(0, |(t, _, _)| t.wrong),
    });
    let wrong = r.wrong + m.wrong + multi.map_or(0, |(t, _, _)| t.wrong);
    if a.json {
        println!("{report}");
    } else {
        println!(
            "one-sided GETs over {transport}, {} client threads, {} items of {} bytes, {} s each, {} key(s) per lookup",
            a.threads, a.items, a.value_size, a.seconds, a.batch
        );
        println!(
            "remora one-sided: {:>10.0} GETs/s, {:.3} us server CPU per GET ({} torn retries, {} fallbacks, {:.2} rounds per GET)",
            per_s(r, rsecs),
            us_per(rcpu, r),
            r.retries,
            r.fallbacks,
            r.rounds as f64 / r.gets.max(1) as f64
        );
        println!(
            "memcached get:    {:>10.0} GETs/s, {:.3} us server CPU per GET",
            per_s(m, msecs),
            us_per(mcpu, m)
        );
        if let Some((t, s, c)) = multi {
            println!(
                "memcached multi-get:{:>9.0} GETs/s, {:.3} us server CPU per GET ({} keys per get)",
                per_s(t, s),
                us_per(c, t),
                a.batch
            );
        }
        println!(
            "ratio to single gets: {:.2}x the GETs/s, {:.3}x the server CPU per GET; wrong values {wrong}",
            per_s(r, rsecs) / per_s(m, msecs).max(1e-9),
            us_per(rcpu, r) / us_per(mcpu, m).max(1e-9),
        );
        if let Some((t, s, c)) = multi {
            println!(
                "ratio to multi-gets:  {:.2}x the GETs/s, {:.3}x the server CPU per GET",
                per_s(r, rsecs) / per_s(t, s).max(1e-9),
                us_per(rcpu, r) / us_per(c, t).max(1e-9),
            );
        }
    }
    ensure!(
        wrong == 0,
        "{wrong} wrong values: a GET returned what was never stored"
    );
    Ok(())
}

/// The path of `prog` on `PATH`.
fn which(prog: &str) -> Option<String> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| format!("{d}/{prog}"))
        .find(|p| std::path::Path::new(p).is_file())
}
