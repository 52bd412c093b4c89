//! The HTTP resize service (axum on tokio): `POST /resize` with an image body and an
//! ImageMagick geometry, imgproxy-style `GET` URLs over a source directory and an allow-list of
//! URL prefixes, a bounded worker pool with backpressure, limits, `/health` and `/metrics`.
//!
//! HTTP API:
//! - `POST /resize?geometry=500x500&quality=85&format=jpeg|png&filter=lanczos&strip=1&auto_orient=1`
//!   (also `thumbnail=1`, `sampling=4:2:0`, `progressive=1`), the image as the body → the resized
//!   image with its `Content-Type` and `X-Remora-Width` / `X-Remora-Height`. Without `quality`
//!   the engine's ImageMagick default applies (the input's estimated quality, else 92);
//!   `auto_orient` defaults to on, `strip` to off.
//! - `GET /<signature>/<options>/plain/<percent-encoded source>@<ext>` and
//!   `GET /<signature>/<options>/<base64url source>.<ext>`: imgproxy's URL API (see
//!   [`imgproxy`] for the options); quality defaults to [`ServeOptions::default_quality`],
//!   metadata is stripped and the EXIF orientation applied unless `sm:0` / `ar:0`. Sources:
//!   `local:///path` or a bare relative path under [`ServeOptions::root`], `http://` URLs under
//!   an [`ServeOptions::allow`] prefix.
//! - `GET /health` → `remora resize: running`; `GET /metrics` → Prometheus text (on the
//!   separate [`ServeOptions::metrics`] bind when one is given); `GET /openapi.json` → this
//!   API's OpenAPI 3 document ([`ApiDoc`]).
//!
//! Errors are `text/plain` reasons: 400 a bad request, 403 a refused source or signature, 404 no
//! such source, 408 a POST body that did not arrive within [`ServeOptions::body_timeout`], 413
//! over a byte or input-pixel limit, 415 not a JPEG or PNG, 422 a malformed, truncated or
//! unsupported image (a JPEG with more than [`Limits::max_scans`](crate::Limits::max_scans)
//! scans included), an output over the pixel limit or a job over the memory limit, 502 a source
//! that failed, 503 (with `Retry-After: 1`) when every worker is busy and the queue is full, 503
//! also for a job past [`ServeOptions::job_timeout`] and while shutting down.
//!
//! Bounds on what a client can make the service hold (see `docs/resize.md`):
//! - connections: at most [`ServeOptions::max_connections`] open on each listener (the next one
//!   is answered 503 and closed), and a request head must arrive within
//!   [`ServeOptions::header_timeout`] (`remora-http`);
//! - inputs: a request takes one of `workers + queue` slots before it reads a body (503 at
//!   once when none is free), and reads it against the byte limit within
//!   [`ServeOptions::body_timeout`]; so at most `(workers + queue) × max_input_bytes` of
//!   inputs are held;
//! - jobs: each is refused before it allocates when its estimated memory is over
//!   [`Limits::max_job_memory`](crate::Limits::max_job_memory), and stopped at
//!   [`ServeOptions::job_timeout`];
//! - shutdown: listeners close at once, running requests get 1 s, then every job is cancelled
//!   (a running one stops at its next check) and the workers still busy 2 s after the call
//!   (in the JPEG codec, or in one untiled resample call) are left behind: the process ends
//!   anyway.
//!
//! Jobs run on a fixed number of worker threads fed by a bounded queue; the async handlers
//! await them, so many requests can be in flight while at most `workers` images are decoded at
//! once. Reading a source (file or URL) happens on the worker too.

pub mod imgproxy;
mod metrics;
mod openapi;
mod pool;
mod process;
mod routes;
mod source;

pub use openapi::ApiDoc;

use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long running requests may take to finish after a shutdown is asked for; then their jobs
/// are cancelled.
const REQUEST_GRACE: Duration = Duration::from_secs(1);
/// How long a shutdown takes at most: workers still busy then are left to end with the process.
const GRACE: Duration = Duration::from_secs(2);

