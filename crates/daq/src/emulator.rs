//! The detector emulator (REMU): one data transmitter per module and receiver, each a thread
//! with its own UC queue pair, pushing its module's frames into the receiver's ring with
//! one-sided WRITEs at addresses it computes itself ([`crate::ring::descriptors`]).
//!
//! Per stack and module: a zero-length WRITE-with-immediate saying the stack starts, the lines
//! of every frame of the stack, and the end-of-stack immediate riding on the last line. It never
//! waits for a receiver: UC has no acknowledgements, and a late or absent receiver costs frames,
//! not time. Frames leave at the configured rate (frame `i` at `i / rate` after the start) or
//! back to back.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use remora_fabric::{connect, Completion, Error as FabricError, Qp, RegionInfo};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

use crate::config::{Config, TransportKind};
use crate::dataset::Dataset;
use crate::flow::{CreditTarget, CreditWord};
use crate::link::{Announce, Hello};
use crate::ring::{descriptors, Marker, RingLayout, MODULE_BYTES};
use crate::tap::StopGate;
use crate::{DaqError, Result};

pub(crate) mod report;

pub use report::EmulatorReport;

fn fab(what: &str) -> impl Fn(FabricError) -> DaqError + '_ {
    move |e| DaqError::Acquisition(format!("{what}: {e}"))
}

pub use crate::link::qp_options;

/// Streams the dataset to the receivers at `to` (one address per configured receiver).
/// `progress` is called with the frames sent so far, from time to time.
pub fn run(
    cfg: &Config,
    data: &Dataset,
    to: &[SocketAddr],
    progress: &(dyn Fn(u64) + Sync),
) -> Result<EmulatorReport> {
    run_until(cfg, data, to, progress, None)
}

/// [`run`], stopping early when `gate` asks: every transmitter then ends after the same stack
/// (native mode: the same frame), so the frames sent are whole, and the report counts them.
pub fn run_until(
    cfg: &Config,
    data: &Dataset,
    to: &[SocketAddr],
    progress: &(dyn Fn(u64) + Sync),
    gate: Option<&StopGate>,
) -> Result<EmulatorReport> {
    if to.len() != cfg.receivers.len() {
        return Err(DaqError::Config(format!(
            "{} receiver addresses for {} configured receivers",
            to.len(),
            cfg.receivers.len()
        )));
    }
    if data.modules != cfg.detector.modules {
        return Err(DaqError::Acquisition(format!(
            "the dataset has {} modules, detector.modules says {}",
            data.modules, cfg.detector.modules
        )));
    }
    if cfg.transport.kind == TransportKind::Native {
        return crate::native::send::run(cfg, data, to[0], gate);
    }
    let pd = Arc::new(Pd::new());
    // A sealed memfd: over shm the receiver's side copies straight out of it.
    let buf = Buffer::memfd("remora-emulator", data.bytes.len().max(4096))
        .map_err(|e| DaqError::Acquisition(format!("dataset buffer: {e}")))?;
    // Filled below, so every page is resident before the run starts.
    let region = pd
        .register(buf, Access::LOCAL_WRITE, Mode::OnDemand)
        .map_err(|e| DaqError::Acquisition(format!("registering the dataset: {e}")))?;
    region
        .write_at(0, &data.bytes)
        .map_err(|e| DaqError::Acquisition(format!("loading the dataset: {e}")))?;
    let modules = cfg.detector.modules;
    let threads = modules * to.len();
    let barrier = Barrier::new(threads);
    let sent = AtomicU64::new(0);
    // With RoI slicing every receiver gets (a slice of) every frame.
    let per_frame = match cfg.emulator.fanout {
        crate::config::Fanout::Roi => to.len() as u64,
        crate::config::Fanout::Time => 1,
    };
    let start = std::sync::OnceLock::new();
    let results: Vec<Result<Streamed>> = std::thread::scope(|sc| {
        let mut hs = Vec::new();
        for (r, &addr) in to.iter().enumerate() {
            for m in 0..modules {
                let (pd, region, barrier, sent, start) = (&pd, &region, &barrier, &sent, &start);
                hs.push(
                    std::thread::Builder::new()
                        .name(format!("remu-r{r}-m{m}"))
                        .spawn_scoped(sc, move || {
                            let tx = Transmitter::connect(cfg, data, pd, region, r, m, addr);
                            // Everyone meets at the barrier, connected or not, so nobody hangs.
                            barrier.wait();
                            let tx = tx?;
                            let t0 = *start.get_or_init(Instant::now);
                            tx.stream(t0, gate, |n| {
                                // Module 0 of each receiver counts detector frames.
                                if m == 0 {
                                    let s = sent.fetch_add(n, Ordering::Relaxed) + n;
                                    progress(s / per_frame);
                                }
                            })
                        })
                        .expect("spawning a transmitter"),
                );
            }
        }
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(DaqError::Acquisition("transmitter panicked".into())))
            })
            .collect()
    });
    let seconds = start.get().map_or(0.0, |t| t.elapsed().as_secs_f64());
    let mut rep = EmulatorReport {
        seconds,
        ..Default::default()
    };
    // Frames every module sent whole, per receiver.
    let mut per_receiver = vec![u64::MAX; to.len()];
    for (i, res) in results.into_iter().enumerate() {
        let st = res?;
        rep.bytes += st.bytes;
        rep.writes += st.writes;
        rep.packets += st.packets;
        rep.credit_wait_seconds = rep.credit_wait_seconds.max(st.credit_wait.as_secs_f64());
        let r = i / modules;
        per_receiver[r] = per_receiver[r].min(st.frames);
    }
    rep.frames_sent = match cfg.emulator.fanout {
        // Every receiver gets a slice of every frame.
        crate::config::Fanout::Roi => per_receiver.iter().copied().min().unwrap_or(0),
        crate::config::Fanout::Time => per_receiver.iter().sum(),
    };
    Ok(rep)
}

