//! The receiver's scheduler (RASHPA Scheduler), as a sans-IO state machine.
//!
//! It sees only the modules' markers (start and end of each stack, from WRITE-with-immediate
//! arrivals) and the clock the caller passes in. It consolidates the per-module events of a stack
//! into one *global event* ([`Issue`]), in stack order; a stack whose modules have not all
//! arrived whole when its deadline passes is issued with the missing ones listed, to be masked.
//! It keeps the double-buffer books: a marker of stack `s` while an older stack of the same half
//! is still waiting or being processed is an *overrun* — a waiting stack is dropped (its data is
//! being overwritten), a stack being processed stops being [`intact`](Scheduler::intact), so the
//! receiver commits no further frame of it. The source is never slowed down; the acquisition
//! goes on.
//!
//! Why a start marker: data of a stack lands before its end marker, so only a marker sent before
//! the first line (a zero-length WRITE-with-immediate) tells the receiver that a half is being
//! written. Markers travel on the same queue pair as the data, in order, so a receiver that has
//! drained its completion queues after a frame was processed knows whether that frame's half was
//! touched meanwhile. If the start marker itself is lost, the end marker still reports the
//! overrun, later.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::ring::{Marker, RingLayout};

/// A stack ready for processing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Issue {
    /// Stack number.
    pub stack: u64,
    /// Modules to mask (bit `m` for module `m`): they did not arrive whole.
    pub lost_modules: u64,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SchedStats {
    /// Markers seen.
    pub markers: u64,
    /// Markers of stacks already issued or dropped (ignored).
    pub late: u64,
    /// Stacks issued with every module whole.
    pub stacks_complete: u64,
    /// Stacks issued with modules masked.
    pub stacks_partial: u64,
    /// Module parts masked (summed over stacks).
    pub modules_lost: u64,
    /// Overruns: stacks whose half was written again before they were done.
    pub overruns: u64,
    /// Of those, stacks dropped before processing started.
    pub stacks_dropped: u64,
}

#[derive(Debug)]
struct Stack {
    first_seen: Instant,
    /// Modules whose end marker arrived whole.
    whole: u64,
    /// Modules whose end marker arrived after a loss.
    broken: u64,
    issued: bool,
    /// A newer stack wrote into this stack's half after it was issued.
    overrun: bool,
}

/// The scheduler of one receiver.
#[derive(Debug)]
pub struct Scheduler {
    modules: usize,
    deadline: Duration,
    stacks: BTreeMap<u64, Stack>,
    /// Stacks below this were issued or dropped; their markers are late.
    floor: u64,
    stats: SchedStats,
}

impl Scheduler {
    /// A scheduler for `modules` modules; a stack waits at most `deadline` after its first marker.
    pub fn new(modules: usize, deadline: Duration) -> Scheduler {
        Scheduler {
            modules,
            deadline,
            stacks: BTreeMap::new(),
            floor: 0,
            stats: SchedStats::default(),
        }
    }

    fn all(&self) -> u64 {
        if self.modules >= 64 {
            u64::MAX
        } else {
            (1u64 << self.modules) - 1
        }
    }

    /// The stack the receiver is at (to resolve wrapped immediates).
    pub fn latest(&self) -> u64 {
        self.stacks
            .keys()
            .next_back()
            .copied()
            .unwrap_or(self.floor)
    }

    /// A module's marker; `whole` says whether every packet of the module's stack arrived
    /// (meaningful for end markers).
    pub fn on_marker(&mut self, now: Instant, module: usize, marker: Marker, whole: bool) {
        self.stats.markers += 1;
        let (s, end) = match marker {
            Marker::Start(s) => (s, false),
            Marker::End(s) => (s, true),
        };
        if module >= self.modules || s < self.floor {
            self.stats.late += 1;
            return;
        }
        self.overrun_older(s);
        let st = self.stacks.entry(s).or_insert(Stack {
            first_seen: now,
            whole: 0,
            broken: 0,
            issued: false,
            overrun: false,
        });
        if st.issued {
            self.stats.late += 1;
            return;
        }
        if end {
            let bit = 1u64 << module;
            if whole && st.broken & bit == 0 {
                st.whole |= bit;
            } else {
                st.whole &= !bit;
                st.broken |= bit;
            }
        }
    }

