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
//!    followed with [`client::migrate`]; the client follows the source's
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
use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use remora_kv::migrate::client::{self, Printer, Progress};
use serde_json::json;

/// Largest value the bench accepts (memcached's default item size limit).
const MAX_VALUE: usize = 1 << 20;
/// Keys per multiget of the stop-and-copy dump.
const DUMP_BATCH: u64 = 100;
/// How far before t0 the downtime window opens.
const BEFORE: Duration = Duration::from_millis(200);
/// How long the client runs before t0 and after the copy.
const SETTLE: Duration = Duration::from_millis(500);
/// How long one request may keep failing over (reconnects) before it counts as failed.
const RETRY_FOR: Duration = Duration::from_secs(10);

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

/// `-m` for `items` values of `size` bytes: memcached's ~48 bytes of header plus key and
/// suffix per item, up to 25% lost to slab classes, and room for the slab pages' rounding.
fn memory_mb(items: u64, size: usize) -> u64 {
    let bytes = items as f64 * (size as f64 + 100.0) * 1.3;
    (bytes / f64::from(1u32 << 20)).ceil() as u64 + 64
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

/// A free TCP port on 127.0.0.1 (free when asked: the server binds it right after).
fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding a port on 127.0.0.1")?;
    Ok(l.local_addr()?.port())
}

/// `-u root` when running as root (memcached refuses root without it).
fn user_flag() -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata("/proc/self") {
        Ok(m) if m.uid() == 0 => vec!["-u".into(), "root".into()],
        _ => Vec::new(),
    }
}

/// The `remora kv serve` processes of a phase; killed when dropped (on errors too).
struct Servers {
    t0: Instant,
    procs: Vec<(String, Child)>,
}

impl Servers {
    fn new(t0: Instant) -> Servers {
        Servers {
            t0,
            procs: Vec::new(),
        }
    }

    /// Starts `remora kv serve ARGS` named `name`; its stderr is forwarded to ours.
    fn spawn(&mut self, name: &str, args: &[String]) -> Result<()> {
        let exe = std::env::current_exe().context("finding this program to start servers")?;
        let mut child = Command::new(&exe)
            .args(["kv", "serve"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} kv serve {}", exe.display(), args.join(" ")))?;
        if let Some(err) = child.stderr.take() {
            let (t0, who) = (self.t0, name.to_string());
            let _ = std::thread::Builder::new()
                .name("bench-log".into())
                .spawn(move || {
                    for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
                        eprintln!("[{:8.3}s {who}] {line}", t0.elapsed().as_secs_f64());
                    }
                });
        }
        self.procs.push((name.to_string(), child));
        Ok(())
    }

