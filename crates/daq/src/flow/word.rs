//! The source's side of ring credits: the word the receiver WRITEs its limit into, and how a
//! transmitter waits on it.
//!
//! The word changes without the source's CPU, so the source polls it. Polling on a fixed short
//! nap costs a wakeup every millisecond per transmitter (8 transmitters of a 4M: 8,000 wakeups a
//! second), and on a host the source shares with the receiver each wakeup preempts one of the
//! pipeline's workers in the middle of a fork-join stage, leaving the other waiting at the join.
//! The limit moves at the pace the receiver finishes stacks, so [`CreditPace`] learns that pace
//! and the wait sleeps through most of the expected gap in one nap, then polls closely around
//! the expected moment.
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_fabric::RegionInfo;
use remora_mem::{Access, Buffer, Mode, Pd, Region};

use super::CREDIT_INFO_LEN;
use crate::{DaqError, Result};

/// The polls around the expected moment: from this nap, doubling up to [`MAX_POLL`].
const MIN_POLL: Duration = Duration::from_micros(20);
const MAX_POLL: Duration = Duration::from_millis(1);
/// The first nap never goes past this, whatever the pace: a pace learned across a pause
/// (`pause`) or a slow start must not make the source oversleep a prompt credit by more.
const MAX_FIRST_NAP: Duration = Duration::from_millis(50);

/// The pace the limit moves at, as one waiter sees it: the time between the moves it noticed,
/// following a shorter gap at once and a longer one slowly, so that it errs towards waking
/// early.
#[derive(Debug, Clone, Copy, Default)]
pub struct CreditPace {
    last_move: Option<Instant>,
    gap: Option<Duration>,
}

impl CreditPace {
    /// The limit was seen to move at `now`.
    pub fn moved(&mut self, now: Instant) {
        if let Some(prev) = self.last_move {
            let g = now.saturating_duration_since(prev);
            self.gap = Some(match self.gap {
                Some(old) if g >= old => (old * 7 + g) / 8,
                _ => g,
            });
        }
        self.last_move = Some(now);
    }

    /// How long to sleep at `now` before polling: until seven eighths of the usual gap after
    /// the last move (at least 20 µs, at most 50 ms).
    pub fn first_nap(&self, now: Instant) -> Duration {
        let (Some(at), Some(gap)) = (self.last_move, self.gap) else {
            return MIN_POLL;
        };
        (at + gap * 7 / 8)
            .saturating_duration_since(now)
            .clamp(MIN_POLL, MAX_FIRST_NAP)
    }
}

/// A transmitter's side: the word the receiver writes its limit into.
pub struct CreditWord {
    region: Arc<Region>,
    pace: Cell<CreditPace>,
}

impl CreditWord {
    /// Registers the word, initialised to `initial` (what the ring holds before any credit).
    pub fn register(pd: &Arc<Pd>, initial: u64) -> Result<CreditWord> {
        let buf = Buffer::anonymous(4096)
            .map_err(|e| DaqError::Acquisition(format!("credit word: {e}")))?;
        let region = pd
            .register(
                buf,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                Mode::OnDemand,
            )
            .map_err(|e| DaqError::Acquisition(format!("registering the credit word: {e}")))?;
        region
            .write_at(0, &initial.to_le_bytes())
            .and_then(|()| region.page_in_range(0, region.len()).map(drop))
            .map_err(|e| DaqError::Acquisition(format!("credit word: {e}")))?;
        Ok(CreditWord {
            region,
            pace: Cell::new(CreditPace::default()),
        })
    }

    /// What goes into the hello.
    pub fn info(&self) -> [u8; CREDIT_INFO_LEN] {
        RegionInfo::of(&self.region).encode()
    }

    /// The limit now: stacks below it may be written.
    pub fn limit(&self) -> u64 {
        // The receiver's WRITE lands with a copy that may not be one store: read until two
        // reads agree.
        let read = || {
            // SAFETY: the region is a live mapping of 4096 bytes owned by `self.region`,
            // page-aligned, so the first 8 bytes are an aligned u64.
            unsafe { std::ptr::read_volatile(self.region.as_ptr().cast::<u64>()) }
        };
        let mut a = read();
        loop {
            let b = read();
            if a == b {
                return u64::from_le(a);
            }
            a = b;
        }
    }

