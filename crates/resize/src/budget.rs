//! What one job may spend, checked before it is spent.
//!
//! - Memory: [`Estimate`] adds up, stage by stage (decode, resample, orient, crop, encode), the
//!   bytes a job holds at once, from the headers and the geometry alone; the engine refuses a job
//!   whose largest stage is over [`Limits::max_job_memory`](crate::Limits::max_job_memory)
//!   before it allocates a pixel. The figures follow what the codecs and the resampler allocate
//!   (libjpeg's whole-image coefficient arrays for progressive or multi-scan input and for
//!   optimised or progressive output, the `png` crate's row buffers, fast_image_resize's
//!   coefficient tables and intermediate image per tile), rounded up; they are estimates, not
//!   an allocator's accounting, and the tests hold them against measured peaks.
//! - Time: [`Stop`] carries the job's deadline ([`Job::timeout`](crate::Job::timeout)) and a
//!   cancel flag (the service sets it when it shuts down); the engine checks it between stages
//!   and inside its long loops (resample tiles, PNG rows, orientation and crop rows). The JPEG
//!   codec's own loops are not interrupted: a decode is bounded by the input pixel limit and the
//!   scan limit instead.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A job's deadline and cancel flag.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stop<'a> {
    deadline: Option<(Instant, Duration)>,
    cancel: Option<&'a AtomicBool>,
}

impl<'a> Stop<'a> {
    /// A job that must end within `timeout` from now (none: no deadline), or as soon as
    /// `cancel` is set.
    pub(crate) fn new(timeout: Option<Duration>, cancel: Option<&'a AtomicBool>) -> Stop<'a> {
        Stop {
            deadline: timeout.map(|t| (Instant::now() + t, t)),
            cancel,
        }
    }

    /// No deadline, no cancel flag.
    pub(crate) fn never() -> Stop<'static> {
        Stop {
            deadline: None,
            cancel: None,
        }
    }

    /// `Err` once the job is cancelled or past its deadline; `stage` names where it was.
    pub(crate) fn check(&self, stage: &'static str) -> Result<()> {
        if self.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(Error::Cancelled);
        }
        match self.deadline {
            Some((at, limit)) if Instant::now() >= at => Err(Error::TimedOut { stage, limit }),
            _ => Ok(()),
        }
    }
}

/// How many rows of `row_bytes` a loop goes through between two [`Stop::check`]s: about
/// 256 KiB of pixels (a check costs a clock read; a row of a 50,000,000-pixel-wide image is
/// checked on its own, a column of one-pixel rows every 262,144).
pub(crate) fn rows_per_check(row_bytes: usize) -> usize {
    ((256 << 10) / row_bytes.max(1)).max(1)
}

/// The bytes a job holds at its most expensive stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Estimate {
    /// Bytes held by the caller for the whole job (the encoded input).
    pub base: u64,
    /// The largest stage so far: its bytes (without `base`) and name.
    pub peak: u64,
    pub stage: &'static str,
}

impl Estimate {
    pub(crate) fn new(input_bytes: usize) -> Estimate {
        Estimate {
            base: input_bytes as u64,
            peak: 0,
            stage: "decode",
        }
    }

    /// Records a stage that holds `bytes` at once.
    pub(crate) fn stage(&mut self, stage: &'static str, bytes: u64) {
        if bytes > self.peak {
            self.peak = bytes;
            self.stage = stage;
        }
    }

    /// The whole estimate: the input and the largest stage.
    pub(crate) fn total(&self) -> u64 {
        self.base.saturating_add(self.peak)
    }

    /// `Err(OverBudget)` when the estimate is over `limit`.
    pub(crate) fn check(&self, limit: u64) -> Result<()> {
        let need = self.total();
        if need > limit {
            return Err(Error::OverBudget {
                stage: self.stage,
                need,
                limit,
            });
        }
        Ok(())
    }
}

/// Bytes of `w`×`h` pixels of `c` bytes.
pub(crate) fn pixels(w: u32, h: u32, c: u8) -> u64 {
    u64::from(w) * u64::from(h) * u64::from(c)
}

/// A JPEG decode to `(w, h)` (after the DCT-domain shrink) of `c` bytes per pixel, from a
/// `full` = (width, height) frame whose components have `factors` (h, v) sampling factors;
/// `whole_image`: progressive or multi-scan, where libjpeg keeps every DCT coefficient of the
/// frame (2 bytes each) until the last scan.
pub(crate) fn jpeg_decode(
    (w, h): (u32, u32),
    c: u8,
    full: (u32, u32),
    factors: &[(u8, u8)],
    whole_image: bool,
) -> u64 {
    let out = pixels(w, h, c);
    let coefficients = if whole_image {
        coefficient_bytes(full, factors)
    } else {
        0
    };
    // Sample rows of one MCU row per component, with libjpeg's context rows and upsampling.
    let rows = u64::from(full.0) * factors.len() as u64 * 64 + (1 << 20);
    out + coefficients + rows
}