/// What a server serves and how.
#[derive(Clone)]
pub struct ServeOptions {
    /// Address to listen on (default `127.0.0.1:8760`).
    pub listen: SocketAddr,
    /// Source directory for `local:///path` and relative paths (none: no local sources).
    pub root: Option<PathBuf>,
    /// Allowed source URL prefixes (`http://host/path/`); empty: no URL sources.
    pub allow: Vec<String>,
    /// Resize threads (default: the number of cores).
    pub workers: usize,
    /// Jobs waiting beyond the busy workers before requests are refused with 503
    /// (default 4 × workers).
    pub queue: usize,
    /// Input bytes, input and output pixels, memory a job, JPEG scans.
    pub limits: crate::Limits,
    /// Longest a job may run on its worker (default 10 s, as imgproxy's `IMGPROXY_TIMEOUT`);
    /// `None`: no limit.
    pub job_timeout: Option<Duration>,
    /// Longest a POST body may take to arrive once the request holds a slot (default 10 s, as
    /// imgproxy's `IMGPROXY_READ_REQUEST_TIMEOUT`).
    pub body_timeout: Duration,
    /// Connections open at once on each listener (default 1024, as imgproxy's
    /// `IMGPROXY_MAX_CLIENTS` idea); the next one gets 503 and is closed.
    pub max_connections: usize,
    /// Longest a request head may take to arrive (default 10 s); then the connection closes.
    pub header_timeout: Duration,
    /// imgproxy signing key (hex-decoded, see [`imgproxy::decode_hex`]); `None`: any signature
    /// segment is accepted. An empty key is refused.
    pub key: Option<Vec<u8>>,
    /// imgproxy signing salt (hex-decoded). An empty salt is refused.
    pub salt: Option<Vec<u8>>,
    /// JPEG quality of imgproxy URLs that give none (80, as imgproxy).
    pub default_quality: u8,
    /// A separate address for `/metrics`; `None`: `/metrics` on the main port.
    pub metrics: Option<SocketAddr>,
    /// Where the resample runs ([`crate::ResampleEngine::Cpu`] by default). `Gpu` is checked when the
    /// service starts: no device, no service, with the reason.
    pub engine: crate::ResampleEngine,
}

impl Default for ServeOptions {
    fn default() -> Self {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 8760)),
            root: None,
            allow: Vec::new(),
            workers,
            queue: 4 * workers,
            limits: crate::Limits::default(),
            job_timeout: Some(Duration::from_secs(10)),
            body_timeout: Duration::from_secs(10),
            max_connections: remora_http::Limits::default().max_connections,
            header_timeout: remora_http::Limits::default().header_timeout,
            key: None,
            salt: None,
            default_quality: 80,
            metrics: None,
            engine: crate::ResampleEngine::Cpu,
        }
    }
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("listen", &self.listen)
            .field("root", &self.root)
            .field("allow", &self.allow)
            .field("workers", &self.workers)
            .field("queue", &self.queue)
            .field("limits", &self.limits)
            .field("job_timeout", &self.job_timeout)
            .field("body_timeout", &self.body_timeout)
            .field("max_connections", &self.max_connections)
            .field("header_timeout", &self.header_timeout)
            .field("key", &self.key.as_ref().map(|_| "<set>"))
            .field("salt", &self.salt.as_ref().map(|_| "<set>"))
            .field("default_quality", &self.default_quality)
            .field("engine", &self.engine)
            .field("metrics", &self.metrics)
            .finish()
    }
}