    /// Waits until `name` accepts connections on `addr`.
    fn wait_listening(&mut self, name: &str, addr: &str) -> Result<()> {
        let a: SocketAddr = addr.parse().context("server address")?;
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if let Some((_, c)) = self.procs.iter_mut().find(|(n, _)| n == name) {
                if let Some(st) = c.try_wait()? {
                    bail!("the {name} server ({addr}) exited at start ({st}); its log is above");
                }
            }
            ensure!(
                Instant::now() < until,
                "the {name} server does not listen on {addr} after 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for (_, c) in &mut self.procs {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A text-protocol connection.
struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn open(addr: &str, timeout: Duration) -> std::io::Result<Conn> {
        let a: SocketAddr = addr
            .parse()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let s = TcpStream::connect_timeout(&a, Duration::from_secs(2))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        let w = s.try_clone()?;
        Ok(Conn {
            r: BufReader::with_capacity(256 << 10, s),
            w,
        })
    }

    /// One line without CR/LF; an error at the end of the stream.
    fn line(&mut self, buf: &mut Vec<u8>) -> std::io::Result<()> {
        buf.clear();
        if self.r.read_until(b'\n', buf)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        Ok(())
    }

    /// Sends `cmd` and reads one line.
    fn ask(&mut self, cmd: &str) -> Result<String> {
        self.w.write_all(cmd.as_bytes())?;
        let mut b = Vec::new();
        self.line(&mut b)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// `stats` as a map.
    fn stats(&mut self) -> Result<HashMap<String, String>> {
        self.w.write_all(b"stats\r\n")?;
        let mut m = HashMap::new();
        let mut b = Vec::new();
        loop {
            self.line(&mut b)?;
            let l = String::from_utf8_lossy(&b);
            if l == "END" {
                return Ok(m);
            }
            let mut t = l.splitn(3, ' ');
            if let (Some("STAT"), Some(k), Some(v)) = (t.next(), t.next(), t.next()) {
                m.insert(k.to_string(), v.to_string());
            } else {
                bail!("unexpected `stats` line: {l}");
            }
        }
    }
}

/// Stores items `range` in the server at `addr` with pipelined `set ... noreply`, then a
/// `mn` round trip that says they are all in.
fn populate_range(addr: &str, range: std::ops::Range<u64>, size: usize) -> Result<()> {
    let mut c = Conn::open(addr, Duration::from_secs(60))?;
    let mut w = BufWriter::with_capacity(256 << 10, c.w.try_clone()?);
    let mut v = Vec::new();
    for i in range {
        value(i, size, &mut v);
        write!(w, "set {} 0 0 {size} noreply\r\n", key(i))?;
        w.write_all(&v)?;
        w.write_all(b"\r\n")?;
    }
    w.flush()?;
    drop(w);
    let l = c.ask("mn\r\n")?;
    ensure!(l == "MN", "storing items: the server said `{l}`");
    Ok(())
}

/// Populates `addr` with `items` values over `conns` connections; checks they all stayed.
fn populate(addr: &str, items: u64, size: usize, conns: u32) -> Result<Duration> {
    let t = Instant::now();
    let per = items.div_ceil(u64::from(conns));
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..u64::from(conns))
            .map(|k| (k * per, ((k + 1) * per).min(items)))
            .filter(|(a, b)| a < b)
            .map(|(a, b)| s.spawn(move || populate_range(addr, a..b, size)))
            .collect();
        hs.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("a populating thread panicked"))?
        })
    })
    .with_context(|| format!("populating {addr}"))?;
    let took = t.elapsed();
    let st = Conn::open(addr, Duration::from_secs(10))?.stats()?;
    let n = |k: &str| st.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    ensure!(
        n("curr_items") == items,
        "{addr} holds {} of the {items} items stored ({} evictions): -m too small?",
        n("curr_items"),
        n("evictions")
    );
    Ok(took)
}

/// The hash table of the server at `addr`: its power and whether a growth is under way.
fn hash_table(addr: &str) -> Result<(u32, bool)> {
    let st = Conn::open(addr, Duration::from_secs(10))?.stats()?;
    let power = st.get("hash_power_level").and_then(|v| v.parse().ok());
    let expanding = st.get("hash_is_expanding").map(|v| v == "1");
    match (power, expanding) {
        (Some(p), Some(e)) => Ok((p, e)),
        _ => bail!("{addr}: `stats` has no hash_power_level / hash_is_expanding"),
    }
}

