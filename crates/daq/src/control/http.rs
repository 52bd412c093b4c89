//! The control service over HTTP (axum on tokio, served by `remora_http` with a connection cap
//! and a header timeout): the REST API, its OpenAPI 3 document (from the handlers'
//! annotations and the reported types, with utoipa), a status stream as server-sent events,
//! previews, and the live view page built into the binary.
//!
//! Every API call (status, waiting, events, metrics, configuration, control and previews) needs
//! the service's token when it has one: `Authorization: Bearer TOKEN`, or `?token=TOKEN` in the
//! query (what the page uses for its image and event stream, which cannot set headers). Only
//! the page shell (`/`) and `/openapi.json` are open: neither says anything about the service.
//! `/metrics` says what runs and how fast, so it is not: Prometheus sends the token as its
//! bearer token.
//! Every error is `{"error": "..."}` with a 4xx status: 400 for a bad request, 401 without the
//! token, 404 for nothing there, 409 for a request that does not fit the state, 413 for a body
//! over [`BODY_LIMIT`].
//!
//! Waiting (`/wait`) and the status stream wait on a notifier fed by the service
//! ([`Service::on_change`]), not on threads: any number of them leave the previews, which
//! render on the blocking pool, their threads.
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Query, State as AxState};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, OpenApi, ToSchema};

pub use super::api_error::ApiError;
pub use super::auth::new_token;
use super::auth::require_token;
use super::image::{render_png, Contrast};
use super::service::{ConfigFormat, ControlError, Service};
use super::state::{RunKind, State};
use super::status::{
    Counters, ModuleStatus, PedestalInfo, PreviewInfo, ProfileOut, Rates, ReceiverStatus, Status,
};
use crate::engine::calibrate::{EngineChoice, EngineFigure, How, Source};

use remora_http::metrics::Registry;
pub use remora_http::{Limits, Stats};
pub use server::{Server, ServerOptions};

mod server;

/// Largest request body accepted (a configuration is a few kilobytes).
pub const BODY_LIMIT: usize = 1 << 20;

/// The live view, one self-contained page.
const PAGE: &str = include_str!("page.html");

/// The last image rendered, by (frame, receiver, log, max, bin): every page open on the same
/// frame with the same contrast gets the same bytes without another rendering.
type ImageCache = std::sync::Mutex<Option<((u64, usize, bool, u32, usize), Arc<Vec<u8>>)>>;

#[derive(Clone)]
struct App {
    svc: Service,
    token: Option<Arc<str>>,
    images: Arc<ImageCache>,
    /// The service's generation, sent on every change ([`Service::on_change`]).
    changes: tokio::sync::watch::Receiver<u64>,
    /// What `/metrics` reports ([`super::metrics`]).
    metrics: Arc<Registry>,
}

type Failure = (StatusCode, Json<ApiError>);

fn fail(code: StatusCode, msg: impl Into<String>) -> Failure {
    (code, Json(ApiError { error: msg.into() }))
}

impl From<ControlError> for (StatusCode, Json<ApiError>) {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::Invalid(m) => fail(StatusCode::BAD_REQUEST, m),
            ControlError::Conflict(c) => fail(StatusCode::CONFLICT, c.0),
        }
    }
}

fn body_failure(e: BytesRejection) -> Failure {
    let code = e.status();
    let msg = if code == StatusCode::PAYLOAD_TOO_LARGE {
        format!("request body over {BODY_LIMIT} bytes")
    } else {
        format!("reading the request body: {}", e.body_text())
    };
    fail(code, msg)
}

/// A run started or asked to stop.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunAnswer {
    /// The run's number.
    pub run: u64,
    /// The state now.
    pub state: State,
}

/// `POST /pedestal` body (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PedestalRequest {
    /// Dark frames to average (default: the configured pedestal window).
    pub frames: Option<u64>,
}

/// `GET /preview/image` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ImageQuery {
    /// `log` (default) or `linear`.
    pub scale: Option<String>,
    /// Saturation in keV, or `auto` (default: the 99.9th percentile).
    pub max: Option<String>,
    /// Average `bin` × `bin` pixel blocks (1 to 16, default 1).
    pub bin: Option<usize>,
    /// Ignored; lets a page make each frame's URL unique.
    pub frame: Option<u64>,
}

