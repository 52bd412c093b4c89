//! The operator's side: arms a source (`migrate to`), then follows the migration through
//! `stats migration` on the source (and on the target once the source has stopped) until the
//! copy is complete. `remora kv migrate` and Python's `remora.kv.migrate` both run this and
//! print the same progress lines.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// A migration's figures as the servers report them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// `migrate_state` (armed, handing_over, moved, done, complete, aborted, failed).
    pub state: String,
    /// Units present on the target.
    pub present: u64,
    /// Units in the arena.
    pub units: u64,
    /// Bytes of the arena.
    pub bytes: u64,
    /// The switch-over as the source measured it (freeze to the target serving).
    pub downtime_ms: Option<f64>,
    /// Seconds since the operator asked.
    pub elapsed: f64,
}

/// How a migration ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The switch-over, as the source measured it (ms).
    pub downtime_ms: Option<f64>,
    /// From the request to the full copy (s).
    pub total_s: f64,
    /// Bytes of the arena.
    pub bytes: u64,
}

/// Why a migration did not complete.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A server could not be reached or spoke out of turn.
    #[error("{0}")]
    Io(String),
    /// The source refused (`migrate to`'s reply).
    #[error("the source refused: {0}")]
    Refused(String),
    /// The migration was abandoned by one side (the servers' logs say why).
    #[error("the migration {0}")]
    Failed(String),
    /// No target asked, or the copy stopped moving, in time.
    #[error("timed out {0}")]
    Timeout(String),
    /// The caller stopped following (a source still armed was disarmed).
    #[error("stopped by the caller{0}")]
    Stopped(&'static str),
}

/// How long the copy may stand still before the client gives up following it.
pub const STALL: Duration = Duration::from_secs(60);

/// One text-protocol connection.
struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn open(addr: &str) -> Result<Conn, ClientError> {
        let a = addr
            .to_socket_addrs()
            .map_err(|e| ClientError::Io(format!("{addr}: {e}")))?
            .next()
            .ok_or_else(|| ClientError::Io(format!("{addr}: no address")))?;
        let s = TcpStream::connect_timeout(&a, Duration::from_secs(5))
            .map_err(|e| ClientError::Io(format!("{addr}: {e}")))?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let w = s.try_clone().map_err(|e| ClientError::Io(e.to_string()))?;
        Ok(Conn {
            r: BufReader::new(s),
            w,
        })
    }

    fn line(&mut self) -> Option<String> {
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(l.trim_end().to_string()),
        }
    }

    fn ask(&mut self, cmd: &str) -> Option<String> {
        self.w.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
        self.line()
    }

    /// `stats migration` as a map; `None` once the server is gone.
    fn stats(&mut self) -> Option<HashMap<String, String>> {
        self.w.write_all(b"stats migration\r\n").ok()?;
        let mut m = HashMap::new();
        loop {
            let l = self.line()?;
            if l == "END" {
                return Some(m);
            }
            let mut t = l.splitn(3, ' ');
            match (t.next(), t.next(), t.next()) {
                (Some("STAT"), Some(k), v) => {
                    m.insert(k.to_string(), v.unwrap_or("").to_string());
                }
                _ => return None,
            }
        }
    }
}

/// `stats migration` of the server at `addr`.
pub fn stats(addr: &str) -> Result<HashMap<String, String>, ClientError> {
    Conn::open(addr)?
        .stats()
        .ok_or_else(|| ClientError::Io(format!("{addr}: no `stats migration` answer")))
}

fn progress(m: &HashMap<String, String>, t0: Instant) -> Progress {
    let n = |k: &str| m.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Progress {
        state: m.get("migrate_state").cloned().unwrap_or_default(),
        present: n("migrate_units_present"),
        units: n("migrate_units_total"),
        bytes: n("migrate_bytes_total"),
        downtime_ms: m
            .get("migrate_downtime_ms")
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|&d| d >= 0.0),
        elapsed: t0.elapsed().as_secs_f64(),
    }
}

/// A source armed by [`arm`], to follow with [`Armed::follow`].
pub struct Armed {
    src: Conn,
    source: String,
    to: String,
    t0: Instant,
    /// The secret the target must show (`--migrate-secret-file`): the operator's, or the one
    /// the source made up.
    pub secret: String,
}

