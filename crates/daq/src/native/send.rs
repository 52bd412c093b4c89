//! The emulator's native mode: each module sends its frames as the detector does, 128 UDP
//! packets per frame from its own socket to its own port on the receiver.
//!
//! The receiver's UDP ports come from a one-line exchange on its control address (what the
//! detector's control software configures on a real system): `remora-native 1 ports P0,P1,...`.
//! The connection stays open for the run; closing it tells the receiver the stream has ended.
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use super::packet::{rows_of_packet, Packet, Repr, PACKETS_PER_FRAME, PACKET_LEN};
use crate::config::Config;
use crate::dataset::Dataset;
use crate::emulator::EmulatorReport;
use crate::model::MODULE_COLS;
use crate::ring::MODULE_BYTES;
use crate::{DaqError, Result};

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

/// Streams the dataset as native packets to the receiver at `to`.
pub fn run(cfg: &Config, data: &Dataset, to: SocketAddr) -> Result<EmulatorReport> {
    let control = TcpStream::connect_timeout(&to, Duration::from_secs(10))
        .map_err(|e| DaqError::Acquisition(format!("connecting to receiver 0 at {to}: {e}")))?;
    let modules = cfg.detector.modules;
    let ports = ports(&control, modules)?;
    let t0 = Instant::now();
    let results: Vec<Result<(u64, u64)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = ports
            .iter()
            .enumerate()
            .map(|(m, &port)| {
                let dest = SocketAddr::new(to.ip(), port);
                sc.spawn(move || stream_module(cfg, data, m, dest, t0))
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
        frames_sent: cfg.acquisition.frames,
        seconds: t0.elapsed().as_secs_f64(),
        ..Default::default()
    };
    for r in results {
        let (bytes, packets) = r?;
        rep.bytes += bytes;
        rep.packets += packets;
    }
    // Closing the control connection ends the stream for the receiver.
    drop(control);
    Ok(rep)
}

/// One module's sender; returns (payload bytes, packets sent).
fn stream_module(
    cfg: &Config,
    data: &Dataset,
    module: usize,
    dest: SocketAddr,
    t0: Instant,
) -> Result<(u64, u64)> {
    let bind: SocketAddr = if dest.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let err = |what: &str, e: std::io::Error| {
        DaqError::Acquisition(format!("module {module} sending to {dest}: {what}: {e}"))
    };
    let sock = UdpSocket::bind(bind).map_err(|e| err("bind", e))?;
    sock.connect(dest).map_err(|e| err("connect", e))?;
    let mut pkt = vec![0u8; PACKET_LEN];
    let mut rng = cfg
        .transport
        .loss_seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(module as u64)
        | 1;
    let loss = cfg.transport.loss;
    let (mut bytes, mut sent) = (0u64, 0u64);
    let fb = data.frame_bytes();
    let line = MODULE_COLS * 2;
    for i in 0..cfg.acquisition.frames {
        if cfg.acquisition.rate_hz > 0.0 {
            let due = t0 + Duration::from_secs_f64(i as f64 / cfg.acquisition.rate_hz);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let src = &data.bytes[data.index_of(i) * fb + module * MODULE_BYTES..][..MODULE_BYTES];
        for k in 0..PACKETS_PER_FRAME {
            let rows = rows_of_packet(k);
            let mut p = Packet::new_unchecked(&mut pkt[..]);
            Repr {
                // Real detectors number frames from 1.
                frame: i + 1,
                packet: k,
                module: module as u16,
                timestamp: t0.elapsed().as_nanos() as u64 / 100,
            }
            .emit(&mut p);
            p.payload_mut()
                .copy_from_slice(&src[rows.start * line..rows.end * line]);
            // xorshift64: a reproducible loss pattern for tests.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if loss > 0.0 && ((rng >> 11) as f64 / (1u64 << 53) as f64) < loss {
                continue;
            }
            loop {
                match sock.send(&pkt) {
                    Ok(_) => break,
                    // The receiver's socket buffer is full; a detector would lose the packet.
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(err("send", e)),
                }
            }
            bytes += (rows.len() * line) as u64;
            sent += 1;
        }
    }
    Ok((bytes, sent))
}
