//! The processing thread: it takes each issued stack, runs the pipeline on the frames where
//! they landed (lost modules overwritten by the error word), checks against the scheduler's
//! books that nothing newer wrote into the half meanwhile, and hands the results, the preview
//! and the pedestal on.
use std::sync::mpsc::{self, Receiver as Rx};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use remora_fabric::{Completion, Qp, WcOpcode};
use remora_mem::Region;

use crate::config::Config;
use crate::model::{ERROR_WORD, MODULE_PIXELS};
use crate::pipeline::{Outcome, Pipeline};
use crate::ring::{Marker, RingLayout};
use crate::scheduler::{Issue, Scheduler};
use crate::tap::{Preview, Tap};

use super::ingest::Msg;
use super::FrameResult;

/// Hands a kept frame to the controller's preview when one is due (a few times a second): the
/// pipeline's buffer itself, swapped for a spare, so the data path copies nothing. Call it
/// after [`kept_image`].
pub(crate) fn offer_preview(
    tap: Option<&Tap>,
    receiver: usize,
    frame: u64,
    p: &mut Pipeline,
    o: &Option<Outcome>,
) {
    let Some(tap) = tap else { return };
    if matches!(o, Some(Outcome::Kept { .. })) && p.has_pixels() && tap.preview_due() {
        let (pixels, width, height, assembled) = p.take_preview(tap.take_buffer());
        tap.offer_preview(Preview {
            frame,
            receiver,
            width,
            height,
            pixels,
            assembled,
        });
    }
}

/// Leaves the pipeline's pedestal with the controller when it asks (after a dark run).
pub(crate) fn leave_pedestal(tap: Option<&Tap>, cfg: &Config, receiver: usize, p: &Pipeline) {
    let Some(tap) = tap.filter(|t| t.keeps_pedestal()) else {
        return;
    };
    let maps =
        crate::model::Detector::new(cfg.detector.modules).and_then(|d| p.tables().pedestal_maps(d));
    match maps {
        Ok(m) => tap.put_pedestal(receiver, m),
        Err(e) => tracing::warn!("receiver {receiver}: keeping the pedestal: {e}"),
    }
}

/// The assembled image of a kept frame, if the output wants images.
pub(crate) fn kept_image(cfg: &Config, p: &Pipeline, o: &Option<Outcome>) -> Option<Vec<f32>> {
    (cfg.output.images
        && matches!(o, Some(Outcome::Kept { .. }))
        && p.has_pixels()
        && !p.image().is_empty())
    .then(|| p.image().to_vec())
}

/// The scheduler and the queue pairs it listens to, shared by the receive thread (which drains
/// and issues) and the processing thread (which drains before deciding a frame is intact).
pub(super) struct Books {
    pub(super) sched: Scheduler,
    pub(super) qps: Vec<Qp>,
    pub(super) comps: Vec<Completion>,
    /// Packets one frame of one module takes.
    pub(super) per_frame: u64,
    pub(super) frames: u64,
    pub(super) bunch: u64,
    pub(super) started: Option<Instant>,
}

impl Books {
    /// Packets a whole module part of stack `s` takes (the last stack may be short).
    fn expected_packets(&self, s: u64) -> u64 {
        let n = self.bunch.min(self.frames.saturating_sub(s * self.bunch));
        1 + self.per_frame * n
    }

    /// Feeds every completion waiting to the scheduler; true if there was any.
    pub(super) fn drain(&mut self, now: Instant) -> bool {
        let mut any = false;
        for m in 0..self.qps.len() {
            loop {
                self.comps.clear();
                if self.qps[m].poll(&mut self.comps, 256) == 0 {
                    break;
                }
                any = true;
                for i in 0..self.comps.len() {
                    let c = self.comps[i];
                    let (WcOpcode::RecvRdmaWithImm, Some(imm)) = (c.opcode, c.imm) else {
                        continue;
                    };
                    let mk = Marker::from_imm(imm, self.sched.latest());
                    let whole = match mk {
                        Marker::End(s) => u64::from(c.in_sequence) >= self.expected_packets(s),
                        Marker::Start(_) => true,
                    };
                    self.sched.on_marker(now, m, mk, whole);
                }
            }
        }
        if any && self.started.is_none() {
            self.started = Some(now);
        }
        any
    }

    /// Whether an issued stack is still intact, with every marker that has arrived counted.
    pub(super) fn intact(&mut self, stack: u64) -> bool {
        self.drain(Instant::now());
        self.sched.intact(stack)
    }
}

