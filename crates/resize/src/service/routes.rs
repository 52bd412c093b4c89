//! The HTTP face: routes, request parsing, the hand-off to the worker pool, and the metrics
//! taken around every image request.
//!
//! An image request takes a pool slot before it reads anything it would hold: a POST body is
//! read only once a slot is held (503 at once when none is free, 413 at once when its
//! `Content-Length` is over the byte limit), then incrementally against the byte limit and
//! within the body timeout.

use super::imgproxy::{self, UrlError};
use super::metrics::Metrics;
use super::pool::{Pool, Slot};
use super::process::{self, Done, Settings};
use super::source::Sources;
use super::Failure;
use crate::{Filter, Format, Job, Limits, Sampling};
use axum::body::{Body, HttpBody};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use utoipa::{IntoParams, ToSchema};

#[derive(Clone)]
pub(crate) struct App {
    pub pool: Arc<Pool>,
    pub metrics: Arc<Metrics>,
    pub sources: Arc<Sources>,
    pub limits: Limits,
    pub key: Option<Arc<[u8]>>,
    pub salt: Option<Arc<[u8]>>,
    pub default_quality: u8,
    pub engine: crate::ResampleEngine,
    /// A job's time limit on its worker.
    pub job_timeout: Option<Duration>,
    /// Time allowed for reading a POST body once a slot is held.
    pub body_timeout: Duration,
}

/// The failure's kind, carried to the metrics in the response's extensions.
#[derive(Clone, Copy)]
struct ErrorKind(&'static str);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let mut r = (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{}\n", self.message),
        )
            .into_response();
        if self.kind == "overloaded" {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r.extensions_mut().insert(ErrorKind(self.kind));
        r
    }
}

/// The router of the separate metrics bind.
pub(crate) fn metrics_router(app: App) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .with_state(app)
}

#[utoipa::path(get, path = "/health", tag = "service",
    responses((status = 200, description = "`remora resize: running` (also on the --metrics address)", body = String, content_type = "text/plain")))]
pub(super) async fn health() -> &'static str {
    "remora resize: running"
}

#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus text format 0.0.4 (OpenMetrics 1.0 when the Accept header prefers it): requests, errors, durations, requests and images in progress, workers, connections. On the --metrics address instead when one is given",
                   content((String = "text/plain; version=0.0.4"), (String = "application/openmetrics-text")))))]
pub(super) async fn metrics(State(app): State<App>, headers: HeaderMap) -> Response {
    let m = app.metrics.clone();
    let registry = remora_http::metrics::registry(move |f| m.report(f));
    remora_http::metrics::response(&registry, &headers)
}

/// Counts the request in progress while it runs (also when the client goes away).
struct InProgress<'a>(&'a Metrics);

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.0.in_progress.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs an image request, recording its status, error kind and duration.
async fn observe(
    app: &App,
    what: &str,
    f: impl Future<Output = Result<Response, Failure>>,
) -> Response {
    let t = Instant::now();
    app.metrics.in_progress.fetch_add(1, Ordering::Relaxed);
    let _guard = InProgress(&app.metrics);
    let r = f.await.unwrap_or_else(IntoResponse::into_response);
    let took = t.elapsed();
    let kind = r.extensions().get::<ErrorKind>().map(|k| k.0);
    let status = r.status();
    app.metrics.request(status.as_u16(), kind, took);
    if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
        tracing::warn!(%status, ?took, "{what}");
    } else {
        tracing::debug!(%status, ?took, "{what}");
    }
    r
}

/// A pool slot, or 503 when every worker is busy and the queue is full.
fn slot(app: &App) -> Result<Slot, Failure> {
    app.pool.try_slot().ok_or_else(|| {
        if app.pool.cancelled() {
            Failure::shutting_down()
        } else {
            Failure::overloaded()
        }
    })
}

