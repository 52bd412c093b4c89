//! The device's page-in worker (PART): page-ins run off the receive path, in pieces, and the
//! queue pair that asked hears of each piece (the wave's front, so the packets waiting behind
//! it are placed) and of the end (then it sends its ERR).
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Weak};
use std::time::Instant;

use super::{Device, IDLE_WAIT};
use crate::engine::PageInRequest;

/// The page-in worker populates and reports in pieces of this size: 16 pages, about 20 µs, so
/// the wave's front moves in steps small beside a 4 MiB transfer and the lock is taken about
/// once per 16 packets placed.
pub(super) const PAGE_IN_CHUNK: usize = 64 << 10;

/// A page-in for the worker: the queue pair that asked and what it needs.
pub(super) type PageInJob = (u32, PageInRequest);

/// The device's page-in worker: takes every job queued, makes the pages resident off the
/// receive path, then reports to each queue pair, which sends its ERR. Ends with the device.
pub(super) fn page_in_worker(dev: Weak<Device>, jobs: mpsc::Receiver<PageInJob>) {
    let mut batch = Vec::new();
    loop {
        match jobs.recv_timeout(IDLE_WAIT) {
            Ok(j) => batch.push(j),
            Err(mpsc::RecvTimeoutError::Timeout) => match dev.upgrade() {
                Some(d) if !d.stop.load(Ordering::Acquire) => continue,
                _ => return,
            },
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        batch.extend(jobs.try_iter());
        for (qpn, req) in batch.drain(..) {
            let result = req
                .run_reporting(PAGE_IN_CHUNK, |done| {
                    // The front, only if the queue pair is free: a receive thread holding it
                    // places what waits itself as packets come, and the wave goes on meanwhile.
                    let Some(d) = dev.upgrade() else { return };
                    let Some(qp) = d.qp(qpn) else { return };
                    let Some(mut st) = qp.try_lock() else { return };
                    let now = Instant::now();
                    st.engine.page_in_progress(now, req.id, done);
                    if let Err(e) = qp.flush(&mut st, now) {
                        tracing::warn!(error = %e, "udp transmit failed");
                    }
                })
                .map_err(|e| e.to_string());
            let Some(d) = dev.upgrade() else { return };
            let Some(qp) = d.qp(qpn) else { continue };
            let mut st = qp.lock();
            let now = Instant::now();
            st.engine.page_in_done(now, req.id, result);
            if let Err(e) = qp.flush(&mut st, now) {
                tracing::warn!(error = %e, "udp transmit failed");
            }
        }
    }
}