/// A failed request: its status, a kind for the metrics and a reason for people.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            kind,
            message: message.into(),
        }
    }
    pub(crate) fn bad_request(m: impl Into<String>) -> Failure {
        Failure::new(400, "bad_request", m)
    }
    pub(crate) fn forbidden(m: impl Into<String>) -> Failure {
        Failure::new(403, "forbidden", m)
    }
    pub(crate) fn not_found(m: impl Into<String>) -> Failure {
        Failure::new(404, "not_found", m)
    }
    pub(crate) fn too_large(m: impl Into<String>) -> Failure {
        Failure::new(413, "too_large", m)
    }
    pub(crate) fn bad_gateway(m: impl Into<String>) -> Failure {
        Failure::new(502, "source", m)
    }
    pub(crate) fn internal(m: impl Into<String>) -> Failure {
        Failure::new(500, "internal", m)
    }
    pub(crate) fn shutting_down() -> Failure {
        Failure::new(503, "shutting_down", "the resize service is shutting down")
    }
    pub(crate) fn overloaded() -> Failure {
        Failure::new(
            503,
            "overloaded",
            "every resize worker is busy and the queue is full; retry after a second",
        )
    }
}

/// The API router; `/metrics` on it unless served apart. Every route is in the OpenAPI
/// document ([`ApiDoc`]); the router is here, above `routes` and `openapi`, because it serves
/// the document that describes the handlers.
fn router(app: routes::App, with_metrics: bool) -> Router {
    let mut r = Router::new()
        .route("/health", get(routes::health))
        .route("/openapi.json", get(openapi::openapi_json))
        .route("/resize", post(routes::post_resize))
        .route("/{*path}", get(routes::get_imgproxy));
    if with_metrics {
        r = r.route("/metrics", get(routes::metrics));
    }
    r.with_state(app)
}

/// A resize server running on threads of its own (an HTTP runtime of two threads and the
/// resize workers). Dropping it shuts it down.
pub struct Server {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pool: Arc<pool::Pool>,
}

