//! The service's counters, for `/metrics` (through `remora_http::metrics`: the Prometheus text
//! format 0.0.4, or OpenMetrics when the scraper prefers it).

use super::pool::PoolCounts;
use remora_http::metrics::Families;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the request duration histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Debug, Default)]
struct Labelled {
    requests: BTreeMap<u16, u64>,
    errors: BTreeMap<&'static str, u64>,
    /// Counts per bucket (not cumulative), one more for +Inf.
    buckets: [u64; BUCKETS.len() + 1],
    duration_sum: f64,
}

/// Everything `/metrics` shows.
#[derive(Debug)]
pub(crate) struct Metrics {
    labelled: Mutex<Labelled>,
    pub in_progress: AtomicU64,
    pub input_bytes: AtomicU64,
    pub output_bytes: AtomicU64,
    pool: Arc<PoolCounts>,
    workers: usize,
    http: Arc<remora_http::Stats>,
}

impl Metrics {
    pub(crate) fn new(
        pool: Arc<PoolCounts>,
        workers: usize,
        http: Arc<remora_http::Stats>,
    ) -> Metrics {
        Metrics {
            labelled: Mutex::default(),
            in_progress: AtomicU64::new(0),
            input_bytes: AtomicU64::new(0),
            output_bytes: AtomicU64::new(0),
            pool,
            workers,
            http,
        }
    }

    /// Records a finished image request.
    pub(crate) fn request(&self, status: u16, error: Option<&'static str>, took: Duration) {
        let mut l = self.labelled.lock().unwrap_or_else(|e| e.into_inner());
        *l.requests.entry(status).or_default() += 1;
        if let Some(kind) = error {
            *l.errors.entry(kind).or_default() += 1;
        }
        let s = took.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(BUCKETS.len());
        l.buckets[i] += 1;
        l.duration_sum += s;
    }

    /// What `/metrics` reports, read at each scrape (the names are the service's own, and
    /// stay as they were when this text was written by hand).
    pub(crate) fn report(&self, m: &mut Families) {
        let l = self.labelled.lock().unwrap_or_else(|e| e.into_inner());
        for (status, n) in &l.requests {
            m.counter_with(
                "remora_resize_requests_total",
                "Image requests answered, by HTTP status.",
                &[("status", &status.to_string())],
                *n,
            );
        }
        for (kind, n) in &l.errors {
            m.counter_with(
                "remora_resize_errors_total",
                "Image requests that failed, by kind.",
                &[("kind", kind)],
                *n,
            );
        }
        let buckets: Vec<(f64, u64)> = BUCKETS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(l.buckets)
            .collect();
        m.histogram_with(
            "remora_resize_request_duration_seconds",
            "Time from an image request's arrival to its answer.",
            &[],
            &buckets,
            l.duration_sum,
        );
        drop(l);
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        m.gauge(
            "remora_resize_requests_in_progress",
            "Image requests being answered now.",
            n(&self.in_progress),
        )
        .gauge(
            "remora_resize_queue_depth",
            "Jobs waiting for a resize worker.",
            self.pool.queued.load(Ordering::Relaxed) as u64,
        )
        .gauge(
            "remora_resize_workers",
            "Resize worker threads.",
            self.workers,
        )
        .gauge(
            "remora_resize_images_in_progress",
            "Jobs queued or running on a worker.",
            self.pool.pending.load(Ordering::Relaxed) as u64,
        )
        .counter(
            "remora_resize_input_bytes_total",
            "Bytes of source images read (bodies and sources).",
            n(&self.input_bytes),
        )
        .counter(
            "remora_resize_output_bytes_total",
            "Bytes of resized images sent.",
            n(&self.output_bytes),
        )
        .http("remora_resize", &self.http);
    }
}
