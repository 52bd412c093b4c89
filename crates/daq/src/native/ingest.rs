//! The receiver's native mode: one UDP socket per module, packets reassembled into frame slots
//! ([`super::reasm`]), each frame processed once done, with the rows of lost packets masked.
//!
//! Unlike a one-sided WRITE, a packet is copied into the ring by this thread, so a slot still
//! being processed is never written: a packet that would need it is dropped and counted (its
//! rows end up masked in the newer frame). An overrun here costs the newer frame's packets, never
//! the integrity of a frame being processed.
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::packet::{rows_of_packet, Packet, Repr, PACKETS_PER_FRAME, PACKET_LEN};
use super::reasm::{Done, Reassembler};
use super::send::HELLO;
use crate::config::Config;
use crate::model::{ERROR_WORD, MODULE_COLS, MODULE_PIXELS};
use crate::pipeline::Pipeline;
use crate::receiver::{commit, FrameResult, Progress, ReceiverReport};
use crate::writer::WriterThread;
use crate::{DaqError, Result};

/// Receive buffer asked for each module socket: a few frames of one module.
const SOCKET_BUFFER: usize = 16 << 20;

/// The bound sockets of a native receiver.
pub struct Sockets {
    control: TcpListener,
    modules: Vec<UdpSocket>,
}

impl Sockets {
    /// Binds the control address and one UDP socket per module on the same IP.
    pub fn bind(listen: SocketAddr, modules: usize) -> Result<Sockets> {
        let err = |what: String, e: std::io::Error| DaqError::Acquisition(format!("{what}: {e}"));
        let control = TcpListener::bind(listen).map_err(|e| err(format!("binding {listen}"), e))?;
        let ip = control
            .local_addr()
            .map_err(|e| err("control address".into(), e))?
            .ip();
        let modules = (0..modules)
            .map(|m| {
                let s = UdpSocket::bind(SocketAddr::new(ip, 0))
                    .map_err(|e| err(format!("module {m} socket on {ip}"), e))?;
                // The kernel may give less (net.core.rmem_max); the drops then show as lost
                // packets, which is what the test of a real receiver must show too.
                // As root, past net.core.rmem_max (what slsDetectorPackage's docs ask for).
                if rustix::net::sockopt::set_socket_recv_buffer_size_force(&s, SOCKET_BUFFER)
                    .is_err()
                {
                    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&s, SOCKET_BUFFER);
                }
                s.set_nonblocking(true)
                    .map_err(|e| err(format!("module {m} socket"), e))?;
                Ok(s)
            })
            .collect::<Result<_>>()?;
        Ok(Sockets { control, modules })
    }

    /// The control address.
    pub fn local_addr(&self) -> SocketAddr {
        self.control
            .local_addr()
            .expect("a bound listener has an address")
    }
}

enum Msg {
    Frame(Box<FrameResult>, usize, f64),
    Failed(DaqError),
}

