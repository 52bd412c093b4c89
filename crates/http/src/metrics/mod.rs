//! Prometheus `/metrics` for remora's services, on the `prometheus-client` crate.
//!
//! A service keeps its counters where its hot paths already count them (atomics, per-worker
//! tables, a status snapshot); nothing here adds work to those paths. At each scrape a
//! [`Scrape`] collector calls the service's closure, which reads them into [`Families`], and
//! the registry is encoded in the format the scraper asked for:
//!
//! - OpenMetrics 1.0 ([`OPENMETRICS`]) when the `Accept` header prefers it (Prometheus sends
//!   that header);
//! - otherwise the Prometheus text format 0.0.4 ([`PROMETHEUS_TEXT`]), what `curl` and
//!   `prometheus_client.parser` read.
//!
//! Names are written as they are exposed: a counter's name ends in `_total` and an info's in
//! `_info` (the families the encoder writes drop those suffixes, as OpenMetrics wants).
//!
//! [`route`] and [`router`] put the text on an axum router; [`serve_metrics`] runs a small
//! server of its own (through [`crate::serve`], on a thread of its own) for services without an
//! HTTP front.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
//! use std::sync::Arc;
//! use remora_http::metrics::{registry, render};
//!
//! let hits = Arc::new(AtomicU64::new(0));
//! let h = hits.clone();
//! let reg = registry(move |m| {
//!     m.counter("demo_hits_total", "Requests that found their item.", h.load(Relaxed));
//!     m.gauge_with("demo_up", "Whether the demo runs.", &[("role", "main")], 1u64);
//! });
//! hits.fetch_add(3, Relaxed);
//! let (content_type, text) = render(&reg, None).unwrap();
//! assert!(content_type.starts_with("text/plain"));
//! assert!(text.contains("demo_hits_total 3\n"));
//! assert!(text.contains("demo_up{role=\"main\"} 1\n"));
//! ```
use std::fmt;
use std::sync::Arc;

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

pub use prometheus_client;
pub use prometheus_client::registry::Registry;

mod server;
pub use server::{serve_metrics, MetricsServer};

/// `Content-Type` of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the Prometheus text format 0.0.4.
pub const PROMETHEUS_TEXT: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A sample's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A count.
    Int(u64),
    /// A signed reading (a gauge that may go below zero).
    Signed(i64),
    /// A ratio, a rate, seconds.
    Float(f64),
}

macro_rules! value_from {
    ($($t:ty => $v:ident as $c:ty),*) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value {
                Value::$v(x as $c)
            }
        }
    )*};
}
value_from!(u64 => Int as u64, u32 => Int as u64, usize => Int as u64, i64 => Signed as i64,
    i32 => Signed as i64, f64 => Float as f64, f32 => Float as f64);

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Int(u64::from(b))
    }
}

/// What kind of family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (resets when the process restarts); the name ends in `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Constant labels describing the service, value 1; the name ends in `_info`.
    Info,
    /// Request durations and the like: buckets, sum and count.
    Histogram,
}

type Labels = Vec<(String, String)>;

#[derive(Debug, Clone, PartialEq)]
enum Sample {
    Value(Value),
    /// Counts per bucket (not cumulative; the last bound may be `f64::INFINITY`), sum, count.
    Histogram(Vec<(f64, u64)>, f64, u64),
}

#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    kind: Kind,
    samples: Vec<(Labels, Sample)>,
}

/// The families one scrape reports, filled by the service's closure.
///
/// Calling a method again with the same name adds a sample (with other labels) to the family.
#[derive(Debug, Default)]
pub struct Families {
    list: Vec<Family>,
}