    /// Older stacks in the half `s` lands in are overrun.
    fn overrun_older(&mut self, s: u64) {
        let half = RingLayout::half(s);
        let hit: Vec<u64> = self
            .stacks
            .range(..s)
            .filter(|(&t, st)| RingLayout::half(t) == half && !st.overrun)
            .map(|(&t, _)| t)
            .collect();
        for t in hit {
            self.stats.overruns += 1;
            let st = self.stacks.get_mut(&t).expect("listed above");
            if st.issued {
                st.overrun = true;
            } else {
                self.stats.stacks_dropped += 1;
                self.stacks.remove(&t);
                self.floor = self.floor.max(t.saturating_add(1));
            }
        }
    }

    fn ready(&self, st: &Stack, now: Instant) -> bool {
        (st.whole | st.broken) == self.all() || now >= st.first_seen + self.deadline
    }

    /// The next stack to process, in stack order: all its modules arrived, or its deadline passed.
    pub fn poll(&mut self, now: Instant) -> Option<Issue> {
        let (&s, st) = self.stacks.iter().find(|(_, st)| !st.issued)?;
        if !self.ready(st, now) {
            return None;
        }
        let lost = self.all() & !st.whole;
        if lost == 0 {
            self.stats.stacks_complete += 1;
        } else {
            self.stats.stacks_partial += 1;
            self.stats.modules_lost += u64::from(lost.count_ones());
        }
        self.stacks.get_mut(&s).expect("found above").issued = true;
        self.floor = self.floor.max(s.saturating_add(1));
        Some(Issue {
            stack: s,
            lost_modules: lost,
        })
    }

