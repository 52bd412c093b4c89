//! The soak's harness (issue 10): a seeded generator of hostile input, the server children, and
//! the journal of what was sent that the report names when a server dies or stops serving.
//! The inputs themselves are in `fabric_inputs` and `kv_inputs`.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

pub mod fabric_inputs;
pub mod kv_inputs;

// ---------------------------------------------------------------------------------------------
// Seeded randomness.

/// xorshift64*: small, seeded, good enough to pick mutations.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    /// A length or count a hostile peer would send: 0, edges of integer types, or random.
    pub fn hostile_u32(&mut self) -> u32 {
        let r = self.next() as u32;
        *self.pick(&[
            0,
            1,
            0x7fff_ffff,
            0x8000_0000,
            u32::MAX,
            u32::MAX - 1,
            65_536,
            65_537,
            1 << 20,
            r,
        ])
    }
    /// Flips, overwrites, inserts or deletes a few bytes.
    pub fn mutate(&mut self, b: &mut Vec<u8>) {
        for _ in 0..1 + self.below(4) {
            if b.is_empty() {
                b.push(self.next() as u8);
                continue;
            }
            let i = self.below(b.len());
            match self.below(5) {
                0 => b[i] ^= 1 << self.below(8),
                1 => b[i] = self.next() as u8,
                2 => b.insert(i, self.next() as u8),
                3 => {
                    b.remove(i);
                }
                _ => b[i] = *self.pick(&[0, 0xff, 0x7f, 0x80, b'\r', b'\n', b' ']),
            }
        }
    }
}

pub fn seed() -> u64 {
    let s = std::env::var("SOAK_SEED").ok().and_then(|s| {
        let s = s.trim();
        match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        }
    });
    s.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ u64::from(std::process::id()) << 32
    })
}

pub fn per_port() -> Duration {
    let s = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(2.0);
    Duration::from_secs_f64(s)
}

// ---------------------------------------------------------------------------------------------
// Servers and the record of what was sent.

/// A server child; killed (by its pid, through `Child`) when dropped.
pub struct Server {
    pub child: Child,
    pub name: &'static str,
    pub stderr: PathBuf,
    /// How much of `stderr` has been searched for a panic.
    pub seen: u64,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub fn new(child: Child, name: &'static str, stderr: PathBuf) -> Server {
        Server {
            child,
            name,
            stderr,
            seen: 0,
        }
    }

    /// The first panic message the server wrote since the last call: a thread of it died even
    /// if the process lives on (a dead worker stops serving its connections).
    pub fn new_panic(&mut self) -> Option<String> {
        use std::io::{Seek, SeekFrom};
        let mut f = std::fs::File::open(&self.stderr).ok()?;
        let len = f.metadata().ok()?.len();
        if len <= self.seen {
            return None;
        }
        // Back up a little so that a line split across two reads is still found.
        let from = self.seen.saturating_sub(64);
        f.seek(SeekFrom::Start(from)).ok()?;
        let mut new = String::new();
        let _ = f.take(len - from).read_to_string(&mut new);
        self.seen = len;
        let i = new.find("panicked at")?;
        let start = new[..i].rfind('\n').map_or(0, |n| n + 1);
        Some(new[start..].lines().take(3).collect::<Vec<_>>().join("\n"))
    }

    pub fn stderr_tail(&self) -> String {
        // The server may still be writing about what just happened.
        std::thread::sleep(Duration::from_millis(100));
        let s = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

pub fn stderr_file(name: &str, seed: u64) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "soak-{name}-{seed:016x}-{}.stderr",
        std::process::id()
    ))
}

/// The last inputs of one phase, for the report when the server dies.
pub struct Journal {
    pub seed: u64,
    pub phase: &'static str,
    pub sent: u64,
    recent: VecDeque<(u64, String, Vec<u8>)>,
}

impl Journal {
    const KEEP: usize = 256;

    pub fn new(seed: u64, phase: &'static str) -> Journal {
        Journal {
            seed,
            phase,
            sent: 0,
            recent: VecDeque::new(),
        }
    }

    pub fn record(&mut self, kind: &str, bytes: &[u8]) {
        if self.recent.len() == Self::KEEP {
            self.recent.pop_front();
        }
        self.recent
            .push_back((self.sent, kind.to_string(), bytes.to_vec()));
        self.sent += 1;
    }

    /// Writes the recent inputs to a file; returns its path.
    pub fn dump(&self) -> PathBuf {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("soak-{}-{:016x}.inputs", self.phase, self.seed));
        let mut s = format!(
            "# soak phase {} seed {} (0x{:016x}): the last {} of {} inputs, newest last\n",
            self.phase,
            self.seed,
            self.seed,
            self.recent.len(),
            self.sent
        );
        for (n, kind, b) in &self.recent {
            let _ = writeln!(s, "## input {n}: {kind}, {} bytes", b.len());
            for line in b.chunks(32) {
                let hex: Vec<String> = line.iter().map(|x| format!("{x:02x}")).collect();
                let _ = writeln!(s, "{}", hex.join(" "));
            }
        }
        std::fs::write(&path, s).expect("write the soak inputs");
        path
    }

    /// Fails the test, with the inputs saved, when `bad` (the server stopped serving).
    #[track_caller]
    pub fn fail_if(&self, bad: bool, srv: &mut Server, what: &str) {
        self.check_alive(srv);
        if bad {
            panic!(
                "{} stopped serving after the {} soak: {what}; {}; its stderr ends:\n{}",
                srv.name,
                self.phase,
                self.replay(),
                srv.stderr_tail()
            );
        }
    }

    /// Fails the test if the server has exited or one of its threads panicked.
    #[track_caller]
    pub fn check_alive(&self, srv: &mut Server) {
        if let Some(p) = srv.new_panic() {
            panic!(
                "a thread of {} panicked during the {} soak: {p}\n{}",
                srv.name,
                self.phase,
                self.replay()
            );
        }
        if let Some(status) = srv.child.try_wait().expect("try_wait") {
            panic!(
                "{} exited ({status}) during the {} soak; {}; its stderr ends:\n{}",
                srv.name,
                self.phase,
                self.replay(),
                srv.stderr_tail()
            );
        }
    }

    /// How to replay a failure: inputs sent, the seed, and where the last inputs were saved.
    fn replay(&self) -> String {
        let path = self.dump();
        format!(
            "{} inputs sent; seed {} (SOAK_SEED={} replays it); last inputs in {}",
            self.sent,
            self.seed,
            self.seed,
            path.display()
        )
    }
}

/// Checks aliveness for a while after a phase: a crash may take a moment to show.
#[track_caller]
pub fn settle(j: &Journal, srv: &mut Server) {
    for _ in 0..10 {
        j.check_alive(srv);
        std::thread::sleep(Duration::from_millis(20));
    }
    j.check_alive(srv);
}

/// A port free for both TCP and UDP on 127.0.0.1 right now, below the ephemeral range (so that
/// no `bind(0)` elsewhere takes it meanwhile) and away from 4791 and 11211.
pub fn free_port(rng: &mut Rng) -> u16 {
    loop {
        let p = 20_000 + rng.below(12_000) as u16;
        if p == 11_211 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p)).is_ok() && UdpSocket::bind(("127.0.0.1", p)).is_ok()
        {
            return p;
        }
    }
}
