//! The HTTP face: routes, request parsing, the hand-off to the worker pool, and the metrics
//! taken around every image request.

use super::imgproxy::{self, UrlError};
use super::metrics::Metrics;
use super::pool::Pool;
use super::process::{self, Done};
use super::source::Sources;
use super::Failure;
use crate::{Filter, Format, Job, Limits, Sampling};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone)]
pub(crate) struct App {
    pub pool: Arc<Pool>,
    pub metrics: Arc<Metrics>,
    pub sources: Arc<Sources>,
    pub limits: Limits,
    pub key: Option<Arc<[u8]>>,
    pub salt: Option<Arc<[u8]>>,
    pub default_quality: u8,
    pub engine: crate::Engine,
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
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r.extensions_mut().insert(ErrorKind(self.kind));
        r
    }
}

/// The API router; `/metrics` on it unless served apart.
pub(crate) fn router(app: App, with_metrics: bool) -> Router {
    let body_limit = usize::try_from(app.limits.max_input_bytes).unwrap_or(usize::MAX);
    let mut r = Router::new()
        .route("/health", get(health))
        .route("/resize", post(post_resize))
        .route("/{*path}", get(get_imgproxy));
    if with_metrics {
        r = r.route("/metrics", get(metrics));
    }
    r.layer(DefaultBodyLimit::max(body_limit)).with_state(app)
}

/// The router of the separate metrics bind.
pub(crate) fn metrics_router(app: App) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .with_state(app)
}

async fn health() -> &'static str {
    "remora resize: running"
}

async fn metrics(State(app): State<App>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(),
    )
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

/// Runs `f` on a resize worker; 503 when the queue is full.
async fn on_worker<T: Send + 'static>(
    app: &App,
    f: impl FnOnce() -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let queued = app.pool.submit(move || {
        // The client may have gone while the job waited.
        if !tx.is_closed() {
            let _ = tx.send(f());
        }
    });
    if !queued {
        return Err(Failure::overloaded());
    }
    rx.await
        .map_err(|_| Failure::internal("the resize job failed on its worker"))?
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
    engine: crate::Engine,
) -> Result<Job, Failure> {
    let geometry = q
        .get("geometry")
        .ok_or_else(|| Failure::bad_request("geometry is missing: /resize?geometry=500x500"))?;
    let mut job = Job::parse(geometry).map_err(process::engine_failure)?;
    job.limits = limits;
    job.engine = engine;
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

async fn post_resize(
    State(app): State<App>,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    observe(&app, "POST /resize", async {
        let Query(q) = q.map_err(|e| Failure::bad_request(e.body_text()))?;
        let body = body.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                Failure::too_large(format!(
                    "request body over the limit of {} bytes",
                    app.limits.max_input_bytes
                ))
            } else {
                Failure::bad_request(format!("reading the body: {}", e.body_text()))
            }
        })?;
        if body.is_empty() {
            return Err(Failure::bad_request("empty body: POST the image"));
        }
        let job = post_job(&q, app.limits, app.engine)?;
        app.metrics
            .input_bytes
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        let done = on_worker(&app, move || process::post(&body, &job)).await?;
        Ok(image_response(&app, done))
    })
    .await
}

async fn get_imgproxy(State(app): State<App>, uri: Uri) -> Response {
    let path = uri.path().to_string();
    observe(&app, "GET imgproxy", async {
        imgproxy::verify(&path, app.key.as_deref(), app.salt.as_deref()).map_err(url_failure)?;
        let req = imgproxy::parse(&path).map_err(url_failure)?;
        let (sources, metrics) = (app.sources.clone(), app.metrics.clone());
        let (limits, quality, engine) = (app.limits, app.default_quality, app.engine);
        let done = on_worker(&app, move || {
            let input = sources.load(&req.source)?;
            metrics
                .input_bytes
                .fetch_add(input.len() as u64, Ordering::Relaxed);
            process::imgproxy(&input, &req, limits, quality, engine)
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