    /// When [`poll`](Self::poll) may next have something (a waiting stack's deadline).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.stacks
            .values()
            .find(|st| !st.issued)
            .map(|st| st.first_seen + self.deadline)
    }

    /// Whether an issued stack's half has not been written by a newer stack since.
    pub fn intact(&self, stack: u64) -> bool {
        self.stacks.get(&stack).is_some_and(|st| !st.overrun)
    }

    /// The processing unit is done with an issued stack: its half is free.
    pub fn finish(&mut self, stack: u64) {
        if self.stacks.get(&stack).is_some_and(|st| st.issued) {
            self.stacks.remove(&stack);
        }
    }

    /// End of the acquisition: every waiting stack becomes due now.
    pub fn flush(&mut self, now: Instant) {
        for st in self.stacks.values_mut() {
            st.first_seen = st
                .first_seen
                .min(now - self.deadline.min(Duration::from_secs(3600)));
        }
    }

    /// Stacks issued and not finished, or waiting.
    pub fn in_flight(&self) -> usize {
        self.stacks.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> SchedStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DL: Duration = Duration::from_millis(50);

    fn sched(modules: usize) -> (Scheduler, Instant) {
        (Scheduler::new(modules, DL), Instant::now())
    }

    fn stack(s: &mut Scheduler, now: Instant, n: u64, modules: &[usize]) {
        for &m in modules {
            s.on_marker(now, m, Marker::Start(n), true);
        }
        for &m in modules {
            s.on_marker(now, m, Marker::End(n), true);
        }
    }

    #[test]
    fn a_stack_is_issued_once_every_module_ended() {
        let (mut s, t) = sched(3);
        stack(&mut s, t, 0, &[0, 1]);
        assert_eq!(s.poll(t), None, "module 2 still missing");
        s.on_marker(t, 2, Marker::End(0), true);
        assert_eq!(
            s.poll(t),
            Some(Issue {
                stack: 0,
                lost_modules: 0
            })
        );
        assert_eq!(s.poll(t), None, "issued once");
    }

    #[test]
    fn a_missing_module_is_masked_after_the_deadline() {
        let (mut s, t) = sched(4);
        stack(&mut s, t, 0, &[0, 1, 3]);
        assert_eq!(s.poll(t + DL / 2), None);
        assert_eq!(s.poll_timeout(), Some(t + DL));
        let i = s.poll(t + DL).unwrap();
        assert_eq!(i.lost_modules, 0b0100);
        assert_eq!(s.stats().stacks_partial, 1);
        assert_eq!(s.stats().modules_lost, 1);
    }

    #[test]
    fn an_end_marker_after_a_loss_masks_that_module_at_once() {
        let (mut s, t) = sched(2);
        s.on_marker(t, 0, Marker::End(0), true);
        s.on_marker(t, 1, Marker::End(0), false);
        assert_eq!(
            s.poll(t),
            Some(Issue {
                stack: 0,
                lost_modules: 0b10
            })
        );
    }

    #[test]
    fn stacks_are_issued_in_order() {
        let (mut s, t) = sched(1);
        s.on_marker(t, 0, Marker::Start(0), true);
        stack(&mut s, t, 1, &[0]);
        assert_eq!(s.poll(t), None, "stack 0 still waits, so 1 waits too");
        assert_eq!(s.poll(t + DL).map(|i| i.stack), Some(0));
        assert_eq!(s.poll(t + DL).map(|i| i.stack), Some(1));
    }

    #[test]
    fn a_newer_stack_in_a_busy_half_is_an_overrun_of_the_one_being_processed() {
        let (mut s, t) = sched(1);
        stack(&mut s, t, 0, &[0]);
        let i = s.poll(t).unwrap();
        stack(&mut s, t, 1, &[0]);
        assert!(s.intact(0), "stack 1 lands in the other half");
        s.on_marker(t, 0, Marker::Start(2), true);
        assert!(!s.intact(i.stack), "stack 2 writes into stack 0's half");
        assert_eq!(s.stats().overruns, 1);
        s.finish(0);
        assert_eq!(
            s.poll(t).map(|i| i.stack),
            Some(1),
            "the acquisition goes on"
        );
    }

    #[test]
    fn a_waiting_stack_overwritten_is_dropped_and_its_markers_are_late() {
        let (mut s, t) = sched(2);
        stack(&mut s, t, 0, &[0]);
        s.on_marker(t, 0, Marker::Start(2), true);
        assert_eq!(s.stats().stacks_dropped, 1);
        s.on_marker(t, 1, Marker::End(0), true);
        assert_eq!(s.stats().late, 1);
        stack(&mut s, t, 2, &[1]);
        s.on_marker(t, 0, Marker::End(2), true);
        assert_eq!(s.poll(t).map(|i| i.stack), Some(2));
    }

    #[test]
    fn a_lost_start_marker_is_caught_by_the_end_marker() {
        let (mut s, t) = sched(1);
        stack(&mut s, t, 0, &[0]);
        s.poll(t).unwrap();
        s.on_marker(t, 0, Marker::End(2), true);
        assert!(!s.intact(0));
    }

    #[test]
    fn flush_issues_everything_waiting() {
        let (mut s, t) = sched(2);
        stack(&mut s, t, 0, &[0]);
        stack(&mut s, t, 1, &[1]);
        s.flush(t);
        assert_eq!(s.poll(t).map(|i| i.lost_modules), Some(0b10));
        assert_eq!(s.poll(t).map(|i| i.lost_modules), Some(0b01));
    }

    #[test]
    fn hostile_markers_do_not_panic() {
        let (mut s, t) = sched(2);
        s.on_marker(t, 99, Marker::End(0), true);
        s.on_marker(t, 0, Marker::End(u64::MAX), true);
        s.on_marker(t, 0, Marker::Start(u64::MAX - 1), true);
        assert_eq!(s.stats().late, 1);
        let _ = s.poll(t + DL);
    }
}
