//! The receiver's native mode: a [`NativeSocket`] per detector, packets reassembled
//! ([`Reassembler`]) straight into frame slots, each frame processed once done, with the rows of
//! lost packets masked.
//!
//! A slot is owned by one thread at a time: this thread while its frame is assembled, the
//! processing thread from the frame's hand-over until it sends the slot back. A packet whose
//! slot is away is dropped and counted as an overrun (its rows end up masked in the newer
//! frame): an overrun costs the newer frame's packets, never the integrity of a frame being
//! processed.
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::reassembler::{Done, Dropped, FrameStore, Reassembler};
use super::recv::NativeSocket;
use super::send::HELLO;
use crate::config::Config;
use crate::model::MODULE_PIXELS;
use crate::pipeline::Pipeline;
use crate::receiver::{commit, FrameResult, Progress, ReceiverReport};
use crate::tap::Tap;
use crate::writer::WriterThread;
use crate::{DaqError, Result};

/// The bound sockets of a native receiver.
pub struct Sockets {
    control: TcpListener,
    modules: NativeSocket,
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
        // The kernel may give a smaller buffer (net.core.rmem_max); the drops then show as
        // lost packets, which is what the test of a real receiver must show too.
        let modules = NativeSocket::bind(ip, 0, modules)
            .map_err(|e| err(format!("module sockets on {ip}"), e))?;
        tracing::debug!(
            ports = ?modules.ports(),
            recv_buffer = modules.recv_buffer(),
            "native module sockets"
        );
        Ok(Sockets { control, modules })
    }

    /// The control address.
    pub fn local_addr(&self) -> SocketAddr {
        self.control
            .local_addr()
            .expect("a bound listener has an address")
    }
}

/// A frame for the processing thread: its number, slot, words and missing packets.
struct Job {
    frame: u64,
    slot: usize,
    words: Vec<u16>,
    missing: Vec<u128>,
}

enum Msg {
    Frame(Box<FrameResult>, usize, Vec<u16>, f64),
    Failed(DaqError),
}

/// The ring as the reassembler sees it: slot `(f - 1) % slots`, `None` while it is away.
struct Slots<'a> {
    ring: &'a mut [Option<Vec<u16>>],
    to_worker: &'a mpsc::Sender<Job>,
    handed: &'a mut u64,
}

fn slot_of(frame: u64, slots: usize) -> usize {
    (frame.wrapping_sub(1) % slots as u64) as usize
}

impl FrameStore for Slots<'_> {
    fn module_mut(&mut self, frame: u64, module: usize) -> Option<&mut [u16]> {
        let s = slot_of(frame, self.ring.len());
        let words = self.ring[s].as_mut()?;
        words.get_mut(module * MODULE_PIXELS..(module + 1) * MODULE_PIXELS)
    }

    fn done(&mut self, d: Done) {
        let slot = slot_of(d.frame, self.ring.len());
        // An open frame's slot is here until it is done (only it can hold the slot).
        let Some(words) = self.ring[slot].take() else {
            debug_assert!(false, "frame {} done without its slot", d.frame);
            return;
        };
        *self.handed += 1;
        let _ = self.to_worker.send(Job {
            frame: d.frame,
            slot,
            words,
            missing: d.missing,
        });
    }
}

