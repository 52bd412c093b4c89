//! A fixed number of resize threads fed by a bounded queue. `submit` never blocks: when every
//! worker is busy and `queue` jobs already wait, it gives the job back (the caller answers 503).
//! A panicking job is caught; the worker goes on with the next one.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

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

pub(crate) struct Pool {
    tx: Mutex<Option<SyncSender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    gate: Arc<Gate>,
    pub counts: Arc<PoolCounts>,
    pub workers: usize,
}

impl Pool {
    pub(crate) fn new(workers: usize, queue: usize) -> std::io::Result<Pool> {
        let workers = workers.max(1);
        let (tx, rx) = sync_channel::<Job>(queue);
        let rx = Arc::new(Mutex::new(rx));
        let gate = Arc::new(Gate::default());
        let counts = Arc::new(PoolCounts::default());
        let mut threads = Vec::with_capacity(workers);
        for i in 0..workers {
            let (rx, gate, counts) = (rx.clone(), gate.clone(), counts.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("resize-worker-{i}"))
                    .spawn(move || work(&rx, &gate, &counts))?,
            );
        }
        Ok(Pool {
            tx: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
            gate,
            counts,
            workers,
        })
    }

    /// Queues `job`, or returns false when the queue is full (or the pool stopped).
    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'static) -> bool {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = tx.as_ref() else {
            return false;
        };
        self.counts.queued.fetch_add(1, Ordering::SeqCst);
        self.counts.pending.fetch_add(1, Ordering::SeqCst);
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

    /// Stops taking jobs, lets the queued ones finish and joins the workers.
    pub(crate) fn stop(&self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.gate.set(false);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop();
    }
}

fn work(rx: &Mutex<Receiver<Job>>, gate: &Gate, counts: &PoolCounts) {
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
        if catch_unwind(AssertUnwindSafe(job)).is_err() {
            tracing::error!("a resize job panicked; the worker goes on");
        }
        counts.pending.fetch_sub(1, Ordering::SeqCst);
    }
}