pub(super) struct Worker {
    pub(super) cfg: Config,
    pub(super) index: usize,
    pub(super) ring: RingLayout,
    pub(super) region: Arc<Region>,
    pub(super) pipeline: Pipeline,
    pub(super) books: Arc<Mutex<Books>>,
    pub(super) tap: Option<Arc<Tap>>,
    /// Every module waits for ring credits, so nothing lands in a stack buffer before the
    /// processing thread releases it (see [`crate::flow`]).
    pub(super) ring_held: bool,
}

/// A frame submitted to the pipeline whose result is not collected yet.
pub(crate) struct Waiting {
    pub(crate) frame: u64,
    pub(crate) since: Instant,
    pub(crate) lost_modules: u64,
    /// The packets each module missed (native ingest), empty when none did.
    pub(crate) missing: Vec<u128>,
    pub(crate) raw: Option<Vec<u16>>,
    /// Whether its data was still intact once the pipeline had taken the frame (on the GPU
    /// chain, copied it to the device; on a host engine, processed it).
    pub(crate) intact: bool,
}

/// The frames a processing thread has in the pipeline, oldest first: frames in flight overlap
/// (upload, compute and readback of different frames on a device engine) and are collected in
/// order.
pub(crate) struct InFlight {
    queue: std::collections::VecDeque<Waiting>,
    depth: usize,
}

impl InFlight {
    /// Up to the pipeline's depth in flight when it processes, else one at a time.
    pub(crate) fn new(cfg: &Config, pipeline: &Pipeline) -> InFlight {
        let depth = if cfg.pipeline.process {
            pipeline.depth()
        } else {
            1
        };
        InFlight {
            queue: Default::default(),
            depth,
        }
    }

    /// Adds a submitted frame, then collects until fewer than the depth are in flight; false
    /// when the run is over (a failure, or nobody listening).
    pub(crate) fn push<D>(
        &mut self,
        w: Waiting,
        ctx: Ctx<'_>,
        p: &mut Pipeline,
        tx: &Tx<D>,
    ) -> bool {
        self.queue.push_back(w);
        while self.queue.len() >= self.depth {
            if !self.complete(ctx, p, tx) {
                return false;
            }
        }
        true
    }

    /// Collects every frame in flight; false when the run is over.
    pub(crate) fn drain<D>(&mut self, ctx: Ctx<'_>, p: &mut Pipeline, tx: &Tx<D>) -> bool {
        while !self.queue.is_empty() {
            if !self.complete(ctx, p, tx) {
                return false;
            }
        }
        true
    }

    /// Collects the oldest waiting frame and sends its result (or its overrun).
    fn complete<D>(&mut self, ctx: Ctx<'_>, p: &mut Pipeline, tx: &Tx<D>) -> bool {
        let Some(w) = self.queue.pop_front() else {
            return true;
        };
        let outcome = if ctx.cfg.pipeline.process {
            match p.collect() {
                Ok(o) => o.map(|(_, o)| o),
                Err(e) => {
                    let _ = tx.send(Msg::Failed(e));
                    return false;
                }
            }
        } else {
            None
        };
        let secs = w.since.elapsed().as_secs_f64();
        let msg = if w.intact {
            // The writer's copy first: the preview takes the buffer away.
            let image = kept_image(ctx.cfg, p, &outcome);
            offer_preview(ctx.tap, ctx.index, w.frame, p, &outcome);
            Msg::Frame(
                Box::new(FrameResult {
                    frame: w.frame,
                    lost_modules: w.lost_modules,
                    missing_packets: w.missing,
                    image,
                    outcome,
                    raw: w.raw,
                }),
                secs,
            )
        } else {
            Msg::Overrun(secs)
        };
        tx.send(msg).is_ok()
    }
}

/// What a processing thread's results need besides the pipeline.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) index: usize,
    pub(crate) tap: Option<&'a Tap>,
}

type Tx<D> = mpsc::Sender<Msg<D>>;