fn labels(l: &[(&str, &str)]) -> Labels {
    l.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Families {
    fn push(&mut self, name: &str, help: &str, kind: Kind, l: Labels, s: Sample) -> &mut Self {
        debug_assert!(valid_name(name), "metric name {name:?}");
        debug_assert!(
            match kind {
                Kind::Counter => name.ends_with("_total"),
                Kind::Info => name.ends_with("_info"),
                _ => true,
            },
            "{name}: counters end in _total, infos in _info"
        );
        let i = match self.list.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.list.push(Family {
                    name: name.into(),
                    help: help.into(),
                    kind,
                    samples: Vec::new(),
                });
                self.list.len() - 1
            }
        };
        debug_assert_eq!(self.list[i].kind, kind, "{name} reported as two kinds");
        self.list[i].samples.push((l, s));
        self
    }

    /// A counter without labels (`name` ends in `_total`).
    pub fn counter(&mut self, name: &str, help: &str, v: impl Into<Value>) -> &mut Self {
        self.counter_with(name, help, &[], v)
    }

    /// One labelled sample of a counter family.
    pub fn counter_with(
        &mut self,
        name: &str,
        help: &str,
        l: &[(&str, &str)],
        v: impl Into<Value>,
    ) -> &mut Self {
        self.push(
            name,
            help,
            Kind::Counter,
            labels(l),
            Sample::Value(v.into()),
        )
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, v: impl Into<Value>) -> &mut Self {
        self.gauge_with(name, help, &[], v)
    }

    /// One labelled sample of a gauge family.
    pub fn gauge_with(
        &mut self,
        name: &str,
        help: &str,
        l: &[(&str, &str)],
        v: impl Into<Value>,
    ) -> &mut Self {
        self.push(name, help, Kind::Gauge, labels(l), Sample::Value(v.into()))
    }

    /// An info (`name` ends in `_info`): the labels describe the service; the value is 1.
    pub fn info(&mut self, name: &str, help: &str, l: &[(&str, &str)]) -> &mut Self {
        self.push(
            name,
            help,
            Kind::Info,
            labels(l),
            Sample::Value(Value::Int(1)),
        )
    }

    /// One labelled sample of a histogram family: `buckets` are (upper bound, count in that
    /// bucket alone), in increasing order; a last bound of `f64::INFINITY` holds the overflow.
    pub fn histogram_with(
        &mut self,
        name: &str,
        help: &str,
        l: &[(&str, &str)],
        buckets: &[(f64, u64)],
        sum: f64,
    ) -> &mut Self {
        let count = buckets.iter().map(|b| b.1).sum();
        let s = Sample::Histogram(buckets.to_vec(), sum, count);
        self.push(name, help, Kind::Histogram, labels(l), s)
    }

    /// The connection counters of a [`crate::serve`] loop, as `PREFIX_connections_open`,
    /// `PREFIX_connections_accepted_total`, `PREFIX_connections_refused_total` and
    /// `PREFIX_connections_timed_out_total`.
    pub fn http(&mut self, prefix: &str, s: &crate::Stats) -> &mut Self {
        let n = |what: &str| format!("{prefix}_connections_{what}");
        self.gauge(
            &n("open"),
            "Connections open on the HTTP listener.",
            s.open(),
        )
        .counter(
            &n("accepted_total"),
            "Connections let through to the HTTP API.",
            s.accepted(),
        )
        .counter(
            &n("refused_total"),
            "Connections answered 503 and closed because the connection cap was reached.",
            s.refused(),
        )
        .counter(
            &n("timed_out_total"),
            "Connections closed because a request head did not arrive within the header timeout.",
            s.timed_out(),
        )
    }

    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        for f in &self.list {
            let (name, ty) = match f.kind {
                Kind::Counter => (strip(&f.name, "_total"), MetricType::Counter),
                Kind::Gauge => (f.name.as_str(), MetricType::Gauge),
                Kind::Info => (strip(&f.name, "_info"), MetricType::Info),
                Kind::Histogram => (f.name.as_str(), MetricType::Histogram),
            };
            let mut me = enc.encode_descriptor(name, &f.help, None, ty)?;
            for (l, s) in &f.samples {
                if f.kind == Kind::Info {
                    me.encode_info(l)?;
                } else if l.is_empty() {
                    write_sample(&mut me, f.kind, s)?;
                } else {
                    write_sample(&mut me.encode_family(l)?, f.kind, s)?;
                }
            }
        }
        Ok(())
    }
}