/// `GET /wait` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Seconds to wait at most (default 60, at most 3600).
    pub timeout: Option<f64>,
}

fn accepted(app: &App, run: u64) -> (StatusCode, Json<RunAnswer>) {
    let state = app.svc.status().state;
    (StatusCode::ACCEPTED, Json(RunAnswer { run, state }))
}

#[utoipa::path(get, path = "/status", tag = "status",
    responses((status = 200, description = "State, counters, rates, per receiver and module", body = Status),
              (status = 401, description = "Token required", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn status(AxState(app): AxState<App>) -> Json<Status> {
    Json(app.svc.status())
}

#[utoipa::path(get, path = "/wait", tag = "status", params(WaitQuery),
    responses((status = 200, description = "The status once no run is going on, or at the timeout", body = Status),
              (status = 400, description = "Bad timeout", body = ApiError),
              (status = 401, description = "Token required", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn wait(
    AxState(app): AxState<App>,
    q: Result<Query<WaitQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Status>, Failure> {
    let Query(q) = q.map_err(|e| fail(StatusCode::BAD_REQUEST, e.body_text()))?;
    let t = q.timeout.unwrap_or(60.0);
    if !(t.is_finite() && (0.0..=3600.0).contains(&t)) {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            "timeout: seconds from 0 to 3600",
        ));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(t);
    let mut changes = app.changes.clone();
    loop {
        // Seen before the state is read: a change after this wakes the wait below.
        changes.borrow_and_update();
        if !app.svc.running() {
            break;
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            // The deadline, or no more changes will come.
            Ok(Err(_)) | Err(_) => break,
        }
    }
    Ok(Json(app.svc.status()))
}

#[utoipa::path(get, path = "/events", tag = "status",
    responses((status = 200, description = "Server-sent events: `event: status`, data as GET /status, on every change and at least every second", content_type = "text/event-stream", body = Status),
              (status = 401, description = "Token required", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn events(AxState(app): AxState<App>) -> impl IntoResponse {
    let stream = futures_util::stream::unfold(
        (app.svc, app.changes, true),
        |(svc, mut changes, first)| async move {
            // The first event at once, then on change, and a fresh one at least every second.
            if !first {
                match tokio::time::timeout(Duration::from_secs(1), changes.changed()).await {
                    Ok(Ok(())) => {
                        // A burst of changes makes one event.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Ok(Err(_)) => tokio::time::sleep(Duration::from_secs(1)).await,
                    Err(_) => {}
                }
            }
            changes.borrow_and_update();
            let ev = Event::default()
                .event("status")
                .json_data(svc.status())
                .unwrap_or_else(|_| Event::default().event("status"));
            Some((Ok::<_, std::convert::Infallible>(ev), (svc, changes, false)))
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[utoipa::path(get, path = "/config", tag = "control",
    responses((status = 200, description = "The loaded configuration, as JSON", body = Object),
              (status = 401, description = "Token required", body = ApiError),
              (status = 404, description = "Nothing configured yet", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn get_config(AxState(app): AxState<App>) -> Result<Json<serde_json::Value>, Failure> {
    let cfg = app
        .svc
        .config()
        .ok_or_else(|| fail(StatusCode::NOT_FOUND, "no configuration yet; PUT /config"))?;
    serde_json::to_value(cfg)
        .map(Json)
        .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

#[utoipa::path(put, path = "/config", tag = "control",
    request_body(description = "The configuration of `remora daq run`: TOML (any content type) or the same schema as JSON (`Content-Type: application/json`). File paths are relative to the service's directories (`--data-dir` for output.file, `--input-dir` for the others); a path outside them, a symbolic link on the way, a file that is not regular, or values that imply more memory than the service's budget are refused", content = String),
    responses((status = 200, description = "Validated and loaded", body = Status),
              (status = 400, description = "Invalid, outside the service's directories, or over its memory budget; the message names the key", body = ApiError),
              (status = 401, description = "Token required", body = ApiError),
              (status = 409, description = "A run is going on", body = ApiError),
              (status = 413, description = "Body too large", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn put_config(
    AxState(app): AxState<App>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Status>, Failure> {
    let body = body.map_err(body_failure)?;
    let text = std::str::from_utf8(&body).map_err(|e| {
        fail(
            StatusCode::BAD_REQUEST,
            format!("the body is not UTF-8: {e}"),
        )
    })?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let format = if json {
        ConfigFormat::Json
    } else {
        ConfigFormat::Toml
    };
    app.svc.configure_text(text, format)?;
    Ok(Json(app.svc.status()))
}

#[utoipa::path(post, path = "/start", tag = "control",
    responses((status = 202, description = "The acquisition started", body = RunAnswer),
              (status = 401, description = "Token required", body = ApiError),
              (status = 409, description = "Not configured, or a run is going on", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn start(AxState(app): AxState<App>) -> Result<(StatusCode, Json<RunAnswer>), Failure> {
    let run = app.svc.start()?;
    Ok(accepted(&app, run))
}

#[utoipa::path(post, path = "/stop", tag = "control",
    responses((status = 202, description = "The run stops after the stack in flight", body = RunAnswer),
              (status = 401, description = "Token required", body = ApiError),
              (status = 409, description = "Nothing is running", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn stop(AxState(app): AxState<App>) -> Result<(StatusCode, Json<RunAnswer>), Failure> {
    let run = app.svc.stop()?;
    Ok(accepted(&app, run))
}

#[utoipa::path(post, path = "/pedestal", tag = "control",
    request_body(content = Option<PedestalRequest>, description = "Optional: how many dark frames"),
    responses((status = 202, description = "The dark run started; its pedestal is used by the following runs", body = RunAnswer),
              (status = 400, description = "Bad body", body = ApiError),
              (status = 401, description = "Token required", body = ApiError),
              (status = 409, description = "Not configured, or a run is going on", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn pedestal(
    AxState(app): AxState<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<RunAnswer>), Failure> {
    let body = body.map_err(body_failure)?;
    let req = if body.iter().all(u8::is_ascii_whitespace) {
        PedestalRequest::default()
    } else {
        let de = &mut serde_json::Deserializer::from_slice(&body);
        serde_path_to_error::deserialize::<_, PedestalRequest>(de).map_err(|e| {
            let path = e.path().to_string();
            fail(
                StatusCode::BAD_REQUEST,
                format!("{path}: {}", e.into_inner()),
            )
        })?
    };
    let run = app.svc.pedestal(req.frames)?;
    Ok(accepted(&app, run))
}

#[utoipa::path(get, path = "/preview/image", tag = "preview", params(ImageQuery),
    responses((status = 200, description = "The latest converted frame (assembled, gaps in grey-blue)", content_type = "image/png", body = Vec<u8>),
              (status = 400, description = "Bad parameter", body = ApiError),
              (status = 401, description = "Token required", body = ApiError),
              (status = 404, description = "No frame yet", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn preview_image(
    AxState(app): AxState<App>,
    q: Result<Query<ImageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Failure> {
    let Query(q) = q.map_err(|e| fail(StatusCode::BAD_REQUEST, e.body_text()))?;
    let log = match q.scale.as_deref() {
        None | Some("log") => true,
        Some("linear") => false,
        Some(o) => {
            return Err(fail(
                StatusCode::BAD_REQUEST,
                format!("scale: {o:?} is neither log nor linear"),
            ))
        }
    };
    let max = match q.max.as_deref() {
        None | Some("auto") | Some("") => None,
        Some(s) => match s.parse::<f32>() {
            Ok(v) if v.is_finite() && v > 0.0 => Some(v),
            _ => {
                return Err(fail(
                    StatusCode::BAD_REQUEST,
                    format!("max: {s:?} is not a positive number of keV or auto"),
                ))
            }
        },
    };
    let bin = q.bin.unwrap_or(1);
    if !(1..=16).contains(&bin) {
        return Err(fail(StatusCode::BAD_REQUEST, "bin: from 1 to 16"));
    }
    let p = app
        .svc
        .preview()
        .ok_or_else(|| fail(StatusCode::NOT_FOUND, "no converted frame yet"))?;
    let c = Contrast { log, max, bin };
    let key = (p.frame, p.receiver, log, max.map_or(0, f32::to_bits), bin);
    let cached = app.images.lock().ok().and_then(|g| {
        g.as_ref()
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    });
    let png = match cached {
        Some(png) => png,
        None => {
            let png = tokio::task::spawn_blocking(move || render_png(&p, &c))
                .await
                .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
                .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e))?;
            let png = Arc::new(png);
            if let Ok(mut g) = app.images.lock() {
                *g = Some((key, png.clone()));
            }
            png
        }
    };
    Ok((
        [
            (header::CONTENT_TYPE, "image/png"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        axum::body::Body::from(png.as_ref().clone()),
    )
        .into_response())
}

#[utoipa::path(get, path = "/preview/profile", tag = "preview",
    responses((status = 200, description = "The latest 1D profile", body = ProfileOut),
              (status = 401, description = "Token required", body = ApiError),
              (status = 404, description = "No profile yet (or integration is off)", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn preview_profile(AxState(app): AxState<App>) -> Result<Json<ProfileOut>, Failure> {
    let p = app
        .svc
        .profile()
        .ok_or_else(|| fail(StatusCode::NOT_FOUND, "no profile yet"))?;
    Ok(Json((*p).clone()))
}

#[utoipa::path(get, path = "/metrics", tag = "status",
    responses((status = 200, description = "The state, the current or last run's counters and rates (gauges that start again with each run), the engine and the HTTP listener's connections, for Prometheus: the text format 0.0.4, or OpenMetrics 1.0 when the Accept header prefers it. Needs the token like every call: give Prometheus the token as its bearer token (`authorization: {credentials_file: ...}`)",
                   content((String = "text/plain"), (String = "application/openmetrics-text"))),
              (status = 401, description = "Token required", body = ApiError)),
    security(("bearer" = []), ("token" = [])))]
async fn metrics(AxState(app): AxState<App>, headers: HeaderMap) -> Response {
    remora_http::metrics::response(&app.metrics, &headers)
}

#[utoipa::path(get, path = "/", tag = "page",
    responses((status = 200, description = "The live view", content_type = "text/html", body = String)))]
async fn page() -> impl IntoResponse {
    // The address may carry the token (`/?token=...`): tell the browser not to pass it on.
    (
        [
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Html(PAGE),
    )
}

#[utoipa::path(get, path = "/openapi.json", tag = "page",
    responses((status = 200, description = "This document", body = Object)))]
async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

async fn not_found() -> Failure {
    fail(StatusCode::NOT_FOUND, "no such path; see /openapi.json")
}

struct BearerScheme;

impl utoipa::Modify for BearerScheme {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme,
        };
        let c = api.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        c.add_security_scheme(
            "token",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::new("token"))),
        );
    }
}

/// The OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    info(title = "remora acquisition control", description = "Configure, start and stop JUNGFRAU acquisitions and dark runs; watch counters, rates and previews. Every call but / and /openapi.json needs the token the service printed at start (unless it was started with --no-token), as a bearer token or as ?token=."),
    paths(status, wait, events, metrics, get_config, put_config, start, stop, pedestal, preview_image, preview_profile, page, openapi_json),
    components(schemas(Status, Counters, Rates, ReceiverStatus, ModuleStatus, PedestalInfo, PreviewInfo, ProfileOut, State, RunKind, ApiError, RunAnswer, PedestalRequest, EngineChoice, EngineFigure, How, Source)),
    modifiers(&BearerScheme)
)]
pub struct ApiDoc;

/// The router: every path of [`ApiDoc`], behind the token check when `token` is given;
/// `/metrics` reports `http`, the counters of the loop that serves it.
pub fn router(svc: Service, token: Option<String>, http: Arc<Stats>) -> Router {
    let (tx, changes) = tokio::sync::watch::channel(svc.generation());
    svc.on_change(move |g| {
        tx.send_replace(g);
    });
    let registry = Arc::new(super::metrics::service_registry(svc.clone(), http));
    let app = App {
        svc,
        token: token.map(Arc::from),
        images: Arc::default(),
        changes,
        metrics: registry,
    };
    Router::new()
        .route("/", get(page))
        .route("/openapi.json", get(openapi_json))
        .route("/status", get(status))
        .route("/wait", get(wait))
        .route("/events", get(events))
        .route("/metrics", get(metrics))
        .route("/config", get(get_config).put(put_config))
        .route("/start", post(start))
        .route("/stop", post(stop))
        .route("/pedestal", post(pedestal))
        .route("/preview/image", get(preview_image))
        .route("/preview/profile", get(preview_profile))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            app.token.clone(),
            require_token,
        ))
        .with_state(app)
}
