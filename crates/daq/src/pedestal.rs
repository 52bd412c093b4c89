//! Pedestal tracking: dark frames update the G0 pedestal as a moving average.
//!
//! Which frames are dark is configuration ([`DarkPattern`], e.g. every other frame, as a chopper
//! gives). Each pixel averages the dark frames in which it was in G0, up to `window` frames
//! (Jungfraujoch uses 128): a running mean while it has fewer, then an exponential moving average
//! with weight 1/window, so old frames fade out. G1/G2 pedestals stay as calibrated.
use crate::calib::ConvTables;
use crate::engine::Engine;
use crate::{DaqError, Result};

/// Which frame numbers are dark: `n % every == phase` (`every` 0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DarkPattern {
    /// Period in frames (0 = no dark frames).
    pub every: u64,
    /// Frame number within the period that is dark.
    pub phase: u64,
}

impl DarkPattern {
    /// No dark frames.
    pub const NONE: DarkPattern = DarkPattern { every: 0, phase: 0 };

    /// One dark frame every `every` frames, at `phase`.
    pub fn new(every: u64, phase: u64) -> Result<Self> {
        if every > 0 && phase >= every {
            return Err(DaqError::Config(format!(
                "dark phase {phase} must be below the period {every}"
            )));
        }
        Ok(Self { every, phase })
    }

    /// Whether frame `n` is dark.
    pub fn is_dark(&self, n: u64) -> bool {
        self.every > 0 && n % self.every == self.phase
    }
}

/// Per-pixel state of the moving average.
#[derive(Debug, Clone)]
pub struct PedestalTracker {
    /// Frames per pixel so far (capped at the window).
    pub counts: Vec<u16>,
    /// Window in frames.
    pub window: u16,
}

impl PedestalTracker {
    /// Default window (Jungfraujoch).
    pub const DEFAULT_WINDOW: u16 = 128;

    /// Starts from nothing: the first dark frame replaces the calibrated G0 pedestal.
    pub fn fresh(pixels: usize, window: u16) -> Result<Self> {
        Self::with_count(pixels, window, 0)
    }

    /// Trusts the calibrated pedestal as a full window: dark frames refine it gradually.
    pub fn seeded(pixels: usize, window: u16) -> Result<Self> {
        Self::with_count(pixels, window, window)
    }

    fn with_count(pixels: usize, window: u16, count: u16) -> Result<Self> {
        if window == 0 {
            return Err(DaqError::Config(
                "pedestal window must be at least 1".into(),
            ));
        }
        Ok(Self {
            counts: vec![count; pixels],
            window,
        })
    }

    /// Feeds one dark frame.
    pub fn update(
        &mut self,
        engine: &dyn Engine,
        raw: &[u16],
        tables: &mut ConvTables,
    ) -> Result<()> {
        engine.track_pedestal(raw, tables, &mut self.counts, self.window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern() {
        let p = DarkPattern::new(2, 1).unwrap();
        assert!(!p.is_dark(0) && p.is_dark(1) && p.is_dark(3));
        assert!(!DarkPattern::NONE.is_dark(0));
        assert!(DarkPattern::new(2, 2).is_err());
        assert!(PedestalTracker::fresh(4, 0).is_err());
    }
}
