//! A fixed number of resize threads fed by a bounded queue, and the slots that bound it.
//!
//! A request takes a [`Slot`] before it reads anything it would hold (its body): there are
//! `workers + queue` of them, so at most that many requests hold an input at once and a
//! request that finds none is answered 503 without its body being read. `submit` hands the
//! job and its slot to the queue; the slot is given back when the job ends. A panicking job
//! is caught; the worker goes on with the next one.
//!
//! Shutting down: [`Pool::cancel`] sets the flag every job's [`Stop`](crate::budget::Stop)
//! watches (a running job ends at its next check, queued ones are dropped unrun), and
//! [`Pool::stop`] joins the workers that end before a deadline and leaves the others (a job
//! inside the JPEG codec cannot be interrupted) to end with the process.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Counts shared with the metrics.
#[derive(Debug, Default)]
pub(crate) struct PoolCounts {
    /// Jobs waiting for a worker.
    pub queued: AtomicUsize,
    /// Jobs submitted and not yet finished (queued or running).
    pub pending: AtomicUsize,
}

/// A gate the workers pass before each job: closed, they hold their job (tests use it to
/// make backpressure deterministic).
#[derive(Debug, Default)]
struct Gate {
    closed: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn pass(&self) {
        let mut closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        while *closed {
            closed = self.cv.wait(closed).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn set(&self, closed: bool) {
        *self.closed.lock().unwrap_or_else(|e| e.into_inner()) = closed;
        self.cv.notify_all();
    }
}

/// A place in the pool (running or queued), held from before a request reads its input until
/// its job ends.
pub(crate) struct Slot(#[allow(dead_code)] OwnedSemaphorePermit);

pub(crate) struct Pool {
    tx: Mutex<Option<SyncSender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    gate: Arc<Gate>,
    slots: Arc<Semaphore>,
    cancel: Arc<AtomicBool>,
    pub counts: Arc<PoolCounts>,
    pub workers: usize,
}

impl Pool {
    pub(crate) fn new(workers: usize, queue: usize) -> std::io::Result<Pool> {
        let workers = workers.max(1);
        let slots = workers.saturating_add(queue).min(Semaphore::MAX_PERMITS);
        // Room for every slot: a job with a slot is never refused by the channel.
        let (tx, rx) = sync_channel::<Job>(slots);
        let rx = Arc::new(Mutex::new(rx));
        let gate = Arc::new(Gate::default());
        let counts = Arc::new(PoolCounts::default());
        let cancel = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::with_capacity(workers);
        for i in 0..workers {
            let (rx, gate, counts, cancel) =
                (rx.clone(), gate.clone(), counts.clone(), cancel.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("resize-worker-{i}"))
                    .spawn(move || work(&rx, &gate, &counts, &cancel))?,
            );
        }
        Ok(Pool {
            tx: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
            gate,
            slots: Arc::new(Semaphore::new(slots)),
            cancel,
            counts,
            workers,
        })
    }

    /// A free slot, or `None` when every worker is busy and the queue is full (or the pool is
    /// cancelled).
    pub(crate) fn try_slot(&self) -> Option<Slot> {
        if self.cancelled() {
            return None;
        }
        self.slots.clone().try_acquire_owned().ok().map(Slot)
    }

    /// The flag a job's stop watches.
    pub(crate) fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// Whether [`Pool::cancel`] was called.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Queues `job` with its slot (given back when the job ends or is dropped); false when the
    /// pool has stopped.
    pub(crate) fn submit(&self, slot: Slot, job: impl FnOnce() + Send + 'static) -> bool {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = tx.as_ref() else {
            return false;
        };
        self.counts.queued.fetch_add(1, Ordering::SeqCst);
        self.counts.pending.fetch_add(1, Ordering::SeqCst);
        let job = move || {
            let _slot = slot;
            job();
        };
        match tx.try_send(Box::new(job)) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counts.queued.fetch_sub(1, Ordering::SeqCst);
                self.counts.pending.fetch_sub(1, Ordering::SeqCst);
                false
            }
        }
    }

    /// Holds (true) or releases (false) the workers before their next job.
    pub(crate) fn pause(&self, paused: bool) {
        self.gate.set(paused);
    }

    /// Cancels every job: running ones stop at their next check, queued ones are dropped,
    /// no slot is handed out any more.
    pub(crate) fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
        self.slots.close();
        self.gate.set(false);
    }

    /// Stops taking jobs and joins the workers that end by `until`; the others are left to
    /// end with the process (a job inside the JPEG codec cannot be interrupted). Without a
    /// [`Pool::cancel`] first, the queued jobs run before the workers end.
    pub(crate) fn stop(&self, until: Instant) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.gate.set(false);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        let mut left = 0;
        for t in threads {
            while !t.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                left += 1;
            }
        }
        if left > 0 {
            tracing::warn!(
                "{left} resize worker(s) still busy at shutdown: left to end with the process"
            );
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.cancel();
        self.stop(Instant::now() + Duration::from_secs(2));
    }
}

fn work(rx: &Mutex<Receiver<Job>>, gate: &Gate, counts: &PoolCounts, cancel: &AtomicBool) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        counts.queued.fetch_sub(1, Ordering::SeqCst);
        gate.pass();
        if cancel.load(Ordering::Relaxed) {
            // Dropped unrun: its request sees the job gone and answers 503.
            drop(job);
        } else if catch_unwind(AssertUnwindSafe(job)).is_err() {
            tracing::error!("a resize job panicked; the worker goes on");
        }
        counts.pending.fetch_sub(1, Ordering::SeqCst);
    }
}