    /// Waits until stack `s` may be written; returns the time waited, or an error after
    /// `patience` without the limit moving (the receiver is gone or stuck). A stop request does
    /// not cut the wait short: a stack the source has agreed to send must still fit the ring.
    pub fn wait_for(&self, s: u64, patience: Duration) -> Result<Duration> {
        let t0 = Instant::now();
        let mut last = self.limit();
        let mut moved = t0;
        let mut pace = self.pace.get();
        let mut nap = pace.first_nap(t0);
        while s >= last {
            std::thread::sleep(nap);
            nap = (nap * 2).min(MAX_POLL);
            let l = self.limit();
            if l != last {
                last = l;
                moved = Instant::now();
                pace.moved(moved);
                // A move that is not yet enough: the next one comes about a gap later.
                nap = pace.first_nap(moved).max(MIN_POLL);
            } else if moved.elapsed() >= patience {
                return Err(DaqError::Acquisition(format!(
                    "stack {s}: the receiver's ring gave no credit for {:.0} s (limit {last})",
                    patience.as_secs_f64()
                )));
            }
        }
        self.pace.set(pace);
        Ok(t0.elapsed())
    }

    /// The word's region (tests write it as the receiver would).
    #[cfg(test)]
    pub(super) fn region(&self) -> &Arc<Region> {
        &self.region
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::CreditTarget;

    #[test]
    fn a_credit_word_reads_what_was_written_and_gives_up_on_a_silent_receiver() {
        let pd = Arc::new(Pd::new());
        let w = CreditWord::register(&pd, 4).unwrap();
        assert_eq!(w.limit(), 4);
        assert!(w.wait_for(3, Duration::from_secs(1)).is_ok());
        let e = w.wait_for(4, Duration::from_millis(30)).unwrap_err();
        assert!(e.to_string().contains("no credit"), "{e}");
        w.region().write_at(0, &9u64.to_le_bytes()).unwrap();
        assert!(w.wait_for(8, Duration::from_secs(1)).is_ok());
        let info = CreditTarget::decode(&w.info()).unwrap();
        assert_eq!(info.0.rkey, w.region().rkey());
    }

    #[test]
    fn the_pace_sleeps_through_most_of_the_usual_gap_and_errs_early() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut p = CreditPace::default();
        assert_eq!(p.first_nap(t), MIN_POLL, "nothing learned: poll");
        p.moved(t);
        assert_eq!(p.first_nap(t), MIN_POLL, "one move is no pace");
        p.moved(t + ms(40));
        // 7/8 of 40 ms after the last move, 5 ms of which have passed.
        assert_eq!(p.first_nap(t + ms(45)), ms(30));
        // Past the expected moment: poll.
        assert_eq!(p.first_nap(t + ms(80)), MIN_POLL);
        // A shorter gap is followed at once, a longer one an eighth at a time.
        p.moved(t + ms(48));
        assert_eq!(p.first_nap(t + ms(48)), ms(7));
        p.moved(t + ms(128));
        assert_eq!(p.gap, Some(ms(17)), "(7 * 8 + 80) / 8");
        // A long learned gap is capped.
        let mut slow = CreditPace::default();
        slow.moved(t);
        slow.moved(t + Duration::from_secs(2));
        assert_eq!(slow.first_nap(t + Duration::from_secs(2)), MAX_FIRST_NAP);
    }

    #[test]
    fn a_paced_wait_still_sees_a_prompt_credit_and_a_receiver_that_falls_silent() {
        let pd = Arc::new(Pd::new());
        let w = CreditWord::register(&pd, 1).unwrap();
        // Teach it a 30 ms pace, then give the next credit after 5 ms, well before the pace
        // expects it: the wait sees it once its first nap is over.
        let mut p = CreditPace::default();
        let t = Instant::now();
        p.moved(t - Duration::from_millis(60));
        p.moved(t - Duration::from_millis(30));
        p.moved(t);
        w.pace.set(p);
        let region = w.region().clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            region.write_at(0, &2u64.to_le_bytes()).unwrap();
        });
        let waited = w.wait_for(1, Duration::from_secs(5)).unwrap();
        writer.join().unwrap();
        assert!(waited >= Duration::from_millis(5), "{waited:?}");
        let e = w.wait_for(2, Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("no credit for"), "{e}");
    }
}
