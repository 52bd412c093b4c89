//! The receiver's scheduler (RASHPA Scheduler), as a sans-IO state machine.
//!
//! It sees only the modules' markers (start and end of each stack, from WRITE-with-immediate
//! arrivals) and the clock the caller passes in. It consolidates the per-module events of a stack
//! into one *global event* ([`Issue`]), in stack order. A module missing from a stack is given
//! up (listed in the issue, to be masked) as soon as it is known lost — the module has sent a
//! marker of a newer stack, and markers arrive in order — or once the stack's deadline has passed
//! and the module has been silent for as long: a module that is only behind (a transmitter
//! starved of CPU for a moment) is waited for, since the ring has room for it.
//! It keeps the ring's books: a marker of stack `s` while an older stack of the same stack buffer
//! is still waiting or being processed is an *overrun* — a waiting stack is dropped (its data is
//! being overwritten), a stack being processed stops being [`intact`](Scheduler::intact), so the
//! receiver commits no further frame of it. The scheduler never slows the source down itself;
//! what it [`released`](Scheduler::released) is what a flow-controlled source may overwrite.
//!
//! Why a start marker: data of a stack lands before its end marker, so only a marker sent before
//! the first line (a zero-length WRITE-with-immediate) tells the receiver that a buffer is being
//! written. Markers travel on the same queue pair as the data, in order, so a receiver that has
//! drained its completion queues after a frame was processed knows whether that frame's buffer
//! was touched meanwhile. If the start marker itself is lost, the end marker still reports the
//! overrun, later.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::ring::Marker;

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
    /// Overruns: stacks whose buffer was written again before they were done.
    pub overruns: u64,
    /// Of those, stacks dropped before processing started.
    pub stacks_dropped: u64,
    /// Most stacks held at once (arrived or arriving, not yet finished): how deep the ring
    /// had to be.
    pub high_water_stacks: u64,
    /// Stacks dropped whole, unprocessed, because the source would overwrite them before the
    /// processing unit could finish them (past the loss-free rate, with `mask`): processing
    /// them would only have made the next ones late too.
    pub stacks_skipped: u64,
}

#[derive(Debug)]
struct Stack {
    first_seen: Instant,
    /// Modules whose end marker arrived whole.
    whole: u64,
    /// Modules whose end marker arrived after a loss.
    broken: u64,
    issued: bool,
    /// When it was issued.
    issued_at: Option<Instant>,
    /// A newer stack wrote into this stack's buffer after it was issued.
    overrun: bool,
}

/// The scheduler of one receiver.
#[derive(Debug)]
pub struct Scheduler {
    modules: usize,
    deadline: Duration,
    /// Per module: the newest stack it sent a marker of, and when its last marker came.
    seen: Vec<Option<(u64, Instant)>>,
    /// The acquisition is over: every stack is due.
    flushed: bool,
    /// The links are reliable (RC): a module is never given up for being silent, only when its
    /// link closes ([`Scheduler::link_closed`]).
    reliable: bool,
    /// Per module: its link has closed.
    closed: Vec<bool>,
    /// Stack buffers in the ring.
    depth: u64,
    /// Drop a stack that would be overwritten before it is processed, when a newer one is
    /// ready.
    skip_doomed: bool,
    /// The newest stack that started, and when.
    last_new: Option<(u64, Instant)>,
    /// Smoothed time between the starts of consecutive stacks.
    period: Option<Duration>,
    /// Smoothed time the processing unit spends on a stack (it takes them one at a time, in
    /// order: from its issue or the previous finish, whichever came later, to its finish).
    processing: Option<Duration>,
    last_finish: Option<Instant>,
    stacks: BTreeMap<u64, Stack>,
    /// Stacks below this were issued or dropped; their markers are late.
    floor: u64,
    stats: SchedStats,
}