impl Worker {
    pub(super) fn run(mut self, rx: Rx<Issue>, tx: mpsc::Sender<Msg<u64>>) {
        let frames = self.cfg.frames_of(self.index);
        let bunch = self.ring.bunch as u64;
        let words = self.ring.slot_bytes() / 2;
        let slow = Duration::from_millis(self.cfg.pipeline.slow_ms);
        let dark = crate::pedestal::DarkPattern::new(
            self.cfg.acquisition.dark_every,
            self.cfg.acquisition.dark_phase,
        )
        .unwrap_or(crate::pedestal::DarkPattern::NONE);
        let process = self.cfg.pipeline.process;
        // Frames in flight overlap within a stack: its frames are all collected before the
        // stack is reported done.
        let mut waiting = InFlight::new(&self.cfg, &self.pipeline);
        let cfg = self.cfg.clone();
        let tap = self.tap.clone();
        let ctx = Ctx {
            cfg: &cfg,
            index: self.index,
            tap: tap.as_deref(),
        };
        let mut scratch: Vec<u16> = Vec::new();
        while let Ok(issue) = rx.recv() {
            let first = issue.stack * bunch;
            let last = (first + bunch).min(frames);
            for n in first..last {
                let t = Instant::now();
                // A stack already overrun is abandoned: processing frames whose results will be
                // thrown away would only make the pipeline fall further behind.
                if !self.books.lock().expect("books").intact(issue.stack) {
                    if !waiting.drain(ctx, &mut self.pipeline, &tx) {
                        return;
                    }
                    for _ in n..last {
                        let _ = tx.send(Msg::Overrun(0.0));
                    }
                    break;
                }
                let off = self.ring.slot(n) * self.ring.slot_bytes();
                // SAFETY: the ring is a live mapping of `ring.bytes()` bytes owned by `region`
                // (kept alive by the Arc), page-aligned, so any u16 view inside it is aligned.
                // The transport writes into it concurrently only during an overrun, which is
                // checked below before anything computed from this view is kept.
                let raw = unsafe {
                    std::slice::from_raw_parts_mut(
                        self.region.as_ptr().add(off).cast::<u16>(),
                        words,
                    )
                };
                for m in 0..self.ring.modules {
                    if issue.lost_modules >> m & 1 == 1 {
                        raw[m * MODULE_PIXELS..(m + 1) * MODULE_PIXELS].fill(ERROR_WORD);
                    }
                }
                let g = self.cfg.global_frame(self.index, n);
                // Copied before processing, and kept only if the stack is still intact after.
                let raw_copy = self.cfg.output.raw.then(|| raw.to_vec());
                // A dark frame changes the pipeline's state (the pedestal). Where a source may
                // overwrite a stack still being processed (`mask`, or a module without ring
                // credits) it is copied out and checked intact *before* it is used, so an
                // overrun cannot leak into later frames; where every source waits for credits
                // it is used where it landed, as other frames are.
                let dark_frame = process && dark.is_dark(g);
                let snapshot = dark_frame && !self.ring_held;
                let input: &[u16] = if snapshot {
                    scratch.resize(words, 0);
                    if let Err(e) = self.pipeline.engine().copy_frame(raw, &mut scratch) {
                        let _ = tx.send(Msg::Failed(e));
                        return;
                    }
                    &scratch
                } else {
                    raw
                };
                if snapshot && !self.books.lock().expect("books").intact(issue.stack) {
                    let _ = tx.send(Msg::Overrun(t.elapsed().as_secs_f64()));
                    continue;
                }
                if process {
                    let preview = ctx.tap.is_some_and(|t| t.preview_due());
                    if let Err(e) = self.pipeline.submit_with_pixels(g, input, preview) {
                        let _ = tx.send(Msg::Failed(e));
                        return;
                    }
                }
                if !slow.is_zero() {
                    std::thread::sleep(slow);
                }
                let intact = self.books.lock().expect("books").intact(issue.stack);
                if dark_frame && !snapshot && !intact {
                    // Only a source that ignored its credits gets here, and the pedestal has
                    // taken what it wrote: every later frame would be converted against it.
                    let _ = tx.send(Msg::Failed(crate::DaqError::Acquisition(format!(
                        "stack {} was overwritten before the receiver released it although \
                         every module follows ring credits: a source broke the credit \
                         protocol, and dark frame {g} may have fed its data into the pedestal",
                        issue.stack
                    ))));
                    return;
                }
                let w = Waiting {
                    frame: g,
                    since: t,
                    lost_modules: issue.lost_modules,
                    missing: Vec::new(),
                    raw: raw_copy,
                    intact,
                };
                if !waiting.push(w, ctx, &mut self.pipeline, &tx) {
                    return;
                }
            }
            if !waiting.drain(ctx, &mut self.pipeline, &tx) {
                return;
            }
            if tx.send(Msg::Done(issue.stack)).is_err() {
                return;
            }
        }
        leave_pedestal(self.tap.as_deref(), &self.cfg, self.index, &self.pipeline);
    }
}