/// Runs a native acquisition to its end.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    cfg: &Config,
    index: usize,
    sockets: Sockets,
    mut pipeline: Pipeline,
    writer: Option<WriterThread>,
    mut on_frame: Option<&mut dyn FnMut(&FrameResult)>,
    progress: &dyn Fn(&Progress),
) -> Result<ReceiverReport> {
    let modules = cfg.detector.modules;
    let frames = cfg.acquisition.frames;
    let wait = Duration::from_millis(cfg.acquisition.connect_timeout_ms);
    let control = accept(&sockets, wait)?;
    let slots = 2 * cfg.acquisition.bunch;
    let words = modules * MODULE_PIXELS;
    let ring: Arc<Vec<Mutex<Vec<u16>>>> =
        Arc::new((0..slots).map(|_| Mutex::new(vec![0u16; words])).collect());
    let deadline = Duration::from_millis(cfg.acquisition.deadline_ms);
    let mut reasm = Reassembler::new(modules, slots, deadline, 1);
    let mut rep = ReceiverReport {
        receiver: index,
        transport: "native".into(),
        modules,
        frames_expected: frames,
        bytes_expected: frames * (modules * MODULE_PIXELS * 2) as u64,
        engine: {
            let i = pipeline.engine().info();
            format!("{} ({} threads, {})", i.name, i.threads, i.simd)
        },
        file: cfg.output_of(index).map(|p| p.display().to_string()),
        ..Default::default()
    };
    let (to_worker, jobs) = mpsc::channel::<(u64, usize, Vec<u128>)>();
    let (worker_tx, results) = mpsc::channel::<Msg>();
    let process = cfg.pipeline.process;
    let slow = Duration::from_millis(cfg.pipeline.slow_ms);
    let wring = ring.clone();
    let wcfg = cfg.clone();
    let worker = std::thread::Builder::new()
        .name(format!("rpu-{index}"))
        .spawn(move || {
            for (frame, slot, missing) in jobs {
                let lost = missing
                    .iter()
                    .enumerate()
                    .filter(|(_, &m)| m != 0)
                    .fold(0u64, |acc, (i, _)| acc | 1 << i);
                let t = Instant::now();
                let raw = wring[slot].lock().expect("slot");
                let n = frame - 1;
                let outcome = if process {
                    match pipeline.process(n, &raw) {
                        Ok(o) => Some(o),
                        Err(e) => {
                            let _ = worker_tx.send(Msg::Failed(e));
                            return;
                        }
                    }
                } else {
                    None
                };
                drop(raw);
                if !slow.is_zero() {
                    std::thread::sleep(slow);
                }
                let fr = FrameResult {
                    frame: n,
                    lost_modules: lost,
                    missing_packets: if lost == 0 { Vec::new() } else { missing },
                    image: crate::receiver::kept_image(&wcfg, &pipeline, &outcome),
                    outcome,
                };
                let secs = t.elapsed().as_secs_f64();
                if worker_tx
                    .send(Msg::Frame(Box::new(fr), slot, secs))
                    .is_err()
                {
                    return;
                }
            }
        })
        .map_err(|e| DaqError::Acquisition(format!("starting the processing thread: {e}")))?;

    let mut busy = vec![false; slots];
    let mut buf = vec![0u8; PACKET_LEN + 1];
    let mut started: Option<Instant> = None;
    let mut last_commit = Instant::now();
    let mut in_worker = 0usize;
    let mut handed = 0u64;
    let mut closed_at: Option<Instant> = None;
    let mut last_progress = Instant::now();
    let mut control_buf = [0u8; 64];
    let mut last_overrun = None;
    control.set_nonblocking(true).ok();
    loop {
        let mut idle = true;
        let now = Instant::now();
        for sock in &sockets.modules {
            // Up to a frame's packets per socket per turn, so that no module starves another.
            for _ in 0..PACKETS_PER_FRAME {
                let n = match sock.recv(&mut buf) {
                    Ok(n) => n,
                    Err(_) => break,
                };
                idle = false;
                started.get_or_insert(now);
                let Ok(p) = Packet::new_checked(&buf[..n]) else {
                    rep.native_malformed += 1;
                    continue;
                };
                let h = Repr::parse(&p).expect("length checked");
                if h.frame == 0 || h.frame > frames {
                    rep.native_malformed += 1;
                    continue;
                }
                // An older frame holding this frame's slot is done now, whatever it misses.
                while reasm.must_evict_for(h.frame) {
                    let d = reasm.poll(now, true).expect("an open frame");
                    hand_over(&d, &ring, &mut busy, &to_worker, slots);
                    in_worker += 1;
                    handed += 1;
                }
                let slot = ((h.frame - 1) % slots as u64) as usize;
                if busy[slot] {
                    rep.overrun_packets += 1;
                    if last_overrun != Some(h.frame) {
                        rep.overruns += 1;
                        last_overrun = Some(h.frame);
                    }
                    continue;
                }
                if reasm.accept(now, &h).is_ok() {
                    let mut raw = ring[slot].lock().expect("slot");
                    let m = usize::from(h.module) * MODULE_PIXELS;
                    let rows = rows_of_packet(h.packet);
                    let dst = &mut raw[m + rows.start * MODULE_COLS..m + rows.end * MODULE_COLS];
                    for (w, b) in dst.iter_mut().zip(p.payload().chunks_exact(2)) {
                        *w = u16::from_le_bytes([b[0], b[1]]);
                    }
                }
            }
        }
        while let Some(d) = reasm.poll(Instant::now(), false) {
            // Its packets were only accepted while its slot was free, and only this frame can
            // take the slot before it is delivered (frames go in order).
            debug_assert!(!busy[((d.frame - 1) % slots as u64) as usize]);
            hand_over(&d, &ring, &mut busy, &to_worker, slots);
            in_worker += 1;
            handed += 1;
        }
        while let Ok(msg) = results.try_recv() {
            idle = false;
            match msg {
                Msg::Frame(fr, slot, secs) => {
                    rep.pipeline_seconds += secs;
                    busy[slot] = false;
                    in_worker -= 1;
                    commit(&mut rep, &fr, writer.as_ref(), &mut on_frame);
                    last_commit = Instant::now();
                }
                Msg::Failed(e) => return Err(e),
            }
        }
        if closed_at.is_none() {
            match (&control).read_probe(&mut control_buf) {
                Probe::Closed => closed_at = Some(Instant::now()),
                Probe::Open => {}
            }
        }
        let grace = closed_at.is_some_and(|t| t.elapsed() >= deadline.min(Duration::from_secs(2)));
        if grace {
            while reasm.open() > 0 {
                let d = reasm.poll(Instant::now(), true).expect("an open frame");
                let slot = ((d.frame - 1) % slots as u64) as usize;
                if busy[slot] {
                    break;
                }
                hand_over(&d, &ring, &mut busy, &to_worker, slots);
                in_worker += 1;
                handed += 1;
            }
        }
        let all_seen = handed >= frames || (grace && reasm.open() == 0);
        if in_worker == 0 && all_seen {
            break;
        }
        if last_progress.elapsed() >= Duration::from_millis(200) {
            last_progress = Instant::now();
            progress(&Progress {
                frames_expected: frames,
                frames_done: rep.frames_complete + rep.frames_partial,
                overruns: rep.overruns,
                kept: rep.kept,
            });
        }
        if idle {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    drop(to_worker);
    let _ = worker.join();
    let st = reasm.stats();
    rep.native = Some(st);
    rep.frames_lost = frames.saturating_sub(rep.frames_complete + rep.frames_partial);
    rep.seconds = started.map_or(0.0, |t| {
        last_commit.saturating_duration_since(t).as_secs_f64()
    });
    crate::receiver::finish(rep, writer, progress)
}

/// Masks the rows of the frame's missing packets and hands the frame to the processing thread.
fn hand_over(
    d: &Done,
    ring: &[Mutex<Vec<u16>>],
    busy: &mut [bool],
    to_worker: &mpsc::Sender<(u64, usize, Vec<u128>)>,
    slots: usize,
) {
    let slot = ((d.frame - 1) % slots as u64) as usize;
    {
        let mut raw = ring[slot].lock().expect("slot");
        for (m, &miss) in d.missing.iter().enumerate() {
            for k in (0..PACKETS_PER_FRAME).filter(|k| miss >> k & 1 == 1) {
                let rows = rows_of_packet(k);
                let base = m * MODULE_PIXELS;
                raw[base + rows.start * MODULE_COLS..base + rows.end * MODULE_COLS]
                    .fill(ERROR_WORD);
            }
        }
    }
    busy[slot] = true;
    let _ = to_worker.send((d.frame, slot, d.missing.clone()));
}

/// Waits for the emulator's control connection and tells it the module ports.
fn accept(s: &Sockets, wait: Duration) -> Result<TcpStream> {
    s.control.set_nonblocking(true).ok();
    let end = Instant::now() + wait;
    let (mut c, _) = loop {
        match s.control.accept() {
            Ok(x) => break x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= end {
                    return Err(DaqError::Acquisition(format!(
                        "no detector connected within {:.1} s (acquisition.connect_timeout_ms)",
                        wait.as_secs_f64()
                    )));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                return Err(DaqError::Acquisition(format!(
                    "accepting the detector: {e}"
                )))
            }
        }
    };
    c.set_nonblocking(false).ok();
    let ports: Vec<String> = s
        .modules
        .iter()
        .map(|u| u.local_addr().map(|a| a.port().to_string()))
        .collect::<std::io::Result<_>>()
        .map_err(|e| DaqError::Acquisition(format!("module socket: {e}")))?;
    writeln!(c, "{HELLO}{}", ports.join(","))
        .map_err(|e| DaqError::Acquisition(format!("telling the detector its ports: {e}")))?;
    Ok(c)
}

enum Probe {
    Open,
    Closed,
}

trait ReadProbe {
    fn read_probe(&self, buf: &mut [u8]) -> Probe;
}

impl ReadProbe for &TcpStream {
    /// Whether the peer closed the connection (a read of 0 bytes), without blocking.
    fn read_probe(&self, buf: &mut [u8]) -> Probe {
        use std::io::Read;
        let mut s = *self;
        match s.read(buf) {
            Ok(0) => Probe::Closed,
            Ok(_) => Probe::Open,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Probe::Open,
            Err(_) => Probe::Closed,
        }
    }
}
