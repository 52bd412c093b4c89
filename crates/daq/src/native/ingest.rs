//! The receiver's native mode: a [`NativeSocket`] per detector, packets reassembled
//! ([`Reassembler`]) straight into frame slots, each frame processed once done, with the rows of
//! lost packets masked.
//!
//! A slot is owned by one thread at a time: the receive loop while its frame is assembled, the
//! processing thread from the frame's hand-over until the pipeline has taken the frame (a host
//! engine processed it, a device engine copied it), when the slot goes back. A packet whose
//! slot is away is dropped and counted as an overrun (its rows end up masked in the newer
//! frame): an overrun costs the newer frame's packets, never the integrity of a frame being
//! processed. The receive loop itself is the receiver's (`crate::receiver::ingest`); this
//! module is what it calls to take packets in.
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::reassembler::{Done, Dropped, FrameStore, Reassembler, ReassemblyStats};
use super::recv::NativeSocket;
use super::send::{CREDITS, HELLO};
use crate::config::Config;
use crate::model::MODULE_PIXELS;
use crate::pipeline::Pipeline;
use crate::receiver::ingest::{Ingest, Msg};
use crate::receiver::processing::{leave_pedestal, Ctx, InFlight, Waiting};
use crate::receiver::report::ReceiverReport;
use crate::tap::Tap;
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

/// A frame slot back from the processing thread.
pub(crate) type Slot = (usize, Vec<u16>);

/// The ring as the reassembler sees it: slot `(f - 1) % slots`, `None` while it is away.
struct Slots<'a> {
    ring: &'a mut [Option<Vec<u16>>],
    to_worker: Option<&'a mpsc::Sender<Job>>,
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
        if let Some(tx) = self.to_worker {
            let _ = tx.send(Job {
                frame: d.frame,
                slot,
                words,
                missing: d.missing,
            });
        }
    }
}

/// A running native acquisition's receive side.
pub(crate) struct NativeIngest {
    sockets: Sockets,
    control: TcpStream,
    control_buf: [u8; 64],
    ring: Vec<Option<Vec<u16>>>,
    reasm: Reassembler,
    to_worker: Option<mpsc::Sender<Job>>,
    worker: Option<JoinHandle<()>>,
    frames: u64,
    handed: u64,
    returned: u64,
    high_water: u64,
    started: Option<Instant>,
    overruns: u64,
    overrun_packets: u64,
    last_overrun: Option<u64>,
    credits: Option<Credits>,
}

/// `overrun = "backpressure"`: the emulated detector sends frame `f` only once the receiver
/// has granted it, over the control connection (`C <f>` lines), so nothing is ever dropped: a
/// frame is granted when its slot is free and the module sockets hold few enough frames that the
/// kernel cannot drop one.
struct Credits {
    /// The highest frame granted so far.
    granted: u64,
    /// Frames that may wait in the module sockets, from their receive buffer size.
    window: u64,
    slots: u64,
    /// Part of a grant line the non-blocking control connection did not take yet.
    pending: Vec<u8>,
}

impl NativeIngest {
    /// Waits for the detector, sizes the frame buffer and starts the processing thread.
    pub(crate) fn start(
        cfg: &Config,
        index: usize,
        sockets: Sockets,
        pipeline: Pipeline,
        tap: Option<std::sync::Arc<Tap>>,
    ) -> Result<(NativeIngest, mpsc::Receiver<Msg<Slot>>)> {
        let modules = cfg.detector.modules;
        let frames = cfg.acquisition.frames;
        let wait = Duration::from_millis(cfg.acquisition.connect_timeout_ms);
        let backpressure = cfg.receiver.overrun == crate::flow::OverrunPolicy::Backpressure;
        let control = accept(&sockets, wait, backpressure)?;
        control.set_nonblocking(true).ok();
        // The frame buffer: as many frame slots as `[receiver] buffer` holds; a frame waits in
        // its slot for the processing thread instead of being overwritten by a newer one.
        let (layout, _) = crate::flow::ring_for(cfg, index)?;
        let slots = layout.slots();
        let ring = (0..slots)
            .map(|_| Some(vec![0u16; modules * MODULE_PIXELS]))
            .collect();
        let deadline = Duration::from_millis(cfg.acquisition.deadline_ms);
        let reasm = Reassembler::new(modules, slots, deadline).frames(1..=frames);
        // The kernel charges a datagram more than its payload (its buffer's true size): a
        // quarter of the receive buffer's worth of frames is safe.
        let window = (sockets.modules.recv_buffer() / (4 * crate::ring::MODULE_BYTES)).max(2);
        let credits = backpressure.then(|| Credits {
            granted: 0,
            window: window as u64,
            slots: slots as u64,
            pending: Vec::new(),
        });
        let (to_worker, jobs) = mpsc::channel::<Job>();
        let (worker_tx, results) = mpsc::channel();
        let cfg = cfg.clone();
        let worker = std::thread::Builder::new()
            .name(format!("rpu-{index}"))
            .spawn(move || process(&cfg, index, pipeline, tap.as_deref(), jobs, worker_tx))
            .map_err(|e| DaqError::Acquisition(format!("starting the processing thread: {e}")))?;
        let ingest = NativeIngest {
            sockets,
            control,
            control_buf: [0; 64],
            ring,
            reasm,
            to_worker: Some(to_worker),
            worker: Some(worker),
            frames,
            handed: 0,
            returned: 0,
            high_water: 0,
            started: None,
            overruns: 0,
            overrun_packets: 0,
            last_overrun: None,
            credits,
        };
        let mut ingest = ingest;
        ingest.grant();
        Ok((ingest, results))
    }

