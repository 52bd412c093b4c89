//! The writer on its own thread, behind a queue bounded in records and in bytes: the receive
//! path pushes and never waits; what does not fit is dropped and counted.
//!
//! The byte bound matters because a record's size depends on the data (a kept frame's CSR can
//! hold every pixel when `pipeline.sparse_kev` is low): a queue of many such records behind a
//! slow disk would otherwise hold gigabytes.
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;

use super::{FrameRecord, RunInfo, Writer, WriterStats};
use crate::{DaqError, Result};

/// Bytes of sparse data and profiles the queue may hold beyond its images (per writer).
pub const QUEUE_DATA_BYTES: u64 = 256 << 20;

enum Job {
    Frame(Box<FrameRecord>, u64),
    /// A frame's raw words, for `/entry/raw`.
    Raw(u64, Vec<u16>, u64),
}

/// The heap bytes a record holds.
fn record_bytes(rec: &FrameRecord) -> u64 {
    let sparse = rec.sparse.as_ref().map_or(0, |s| {
        s.row_ptr.len() * 4 + s.col.len() * 2 + s.values.len() * 4
    });
    let profile = rec.profile.as_ref().map_or(0, |p| p.len() * 8);
    let image = rec.image.as_ref().map_or(0, |i| i.len() * 4);
    (std::mem::size_of::<FrameRecord>() + sparse + profile + image) as u64
}

/// The writer on its own thread behind a bounded queue: pushing never blocks.
pub struct WriterThread {
    tx: SyncSender<Job>,
    dropped: Arc<AtomicU64>,
    queued: Arc<AtomicU64>,
    max_bytes: u64,
    handle: std::thread::JoinHandle<Result<Writer>>,
}

impl WriterThread {
    /// Creates the file (errors surface here) and starts the thread, with a queue of `queue`
    /// records and no bound in bytes.
    pub fn spawn(path: &Path, info: RunInfo, queue: usize) -> Result<WriterThread> {
        Self::spawn_bounded(path, info, queue, u64::MAX)
    }

    /// [`WriterThread::spawn`] with the queue also bounded to `max_bytes` of records.
    pub fn spawn_bounded(
        path: &Path,
        info: RunInfo,
        queue: usize,
        max_bytes: u64,
    ) -> Result<WriterThread> {
        let mut w = Writer::create(path, &info)?;
        let (tx, rx) = mpsc::sync_channel::<Job>(queue.max(1));
        let queued = Arc::new(AtomicU64::new(0));
        let done = queued.clone();
        let handle = std::thread::Builder::new()
            .name("nexus-writer".into())
            .spawn(move || {
                for job in rx {
                    let (r, bytes) = match job {
                        Job::Frame(rec, bytes) => (w.write(&rec), bytes),
                        Job::Raw(frame, words, bytes) => (w.write_raw(frame, &words), bytes),
                    };
                    done.fetch_sub(bytes, Ordering::Relaxed);
                    r?;
                }
                Ok(w)
            })
            .map_err(|e| DaqError::Acquisition(format!("starting the writer thread: {e}")))?;
        Ok(WriterThread {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
            queued,
            max_bytes,
            handle,
        })
    }

    /// Queues a record; false (and counted) when the queue is full, in records or in bytes,
    /// or the writer failed.
    pub fn push(&self, rec: FrameRecord) -> bool {
        let bytes = record_bytes(&rec);
        self.send(bytes, || Job::Frame(Box::new(rec), bytes))
    }

    /// Queues a frame's raw words for `/entry/raw` (a file created with
    /// [`RunInfo::raw_frames`]), bounded and counted as [`WriterThread::push`] is.
    pub fn push_raw(&self, frame: u64, words: Vec<u16>) -> bool {
        let bytes = (words.len() * 2) as u64;
        self.send(bytes, || Job::Raw(frame, words, bytes))
    }

    fn send(&self, bytes: u64, job: impl FnOnce() -> Job) -> bool {
        // Only this thread adds: a check then an add cannot overshoot.
        if self.queued.load(Ordering::Relaxed).saturating_add(bytes) > self.max_bytes {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.queued.fetch_add(bytes, Ordering::Relaxed);
        match self.tx.try_send(job()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(bytes, Ordering::Relaxed);
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Records dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Drains the queue, writes the summary and closes the file.
    pub fn finish(self, summary_json: &str) -> Result<WriterStats> {
        drop(self.tx);
        let w = self
            .handle
            .join()
            .map_err(|_| DaqError::Acquisition("the writer thread panicked".into()))??;
        let mut st = w.finish(summary_json)?;
        st.dropped = self.dropped.load(Ordering::Relaxed);
        Ok(st)
    }
}
