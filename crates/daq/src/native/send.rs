//! The sending end: a [`Sender`] streams one module's frames as a JUNGFRAU module does, 128
//! packets per frame from its own UDP socket to its own destination port; and the emulator's
//! native mode ([`run`]), one sender thread per module.
//!
//! Pacing is the caller's job. Packets go out one `send(2)` each: at the emulator's rates the
//! kernel's per-datagram work dominates, which `sendmmsg` would not remove (not measured).
//!
//! The emulator learns the receiver's UDP ports from a one-line exchange on the receiver's
//! control address (what the detector's control software configures on a real system):
//! `remora-native 1 ports P0,P1,...`. The connection stays open for the run; closing it tells
//! the receiver the stream has ended.
use std::io::{self, BufRead, BufReader};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use super::packet::{words_of_packet, Packet, Repr, PACKETS_PER_FRAME, PACKET_LEN};
use crate::config::Config;
use crate::dataset::Dataset;
use crate::emulator::EmulatorReport;
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

/// Asks a native receiver for its module ports.
pub(crate) fn ports(control: &TcpStream, modules: usize) -> Result<Vec<u16>> {
    let mut line = String::new();
    BufReader::new(control)
        .read_line(&mut line)
        .map_err(|e| DaqError::Acquisition(format!("reading the receiver's ports: {e}")))?;
    let ports: Vec<u16> = line
        .trim()
        .strip_prefix(HELLO)
        .ok_or_else(|| DaqError::Acquisition(format!("not a native receiver: {line:?}")))?
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
    Ok(ports)
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
    let ports = ports(&control, cfg.detector.modules)?;
    let t0 = Instant::now();
    let results: Vec<Result<(u64, u64, u64)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = ports
            .iter()
            .enumerate()
            .map(|(m, &port)| {
                let dest = SocketAddr::new(to.ip(), port);
                sc.spawn(move || stream_module(cfg, data, m, dest, t0, gate))
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
        let (bytes, packets, frames) = r?;
        rep.bytes += bytes;
        rep.packets += packets;
        rep.frames_sent = rep.frames_sent.min(frames);
    }
    if rep.frames_sent == u64::MAX {
        rep.frames_sent = 0;
    }
    // Closing the control connection ends the stream for the receiver.
    drop(control);
    Ok(rep)
}

/// One module's sender thread; returns (payload bytes, packets sent, frames sent).
fn stream_module(
    cfg: &Config,
    data: &Dataset,
    module: usize,
    dest: SocketAddr,
    t0: Instant,
    gate: Option<&StopGate>,
) -> Result<(u64, u64, u64)> {
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
    for i in 0..cfg.acquisition.frames {
        if gate.is_some_and(|g| !g.may_send(i)) {
            break;
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
    Ok((
        sent * (MODULE_BYTES as u64 / u64::from(PACKETS_PER_FRAME)),
        sent,
        frames,
    ))
}
