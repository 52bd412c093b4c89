//! The receiver's one receive loop, whatever brings the frames in.
//!
//! An [`Ingest`] takes in what arrived (the fabric's completion markers, the detector's own
//! packets) and hands whole work to its processing thread; the loop here does everything else
//! the same way for all of them: the results the processing thread sends back go to the
//! report and the writer ([`commit`]), the source's end is detected (closed links, then a grace
//! period, or a stop request once arrivals pause) and open work flushed, progress is reported
//! five times a second, and the run ends once the ingest has nothing left out.
use std::sync::mpsc::Receiver as Rx;
use std::time::{Duration, Instant};

use super::{commit, FrameResult, Progress, ReceiverReport};
use crate::tap::Tap;
use crate::writer::WriterThread;
use crate::{DaqError, Result};

/// What a processing thread sends the receive loop.
pub(crate) enum Msg<D> {
    /// A frame's results and the seconds the pipeline spent on it.
    Frame(Box<FrameResult>, f64),
    /// A frame whose data was overwritten before its results could be kept.
    Overrun(f64),
    /// Work the processing thread is done with, back to its ingest (a stack, a frame slot).
    Done(D),
    /// The pipeline failed: the run ends with this error.
    Failed(DaqError),
}

/// A way frames come into a receiver.
pub(crate) trait Ingest {
    /// What the processing thread hands back when it is done with a piece of work.
    type Done;
    /// Takes in what arrived and hands the processing thread what is whole; true if anything
    /// arrived. May wait a little when nothing did (a socket's receive timeout).
    fn pump(&mut self, now: Instant) -> Result<bool>;
    /// Whether the source has closed every link.
    fn closed(&mut self) -> bool;
    /// Nothing more is coming: hands over what is still open (called on every turn of the
    /// grace period).
    fn flush(&mut self, now: Instant);
    /// The processing thread is done with `d`.
    fn done(&mut self, d: Self::Done);
    /// Everything handed over has come back and nothing more will be; `results` counts the
    /// frames whose results (or overruns) the loop has taken so far.
    fn finished(&self, flushed: bool, results: u64) -> bool;
    /// Overruns so far and frames waiting in the buffer, for progress reports.
    fn load(&self) -> (u64, u64);
    /// When the first data arrived.
    fn started(&self) -> Option<Instant>;
    /// Stops the processing thread and fills the report's fields that belong to this ingest.
    fn finish(self, rep: &mut ReceiverReport);
    /// Called when a turn found nothing to do; an ingest whose `pump` does not wait sleeps.
    fn idle(&self) {
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// What the loop needs besides the ingest.
pub(crate) struct Sinks<'a, 'f> {
    pub(crate) writer: Option<&'a WriterThread>,
    pub(crate) on_frame: Option<&'f mut dyn FnMut(&FrameResult)>,
    pub(crate) progress: &'a dyn Fn(&Progress),
    pub(crate) tap: Option<&'a Tap>,
    /// How long an open frame or stack waits for its missing parts.
    pub(crate) deadline: Duration,
}

/// Runs `ingest` to the end of the acquisition, committing every result into `rep`.
pub(crate) fn run<I: Ingest>(
    mut ingest: I,
    from_worker: &Rx<Msg<I::Done>>,
    rep: &mut ReceiverReport,
    mut s: Sinks<'_, '_>,
) -> Result<()> {
    let frames = rep.frames_expected;
    let mut last_commit = Instant::now();
    let mut closed_at: Option<Instant> = None;
    let mut flushed = false;
    let mut last_progress = Instant::now();
    let mut last_arrival = Instant::now();
    let mut results = 0u64;
    let stop_requested = || s.tap.is_some_and(|t| t.gate.requested());
    let result = loop {
        let now = Instant::now();
        let mut busy = match ingest.pump(now) {
            Ok(b) => b,
            Err(e) => break Err(e),
        };
        if busy {
            last_arrival = now;
        }
        if closed_at.is_none() && ingest.closed() {
            closed_at = Some(now);
        }
        // A stopped source ends on whole frames: once what it sent has landed (the closed
        // connection can overtake the last datagrams), nothing more is coming.
        let grace = closed_at.is_some_and(|t| {
            (stop_requested() && last_arrival.elapsed() >= Duration::from_millis(200))
                || t.elapsed() >= s.deadline.min(Duration::from_secs(2))
        });
        if grace {
            ingest.flush(Instant::now());
            flushed = true;
        }
        let mut failed = None;
        while let Ok(msg) = from_worker.try_recv() {
            busy = true;
            match msg {
                Msg::Frame(fr, secs) => {
                    results += 1;
                    rep.pipeline_seconds += secs;
                    commit(rep, *fr, s.writer, &mut s.on_frame);
                    last_commit = Instant::now();
                }
                Msg::Overrun(secs) => {
                    results += 1;
                    rep.pipeline_seconds += secs;
                    rep.frames_overrun += 1;
                    last_commit = Instant::now();
                }
                Msg::Done(d) => ingest.done(d),
                Msg::Failed(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            break Err(e);
        }
        if ingest.finished(flushed, results) {
            break Ok(());
        }
        if last_progress.elapsed() >= Duration::from_millis(200) {
            last_progress = Instant::now();
            let (overruns, buffered) = ingest.load();
            (s.progress)(&Progress {
                frames_expected: frames,
                frames_done: rep.frames_complete + rep.frames_partial,
                overruns,
                kept: rep.kept,
                buffered,
            });
        }
        if !busy {
            ingest.idle();
        }
    };
    rep.seconds = ingest.started().map_or(0.0, |t| {
        last_commit.saturating_duration_since(t).as_secs_f64()
    });
    ingest.finish(rep);
    result
}