/// libjpeg's whole-image coefficient arrays: 64 coefficients of 2 bytes per block of each
/// component, the block counts padded to the component's sampling factors.
pub(crate) fn coefficient_bytes((w, h): (u32, u32), factors: &[(u8, u8)]) -> u64 {
    let hmax = factors
        .iter()
        .map(|f| u64::from(f.0))
        .max()
        .unwrap_or(1)
        .max(1);
    let vmax = factors
        .iter()
        .map(|f| u64::from(f.1))
        .max()
        .unwrap_or(1)
        .max(1);
    factors
        .iter()
        .map(|&(hs, vs)| {
            let (hs, vs) = (u64::from(hs).max(1), u64::from(vs).max(1));
            let bw = (u64::from(w) * hs)
                .div_ceil(hmax)
                .div_ceil(8)
                .next_multiple_of(hs);
            let bh = (u64::from(h) * vs)
                .div_ceil(vmax)
                .div_ceil(8)
                .next_multiple_of(vs);
            bw * bh * 128
        })
        .sum()
}

/// A PNG decode of a `w`×`h` image to `c` bytes per pixel: the pixels, the decoder's raw rows
/// (up to 8 bytes a pixel before 16-bit samples are stripped) and its inflate state.
pub(crate) fn png_decode(w: u32, h: u32, c: u8) -> u64 {
    pixels(w, h, c) + 3 * u64::from(w) * 8 + (1 << 20)
}

/// A JPEG encode of `w`×`h` pixels of `c` bytes (alpha dropped first: a copy without it) with
/// `samples` colour samples per pixel after subsampling (gray 1, 4:2:0 1.5, 4:4:4 3 …, in
/// halves), `whole_image`: optimised Huffman tables or progressive, where libjpeg keeps every
/// coefficient (2 bytes a sample). The output is counted three times (libjpeg's growing buffer,
/// the copy into a `Vec`, the copy with the metadata segments) at a quarter of the raw size.
pub(crate) fn jpeg_encode(w: u32, h: u32, c: u8, half_samples: u8, whole_image: bool) -> u64 {
    let px = pixels(w, h, c);
    let no_alpha = if c == 2 || c == 4 {
        pixels(w, h, c - 1)
    } else {
        0
    };
    let samples = pixels(w, h, 1) * u64::from(half_samples) / 2;
    let coefficients = if whole_image { samples * 2 } else { 0 };
    let encoded = 3 * (samples / 4) + 2048;
    let rows = u64::from(w) * 3 * 32;
    px + no_alpha + coefficients + encoded + rows
}

/// A PNG encode of `w`×`h` pixels of `c` bytes: the pixels, the encoder's three row buffers and
/// the compressed stream (counted at three quarters of the raw size).
pub(crate) fn png_encode(w: u32, h: u32, c: u8) -> u64 {
    let px = pixels(w, h, c);
    px + 3 * (u64::from(w) * u64::from(c) + 1) + px / 4 * 3 + (1 << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_stage_and_the_input_make_the_estimate() {
        let mut e = Estimate::new(1000);
        e.stage("decode", 10);
        e.stage("resample", 50);
        e.stage("encode", 20);
        assert_eq!((e.total(), e.stage), (1050, "resample"));
        assert!(e.check(1050).is_ok());
        match e.check(1049) {
            Err(Error::OverBudget { stage, need, limit }) => {
                assert_eq!((stage, need, limit), ("resample", 1050, 1049))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn coefficient_arrays_follow_the_sampling_factors() {
        // 4:2:0 16×16: 4 luma blocks and one block per chroma component.
        assert_eq!(
            coefficient_bytes((16, 16), &[(2, 2), (1, 1), (1, 1)]),
            (4 + 1 + 1) * 128
        );
        // 7000×7000 4:4:4: 875² blocks a component.
        assert_eq!(
            coefficient_bytes((7000, 7000), &[(1, 1); 3]),
            3 * 875 * 875 * 128
        );
    }

    #[test]
    fn a_stop_without_deadline_or_flag_never_fires_and_a_set_flag_always_does() {
        assert!(Stop::never().check("x").is_ok());
        let flag = AtomicBool::new(false);
        let s = Stop::new(Some(Duration::from_secs(60)), Some(&flag));
        assert!(s.check("x").is_ok());
        flag.store(true, Ordering::Relaxed);
        assert!(matches!(s.check("x"), Err(Error::Cancelled)));
        let s = Stop::new(Some(Duration::ZERO), None);
        assert!(matches!(
            s.check("resample"),
            Err(Error::TimedOut {
                stage: "resample",
                ..
            })
        ));
    }
}