impl Scheduler {
    /// A scheduler for `modules` modules writing into a ring of `depth` stack buffers; a stack
    /// waits at most `deadline` after its first marker.
    pub fn new(modules: usize, deadline: Duration, depth: usize) -> Scheduler {
        Scheduler {
            modules,
            deadline,
            seen: vec![None; modules],
            flushed: false,
            reliable: false,
            closed: vec![false; modules],
            depth: depth.max(1) as u64,
            skip_doomed: false,
            last_new: None,
            period: None,
            processing: None,
            last_finish: None,
            stacks: BTreeMap::new(),
            floor: 0,
            stats: SchedStats::default(),
        }
    }

    /// Drops a stack whole, before processing, when the source would overwrite it before the
    /// processing unit could finish it and a newer stack is ready: for a source that does not
    /// wait (`mask`), past the rate the receiver keeps up with, the unit then works on stacks
    /// it can deliver instead of falling further behind on ones it cannot (the newest ready
    /// stack is always processed, as far as it can be). Estimates come from the stacks' start
    /// times and the processing times seen so far.
    pub fn skipping_doomed(mut self) -> Scheduler {
        self.skip_doomed = true;
        self
    }

    /// The modules' links are reliable (RC, a flow-controlled source): what a module sends
    /// arrives or its link breaks, so a silent module is waited for however long it takes.
    pub fn reliable_links(mut self) -> Scheduler {
        self.reliable = true;
        self
    }

