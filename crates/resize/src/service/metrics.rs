//! The service's counters, rendered in the Prometheus text format (version 0.0.4).

use super::pool::PoolCounts;
use std::collections::BTreeMap;
use std::fmt::Write as _;
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

    /// The Prometheus text.
    pub(crate) fn render(&self) -> String {
        let l = self.labelled.lock().unwrap_or_else(|e| e.into_inner());
        let mut o = String::new();
        let head = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        head(
            &mut o,
            "remora_resize_requests_total",
            "counter",
            "Image requests answered, by HTTP status.",
        );
        for (status, n) in &l.requests {
            let _ = writeln!(o, "remora_resize_requests_total{{status=\"{status}\"}} {n}");
        }
        head(
            &mut o,
            "remora_resize_errors_total",
            "counter",
            "Image requests that failed, by kind.",
        );
        for (kind, n) in &l.errors {
            let _ = writeln!(o, "remora_resize_errors_total{{kind=\"{kind}\"}} {n}");
        }
        head(
            &mut o,
            "remora_resize_request_duration_seconds",
            "histogram",
            "Time from an image request's arrival to its answer.",
        );
        let mut cumulative = 0;
        for (b, n) in BUCKETS.iter().zip(&l.buckets) {
            cumulative += n;
            let _ = writeln!(
                o,
                "remora_resize_request_duration_seconds_bucket{{le=\"{b}\"}} {cumulative}"
            );
        }
        cumulative += l.buckets[BUCKETS.len()];
        let _ = writeln!(
            o,
            "remora_resize_request_duration_seconds_bucket{{le=\"+Inf\"}} {cumulative}"
        );
        let _ = writeln!(
            o,
            "remora_resize_request_duration_seconds_sum {}",
            l.duration_sum
        );
        let _ = writeln!(
            o,
            "remora_resize_request_duration_seconds_count {cumulative}"
        );
        drop(l);
        let gauges: [(&str, &str, &str, u64); 10] = [
            (
                "remora_resize_requests_in_progress",
                "gauge",
                "Image requests being answered now.",
                self.in_progress.load(Ordering::Relaxed),
            ),
            (
                "remora_resize_queue_depth",
                "gauge",
                "Jobs waiting for a resize worker.",
                self.pool.queued.load(Ordering::Relaxed) as u64,
            ),
            (
                "remora_resize_workers",
                "gauge",
                "Resize worker threads.",
                self.workers as u64,
            ),
            (
                "remora_resize_images_in_progress",
                "gauge",
                "Jobs queued or running on a worker.",
                self.pool.pending.load(Ordering::Relaxed) as u64,
            ),
            (
                "remora_resize_input_bytes_total",
                "counter",
                "Bytes of source images read (bodies and sources).",
                self.input_bytes.load(Ordering::Relaxed),
            ),
            (
                "remora_resize_output_bytes_total",
                "counter",
                "Bytes of resized images sent.",
                self.output_bytes.load(Ordering::Relaxed),
            ),
            (
                "remora_resize_connections_open",
                "gauge",
                "Connections open on the API listener.",
                self.http.open(),
            ),
            (
                "remora_resize_connections_accepted_total",
                "counter",
                "Connections let through to the API.",
                self.http.accepted(),
            ),
            (
                "remora_resize_connections_refused_total",
                "counter",
                "Connections answered 503 and closed because --max-connections were open.",
                self.http.refused(),
            ),
            (
                "remora_resize_connections_timed_out_total",
                "counter",
                "Connections closed because a request head did not arrive within --header-timeout.",
                self.http.timed_out(),
            ),
        ];
        for (name, kind, help, v) in gauges {
            head(&mut o, name, kind, help);
            let _ = writeln!(o, "{name} {v}");
        }
        o
    }
}