/// Arms `source` to hand its cache to the server that asks with `--migrate-from` and the
/// secret, sending its clients to `to`. With `secret` `None` the source makes one up; either
/// way [`Armed::secret`] has it.
pub fn arm(source: &str, to: &str, secret: Option<&str>) -> Result<Armed, ClientError> {
    let t0 = Instant::now();
    if let Some(s) = secret {
        super::secret::check(s).map_err(|why| ClientError::Refused(why.into()))?;
    }
    let mut src = Conn::open(source)?;
    let cmd = match secret {
        Some(s) => format!("migrate to {to} {s}"),
        None => format!("migrate to {to}"),
    };
    let secret = match src.ask(&cmd) {
        Some(l) => match l.strip_prefix("SECRET ") {
            Some(s) => s.to_string(),
            None => return Err(ClientError::Refused(l)),
        },
        None => return Err(ClientError::Io(format!("{source}: connection closed"))),
    };
    Ok(Armed {
        src,
        source: source.to_string(),
        to: to.to_string(),
        t0,
        secret,
    })
}

/// [`arm`], then [`Armed::follow`].
pub fn migrate(
    source: &str,
    to: &str,
    secret: Option<&str>,
    wait: Duration,
    report: &mut dyn FnMut(&Progress) -> ControlFlow<()>,
) -> Result<Summary, ClientError> {
    arm(source, to, secret)?.follow(wait, report)
}

impl Armed {
    /// Follows the migration until the copy is complete. `wait` bounds the time until a target
    /// asks; `report` sees every progress step and may stop following (a source no target
    /// asked yet is disarmed then; a migration under way goes on).
    pub fn follow(
        self,
        wait: Duration,
        report: &mut dyn FnMut(&Progress) -> ControlFlow<()>,
    ) -> Result<Summary, ClientError> {
        let Armed {
            mut src,
            source,
            to,
            t0,
            ..
        } = self;
        follow(&mut src, &source, &to, t0, wait, report)
    }
}