impl Server {
    /// Binds the listener(s) and serves on threads of its own.
    pub fn spawn(opts: ServeOptions) -> std::io::Result<Server> {
        let invalid =
            |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, m.to_string());
        if opts.workers == 0 {
            return Err(invalid("workers must be at least 1"));
        }
        if !(1..=100).contains(&opts.default_quality) {
            return Err(invalid("default quality must be 1 to 100"));
        }
        if opts.key.as_ref().is_some_and(|k| k.is_empty()) {
            return Err(invalid("the signing key is empty"));
        }
        if opts.salt.as_ref().is_some_and(|k| k.is_empty()) {
            return Err(invalid("the signing salt is empty"));
        }
        if opts.max_connections == 0 {
            return Err(invalid("max connections must be at least 1"));
        }
        // A GPU service without a device would fail every request: refuse to start instead.
        opts.engine
            .resampler()
            .map_err(|e| invalid(&format!("engine {}: {e}", opts.engine)))?;
        let sources = source::Sources::new(
            opts.root.as_deref(),
            opts.allow.clone(),
            opts.limits.max_input_bytes,
            opts.job_timeout,
        )?;
        let pool = Arc::new(pool::Pool::new(opts.workers, opts.queue)?);
        let http_stats = Arc::new(remora_http::Stats::default());
        let metrics = Arc::new(metrics::Metrics::new(
            pool.counts.clone(),
            pool.workers,
            http_stats.clone(),
        ));
        let app = routes::App {
            pool: pool.clone(),
            metrics: metrics.clone(),
            sources: Arc::new(sources),
            limits: opts.limits,
            key: opts.key.clone().map(Arc::from),
            salt: opts.salt.clone().map(Arc::from),
            default_quality: opts.default_quality,
            engine: opts.engine,
            job_timeout: opts.job_timeout,
            body_timeout: opts.body_timeout,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("resize-http")
            .enable_all()
            .build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind(opts.listen))?;
        let addr = listener.local_addr()?;
        let metrics_listener = match opts.metrics {
            Some(m) => Some(rt.block_on(tokio::net::TcpListener::bind(m))?),
            None => None,
        };
        let metrics_addr = match &metrics_listener {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let main_router = router(app.clone(), metrics_listener.is_none());
        let metrics_router = routes::metrics_router(app);
        let limits = remora_http::Limits {
            max_connections: opts.max_connections,
            header_timeout: opts.header_timeout,
        };
        let (tx, rx) = tokio::sync::watch::channel(false);
        tracing::info!(
            %addr, ?metrics_addr, workers = opts.workers, queue = opts.queue,
            root = ?opts.root, allow = ?opts.allow, signed = opts.key.is_some(),
            limits = ?opts.limits, job_timeout = ?opts.job_timeout,
            max_connections = opts.max_connections, header_timeout = ?opts.header_timeout,
            "remora resize: serving"
        );
        let (http_pool, http_metrics) = (pool.clone(), metrics);
        let thread = std::thread::Builder::new()
            .name("resize-http-main".into())
            .spawn(move || {
                rt.block_on(async move {
                    let main = remora_http::serve(listener, main_router, limits, http_stats);
                    let side = async {
                        match metrics_listener {
                            Some(l) => {
                                let stats = Arc::new(remora_http::Stats::default());
                                remora_http::serve(l, metrics_router, limits, stats).await
                            }
                            None => std::future::pending().await,
                        }
                    };
                    // The accept loops end when a listener fails for good, or here on stop.
                    tokio::select! {
                        r = main => if let Err(e) = r { tracing::warn!("resize http server: {e}") },
                        r = side => if let Err(e) = r { tracing::warn!("resize metrics server: {e}") },
                        _ = stopped(rx) => {}
                    }
                    // No new connections. Running requests get REQUEST_GRACE, then their jobs
                    // are cancelled and they answer 503 at once.
                    let t0 = Instant::now();
                    let busy = || http_metrics.in_progress.load(Ordering::Relaxed) > 0;
                    while busy() && t0.elapsed() < REQUEST_GRACE {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    http_pool.cancel();
                    while busy() && t0.elapsed() < REQUEST_GRACE + Duration::from_millis(200) {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    if busy() {
                        tracing::warn!("requests still running after {REQUEST_GRACE:?}: cut");
                    }
                });
                rt.shutdown_timeout(Duration::from_millis(100));
            })?;
        Ok(Server {
            addr,
            metrics_addr,
            stop: Some(tx),
            thread: Some(thread),
            pool,
        })
    }

    /// The address the API listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The separate `/metrics` address, when one was asked for.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Stops listening, lets running requests finish (1 s at most), cancels what is left and
    /// joins the workers that end within 2 s of the call (the others end with the process).
    pub fn shutdown(mut self) {
        self.stop();
    }

    /// Blocks until SIGINT or SIGTERM, then shuts down.
    pub fn wait(self) {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(async {
                #[cfg(unix)]
                {
                    use tokio::signal::unix::{signal, SignalKind};
                    match signal(SignalKind::terminate()) {
                        Ok(mut term) => {
                            tokio::select! {
                                _ = tokio::signal::ctrl_c() => {}
                                _ = term.recv() => {}
                            }
                        }
                        Err(_) => {
                            let _ = tokio::signal::ctrl_c().await;
                        }
                    }
                }
                #[cfg(not(unix))]
                let _ = tokio::signal::ctrl_c().await;
            }),
            Err(e) => tracing::error!("cannot wait for signals: {e}"),
        }
        tracing::info!("remora resize: shutting down");
        self.shutdown();
    }

    /// Holds the workers before their next job (`true`) or lets them go (`false`): for tests
    /// that need a full queue.
    #[doc(hidden)]
    pub fn pause_workers(&self, paused: bool) {
        self.pool.pause(paused);
    }

    /// Jobs queued or running, and of those the queued ones: for tests.
    #[doc(hidden)]
    pub fn jobs(&self) -> (usize, usize) {
        let c = &self.pool.counts;
        (
            c.pending.load(Ordering::SeqCst),
            c.queued.load(Ordering::SeqCst),
        )
    }

    fn stop(&mut self) {
        let until = Instant::now() + GRACE;
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
        // Let held jobs go so that the requests waiting on them can finish.
        self.pool.pause(false);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.pool.cancel();
        self.pool.stop(until);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