/// Runs a native acquisition to its end.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    cfg: &Config,
    index: usize,
    mut sockets: Sockets,
    mut pipeline: Pipeline,
    engine_choice: crate::engine::calibrate::EngineChoice,
    tap: Option<Arc<Tap>>,
    writer: Option<WriterThread>,
    mut on_frame: Option<&mut dyn FnMut(&FrameResult)>,
    progress: &dyn Fn(&Progress),
) -> Result<ReceiverReport> {
    let modules = cfg.detector.modules;
    let frames = cfg.acquisition.frames;
    let wait = Duration::from_millis(cfg.acquisition.connect_timeout_ms);
    let control = accept(&sockets, wait)?;
    // The frame buffer: as many frame slots as `[receiver] buffer` holds; a frame waits in its
    // slot for the processing thread instead of being overwritten by a newer one.
    let (layout, buffer) = crate::flow::ring_for(cfg, index)?;
    let slots = layout.slots();
    let mut ring: Vec<Option<Vec<u16>>> = (0..slots)
        .map(|_| Some(vec![0u16; modules * MODULE_PIXELS]))
        .collect();
    let deadline = Duration::from_millis(cfg.acquisition.deadline_ms);
    let mut reasm = Reassembler::new(modules, slots, deadline).frames(1..=frames);
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
        engine_choice: Some(engine_choice),
        file: cfg.output_of(index).map(|p| p.display().to_string()),
        buffer: Some(buffer),
        overrun_policy: crate::flow::OverrunPolicy::Mask.name().into(),
        ..Default::default()
    };
    let (to_worker, jobs) = mpsc::channel::<Job>();
    let (worker_tx, results) = mpsc::channel::<Msg>();
    let process = cfg.pipeline.process;
    let slow = Duration::from_millis(cfg.pipeline.slow_ms);
    let wcfg = cfg.clone();
    let wtap = tap.clone();
    let worker = std::thread::Builder::new()
        .name(format!("rpu-{index}"))
        .spawn(move || {
            for job in jobs {
                let lost = job
                    .missing
                    .iter()
                    .enumerate()
                    .filter(|(_, &m)| m != 0)
                    .fold(0u64, |acc, (i, _)| acc | 1 << i);
                let t = Instant::now();
                let n = job.frame - 1;
                let outcome = if process {
                    match pipeline.process(n, &job.words) {
                        Ok(o) => Some(o),
                        Err(e) => {
                            let _ = worker_tx.send(Msg::Failed(e));
                            return;
                        }
                    }
                } else {
                    None
                };
                if !slow.is_zero() {
                    std::thread::sleep(slow);
                }
                // The writer's copy first: the preview takes the buffer away.
                let image = crate::receiver::kept_image(&wcfg, &pipeline, &outcome);
                let tap = wtap.as_deref();
                crate::receiver::offer_preview(tap, index, n, &mut pipeline, &outcome);
                let fr = FrameResult {
                    frame: n,
                    lost_modules: lost,
                    missing_packets: if lost == 0 { Vec::new() } else { job.missing },
                    image,
                    outcome,
                    raw: wcfg.output.raw.then(|| job.words.to_vec()),
                };
                let secs = t.elapsed().as_secs_f64();
                let msg = Msg::Frame(Box::new(fr), job.slot, job.words, secs);
                if worker_tx.send(msg).is_err() {
                    return;
                }
            }
            crate::receiver::leave_pedestal(wtap.as_deref(), &wcfg, index, &pipeline);
        })
        .map_err(|e| DaqError::Acquisition(format!("starting the processing thread: {e}")))?;

    let mut started: Option<Instant> = None;
    let mut last_commit = Instant::now();
    let mut handed = 0u64;
    let mut committed = 0u64;
    let mut closed_at: Option<Instant> = None;
    let mut last_progress = Instant::now();
    let mut last_arrival = Instant::now();
    let mut control_buf = [0u8; 64];
    let mut last_overrun = None;
    control.set_nonblocking(true).ok();
    loop {
        let now = Instant::now();
        let mut store = Slots {
            ring: &mut ring,
            to_worker: &to_worker,
            handed: &mut handed,
        };
        sockets
            .modules
            .recv_batch(Duration::from_millis(1), |d| {
                started.get_or_insert(now);
                last_arrival = now;
                if let Err(Dropped::NoSlot(f)) = reasm.push(now, d, &mut store) {
                    rep.overrun_packets += 1;
                    if last_overrun != Some(f) {
                        rep.overruns += 1;
                        last_overrun = Some(f);
                    }
                }
            })
            .map_err(|e| DaqError::Acquisition(format!("receiving module packets: {e}")))?;
        reasm.poll(Instant::now(), &mut store);
        // A stopped emulator ends on whole frames: once its last packets landed (the closed
        // control connection can overtake them), nothing more is coming.
        let stopping = tap.as_ref().is_some_and(|t| t.gate.requested())
            && last_arrival.elapsed() >= Duration::from_millis(200);
        let grace = closed_at
            .is_some_and(|t| stopping || t.elapsed() >= deadline.min(Duration::from_secs(2)));
        if grace {
            // Open frames hold their slots, so they can all be handed over now.
            reasm.flush(&mut store);
        }
        // recv_batch waited up to 1 ms when nothing came: the loop never spins.
        while let Ok(msg) = results.try_recv() {
            match msg {
                Msg::Frame(fr, slot, words, secs) => {
                    rep.pipeline_seconds += secs;
                    ring[slot] = Some(words);
                    rep.buffer_high_water_frames =
                        rep.buffer_high_water_frames.max(handed - committed);
                    committed += 1;
                    commit(&mut rep, *fr, writer.as_ref(), &mut on_frame);
                    last_commit = Instant::now();
                }
                Msg::Failed(e) => return Err(e),
            }
        }
        if closed_at.is_none() && peer_closed(&control, &mut control_buf) {
            closed_at = Some(Instant::now());
        }
        let all_seen = handed >= frames || (grace && reasm.open_frames() == 0);
        if committed == handed && all_seen {
            break;
        }
        if last_progress.elapsed() >= Duration::from_millis(200) {
            last_progress = Instant::now();
            progress(&Progress {
                frames_expected: frames,
                frames_done: rep.frames_complete + rep.frames_partial,
                overruns: rep.overruns,
                kept: rep.kept,
                buffered: handed.saturating_sub(committed),
            });
        }
    }
    drop(to_worker);
    let _ = worker.join();
    let st = reasm.stats();
    let rs = sockets.modules.stats();
    rep.native = Some(st);
    rep.native_malformed = st.malformed() + rs.truncated;
    rep.frames_lost = frames.saturating_sub(rep.frames_complete + rep.frames_partial);
    rep.seconds = started.map_or(0.0, |t| {
        last_commit.saturating_duration_since(t).as_secs_f64()
    });
    crate::receiver::finish(rep, writer, progress)
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
    let ports: Vec<String> = s.modules.ports().iter().map(|p| p.to_string()).collect();
    writeln!(c, "{HELLO}{}", ports.join(","))
        .map_err(|e| DaqError::Acquisition(format!("telling the detector its ports: {e}")))?;
    Ok(c)
}

/// Whether the peer closed the (non-blocking) control connection: a read of 0 bytes or an
/// error other than "nothing yet".
fn peer_closed(c: &TcpStream, buf: &mut [u8]) -> bool {
    use std::io::Read;
    let mut s = c;
    match s.read(buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}
