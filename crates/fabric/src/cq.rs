//! Completion queues: a FIFO of work completions with busy-poll and blocking waits.
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::wr::Completion;

/// A completion queue shared by the application and whatever drives the queue pair.
///
/// `poll` never blocks (busy polling is calling it in a loop); `wait` sleeps on a condition
/// variable until a completion arrives or the timeout passes. A thread that drives progress
/// itself sleeps on its socket instead and registers with `Cq::sleep_fd`, so that a completion
/// pushed by another thread (a poster's UC completion, the page-in worker) wakes it too.
pub struct Cq {
    q: Mutex<VecDeque<Completion>>,
    cv: Condvar,
    /// Written when a completion arrives while someone sleeps on it.
    efd: Option<OwnedFd>,
    sleepers: AtomicU32,
}

impl Default for Cq {
    fn default() -> Cq {
        let efd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )
        .map_err(|e| tracing::warn!(error = %e, "no eventfd for a completion queue"))
        .ok();
        Cq {
            q: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            efd,
            sleepers: AtomicU32::new(0),
        }
    }
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
            if self.sleepers.load(Ordering::SeqCst) > 0 {
                if let Some(fd) = &self.efd {
                    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
                }
            }
        }
    }

    /// Moves up to `max` completions into `out`; returns how many. Never blocks.
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let n = max.min(q.len());
        out.extend(q.drain(..n));
        n
    }

    /// The oldest completion, if any. Never blocks.
    pub(crate) fn pop(&self) -> Option<Completion> {
        self.q.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
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

    /// Registers the caller as about to sleep on something else (its socket) and returns the
    /// eventfd to add to that wait; the registration ends when the guard drops. Check the
    /// queue after this call and before sleeping: a completion pushed from then on also makes
    /// the eventfd readable.
    pub(crate) fn sleep_fd(&self) -> SleepGuard<'_> {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        SleepGuard { cq: self }
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

/// A registered sleeper of a [`Cq`] (see [`Cq::sleep_fd`]).
pub(crate) struct SleepGuard<'a> {
    cq: &'a Cq,
}

impl SleepGuard<'_> {
    /// The eventfd to wait on, if the queue has one.
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.cq.efd.as_ref().map(|f| f.as_fd())
    }
}

impl Drop for SleepGuard<'_> {
    fn drop(&mut self) {
        if self.cq.sleepers.fetch_sub(1, Ordering::SeqCst) == 1 {
            if let Some(fd) = &self.cq.efd {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(fd, &mut b);
            }
        }
    }
}