/// What one transmitter did.
struct Streamed {
    bytes: u64,
    writes: u64,
    packets: u64,
    frames: u64,
    credit_wait: Duration,
}

struct Transmitter<'a> {
    cfg: &'a Config,
    data: &'a Dataset,
    region: &'a Arc<Region>,
    qp: Qp,
    remote: RegionInfo,
    ring: RingLayout,
    receiver: usize,
    module: usize,
    /// Ring credits, when the overrun policy has the source wait for them.
    credit: Option<CreditWord>,
    /// Send completions seen so far.
    completed: std::cell::Cell<u64>,
}

impl<'a> Transmitter<'a> {
    fn connect(
        cfg: &'a Config,
        data: &'a Dataset,
        pd: &Arc<Pd>,
        region: &'a Arc<Region>,
        receiver: usize,
        module: usize,
        addr: SocketAddr,
    ) -> Result<Transmitter<'a>> {
        let what = format!("module {module} connecting to receiver {receiver} at {addr}");
        // The word starts at the smallest ring (two stacks); the receiver's first credit says
        // how deep its ring really is.
        let credit = match cfg.receiver.overrun.flow_controlled() {
            true => Some(CreditWord::register(pd, 2)?),
            false => None,
        };
        let hello = Hello {
            module,
            credit: credit
                .as_ref()
                .and_then(|c| CreditTarget::decode(&c.info())),
        }
        .encode();
        let (qp, peer) = connect(addr, pd.clone(), qp_options(cfg, module, receiver), &hello)
            .map_err(fab(&what))?;
        let Announce {
            region: remote,
            ring,
        } = Announce::decode(&peer).map_err(|e| DaqError::Acquisition(format!("{what}: {e}")))?;
        if ring.modules != cfg.detector.modules || ring.bunch != cfg.acquisition.bunch {
            return Err(DaqError::Acquisition(format!(
                "{what}: the receiver's ring is {} modules x {} frames per stack, the configuration says {} x {}",
                ring.modules, ring.bunch, cfg.detector.modules, cfg.acquisition.bunch
            )));
        }
        Ok(Transmitter {
            cfg,
            data,
            region,
            qp,
            remote,
            ring,
            receiver,
            module,
            credit,
            completed: std::cell::Cell::new(0),
        })
    }

    /// Posts one WRITE, draining send completions when the queue is full.
    fn post(&self, wr: u64, src: usize, len: usize, dst: usize, imm: Option<u32>) -> Result<()> {
        let mut done: Vec<Completion> = Vec::with_capacity(64);
        loop {
            match self.qp.post_write(
                wr,
                self.region,
                src,
                len,
                self.remote.addr + dst as u64,
                self.remote.rkey,
                imm,
            ) {
                Ok(()) => break,
                Err(FabricError::QueueFull(_)) => {
                    // Sleep on the completion queue rather than spin: the cores are the
                    // receiver's too when both run on one host.
                    if self.qp.poll(&mut done, 64) == 0 {
                        if let Ok(Some(c)) = self.qp.wait(Duration::from_millis(2)) {
                            done.push(c);
                        }
                    }
                    self.seen(&done)?;
                    done.clear();
                }
                Err(e) => {
                    return Err(DaqError::Acquisition(format!(
                        "module {} to receiver {}: {e}",
                        self.module, self.receiver
                    )))
                }
            }
        }
        while self.qp.poll(&mut done, 64) > 0 {
            self.seen(&done)?;
            done.clear();
        }
        Ok(())
    }

    fn seen(&self, done: &[Completion]) -> Result<()> {
        self.completed.set(self.completed.get() + done.len() as u64);
        check(done)
    }

    /// Waits until the `posted` WRITEs have completed: on RC a WRITE is delivered only once it
    /// is acknowledged, and closing the queue pair before would lose what is still in flight.
    fn drain(&self, posted: u64) -> Result<()> {
        let end = Instant::now() + Duration::from_secs(30);
        while self.completed.get() < posted {
            if Instant::now() >= end {
                return Err(DaqError::Acquisition(format!(
                    "module {} to receiver {}: {} of {posted} WRITEs unacknowledged after 30 s",
                    self.module,
                    self.receiver,
                    posted - self.completed.get()
                )));
            }
            let c = self
                .qp
                .wait(Duration::from_millis(20))
                .map_err(|e| DaqError::Acquisition(format!("module {}: {e}", self.module)))?;
            if let Some(c) = c {
                self.seen(&[c])?;
            }
        }
        Ok(())
    }

    /// Streams every frame of this receiver (up to where `gate` stops it).
    fn stream(
        &self,
        t0: Instant,
        gate: Option<&StopGate>,
        mut progress: impl FnMut(u64),
    ) -> Result<Streamed> {
        let cfg = self.cfg;
        let frames = cfg.frames_of(self.receiver);
        let roi = cfg.roi_of(self.receiver);
        let bunch = self.ring.bunch as u64;
        let rate = cfg.acquisition.rate_hz;
        let (mut bytes, mut writes, mut wr, mut sent) = (0u64, 0u64, 0u64, 0u64);
        let mut credit_wait = Duration::ZERO;
        // A receiver that stops granting for this long is gone or stuck: the run fails rather
        // than hangs.
        let patience =
            Duration::from_millis(cfg.acquisition.deadline_ms).max(Duration::from_secs(30));
        let fb = self.data.frame_bytes();
        // At a set rate a module streams each frame over its frame period, as a detector does,
        // in pieces of whole MTUs (so the packet count is the same as unsplit) about a
        // millisecond apart: bursts of whole frames from every module at once would overflow
        // socket buffers that a steady stream fits, and much finer pacing costs more in sleeps
        // than it smooths. A shared-memory link has no socket buffer to overflow (the stream
        // waits), so there each frame goes whole at its time: a wakeup per piece would only
        // preempt the receiver's workers on the cores both share.
        let mtu = self.qp.mtu();
        let pieces_per_frame = if rate > 0.0 && cfg.transport.kind != TransportKind::Shm {
            ((1000.0 / rate) as usize).clamp(1, 16)
        } else {
            1
        };
        let module_bytes = roi.width * roi.height * 2;
        let piece = (module_bytes.div_ceil(pieces_per_frame))
            .div_ceil(mtu)
            .max(1)
            * mtu;
        let pace = |g: u64, part: f64| {
            if rate > 0.0 {
                let due = t0 + Duration::from_secs_f64((g as f64 + part) / rate);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
        };
        for n in 0..frames {
            let g = cfg.global_frame(self.receiver, n);
            pace(g, 0.0);
            let stack = self.ring.stack(n);
            if n % bunch == 0 && gate.is_some_and(|g| !g.may_send(n / bunch)) {
                break;
            }
            if let (0, Some(c)) = (n % bunch, &self.credit) {
                credit_wait += c.wait_for(stack, patience).map_err(|e| {
                    DaqError::Acquisition(format!(
                        "module {} to receiver {}: {e}",
                        self.module, self.receiver
                    ))
                })?;
            }
            if n % bunch == 0 {
                self.post(wr, 0, 0, 0, Some(Marker::Start(stack).imm()))?;
                wr += 1;
                writes += 1;
            }
            let last = n % bunch == bunch - 1 || n + 1 == frames;
            let src = self.data.index_of(g) * fb + self.module * MODULE_BYTES;
            let mut pieces: Vec<(usize, usize, usize)> = Vec::new();
            for d in descriptors(&self.ring, self.module, n, src, &roi) {
                if rate > 0.0 {
                    let mut off = 0;
                    while off < d.len {
                        let len = piece.min(d.len - off);
                        pieces.push((d.src + off, len, d.dst + off));
                        off += len;
                    }
                } else {
                    pieces.push((d.src, d.len, d.dst));
                }
            }
            let count = pieces.len();
            for (i, &(src, len, dst)) in pieces.iter().enumerate() {
                if i > 0 {
                    pace(g, i as f64 / count as f64);
                }
                let imm = (last && i + 1 == count).then(|| Marker::End(stack).imm());
                self.post(wr, src, len, dst, imm)?;
                wr += 1;
                writes += 1;
                bytes += len as u64;
            }
            sent += 1;
            progress(1);
        }
        if self.qp.qp_type() == remora_fabric::QpType::Rc {
            self.drain(wr)?;
        }
        Ok(Streamed {
            bytes,
            writes,
            packets: self.qp.stats().engine.tx_packets,
            frames: sent,
            credit_wait,
        })
    }
}

fn check(done: &[Completion]) -> Result<()> {
    for c in done {
        if !c.status.is_ok() {
            return Err(DaqError::Acquisition(format!(
                "WRITE {} failed: {:?}",
                c.wr_id, c.status
            )));
        }
    }
    Ok(())
}