/// Runs `f` on a resize worker with the pool's cancel flag, holding `slot` until it ends.
async fn on_worker<T: Send + 'static>(
    app: &App,
    slot: Slot,
    f: impl FnOnce(&AtomicBool) -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cancel = app.pool.cancel_flag();
    let queued = app.pool.submit(slot, move || {
        // The client may have gone while the job waited.
        if !tx.is_closed() {
            let _ = tx.send(f(&cancel));
        }
    });
    if !queued {
        return Err(Failure::shutting_down());
    }
    rx.await.map_err(|_| {
        if app.pool.cancelled() {
            Failure::shutting_down()
        } else {
            Failure::internal("the resize job failed on its worker")
        }
    })?
}

/// Reads a request body of at most `max` bytes within `timeout`: 413 past `max` (as soon as
/// it is passed), 408 when the body is not all there in time.
async fn read_body(
    body: &mut Body,
    expected: Option<u64>,
    max: u64,
    timeout: Duration,
) -> Result<Vec<u8>, Failure> {
    let too_large = || Failure::too_large(format!("request body over the limit of {max} bytes"));
    let read = async {
        let mut out = Vec::with_capacity(expected.unwrap_or(0).min(max) as usize);
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
        {
            let frame =
                frame.map_err(|e| Failure::bad_request(format!("reading the body: {e}")))?;
            if let Ok(data) = frame.into_data() {
                if out.len() as u64 + data.len() as u64 > max {
                    return Err(too_large());
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(out)
    };
    tokio::time::timeout(timeout, read).await.map_err(|_| {
        Failure::new(
            408,
            "body_timeout",
            format!("the request body did not arrive within {timeout:?}"),
        )
    })?
}

fn image_response(app: &App, d: Done) -> Response {
    app.metrics
        .output_bytes
        .fetch_add(d.data.len() as u64, Ordering::Relaxed);
    let mime = match d.format {
        Format::Jpeg => "image/jpeg",
        Format::Png => "image/png",
    };
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(mime)),
            (
                header::HeaderName::from_static("x-remora-width"),
                HeaderValue::from(d.width),
            ),
            (
                header::HeaderName::from_static("x-remora-height"),
                HeaderValue::from(d.height),
            ),
        ],
        d.data,
    )
        .into_response()
}

fn parse_bool(key: &str, v: &str) -> Result<bool, Failure> {
    match v {
        "1" | "true" | "yes" | "on" | "" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Failure::bad_request(format!("{key}={v:?}: 1 or 0"))),
    }
}

/// The job a `POST /resize` query asks for.
fn post_job(
    q: &HashMap<String, String>,
    limits: Limits,
    engine: crate::ResampleEngine,
    timeout: Option<Duration>,
) -> Result<Job, Failure> {
    let geometry = q
        .get("geometry")
        .ok_or_else(|| Failure::bad_request("geometry is missing: /resize?geometry=500x500"))?;
    let mut job = Job::parse(geometry).map_err(process::engine_failure)?;
    job.limits = limits;
    job.engine = engine;
    job.timeout = timeout;
    job.auto_orient = true;
    for (k, v) in q {
        match k.as_str() {
            "geometry" => {}
            "quality" => {
                job.quality = Some(
                    v.parse::<u8>()
                        .ok()
                        .filter(|q| (1..=100).contains(q))
                        .ok_or_else(|| Failure::bad_request(format!("quality={v:?}: 1 to 100")))?,
                )
            }
            "format" => {
                job.format = Some(match v.to_ascii_lowercase().as_str() {
                    "jpeg" | "jpg" => Format::Jpeg,
                    "png" => Format::Png,
                    _ => return Err(Failure::bad_request(format!("format={v:?}: jpeg or png"))),
                })
            }
            "filter" => job.filter = Some(v.parse::<Filter>().map_err(process::engine_failure)?),
            "sampling" => {
                job.sampling = Some(v.parse::<Sampling>().map_err(process::engine_failure)?)
            }
            "strip" => job.strip = parse_bool(k, v)?,
            "auto_orient" => job.auto_orient = parse_bool(k, v)?,
            "thumbnail" => job.thumbnail = parse_bool(k, v)?,
            "progressive" => job.progressive = parse_bool(k, v)?,
            _ => {
                return Err(Failure::bad_request(format!(
                    "unknown parameter {k:?} (geometry, quality, format, filter, sampling, \
                     strip, auto_orient, thumbnail, progressive)"
                )))
            }
        }
    }
    Ok(job)
}

