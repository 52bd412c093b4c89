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
//!   separate [`ServeOptions::metrics`] bind when one is given).
//!
//! Errors are `text/plain` reasons: 400 a bad request, 403 a refused source or signature, 404 no
//! such source, 413 over a byte or input-pixel limit, 415 not a JPEG or PNG, 422 a malformed,
//! truncated or unsupported image or an output over the pixel limit, 502 a source that failed,
//! 503 (with `Retry-After: 1`) when every worker is busy and the queue is full.
//!
//! Jobs run on a fixed number of worker threads fed by a bounded queue; the async handlers
//! await them, so many requests can be in flight while at most `workers` images are decoded at
//! once. Reading a source (file or URL) happens on the worker too.

pub mod imgproxy;
mod metrics;
mod pool;
mod process;
mod routes;
mod source;

use axum::http::StatusCode;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long in-flight requests may take to finish after a shutdown is asked for.
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
    /// Input bytes, input pixels, output pixels.
    pub limits: crate::Limits,
    /// imgproxy signing key (hex-decoded); `None`: any signature segment is accepted.
    pub key: Option<Vec<u8>>,
    /// imgproxy signing salt (hex-decoded).
    pub salt: Option<Vec<u8>>,
    /// JPEG quality of imgproxy URLs that give none (80, as imgproxy).
    pub default_quality: u8,
    /// A separate address for `/metrics`; `None`: `/metrics` on the main port.
    pub metrics: Option<SocketAddr>,
    /// Where the resample runs ([`crate::Engine::Cpu`] by default). `Gpu` is checked when the
    /// service starts: no device, no service, with the reason.
    pub engine: crate::Engine,
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
            key: None,
            salt: None,
            default_quality: 80,
            metrics: None,
            engine: crate::Engine::Cpu,
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
    pub(crate) fn overloaded() -> Failure {
        Failure::new(
            503,
            "overloaded",
            "every resize worker is busy and the queue is full; retry after a second",
        )
    }
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
        // A GPU service without a device would fail every request: refuse to start instead.
        opts.engine
            .resampler()
            .map_err(|e| invalid(&format!("engine {}: {e}", opts.engine)))?;
        let sources = source::Sources::new(
            opts.root.as_deref(),
            opts.allow.clone(),
            opts.limits.max_input_bytes,
        )?;
        let pool = Arc::new(pool::Pool::new(opts.workers, opts.queue)?);
        let metrics = Arc::new(metrics::Metrics::new(pool.counts.clone(), pool.workers));
        let app = routes::App {
            pool: pool.clone(),
            metrics,
            sources: Arc::new(sources),
            limits: opts.limits,
            key: opts.key.clone().map(Arc::from),
            salt: opts.salt.clone().map(Arc::from),
            default_quality: opts.default_quality,
            engine: opts.engine,
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
        let main_router = routes::router(app.clone(), metrics_listener.is_none());
        let metrics_router = routes::metrics_router(app);
        let (tx, rx) = tokio::sync::watch::channel(false);
        tracing::info!(
            %addr, ?metrics_addr, workers = opts.workers, queue = opts.queue,
            root = ?opts.root, allow = ?opts.allow, signed = opts.key.is_some(),
            "remora resize: serving"
        );
        let thread = std::thread::Builder::new()
            .name("resize-http-main".into())
            .spawn(move || {
                rt.block_on(async move {
                    let main = axum::serve(listener, main_router)
                        .with_graceful_shutdown(stopped(rx.clone()))
                        .into_future();
                    let side = async {
                        if let Some(l) = metrics_listener {
                            axum::serve(l, metrics_router)
                                .with_graceful_shutdown(stopped(rx.clone()))
                                .await
                        } else {
                            Ok(())
                        }
                    };
                    let deadline = async {
                        stopped(rx.clone()).await;
                        tokio::time::sleep(GRACE).await;
                    };
                    tokio::select! {
                        (a, b) = async { tokio::join!(main, side) } => {
                            for e in [a.err(), b.err()].into_iter().flatten() {
                                tracing::warn!("resize http server: {e}");
                            }
                        }
                        _ = deadline => tracing::warn!("requests still running after {GRACE:?}: cut"),
                    }
                });
                rt.shutdown_timeout(Duration::from_millis(200));
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

    /// Stops listening, lets running requests finish (2 s at most) and joins the workers.
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
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
        // Let held jobs go so that the requests waiting on them can finish.
        self.pool.pause(false);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.pool.stop();
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
