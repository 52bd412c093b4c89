//! The sending end: a [`Sender`] streams one module's frames as a JUNGFRAU module does, 128
//! packets per frame from its own UDP socket to its own destination port; and the emulator's
//! native mode ([`run`]), one sender thread per module.
//!
//! Pacing is the caller's job. Packets go out one `send(2)` each: at the emulator's rates the
//! kernel's per-datagram work dominates, which `sendmmsg` would not remove (not measured).
//!
//! The emulator learns the receiver's UDP ports from a one-line exchange on the receiver's
//! control address (what the detector's control software configures on a real system):
//! `remora-native 1 ports P0,P1,...`, followed by ` credits` when the receiver applies
//! `overrun = "backpressure"`: it then writes `C <frame>` lines as it frees room, and each
//! module sends frame `f` only once `f` has been granted (an emulated detector may wait; a real
//! one cannot). The connection stays open for the run; closing it (its write half) tells the
//! receiver the stream has ended.
use std::io::{self, BufRead, BufReader};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::packet::{words_of_packet, Packet, Repr, PACKETS_PER_FRAME, PACKET_LEN};
use crate::config::Config;
use crate::dataset::Dataset;
use crate::emulator::report::EmulatorReport;
use crate::model::MODULE_PIXELS;
use crate::ring::MODULE_BYTES;
use crate::tap::StopGate;
use crate::{DaqError, Result};

/// One module's packet stream.
pub struct Sender {
    socket: UdpSocket,
    module: u16,
    t0: Instant,
    packet: Vec<u8>,
    sent: u64,
    skipped: u64,
}

impl Sender {
    /// A module's sender: a UDP socket on an ephemeral port, connected to `dest`. Its packets
    /// carry module id and row `module`, column 0, type JUNGFRAU, version 2, and a timestamp
    /// in 0.1 µs since this call.
    pub fn new(module: u16, dest: SocketAddr) -> io::Result<Sender> {
        let any: SocketAddr = if dest.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let socket = UdpSocket::bind(any)?;
        socket.connect(dest)?;
        Ok(Sender {
            socket,
            module,
            t0: Instant::now(),
            packet: vec![0u8; PACKET_LEN],
            sent: 0,
            skipped: 0,
        })
    }

    /// Sends `words` (one module frame, 512 × 1024, row-major) as frame `frame_number`:
    /// packets 0 to 127 in order, except those for which `drop(k)` says true (a test's loss).
    /// Returns the packets sent. A packet the network refuses (ICMP port unreachable from an
    /// earlier one: no receiver yet) counts as lost, as on a detector.
    pub fn send_frame(
        &mut self,
        frame_number: u64,
        words: &[u16],
        drop: &mut dyn FnMut(u32) -> bool,
    ) -> io::Result<u32> {
        if words.len() != MODULE_PIXELS {
            return Err(frame_size_error(words.len() * 2));
        }
        self.send(frame_number, drop, |k, payload| {
            for (c, w) in payload.chunks_exact_mut(2).zip(&words[words_of_packet(k)]) {
                c.copy_from_slice(&w.to_le_bytes());
            }
        })
    }

    /// [`send_frame`](Self::send_frame) from a module frame already in little-endian bytes
    /// (as datasets hold them).
    pub fn send_frame_bytes(
        &mut self,
        frame_number: u64,
        bytes: &[u8],
        drop: &mut dyn FnMut(u32) -> bool,
    ) -> io::Result<u32> {
        if bytes.len() != MODULE_BYTES {
            return Err(frame_size_error(bytes.len()));
        }
        self.send(frame_number, drop, |k, payload| {
            let w = words_of_packet(k);
            payload.copy_from_slice(&bytes[w.start * 2..w.end * 2]);
        })
    }

