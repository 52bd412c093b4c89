//! The bench's client: a text-protocol connection, the workload (one request at a time,
//! checked, following redirects and lost connections to wherever the phase points it) and
//! what it saw (successes, failures, the gaps between successes).
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{key, ms, value, BenchArgs};

/// How long one request may keep failing over (reconnects) before it counts as failed.
const RETRY_FOR: Duration = Duration::from_secs(10);

/// A text-protocol connection.
pub(super) struct Conn {
    pub(super) r: BufReader<TcpStream>,
    pub(super) w: TcpStream,
}

impl Conn {
    pub(super) fn open(addr: &str, timeout: Duration) -> std::io::Result<Conn> {
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
    pub(super) fn line(&mut self, buf: &mut Vec<u8>) -> std::io::Result<()> {
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
    pub(super) fn ask(&mut self, cmd: &str) -> Result<String> {
        self.w.write_all(cmd.as_bytes())?;
        let mut b = Vec::new();
        self.line(&mut b)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// `stats` as a map.
    pub(super) fn stats(&mut self) -> Result<HashMap<String, String>> {
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
pub(super) struct Shared {
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
    pub(super) fn hold(&self) {
        let mut ep = self.lock();
        ep.addr = None;
        ep.generation += 1;
        while ep.busy {
            ep = self.cv.wait(ep).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Sends the client to `addr`.
    pub(super) fn point(&self, addr: &str) {
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
pub(super) struct Seen {
    /// Completion instant of every successful request.
    pub(super) done: Vec<Instant>,
    /// When each failed request gave up.
    pub(super) failed: Vec<Instant>,
    /// The first few failures, for the log.
    pub(super) failures: Vec<(Instant, String)>,
    pub(super) redirects: u64,
    /// Connections lost (or not made) and retried.
    pub(super) reconnects: u64,
    /// When the first redirect arrived.
    pub(super) first_redirect: Option<Instant>,
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
    pub(super) fn failed_beyond_switch(&self) -> u64 {
        let w = self.switch_window();
        self.failed
            .iter()
            .filter(|&&t| !w.is_some_and(|(a, b)| t >= a && t <= b))
            .count() as u64
    }
}

pub(super) enum Reply {
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
pub(super) fn request(c: &mut Conn, k: &str, set: bool, want: &[u8], line: &mut Vec<u8>) -> Reply {
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

/// Starts the client on `addr`, with its thread.
pub(super) fn start_client(
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

pub(super) fn stop_client(shared: &Shared, h: std::thread::JoinHandle<Seen>) -> Result<Seen> {
    shared.stop();
    h.join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))
}

/// The longest gap between consecutive successes that ends after `from` and starts before
/// `to`: (gap, its start, its end).
pub(super) fn longest_gap(
    done: &[Instant],
    from: Instant,
    to: Instant,
) -> Option<(Duration, Instant, Instant)> {
    done.windows(2)
        .filter(|w| w[1] >= from && w[0] <= to)
        .map(|w| (w[1] - w[0], w[0], w[1]))
        .max_by_key(|g| g.0)
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

pub(super) fn log_client(what: &str, seen: &Seen, window: (Instant, Instant), t0: Instant) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