fn strip<'a>(name: &'a str, suffix: &str) -> &'a str {
    name.strip_suffix(suffix).unwrap_or(name)
}

fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

fn write_sample(me: &mut MetricEncoder, kind: Kind, s: &Sample) -> fmt::Result {
    let none = None::<&prometheus_client::metrics::exemplar::Exemplar<NoLabelSet, u64>>;
    match (kind, s) {
        (Kind::Histogram, Sample::Histogram(b, sum, count)) => {
            me.encode_histogram::<NoLabelSet>(*sum, *count, b, None)
        }
        (Kind::Counter, Sample::Value(v)) => match *v {
            Value::Int(x) => me.encode_counter(&x, none),
            Value::Signed(x) => me.encode_counter(&x.max(0).unsigned_abs(), none),
            Value::Float(x) => me.encode_counter(&x, none),
        },
        (_, Sample::Value(v)) => match *v {
            Value::Int(x) => me.encode_gauge(&x),
            Value::Signed(x) => me.encode_gauge(&x),
            Value::Float(x) => me.encode_gauge(&x),
        },
        (_, Sample::Histogram(..)) => Err(fmt::Error),
    }
}

/// A collector that asks the service for its figures at each scrape.
pub struct Scrape<F>(F);

impl<F: Fn(&mut Families) + Send + Sync + 'static> Scrape<F> {
    /// Calls `read` at each scrape.
    pub fn new(read: F) -> Scrape<F> {
        Scrape(read)
    }
}

impl<F> fmt::Debug for Scrape<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scrape")
    }
}

impl<F: Fn(&mut Families) + Send + Sync + 'static> Collector for Scrape<F> {
    fn encode(&self, enc: DescriptorEncoder) -> fmt::Result {
        let mut families = Families::default();
        (self.0)(&mut families);
        families.encode(enc)
    }
}

/// A registry holding one [`Scrape`] collector that calls `read`.
pub fn registry(read: impl Fn(&mut Families) + Send + Sync + 'static) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(Scrape::new(read)));
    r
}

/// Whether an `Accept` header prefers OpenMetrics to the Prometheus text format (by the
/// q-values of `application/openmetrics-text` and of `text/plain` or `*/*`).
pub fn wants_openmetrics(accept: &str) -> bool {
    let (mut om, mut text) = (0.0f32, 0.0f32);
    for item in accept.split(',') {
        let mut parts = item.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    om > 0.0 && om >= text
}

/// The registry as text, in the format `accept` prefers: (`Content-Type`, body).
pub fn render(
    registry: &Registry,
    accept: Option<&str>,
) -> Result<(&'static str, String), fmt::Error> {
    let mut out = String::new();
    if accept.is_some_and(wants_openmetrics) {
        prometheus_client::encoding::text::encode(&mut out, registry)?;
        Ok((OPENMETRICS, out))
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, registry)?;
        Ok((PROMETHEUS_TEXT, out))
    }
}

/// The answer to `GET /metrics`: the text in the format the request's `Accept` prefers.
pub fn response(registry: &Registry, headers: &HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    match render(registry, accept) {
        Ok((ct, body)) => (
            [
                (header::CONTENT_TYPE, ct),
                (header::CACHE_CONTROL, "no-store"),
            ],
            body,
        )
            .into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed",
        )
            .into_response(),
    }
}

/// A `GET` route serving `registry` (mount it at `/metrics` on any router).
pub fn route<S: Clone + Send + Sync + 'static>(registry: Arc<Registry>) -> MethodRouter<S> {
    get(move |headers: HeaderMap| {
        let registry = registry.clone();
        async move { response(&registry, &headers) }
    })
}

/// A router with `/metrics` only (every other path: 404).
pub fn router(registry: Arc<Registry>) -> Router {
    Router::new().route("/metrics", route(registry))
}

#[cfg(test)]
mod tests;