fn follow(
    src: &mut Conn,
    source: &str,
    to: &str,
    t0: Instant,
    wait: Duration,
    report: &mut dyn FnMut(&Progress) -> ControlFlow<()>,
) -> Result<Summary, ClientError> {
    let mut last = Progress::default();
    // Follow the source until it stops.
    while let Some(m) = src.stats() {
        last = progress(&m, t0);
        let stop = report(&last).is_break();
        match last.state.as_str() {
            "armed" if stop => {
                let _ = src.ask("migrate cancel");
                return Err(ClientError::Stopped(": the source was disarmed"));
            }
            "armed" if t0.elapsed() > wait => {
                let _ = src.ask("migrate cancel");
                return Err(ClientError::Timeout(format!(
                    "after {:.1} s: no target asked (start it with --migrate-from {source} \
                     --migrate-secret-file FILE)",
                    wait.as_secs_f64()
                )));
            }
            "idle" => {
                return Err(ClientError::Failed(
                    "was cancelled on the source before a target asked".into(),
                ))
            }
            "aborted" => {
                return Err(ClientError::Failed(
                    "was aborted: the target left before taking over; the source serves on with every item".into(),
                ))
            }
            "failed" => {
                return Err(ClientError::Failed(
                    "failed: the target left after taking over; the source serves on, flushed".into(),
                ))
            }
            "done" => break,
            _ if stop => {
                return Err(ClientError::Stopped(
                    " (the migration goes on without it)",
                ))
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // A small cache moves in full between two looks at the source (every 100 ms): armed, then
    // gone. The target says whether it took over.
    let took_over = || {
        Conn::open(to)
            .ok()
            .and_then(|mut c| c.stats())
            .is_some_and(|m| matches!(progress(&m, t0).state.as_str(), "pulling" | "complete"))
    };
    let handed_over = match last.state.as_str() {
        "moved" | "done" => true,
        "armed" => took_over(),
        _ => false,
    };
    if !handed_over {
        return Err(ClientError::Failed(format!(
            "ended: the source {source} went away in state `{}`",
            last.state
        )));
    }
    // The source has stopped (or is stopping): the target has the last word.
    let mut tgt = Conn::open(to)?;
    let (mut moved_at, mut seen) = (Instant::now(), 0);
    loop {
        let m = tgt
            .stats()
            .ok_or_else(|| ClientError::Io(format!("{to}: no `stats migration` answer")))?;
        let mut p = progress(&m, t0);
        p.downtime_ms = last.downtime_ms;
        let stop = report(&p).is_break();
        match p.state.as_str() {
            "complete" => {
                return Ok(Summary {
                    downtime_ms: p.downtime_ms,
                    total_s: t0.elapsed().as_secs_f64(),
                    bytes: p.bytes,
                })
            }
            "failed" => return Err(ClientError::Failed("failed on the target".into())),
            _ if stop => return Err(ClientError::Stopped(" (the migration goes on without it)")),
            _ => {}
        }
        if p.present != seen {
            (moved_at, seen) = (Instant::now(), p.present);
        } else if moved_at.elapsed() > STALL {
            return Err(ClientError::Timeout(format!(
                "the copy to {to} stood still at {}/{} units for {} s",
                p.present,
                p.units,
                STALL.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Prints progress lines to stderr as they change (at most one a second while copying).
pub struct Printer {
    last_state: String,
    last_print: Option<Instant>,
}

impl Default for Printer {
    fn default() -> Printer {
        Printer::new()
    }
}

impl Printer {
    /// A printer that has printed nothing yet.
    pub fn new() -> Printer {
        Printer {
            last_state: String::new(),
            last_print: None,
        }
    }

    /// The line for `p`, when one is due.
    pub fn line(&mut self, p: &Progress) -> Option<String> {
        let changed = p.state != self.last_state;
        let due = self
            .last_print
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if !changed && !due {
            return None;
        }
        self.last_state = p.state.clone();
        self.last_print = Some(Instant::now());
        let pct = if p.units > 0 {
            100.0 * p.present as f64 / p.units as f64
        } else {
            0.0
        };
        let down = p
            .downtime_ms
            .map_or(String::new(), |d| format!(", switch-over {d:.2} ms"));
        Some(match p.state.as_str() {
            "armed" => format!(
                "[{:6.1}s] migrate: armed, waiting for the target to ask",
                p.elapsed
            ),
            "freezing" | "handing_over" => format!("[{:6.1}s] migrate: handing over", p.elapsed),
            "moved" | "done" if p.units == 0 => format!(
                "[{:6.1}s] migrate: the target serves; copying {} MiB{down}",
                p.elapsed,
                p.bytes >> 20
            ),
            "moved" | "pulling" | "done" | "complete" => format!(
                "[{:6.1}s] migrate: {}: {}/{} units ({pct:.1}%) of {} MiB{down}",
                p.elapsed,
                if p.state == "complete" {
                    "copy complete"
                } else {
                    "copying"
                },
                p.present,
                p.units,
                p.bytes >> 20
            ),
            s => format!("[{:6.1}s] migrate: {s}", p.elapsed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    /// A text server on loopback that answers each line with `reply(line)` (None: hang up),
    /// one connection after another.
    fn fake(mut reply: impl FnMut(&str) -> Option<String> + Send + 'static) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                let mut w = s.try_clone().unwrap();
                for line in BufReader::new(s).lines() {
                    let Ok(line) = line else { break };
                    match reply(&line) {
                        Some(r) => {
                            if w.write_all(r.as_bytes()).is_err() {
                                break;
                            }
                        }
                        None => break,
                    }
                }
            }
        });
        addr
    }

    /// A source that is armed, seen armed once, then gone: the whole copy ran between two looks.
    fn source_gone_after_armed() -> String {
        let mut looks = 0;
        fake(move |line| {
            if line.starts_with("migrate to ") {
                return Some("SECRET 0123456789abcdef0123456789abcdef\r\n".into());
            }
            looks += 1;
            (looks == 1).then(|| "STAT migrate_state armed\r\nEND\r\n".into())
        })
    }

    fn target_in(state: &'static str) -> String {
        fake(move |_| {
            Some(format!(
                "STAT migrate_state {state}\r\nSTAT migrate_units_present 4\r\n\
                 STAT migrate_units_total 4\r\nSTAT migrate_bytes_total 4096\r\nEND\r\n"
            ))
        })
    }

    #[test]
    fn a_source_gone_while_armed_handed_over_when_the_target_took_over() {
        let tgt = target_in("complete");
        let src = source_gone_after_armed();
        let s = migrate(&src, &tgt, None, Duration::from_secs(5), &mut |_| {
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(s.bytes, 4096);
    }

    #[test]
    fn a_source_gone_while_armed_failed_when_the_target_did_not_take_over() {
        let tgt = target_in("idle");
        let src = source_gone_after_armed();
        let e = migrate(&src, &tgt, None, Duration::from_secs(5), &mut |_| {
            ControlFlow::Continue(())
        })
        .unwrap_err();
        assert!(e.to_string().contains("went away in state `armed`"), "{e}");
    }
}
