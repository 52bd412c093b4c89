//! Completion queues: a FIFO of work completions with busy-poll and blocking waits.
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::wr::Completion;

/// A completion queue shared by the application and a transport's progress thread.
///
/// `poll` never blocks (busy polling is calling it in a loop); `wait` sleeps on a condition
/// variable until a completion arrives or the timeout passes.
#[derive(Default)]
pub struct Cq {
    q: Mutex<VecDeque<Completion>>,
    cv: Condvar,
}

impl Cq {
    /// An empty queue.
    pub fn new() -> Cq {
        Cq::default()
    }

    /// Appends completions and wakes a waiter.
    pub(crate) fn push_all(&self, items: impl IntoIterator<Item = Completion>) {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let before = q.len();
        q.extend(items);
        if q.len() > before {
            drop(q);
            self.cv.notify_all();
        }
    }

    /// Moves up to `max` completions into `out`; returns how many. Never blocks.
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let n = max.min(q.len());
        out.extend(q.drain(..n));
        n
    }

    /// The oldest completion, waiting up to `timeout` for one; `None` on timeout.
    pub fn wait(&self, timeout: Duration) -> Option<Completion> {
        let deadline = Instant::now() + timeout;
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(c) = q.pop_front() {
                return Some(c);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            q = self
                .cv
                .wait_timeout(q, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.q.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
