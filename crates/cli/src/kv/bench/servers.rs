//! The servers of a phase: `remora kv serve` processes on free ports of 127.0.0.1 (started,
//! waited for and killed), populated with the bench's items, and the stop-and-copy baseline's
//! dump and reload; the source's hash table is settled before t0.
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use super::client::Conn;
use super::{key, value};

/// Keys per multiget of the stop-and-copy dump.
const DUMP_BATCH: u64 = 100;

/// `-m` for `items` values of `size` bytes: memcached's ~48 bytes of header plus key and
/// suffix per item, up to 25% lost to slab classes, and room for the slab pages' rounding.
pub(super) fn memory_mb(items: u64, size: usize) -> u64 {
    let bytes = items as f64 * (size as f64 + 100.0) * 1.3;
    (bytes / f64::from(1u32 << 20)).ceil() as u64 + 64
}

/// A free TCP port on 127.0.0.1 (free when asked: the server binds it right after).
pub(super) fn free_port() -> Result<u16> {
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
pub(super) struct Servers {
    t0: Instant,
    procs: Vec<(String, Child)>,
}

impl Servers {
    pub(super) fn new(t0: Instant) -> Servers {
        Servers {
            t0,
            procs: Vec::new(),
        }
    }

    /// Starts `remora kv serve ARGS` named `name`; its stderr is forwarded to ours.
    pub(super) fn spawn(&mut self, name: &str, args: &[String]) -> Result<()> {
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

    /// Starts another program (`prog ARGS`, e.g. memcached beside remora) named `name`.
    pub(super) fn spawn_program(&mut self, name: &str, prog: &str, args: &[String]) -> Result<()> {
        let child = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {prog} {}", args.join(" ")))?;
        self.procs.push((name.to_string(), child));
        Ok(())
    }

    /// The process id of `name`.
    pub(super) fn pid(&self, name: &str) -> Result<u32> {
        self.procs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.id())
            .with_context(|| format!("no server named {name}"))
    }

    /// Waits until `name` accepts connections on `addr`.
    pub(super) fn wait_listening(&mut self, name: &str, addr: &str) -> Result<()> {
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

pub(super) fn server_args(port: u16, mb: u64, threads: u32) -> Vec<String> {
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
pub(super) fn populate(addr: &str, items: u64, size: usize, conns: u32) -> Result<Duration> {
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
pub(super) fn settle_hash(what: &str, addr: &str, wait: bool) -> Result<bool> {
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

/// Copies the `items` items from `src` to `dst` over `conns` connections, each a
/// [`copy_range`] of its share; returns the items copied.
pub(super) fn copy(src: &str, dst: &str, items: u64, conns: u32) -> Result<u64> {
    let per = items.div_ceil(u64::from(conns));
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..u64::from(conns))
            .map(|k| (k * per, ((k + 1) * per).min(items)))
            .filter(|(x, y)| x < y)
            .map(|(x, y)| s.spawn(move || copy_range(src, dst, x..y)))
            .collect();
        hs.into_iter().try_fold(0u64, |n, h| {
            Ok::<u64, anyhow::Error>(
                n + h
                    .join()
                    .map_err(|_| anyhow::anyhow!("a copying thread panicked"))??,
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_covers_the_items() {
        // 1M items of 1000 bytes: 1.43 GB of slab memory.
        assert_eq!(memory_mb(1_000_000, 1000), 1364 + 64);
        assert_eq!(memory_mb(1, 1), 65);
    }
}