/// An encoded image: JPEG or PNG bytes.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
#[allow(dead_code)]
pub(crate) struct Image(Vec<u8>);

/// The query of `POST /resize` (documentation only: the handler reads the query as a map, to
/// name an unknown parameter in its refusal).
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct ResizeQuery {
    /// ImageMagick geometry: `W`, `xH`, `WxH`, `WxH^`, `WxH!`, `WxH>`, `WxH<`, `S%`, `A@`.
    geometry: String,
    /// JPEG quality, 1 to 100 (default: the input's estimated quality, else 92).
    quality: Option<u8>,
    /// Output format: `jpeg` or `png` (default: the input's).
    format: Option<String>,
    /// Resampling filter (`lanczos`, `mitchell`, `triangle`, `box`, …; default: Lanczos when
    /// shrinking, Mitchell when enlarging).
    filter: Option<String>,
    /// JPEG chroma sampling: `4:4:4`, `4:2:2` or `4:2:0`.
    sampling: Option<String>,
    /// Drop metadata (1 or 0; default 0).
    strip: Option<bool>,
    /// Apply the EXIF orientation (1 or 0; default 1).
    auto_orient: Option<bool>,
    /// ImageMagick's `-thumbnail` (1 or 0; default 0).
    thumbnail: Option<bool>,
    /// Progressive JPEG (1 or 0; default 0).
    progressive: Option<bool>,
}

#[utoipa::path(post, path = "/resize", tag = "image", params(ResizeQuery),
    request_body(description = "The image", content((Image = "image/jpeg"), (Image = "image/png"))),
    responses(
        (status = 200, description = "The resized image", content((Image = "image/jpeg"), (Image = "image/png")),
            headers(("X-Remora-Width" = u32, description = "Output width"), ("X-Remora-Height" = u32, description = "Output height"))),
        (status = 400, description = "A bad parameter, an empty body or a bad geometry", body = String, content_type = "text/plain"),
        (status = 408, description = "The body did not arrive within --body-timeout", body = String, content_type = "text/plain"),
        (status = 413, description = "A body over --max-bytes, or an input over --max-pixels", body = String, content_type = "text/plain"),
        (status = 415, description = "Not a JPEG or PNG", body = String, content_type = "text/plain"),
        (status = 422, description = "A malformed image, an output over the pixel limit or a job over --max-job-memory", body = String, content_type = "text/plain"),
        (status = 503, description = "Every worker busy and the queue full (with Retry-After), a job past --job-timeout, or shutting down", body = String, content_type = "text/plain")))]
pub(super) async fn post_resize(
    State(app): State<App>,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    observe(&app, "POST /resize", async {
        let max = app.limits.max_input_bytes;
        let expected = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let ready = (|| {
            let Query(q) = q.map_err(|e| Failure::bad_request(e.body_text()))?;
            let job = post_job(&q, app.limits, app.engine, app.job_timeout)?;
            if let Some(n) = expected.filter(|n| *n > max) {
                return Err(Failure::too_large(format!(
                    "request body of {n} bytes over the limit of {max} bytes"
                )));
            }
            // A slot before the body: a full service holds nothing of it.
            Ok((job, slot(&app)?))
        })();
        let (job, slot) = match ready {
            Ok(r) => r,
            Err(f) => {
                // A body over the limit is not worth reading; one that would fit is read and
                // dropped (nothing kept), so that its sender sees this answer, not a reset.
                let limit = if f.status == StatusCode::PAYLOAD_TOO_LARGE {
                    REFUSED_DRAIN
                } else {
                    expected.unwrap_or(max).min(max)
                };
                drain(body, limit, app.body_timeout);
                return Ok(closing(f));
            }
        };
        let mut body = body;
        let body = match read_body(&mut body, expected, max, app.body_timeout).await {
            Ok(b) => b,
            Err(f) => {
                if f.status == StatusCode::PAYLOAD_TOO_LARGE {
                    drain(body, REFUSED_DRAIN, Duration::from_secs(1));
                }
                return Ok(closing(f));
            }
        };
        if body.is_empty() {
            return Err(Failure::bad_request("empty body: POST the image"));
        }
        app.metrics
            .input_bytes
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        let done = on_worker(&app, slot, move |cancel| process::post(&body, &job, cancel)).await?;
        Ok(image_response(&app, done))
    })
    .await
}