/// Says how the source's hash table stands; with `--wait-hash`, first waits for a growth
/// under way to end. Returns whether one is under way at t0.
fn settle_hash(what: &str, addr: &str, wait: bool) -> Result<bool> {
    let t = Instant::now();
    let (mut power, mut growing) = hash_table(addr)?;
    if wait && growing {
        eprintln!("{what}: the source's hash table is growing (power {power}): waiting");
        while growing {
            ensure!(
                t.elapsed() < Duration::from_secs(600),
                "{addr}: the hash table still grows after 600 s"
            );
            std::thread::sleep(Duration::from_millis(200));
            (power, growing) = hash_table(addr)?;
        }
        eprintln!(
            "{what}: the hash table grew to power {power} in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    eprintln!(
        "{what}: source hash table: power {power}{}",
        if growing {
            ", growing (the maintainer splits buckets once a second)"
        } else {
            ""
        }
    );
    Ok(growing)
}

/// Copies items `range` from `src` to `dst`: multigets of [`DUMP_BATCH`] keys, each value
/// written on as a pipelined `set ... noreply`; returns the items copied.
fn copy_range(src: &str, dst: &str, range: std::ops::Range<u64>) -> Result<u64> {
    let mut from = Conn::open(src, Duration::from_secs(60))?;
    let mut to = Conn::open(dst, Duration::from_secs(60))?;
    let mut w = BufWriter::with_capacity(256 << 10, to.w.try_clone()?);
    let (mut line, mut data) = (Vec::new(), Vec::new());
    let mut copied = 0;
    let mut next = range.start;
    while next < range.end {
        let end = (next + DUMP_BATCH).min(range.end);
        let mut req = String::with_capacity(4 + 10 * (end - next) as usize);
        req.push_str("get");
        for i in next..end {
            req.push(' ');
            req.push_str(&key(i));
        }
        req.push_str("\r\n");
        from.w.write_all(req.as_bytes())?;
        loop {
            from.line(&mut line)?;
            if line == b"END" {
                break;
            }
            let l = String::from_utf8_lossy(&line).into_owned();
            let mut t = l.split(' ');
            let (Some("VALUE"), Some(k), Some(flags), Some(n)) =
                (t.next(), t.next(), t.next(), t.next())
            else {
                bail!("dumping {src}: unexpected line `{l}`");
            };
            let n: usize = n.parse().with_context(|| format!("dumping {src}: `{l}`"))?;
            data.resize(n + 2, 0);
            from.r.read_exact(&mut data)?;
            write!(w, "set {k} {flags} 0 {n} noreply\r\n")?;
            w.write_all(&data)?;
            copied += 1;
        }
        next = end;
    }
    w.flush()?;
    drop(w);
    let l = to.ask("mn\r\n")?;
    ensure!(l == "MN", "reloading {dst}: the server said `{l}`");
    Ok(copied)
}

/// Where the client sends its requests; `addr == None` holds it.
#[derive(Default)]
struct Endpoint {
    addr: Option<String>,
    /// Bumped at every change: the client reconnects.
    generation: u64,
    /// A request is under way.
    busy: bool,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    ep: Mutex<Endpoint>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Endpoint> {
        self.ep.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn new(addr: &str) -> Arc<Shared> {
        let s = Arc::new(Shared::default());
        s.lock().addr = Some(addr.to_string());
        s
    }

    /// Holds the client: returns once no request is under way and none will start.
    fn hold(&self) {
        let mut ep = self.lock();
        ep.addr = None;
        ep.generation += 1;
        while ep.busy {
            ep = self.cv.wait(ep).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Sends the client to `addr`.
    fn point(&self, addr: &str) {
        let mut ep = self.lock();
        ep.addr = Some(addr.to_string());
        ep.generation += 1;
        self.cv.notify_all();
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.cv.notify_all();
    }
}

/// What the client saw.
#[derive(Default)]
struct Seen {
    /// Completion instant of every successful request.
    done: Vec<Instant>,
    /// When each failed request gave up.
    failed: Vec<Instant>,
    /// The first few failures, for the log.
    failures: Vec<(Instant, String)>,
    redirects: u64,
    /// Connections lost (or not made) and retried.
    reconnects: u64,
    /// When the first redirect arrived.
    first_redirect: Option<Instant>,
}

impl Seen {
    fn fail(&mut self, at: Instant, why: String) {
        self.failed.push(at);
        if self.failures.len() < 5 {
            self.failures.push((at, why));
        }
    }

    /// The switch-over as this client lived it: from the first redirect to the first success
    /// after it.
    fn switch_window(&self) -> Option<(Instant, Instant)> {
        let r = self.first_redirect?;
        let ok = self.done.iter().find(|&&t| t > r)?;
        Some((r, *ok))
    }

    /// Failed requests outside the switch-over window.
    fn failed_beyond_switch(&self) -> u64 {
        let w = self.switch_window();
        self.failed
            .iter()
            .filter(|&&t| !w.is_some_and(|(a, b)| t >= a && t <= b))
            .count() as u64
    }
}

enum Reply {
    Ok,
    Redirect(String),
    /// Closed, reset, timed out or not reachable: reconnect and retry.
    Lost,
    Wrong(String),
}

fn redirect_of(line: &[u8]) -> Option<String> {
    std::str::from_utf8(line)
        .ok()?
        .strip_prefix("SERVER_ERROR migrated to ")
        .map(|a| a.trim().to_string())
}

/// One request on `c`: a `get` checked against `want`, or a `set` of `want`.
fn request(c: &mut Conn, k: &str, set: bool, want: &[u8], line: &mut Vec<u8>) -> Reply {
    let mut req = Vec::with_capacity(want.len() + 64);
    if set {
        let _ = write!(req, "set {k} 0 0 {}\r\n", want.len());
        req.extend_from_slice(want);
        req.extend_from_slice(b"\r\n");
    } else {
        let _ = write!(req, "get {k}\r\n");
    }
    // A moved source may answer and close before it read a whole `set`: its reply can still
    // be waiting to be read after a failed write.
    let wrote = c.w.write_all(&req).is_ok();
    if c.line(line).is_err() {
        return Reply::Lost;
    }
    if let Some(to) = redirect_of(line) {
        return Reply::Redirect(to);
    }
    if !wrote {
        return Reply::Lost;
    }
    if set {
        return if line == b"STORED" {
            Reply::Ok
        } else {
            Reply::Wrong(format!("set {k}: {}", String::from_utf8_lossy(line)))
        };
    }
    if line == b"END" {
        return Reply::Wrong(format!("get {k}: miss"));
    }
    let l = String::from_utf8_lossy(line).into_owned();
    let mut t = l.split(' ');
    let n = match (t.next(), t.next(), t.nth(1)) {
        (Some("VALUE"), Some(kk), Some(n)) if kk == k => n.parse::<usize>().ok(),
        _ => None,
    };
    let Some(n) = n else {
        return Reply::Wrong(format!("get {k}: `{l}`"));
    };
    let mut data = vec![0; n + 2];
    if c.r.read_exact(&mut data).is_err() {
        return Reply::Lost;
    }
    if c.line(line).is_err() {
        return Reply::Lost;
    }
    if line != b"END" || &data[n..] != b"\r\n" {
        return Reply::Wrong(format!("get {k}: malformed reply"));
    }
    if &data[..n] != want {
        return Reply::Wrong(format!("get {k}: wrong value ({n} bytes)"));
    }
    Reply::Ok
}

/// The client: random keys, 90% `get` (checked) and 10% `set` of the same value, one at a
/// time, until stopped; follows redirects and lost connections to the endpoint.
fn workload(shared: Arc<Shared>, items: u64, size: usize, seed: u64) -> Seen {
    let mut seen = Seen::default();
    let mut conn: Option<(u64, Conn)> = None;
    let mut rng = seed | 1;
    let (mut want, mut line) = (Vec::new(), Vec::new());
    'requests: loop {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng >> 8) % items;
        let set = rng % 10 == 0;
        value(i, size, &mut want);
        let k = key(i);
        let started = Instant::now();
        loop {
            let (addr, generation) = {
                let mut ep = shared.lock();
                loop {
                    if ep.stop {
                        break 'requests;
                    }
                    if let Some(a) = &ep.addr {
                        // Busy under the same lock: a hold from here on waits for this request.
                        let r = (a.clone(), ep.generation);
                        ep.busy = true;
                        break r;
                    }
                    ep = shared.cv.wait(ep).unwrap_or_else(|p| p.into_inner());
                }
            };
            let reply = {
                if conn.as_ref().is_none_or(|(g, _)| *g != generation) {
                    conn = Conn::open(&addr, RETRY_FOR).ok().map(|c| (generation, c));
                }
                match &mut conn {
                    Some((_, c)) => request(c, &k, set, &want, &mut line),
                    None => Reply::Lost,
                }
            };
            let at = Instant::now();
            {
                let mut ep = shared.lock();
                ep.busy = false;
                shared.cv.notify_all();
                if let Reply::Redirect(to) = &reply {
                    if ep.generation == generation {
                        ep.addr = Some(to.clone());
                        ep.generation += 1;
                    }
                }
            }
            match reply {
                Reply::Ok => {
                    seen.done.push(at);
                    continue 'requests;
                }
                Reply::Redirect(_) => {
                    seen.redirects += 1;
                    seen.first_redirect.get_or_insert_with(Instant::now);
                    conn = None;
                }
                Reply::Lost => {
                    seen.reconnects += 1;
                    conn = None;
                    if started.elapsed() > RETRY_FOR {
                        seen.fail(at, format!("{k}: no answer from {addr} for {RETRY_FOR:?}"));
                        continue 'requests;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Reply::Wrong(why) => {
                    seen.fail(at, why);
                    continue 'requests;
                }
            }
        }
    }
    seen
}

/// The longest gap between consecutive successes that ends after `from` and starts before
/// `to`: (gap, its start, its end).
fn longest_gap(
    done: &[Instant],
    from: Instant,
    to: Instant,
) -> Option<(Duration, Instant, Instant)> {
    done.windows(2)
        .filter(|w| w[1] >= from && w[0] <= to)
        .map(|w| (w[1] - w[0], w[0], w[1]))
        .max_by_key(|g| g.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Gaps of at least `min` between consecutive successes inside the window, as in
/// [`longest_gap`], in time order.
fn long_gaps(
    done: &[Instant],
    from: Instant,
    to: Instant,
    min: Duration,
) -> Vec<(Instant, Instant)> {
    done.windows(2)
        .filter(|w| w[1] >= from && w[0] <= to && w[1] - w[0] >= min)
        .map(|w| (w[0], w[1]))
        .collect()
}

/// Signed milliseconds from `t0` to `t`.
fn rel(t: Instant, t0: Instant) -> f64 {
    if t >= t0 {
        ms(t - t0)
    } else {
        -ms(t0 - t)
    }
}

struct Phase {
    downtime: Duration,
    total: Duration,
    seen: Seen,
}

fn server_args(port: u16, mb: u64, threads: u32) -> Vec<String> {
    let mut a: Vec<String> = [
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-l",
        "127.0.0.1",
        "-m",
        &mb.to_string(),
        "-t",
        &threads.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(user_flag());
    a
}

/// Starts the client on `addr`, with its thread.
fn start_client(
    addr: &str,
    a: &BenchArgs,
    seed: u64,
) -> Result<(Arc<Shared>, std::thread::JoinHandle<Seen>)> {
    let shared = Shared::new(addr);
    let sh = shared.clone();
    let (items, size) = (a.items, a.value_size);
    let h = std::thread::Builder::new()
        .name("bench-client".into())
        .spawn(move || workload(sh, items, size, seed))
        .context("starting the client thread")?;
    Ok((shared, h))
}

fn stop_client(shared: &Shared, h: std::thread::JoinHandle<Seen>) -> Result<Seen> {
    shared.stop();
    h.join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))
}

fn log_client(what: &str, seen: &Seen, window: (Instant, Instant), t0: Instant) {
    let gap = longest_gap(&seen.done, window.0, window.1);
    let gap_text = gap.map_or("no requests".into(), |(d, a, b)| {
        format!(
            "longest gap {:.2} ms, from {:+.1} to {:+.1} ms of t0",
            ms(d),
            rel(a, t0),
            rel(b, t0)
        )
    });
    let redirect = seen.first_redirect.map_or(String::new(), |r| {
        format!(", first redirect at {:+.1} ms", rel(r, t0))
    });
    // The requests right after the gap: slow ones there are the new server warming up.
    let after = gap.map_or(String::new(), |(_, _, end)| {
        let next: Vec<String> = seen
            .done
            .iter()
            .filter(|&&t| t > end)
            .take(5)
            .map(|&t| format!("{:+.1}", rel(t, t0)))
            .collect();
        format!(" (the next successes at {} ms)", next.join(", "))
    });
    eprintln!(
        "{what}: client: {} requests, {} failed, {} redirects, {} reconnects{redirect}; \
         {gap_text}{after}",
        seen.done.len(),
        seen.failed.len(),
        seen.redirects,
        seen.reconnects
    );
    let long = long_gaps(&seen.done, window.0, window.1, Duration::from_millis(20));
    if long.len() > 1 {
        let l: Vec<String> = long
            .iter()
            .take(20)
            .map(|&(a, b)| format!("{:+.1}..{:+.1}", rel(a, t0), rel(b, t0)))
            .collect();
        eprintln!(
            "{what}: client: {} gaps of 20 ms or more (ms of t0): {}",
            long.len(),
            l.join(", ")
        );
    }
    for (at, why) in &seen.failures {
        eprintln!("{what}: client: failed at {:+.1} ms: {why}", rel(*at, t0));
    }
}

/// Phase 1: post-copy live migration. Returns the phase and (switch-over ms, faults).
/// What post-copy reports beside the client's figures.
struct PostCopy {
    switchover_ms: Option<f64>,
    faults: u64,
    /// The source's hash table was growing when the bench settled before t0.
    hash_growing: bool,
}

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
    args.push("--migrate-from".into());
    args.push(src.clone());
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
    let summary = client::migrate(&src, &tgt, Duration::from_secs(60), &mut report);
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
    let faults = client::stats(&tgt)
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
    let per = a.items.div_ceil(u64::from(a.conns));
    let copied = std::thread::scope(|s| {
        let hs: Vec<_> = (0..u64::from(a.conns))
            .map(|k| (k * per, ((k + 1) * per).min(a.items)))
            .filter(|(x, y)| x < y)
            .map(|(x, y)| {
                let (src, tgt) = (&src, &tgt);
                s.spawn(move || copy_range(src, tgt, x..y))
            })
            .collect();
        hs.into_iter().try_fold(0u64, |n, h| {
            Ok::<u64, anyhow::Error>(
                n + h
                    .join()
                    .map_err(|_| anyhow::anyhow!("a copying thread panicked"))??,
            )
        })
    });
    let copied = match copied {
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

    #[test]
    fn memory_covers_the_items() {
        // 1M items of 1000 bytes: 1.43 GB of slab memory.
        assert_eq!(memory_mb(1_000_000, 1000), 1364 + 64);
        assert_eq!(memory_mb(1, 1), 65);
    }

    #[test]
    fn longest_gap_inside_the_window() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        let done = [at(0), at(10), at(500), at(510), at(2000)];
        let g = longest_gap(&done, at(100), at(505)).unwrap();
        assert_eq!(g.0, Duration::from_millis(490));
        // A gap that straddles the window's end counts.
        let g = longest_gap(&done, at(100), at(1000)).unwrap();
        assert_eq!(g.0, Duration::from_millis(1490));
    }

    #[test]
    fn failures_between_the_redirect_and_the_next_success_are_the_switch_over() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        let seen = Seen {
            done: vec![at(0), at(10), at(30), at(40)],
            failed: vec![at(5), at(20), at(35)],
            first_redirect: Some(at(15)),
            ..Seen::default()
        };
        assert_eq!(seen.switch_window(), Some((at(15), at(30))));
        assert_eq!(seen.failed_beyond_switch(), 2);
        // Without a redirect every failure counts.
        let seen = Seen {
            first_redirect: None,
            ..seen
        };
        assert_eq!(seen.failed_beyond_switch(), 3);
    }

    #[test]
    fn redirects_are_recognised() {
        assert_eq!(
            redirect_of(b"SERVER_ERROR migrated to 127.0.0.1:5"),
            Some("127.0.0.1:5".into())
        );
        assert_eq!(redirect_of(b"SERVER_ERROR out of memory"), None);
    }
}