    fn send(
        &mut self,
        frame_number: u64,
        drop: &mut dyn FnMut(u32) -> bool,
        fill: impl Fn(u32, &mut [u8]),
    ) -> io::Result<u32> {
        let mut sent = 0;
        for k in 0..PACKETS_PER_FRAME {
            if drop(k) {
                self.skipped += 1;
                continue;
            }
            let mut p = Packet::new_unchecked(&mut self.packet[..]);
            Repr {
                row: self.module,
                timestamp: (self.t0.elapsed().as_nanos() / 100) as u64,
                ..Repr::jungfrau(frame_number, k, self.module)
            }
            .emit(&mut p);
            fill(k, p.payload_mut());
            loop {
                match self.socket.send(&self.packet) {
                    Ok(_) => {
                        sent += 1;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        self.sent += u64::from(sent);
        Ok(sent)
    }

    /// Packets sent so far.
    pub fn packets_sent(&self) -> u64 {
        self.sent
    }

    /// Packets the drop hook kept back so far.
    pub fn packets_dropped(&self) -> u64 {
        self.skipped
    }

    /// The local address packets come from.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

fn frame_size_error(bytes: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("a module frame is {MODULE_BYTES} bytes, not {bytes}"),
    )
}

/// The control line's first words.
pub(crate) const HELLO: &str = "remora-native 1 ports ";
/// The control line's ending when the receiver grants frames.
pub(crate) const CREDITS: &str = " credits";

/// The frames a backpressured receiver has granted so far, kept current by a reader thread.
#[derive(Default)]
struct Grants {
    upto: AtomicU64,
    /// The receiver closed the connection or sent something that is not a grant.
    gone: AtomicBool,
}

impl Grants {
    /// Follows the `C <frame>` lines on the control connection until it closes.
    fn follow(self: Arc<Self>, mut lines: BufReader<TcpStream>) {
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
            match line.trim().strip_prefix("C ").map(str::parse::<u64>) {
                Some(Ok(f)) => {
                    self.upto.fetch_max(f, Ordering::Release);
                }
                _ => {
                    tracing::warn!(line = line.trim(), "not a grant from the native receiver");
                    break;
                }
            }
        }
        self.gone.store(true, Ordering::Release);
    }

    /// Waits until frame `f` (from 1) is granted; false if it never will be (the receiver left,
    /// or a stop), an error after `limit` without a grant (a receiver that neither grants nor
    /// closes would otherwise hang the source).
    fn wait_for(&self, f: u64, gate: Option<&StopGate>, limit: Duration) -> Result<bool> {
        let t = Instant::now();
        while self.upto.load(Ordering::Acquire) < f {
            if self.gone.load(Ordering::Acquire) || gate.is_some_and(|g| !g.may_send(f - 1)) {
                return Ok(false);
            }
            if t.elapsed() >= limit {
                return Err(DaqError::Acquisition(format!(
                    "the native receiver granted no frame for {:.0} s (waiting to send frame {f})",
                    limit.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(true)
    }
}

/// Reads the receiver's hello: its module ports, and whether it grants frames.
fn hello(lines: &mut BufReader<TcpStream>, modules: usize) -> Result<(Vec<u16>, bool)> {
    let mut line = String::new();
    lines
        .read_line(&mut line)
        .map_err(|e| DaqError::Acquisition(format!("reading the receiver's ports: {e}")))?;
    let rest = line
        .trim()
        .strip_prefix(HELLO)
        .ok_or_else(|| DaqError::Acquisition(format!("not a native receiver: {line:?}")))?;
    let (list, credits) = match rest.strip_suffix(CREDITS) {
        Some(list) => (list, true),
        None => (rest, false),
    };
    let ports: Vec<u16> = list
        .split(',')
        .map(|p| p.parse::<u16>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| DaqError::Acquisition(format!("receiver's ports {line:?}: {e}")))?;
    if ports.len() != modules {
        return Err(DaqError::Acquisition(format!(
            "the receiver listens for {} modules, the configuration has {modules}",
            ports.len()
        )));
    }
    Ok((ports, credits))
}

/// Streams the dataset as native packets to the receiver at `to` (the emulator's native mode).
pub fn run(
    cfg: &Config,
    data: &Dataset,
    to: SocketAddr,
    gate: Option<&StopGate>,
) -> Result<EmulatorReport> {
    let control = TcpStream::connect_timeout(&to, Duration::from_secs(10))
        .map_err(|e| DaqError::Acquisition(format!("connecting to receiver 0 at {to}: {e}")))?;
    let err = |e: io::Error| DaqError::Acquisition(format!("control connection to {to}: {e}"));
    // One reader for the whole connection: a grant may arrive in the hello's read.
    let mut lines = BufReader::new(control.try_clone().map_err(err)?);
    let (ports, credits) = hello(&mut lines, cfg.detector.modules)?;
    let grants = credits.then(|| {
        let g = Arc::new(Grants::default());
        let follower = g.clone();
        // Detached: it ends when the receiver closes the connection, after the run.
        std::thread::spawn(move || follower.follow(lines));
        g
    });
    let t0 = Instant::now();
    let results: Vec<Result<Streamed>> = std::thread::scope(|sc| {
        let hs: Vec<_> = ports
            .iter()
            .enumerate()
            .map(|(m, &port)| {
                let dest = SocketAddr::new(to.ip(), port);
                let grants = grants.as_deref();
                sc.spawn(move || stream_module(cfg, data, m, dest, t0, gate, grants))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(DaqError::Acquisition("sender panicked".into())))
            })
            .collect()
    });
    let mut rep = EmulatorReport {
        frames_sent: u64::MAX,
        seconds: t0.elapsed().as_secs_f64(),
        ..Default::default()
    };
    for r in results {
        let s = r?;
        rep.bytes += s.bytes;
        rep.packets += s.packets;
        rep.frames_sent = rep.frames_sent.min(s.frames);
        rep.credit_wait_seconds = rep.credit_wait_seconds.max(s.waited);
    }
    if rep.frames_sent == u64::MAX {
        rep.frames_sent = 0;
    }
    // Closing the write half ends the stream for the receiver (the grant reader still holds
    // the connection).
    let _ = control.shutdown(Shutdown::Write);
    Ok(rep)
}

/// What one module's sender thread did.
struct Streamed {
    /// Payload bytes.
    bytes: u64,
    packets: u64,
    frames: u64,
    /// Seconds spent waiting for grants.
    waited: f64,
}

/// One module's sender thread.
fn stream_module(
    cfg: &Config,
    data: &Dataset,
    module: usize,
    dest: SocketAddr,
    t0: Instant,
    gate: Option<&StopGate>,
    grants: Option<&Grants>,
) -> Result<Streamed> {
    let err = |what: &str, e: io::Error| {
        DaqError::Acquisition(format!("module {module} sending to {dest}: {what}: {e}"))
    };
    let mut sender = Sender::new(module as u16, dest).map_err(|e| err("socket", e))?;
    // xorshift64: a reproducible loss pattern for tests, one draw per packet.
    let mut rng = cfg
        .transport
        .loss_seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(module as u64)
        | 1;
    let loss = cfg.transport.loss;
    let mut lose = |_k: u32| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        loss > 0.0 && ((rng >> 11) as f64 / (1u64 << 53) as f64) < loss
    };
    let fb = data.frame_bytes();
    let mut frames = 0;
    let mut waited = Duration::ZERO;
    for i in 0..cfg.acquisition.frames {
        if gate.is_some_and(|g| !g.may_send(i)) {
            break;
        }
        if let Some(g) = grants {
            let t = Instant::now();
            let limit = Duration::from_millis(cfg.acquisition.deadline_ms.max(30_000));
            let granted = g.wait_for(i + 1, gate, limit)?;
            waited += t.elapsed();
            if !granted {
                break;
            }
        }
        if cfg.acquisition.rate_hz > 0.0 {
            let due = t0 + Duration::from_secs_f64(i as f64 / cfg.acquisition.rate_hz);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let src = &data.bytes[data.index_of(i) * fb + module * MODULE_BYTES..][..MODULE_BYTES];
        // Real detectors number frames from 1.
        sender
            .send_frame_bytes(i + 1, src, &mut lose)
            .map_err(|e| err("send", e))?;
        frames += 1;
    }
    let sent = sender.packets_sent();
    Ok(Streamed {
        bytes: sent * (MODULE_BYTES as u64 / u64::from(PACKETS_PER_FRAME)),
        packets: sent,
        frames,
        waited: waited.as_secs_f64(),
    })
}