/// What is read of a refused body over the limit before the connection closes (so that a
/// small request's sender sees the answer).
const REFUSED_DRAIN: u64 = 64 << 10;

/// The answer for `f`, closing the connection after it.
fn closing(f: Failure) -> Response {
    let mut r = f.into_response();
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Reads and drops up to `limit` bytes of `body` within `within`, on a task of its own: the
/// answer goes out meanwhile.
fn drain(mut body: Body, limit: u64, within: Duration) {
    tokio::spawn(async move {
        let read = async {
            let mut n = 0u64;
            while let Some(Ok(frame)) =
                std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
            {
                if let Ok(data) = frame.into_data() {
                    n += data.len() as u64;
                    if n > limit {
                        break;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(within, read).await;
    });
}

/// imgproxy's URL API, both forms (the `plain` one is documented apart, in `openapi`).
#[utoipa::path(get, path = "/{signature}/{processing_options}/{encoded_source_url}", tag = "imgproxy",
    params(
        ("signature" = String, Path, description = "HMAC-SHA256 of salt + the path after it, URL-safe base64 without padding; any placeholder (`insecure`, `_`) when the service has no key"),
        ("processing_options" = String, Path, description = "One or more `/`-separated options `name:arg:arg` (`rs:fill:300:200`, `q:85`, `g:ce`, …); an unknown option is refused"),
        ("encoded_source_url" = String, Path, description = "The source URL in URL-safe base64 (split by `/` if long), optionally `.` and the output extension (`.jpg`, `.png`)")),
    responses(
        (status = 200, description = "The processed image", content((Image = "image/jpeg"), (Image = "image/png"))),
        (status = 400, description = "A malformed URL or option", body = String, content_type = "text/plain"),
        (status = 403, description = "A bad signature, or a source outside --root or the --allow prefixes", body = String, content_type = "text/plain"),
        (status = 404, description = "No such source", body = String, content_type = "text/plain"),
        (status = 413, description = "A source over --max-bytes or --max-pixels", body = String, content_type = "text/plain"),
        (status = 415, description = "Not a JPEG or PNG", body = String, content_type = "text/plain"),
        (status = 422, description = "A malformed image, an output over the pixel limit or a job over --max-job-memory", body = String, content_type = "text/plain"),
        (status = 502, description = "The source could not be fetched", body = String, content_type = "text/plain"),
        (status = 503, description = "Every worker busy and the queue full (with Retry-After), a job past --job-timeout, or shutting down", body = String, content_type = "text/plain")))]
pub(super) async fn get_imgproxy(State(app): State<App>, uri: Uri) -> Response {
    let path = uri.path().to_string();
    observe(&app, "GET imgproxy", async {
        imgproxy::verify(&path, app.key.as_deref(), app.salt.as_deref()).map_err(url_failure)?;
        let req = imgproxy::parse(&path).map_err(url_failure)?;
        let slot = slot(&app)?;
        let (sources, metrics) = (app.sources.clone(), app.metrics.clone());
        let settings = Settings {
            limits: app.limits,
            default_quality: app.default_quality,
            engine: app.engine,
            timeout: app.job_timeout,
        };
        let done = on_worker(&app, slot, move |cancel| {
            let input = sources.load(&req.source)?;
            metrics
                .input_bytes
                .fetch_add(input.len() as u64, Ordering::Relaxed);
            process::imgproxy(&input, &req, settings, cancel)
        })
        .await?;
        Ok(image_response(&app, done))
    })
    .await
}

fn url_failure(e: UrlError) -> Failure {
    match e {
        UrlError::BadSignature(m) => Failure::new(403, "signature", m),
        UrlError::Invalid(m) | UrlError::Unsupported(m) => Failure::bad_request(m),
    }
}
