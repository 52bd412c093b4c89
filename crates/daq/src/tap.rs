//! What a controller shares with a running acquisition's nodes: a stop request that every
//! transmitter honours at the same stack boundary, the latest converted image for the preview,
//! the pedestals a dark run leaves behind, and which engine the receivers chose.
//!
//! The nodes only ever take a lock that nobody holds for long: the stop gate once per stack and
//! transmitter, the preview slot at most a few times a second (a `try_lock`, so the processing
//! thread never waits for a reader), the pedestal slot once at the end.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use remora_accel::AlignedBuf;

use crate::calib::PedestalMaps;
use crate::engine::calibrate::EngineChoice;

/// A converted frame kept for the preview.
#[derive(Debug, Clone)]
pub struct Preview {
    /// Detector frame number.
    pub frame: u64,
    /// Receiver that processed it.
    pub receiver: usize,
    /// Image width (pixels).
    pub width: usize,
    /// Image height (pixels).
    pub height: usize,
    /// Energies (keV), row-major; NaN where nothing was measured (gaps, masked pixels). The
    /// pipeline's own frame buffer, handed over rather than copied.
    pub pixels: AlignedBuf<f32>,
    /// Whether the image is assembled (modules placed with their gaps) or raw (modules stacked).
    pub assembled: bool,
}

/// Decides where all transmitters stop, so that every module stops at the same stack.
///
/// Each transmitter calls [`StopGate::may_send`] before a stack. Once a stop is requested, the
/// first caller fixes the limit just past the highest stack any transmitter has started: those
/// stacks are finished by everyone, later ones by nobody, so a stopped run ends on whole frames.
#[derive(Debug, Default)]
pub struct StopGate {
    requested: AtomicBool,
    inner: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    highest_started: Option<u64>,
    limit: Option<u64>,
}

impl StopGate {
    /// Asks the transmitters to stop.
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
    }

    /// Whether a stop was asked for.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Whether stack `unit` may be sent; a `true` answer is a promise to send it whole.
    pub fn may_send(&self, unit: u64) -> bool {
        let mut g = self.inner.lock().expect("stop gate");
        if g.limit.is_none() && self.requested.load(Ordering::SeqCst) {
            g.limit = Some(g.highest_started.map_or(0, |h| h + 1));
        }
        if let Some(l) = g.limit {
            return unit < l;
        }
        g.highest_started = Some(g.highest_started.map_or(unit, |h| h.max(unit)));
        true
    }
}

/// The hooks a controller hands to an acquisition (see the module doc).
#[derive(Debug)]
pub struct Tap {
    /// Where transmitters stop.
    pub gate: StopGate,
    preview_every: Duration,
    preview: Mutex<(Option<Instant>, Option<Arc<Preview>>)>,
    /// The buffer of a preview nobody reads any more, handed back to the pipeline: a fresh
    /// 18 MB buffer per 4M preview would cost the processing thread its page faults.
    spare: Mutex<Option<AlignedBuf<f32>>>,
    keep_pedestal: bool,
    pedestals: Mutex<Vec<(usize, PedestalMaps)>>,
    engine_choice: Mutex<Option<(usize, EngineChoice)>>,
}

impl Tap {
    /// A tap that keeps a preview at most every `preview_every` and, with `keep_pedestal`, the
    /// receivers' pedestals when they finish.
    pub fn new(preview_every: Duration, keep_pedestal: bool) -> Tap {
        Tap {
            gate: StopGate::default(),
            preview_every,
            preview: Mutex::new((None, None)),
            spare: Mutex::new(None),
            keep_pedestal,
            pedestals: Mutex::new(Vec::new()),
            engine_choice: Mutex::new(None),
        }
    }

    /// Which engine receiver `index` chose and why (set when it binds); the lowest index's is
    /// kept.
    pub fn set_engine_choice(&self, index: usize, choice: &EngineChoice) {
        if let Ok(mut g) = self.engine_choice.lock() {
            if g.as_ref().is_none_or(|(i, _)| index <= *i) {
                *g = Some((index, choice.clone()));
            }
        }
    }

    /// The engine choice of the run's first receiver, once it has bound.
    pub fn engine_choice(&self) -> Option<EngineChoice> {
        self.engine_choice
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(|(_, c)| c.clone()))
    }

    /// Whether a new preview is due (cheap; never blocks).
    pub fn preview_due(&self) -> bool {
        match self.preview.try_lock() {
            Ok(g) => g.0.is_none_or(|t| t.elapsed() >= self.preview_every),
            Err(_) => false,
        }
    }

    /// Stores a preview (called by the processing thread after [`Tap::preview_due`]).
    pub fn offer_preview(&self, p: Preview) {
        let old = match self.preview.lock() {
            Ok(mut g) => std::mem::replace(&mut *g, (Some(Instant::now()), Some(Arc::new(p)))).1,
            Err(_) => None,
        };
        if let Some(Ok(old)) = old.map(Arc::try_unwrap) {
            if let Ok(mut s) = self.spare.lock() {
                *s = Some(old.pixels);
            }
        }
    }

    /// A buffer to give the pipeline in exchange for the next preview (the last unread
    /// preview's, when there is one).
    pub fn take_buffer(&self) -> Option<AlignedBuf<f32>> {
        self.spare.lock().ok().and_then(|mut s| s.take())
    }

    /// The latest preview.
    pub fn preview(&self) -> Option<Arc<Preview>> {
        self.preview.lock().ok().and_then(|g| g.1.clone())
    }

    /// Whether receivers should leave their pedestal here when they finish.
    pub fn keeps_pedestal(&self) -> bool {
        self.keep_pedestal
    }

    /// A receiver's pedestal at the end of its run.
    pub fn put_pedestal(&self, receiver: usize, maps: PedestalMaps) {
        if let Ok(mut g) = self.pedestals.lock() {
            g.push((receiver, maps));
        }
    }

    /// The pedestals left so far, by receiver.
    pub fn take_pedestals(&self) -> Vec<(usize, PedestalMaps)> {
        self.pedestals
            .lock()
            .map(|mut g| std::mem::take(&mut *g))
            .unwrap_or_default()
    }
}

impl Default for Tap {
    fn default() -> Self {
        Tap::new(Duration::from_millis(250), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transmitter_stops_after_the_highest_stack_started() {
        let g = StopGate::default();
        assert!(g.may_send(0) && g.may_send(1) && g.may_send(0));
        g.request();
        // A transmitter still at stack 0 finishes stack 1 too; nobody sends stack 2.
        assert!(g.may_send(1));
        assert!(!g.may_send(2));
        assert!(!g.may_send(2));
        let fresh = StopGate::default();
        fresh.request();
        assert!(
            !fresh.may_send(0),
            "a stop before the first stack sends nothing"
        );
    }

    #[test]
    fn previews_are_throttled() {
        let t = Tap::new(Duration::from_secs(3600), false);
        assert!(t.preview_due());
        t.offer_preview(Preview {
            frame: 7,
            receiver: 0,
            width: 1,
            height: 1,
            pixels: AlignedBuf::from(&[1.0f32][..]),
            assembled: false,
        });
        assert!(!t.preview_due());
        assert_eq!(t.preview().unwrap().frame, 7);
    }
}
