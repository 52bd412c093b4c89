//! The device's page-in worker (PART): page-ins run off the receive path, and each queue pair
//! that asked hears back through its engine, which then sends its ERR.
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Weak};
use std::time::Instant;

use super::{Device, IDLE_WAIT};
use crate::engine::PageInRequest;

/// The page-in worker populates in pieces of this size, so that a resend racing it (PIA with a
/// short fault timeout) finds the first pages in while later ones are still coming.
pub(super) const PAGE_IN_CHUNK: usize = 256 << 10;

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
        let done: Vec<_> = batch
            .drain(..)
            .map(|(qpn, req)| {
                let result = req.run(PAGE_IN_CHUNK).map_err(|e| e.to_string());
                (qpn, req.id, result)
            })
            .collect();
        let Some(d) = dev.upgrade() else { return };
        let now = Instant::now();
        for (qpn, id, result) in done {
            let Some(qp) = d.qp(qpn) else { continue };
            let mut st = qp.lock();
            st.engine.page_in_done(now, id, result);
            if let Err(e) = qp.flush(&mut st, now) {
                tracing::warn!(error = %e, "udp transmit failed");
            }
        }
    }
}