    /// Module `module`'s link has closed: on reliable links, nothing more will come from it
    /// (its source waited for every WRITE to be acknowledged before closing).
    pub fn link_closed(&mut self, module: usize) {
        if let Some(c) = self.closed.get_mut(module) {
            *c = true;
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
        if module >= self.modules {
            self.stats.late += 1;
            return;
        }
        let newest = self.seen[module].map_or(s, |(n, _)| n.max(s));
        self.seen[module] = Some((newest, now));
        if s < self.floor {
            self.stats.late += 1;
            return;
        }
        self.overrun_older(s);
        let held = s.saturating_sub(self.released()).saturating_add(1);
        self.stats.high_water_stacks = self.stats.high_water_stacks.max(held);
        if !self.stacks.contains_key(&s) {
            self.started(s, now);
        }
        let st = self.stacks.entry(s).or_insert(Stack {
            first_seen: now,
            whole: 0,
            broken: 0,
            issued: false,
            issued_at: None,
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

    /// A stack not seen before started arriving: the source's pace.
    fn started(&mut self, s: u64, now: Instant) {
        match self.last_new {
            Some((prev, at)) if s > prev => {
                let gap = now.saturating_duration_since(at) / (s - prev).min(1 << 20) as u32;
                self.period = Some(smooth(self.period, gap));
                self.last_new = Some((s, now));
            }
            None => self.last_new = Some((s, now)),
            _ => {}
        }
    }

    /// Whether stack `s`, issued now, would be overwritten before the processing unit finishes
    /// it: the stacks issued before it are done first, and the `depth - (newest - s)`-th stack
    /// to start after the newest lands on its buffer.
    fn doomed(&self, s: u64, now: Instant) -> bool {
        let (Some(period), Some(processing), Some((newest, at))) =
            (self.period, self.processing, self.last_new)
        else {
            return false;
        };
        if !self.skip_doomed || self.flushed || now.saturating_duration_since(at) > 2 * period {
            // A source that has gone quiet overwrites nothing.
            return false;
        }
        let ahead = self.stacks.values().filter(|st| st.issued).count() as u32;
        let starts_left = (s + self.depth).saturating_sub(newest).min(1 << 20) as u32;
        now + processing * (ahead + 1) >= at + period * starts_left
    }

    /// Older stacks in the buffer `s` lands in are overrun.
    fn overrun_older(&mut self, s: u64) {
        let depth = self.depth;
        let hit: Vec<u64> = self
            .stacks
            .range(..s)
            .filter(|(&t, st)| t % depth == s % depth && !st.overrun)
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

    /// Whether every module of stack `s` has arrived or is given up.
    fn ready(&self, s: u64, st: &Stack, now: Instant) -> bool {
        let missing = self.all() & !(st.whole | st.broken);
        if missing == 0 || self.flushed {
            return true;
        }
        let overdue = now >= st.first_seen + self.deadline;
        (0..self.modules)
            .filter(|m| missing >> m & 1 == 1)
            .all(|m| match self.seen[m] {
                Some((newest, _)) if newest > s => true,
                // Over UC the closed connection can overtake the last datagrams: only the
                // deadline (and the end of the run's flush) gives a module up there.
                _ if self.reliable => self.closed[m],
                Some((_, last)) => overdue && now >= last + self.deadline,
                None => overdue,
            })
    }

    /// The next stack to process, in stack order: all its modules arrived, or its deadline passed.
    pub fn poll(&mut self, now: Instant) -> Option<Issue> {
        let (s, st) = loop {
            let (&s, st) = self.stacks.iter().find(|(_, st)| !st.issued)?;
            if !self.ready(s, st, now) {
                return None;
            }
            let newer_ready = || {
                self.stacks
                    .range(s + 1..)
                    .any(|(&t, st)| !st.issued && self.ready(t, st, now))
            };
            if !(self.doomed(s, now) && newer_ready()) {
                break (s, st);
            }
            self.stacks.remove(&s);
            self.stats.stacks_skipped += 1;
            self.floor = self.floor.max(s.saturating_add(1));
        };
        let lost = self.all() & !st.whole;
        if lost == 0 {
            self.stats.stacks_complete += 1;
        } else {
            self.stats.stacks_partial += 1;
            self.stats.modules_lost += u64::from(lost.count_ones());
        }
        let st = self.stacks.get_mut(&s).expect("found above");
        st.issued = true;
        st.issued_at = Some(now);
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

    /// Whether an issued stack's buffer has not been written by a newer stack since.
    pub fn intact(&self, stack: u64) -> bool {
        self.stacks.get(&stack).is_some_and(|st| !st.overrun)
    }

    /// The processing unit is done with an issued stack: its buffer is free.
    pub fn finish(&mut self, stack: u64, now: Instant) {
        if let Some(st) = self.stacks.get(&stack).filter(|st| st.issued) {
            if let Some(t) = st.issued_at {
                let began = self.last_finish.map_or(t, |f| f.max(t));
                let took = now.saturating_duration_since(began);
                self.processing = match (st.overrun, self.processing) {
                    (false, avg) => Some(smooth(avg, took)),
                    // An overrun stack is abandoned part way: its time is only a lower bound.
                    (true, Some(avg)) => Some(avg.max(took)),
                    (true, None) => Some(took),
                };
            }
            self.last_finish = Some(now);
            self.stacks.remove(&stack);
        }
    }

    /// End of the acquisition: every waiting stack becomes due now, whatever is missing.
    pub fn flush(&mut self, _now: Instant) {
        self.flushed = true;
    }

    /// Stacks issued and not finished, or waiting.
    pub fn in_flight(&self) -> usize {
        self.stacks.len()
    }

    /// The newest stack any marker has been seen of and that is still held.
    pub fn newest(&self) -> Option<u64> {
        self.stacks.keys().next_back().copied()
    }

    /// Every stack below this one is done with (processed, dropped or never coming), so a source
    /// may write stacks up to `released() + depth - 1` without overwriting anything held.
    pub fn released(&self) -> u64 {
        self.stacks
            .keys()
            .next()
            .map_or(self.floor, |&first| first.min(self.floor))
    }

    /// Counters so far.
    pub fn stats(&self) -> SchedStats {
        self.stats
    }
}

/// An exponentially weighted average, an eighth of the new sample at a time.
fn smooth(avg: Option<Duration>, sample: Duration) -> Duration {
    match avg {
        None => sample,
        Some(a) => (a * 7 + sample) / 8,
    }
}

#[cfg(test)]
mod tests;