    /// Grants the source every frame that has a free slot and room in the sockets (with
    /// backpressure), as far as the control connection takes it without blocking.
    fn grant(&mut self) {
        use std::io::ErrorKind;
        let Some(c) = &mut self.credits else { return };
        let upto = (self.returned + c.slots)
            .min(self.handed + c.window)
            .min(self.frames);
        if upto > c.granted && c.pending.is_empty() {
            c.pending = format!("C {upto}\n").into_bytes();
            c.granted = upto;
        }
        while !c.pending.is_empty() {
            match (&self.control).write(&c.pending) {
                Ok(0) => break,
                Ok(n) => {
                    c.pending.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // WouldBlock: the rest goes next turn; anything else: the source has gone.
                Err(_) => break,
            }
        }
    }
}

impl Ingest for NativeIngest {
    type Done = Slot;

    fn pump(&mut self, now: Instant) -> Result<bool> {
        let mut store = Slots {
            ring: &mut self.ring,
            to_worker: self.to_worker.as_ref(),
            handed: &mut self.handed,
        };
        let mut arrived = false;
        let (reasm, started) = (&mut self.reasm, &mut self.started);
        let (overruns, packets, last) = (
            &mut self.overruns,
            &mut self.overrun_packets,
            &mut self.last_overrun,
        );
        // Waits up to 1 ms when nothing comes: the loop never spins.
        self.sockets
            .modules
            .recv_batch(Duration::from_millis(1), |d| {
                started.get_or_insert(now);
                arrived = true;
                if let Err(Dropped::NoSlot(f)) = reasm.push(now, d, &mut store) {
                    *packets += 1;
                    if *last != Some(f) {
                        *overruns += 1;
                        *last = Some(f);
                    }
                }
            })
            .map_err(|e| DaqError::Acquisition(format!("receiving module packets: {e}")))?;
        reasm.poll(Instant::now(), &mut store);
        self.grant();
        Ok(arrived)
    }

    fn closed(&mut self) -> bool {
        peer_closed(&self.control, &mut self.control_buf)
    }

    fn flush(&mut self, _now: Instant) {
        // Open frames hold their slots, so they can all be handed over now.
        let mut store = Slots {
            ring: &mut self.ring,
            to_worker: self.to_worker.as_ref(),
            handed: &mut self.handed,
        };
        self.reasm.flush(&mut store);
    }

    fn done(&mut self, (slot, words): Slot) {
        self.high_water = self.high_water.max(self.handed - self.returned);
        self.returned += 1;
        self.ring[slot] = Some(words);
        self.grant();
    }

    fn finished(&self, flushed: bool, results: u64) -> bool {
        let all_seen = self.handed >= self.frames || (flushed && self.reasm.open_frames() == 0);
        all_seen && results == self.handed && self.returned == self.handed
    }

    fn load(&self) -> (u64, u64) {
        (self.overruns, self.handed.saturating_sub(self.returned))
    }

    fn started(&self) -> Option<Instant> {
        self.started
    }

    fn idle(&self) {}

    fn finish(mut self, rep: &mut ReceiverReport) {
        drop(self.to_worker.take());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
        let st: ReassemblyStats = self.reasm.stats();
        let rs = self.sockets.modules.stats();
        rep.native = Some(st);
        rep.native_malformed = st.malformed() + rs.truncated;
        rep.overruns = self.overruns;
        rep.overrun_packets = self.overrun_packets;
        rep.buffer_high_water_frames = self.high_water;
        rep.frames_lost = self
            .frames
            .saturating_sub(rep.frames_complete + rep.frames_partial);
    }
}

/// The processing thread: each whole frame into the pipeline, its slot back as soon as the
/// pipeline has taken it, results in frame order with up to the pipeline's depth in flight.
fn process(
    cfg: &Config,
    index: usize,
    mut pipeline: Pipeline,
    tap: Option<&Tap>,
    jobs: mpsc::Receiver<Job>,
    tx: mpsc::Sender<Msg<Slot>>,
) {
    let slow = Duration::from_millis(cfg.pipeline.slow_ms);
    let ctx = Ctx { cfg, index, tap };
    let mut in_flight = InFlight::new(cfg, &pipeline);
    for job in jobs {
        let lost = job
            .missing
            .iter()
            .enumerate()
            .filter(|(_, &m)| m != 0)
            .fold(0u64, |acc, (i, _)| acc | 1 << i);
        let t = Instant::now();
        let n = job.frame - 1;
        let raw = cfg.output.raw.then(|| job.words.to_vec());
        if cfg.pipeline.process {
            let preview = tap.is_some_and(|t| t.preview_due());
            if let Err(e) = pipeline.submit_with_pixels(n, &job.words, preview) {
                let _ = tx.send(Msg::Failed(e));
                return;
            }
        }
        if !slow.is_zero() {
            std::thread::sleep(slow);
        }
        if tx.send(Msg::Done((job.slot, job.words))).is_err() {
            return;
        }
        let w = Waiting {
            frame: n,
            since: t,
            lost_modules: lost,
            missing: if lost == 0 { Vec::new() } else { job.missing },
            raw,
            // The slot was this thread's until the pipeline had the frame.
            intact: true,
        };
        if !in_flight.push(w, ctx, &mut pipeline, &tx) {
            return;
        }
    }
    if in_flight.drain(ctx, &mut pipeline, &tx) {
        leave_pedestal(tap, cfg, index, &pipeline);
    }
}

/// Waits for the emulator's control connection and tells it the module ports, and whether it
/// is to wait for grants (`credits`).
fn accept(s: &Sockets, wait: Duration, credits: bool) -> Result<TcpStream> {
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
    let flag = if credits { CREDITS } else { "" };
    writeln!(c, "{HELLO}{}{flag}", ports.join(","))
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
