//! The HTTP front of remora's services (`remora daq serve`, `remora resize serve`, and the
//! `/metrics` of the others): an accept loop that serves an axum [`Router`] to peers that may
//! be hostile.
//!
//! `axum::serve` takes every connection and waits on each for as long as the peer likes, so
//! 20,000 connections that trickle one header byte at a time hold the whole file-descriptor
//! limit and starve every other client. [`serve`] adds the two bounds that imgproxy
//! (`IMGPROXY_MAX_CLIENTS`, its read timeouts) and nginx (`client_header_timeout`) put on a
//! public endpoint:
//!
//! - a cap on open connections: one over the cap is answered `503` with `Connection: close`
//!   and closed at once, without reaching the router;
//! - a header timeout: a request's head (and a kept-alive connection's next one) must arrive
//!   whole within [`Limits::header_timeout`], or the connection is closed.
//!
//! Bodies are the handlers' business (they know what size and pace they accept). This crate
//! does not do TLS, HTTP/2 or graceful shutdown: drop the [`serve`] future (for example in a
//! `tokio::select!` with a shutdown signal) to stop accepting.
//!
//! Hand-written over `hyper` because axum's own `serve` exposes neither bound.
//!
//! [`metrics`] is the Prometheus `/metrics` every service shares: figures read at scrape time,
//! both text formats, a route for an axum router and a small server of its own.
//!
//! ```no_run
//! # async fn f() -> std::io::Result<()> {
//! use std::sync::Arc;
//! let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let stats = Arc::new(remora_http::Stats::default());
//! remora_http::serve(listener, app, remora_http::Limits::default(), stats).await
//! # }
//! ```
#![warn(missing_docs)]

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustix::io::Errno;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub mod metrics;

/// The bounds [`serve`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; the next one is answered 503 and closed.
    pub max_connections: usize,
    /// Time allowed for a request's head, counted from when the server starts reading it
    /// (for a kept-alive connection: from the end of the previous response).
    pub header_timeout: Duration,
}

impl Default for Limits {
    /// 1024 connections (a default fd limit holds them with room to spare), 10 s for headers.
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// Counters of what [`serve`] did, for a service's status or metrics.
#[derive(Debug, Default)]
pub struct Stats {
    accepted: AtomicU64,
    refused: AtomicU64,
    open: AtomicU64,
    timed_out: AtomicU64,
}

impl Stats {
    /// Connections served (let through to the router).
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Relaxed)
    }
    /// Connections answered 503 because the cap was reached.
    pub fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }
    /// Connections open now.
    pub fn open(&self) -> u64 {
        self.open.load(Relaxed)
    }
    /// Connections closed because a request's head did not arrive in time.
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(Relaxed)
    }
}

/// Refusals answered at once; beyond these (a flood) an over-cap connection is just closed.
const REFUSALS_IN_FLIGHT: usize = 64;

/// Serves `app` on `listener` within `limits`, counting into `stats`. Runs until the listener
/// fails for good (an error other than a peer's reset or a momentary lack of descriptors),
/// or until the future is dropped.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stats: Arc<Stats>,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT));
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => match accept_error(&e) {
                AcceptError::PeerGone => continue,
                AcceptError::Transient => {
                    tracing::warn!("http: accept: {e}; pausing 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                AcceptError::Fatal => return Err(e),
            },
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                stats.accepted.fetch_add(1, Relaxed);
                tokio::spawn(connection(stream, app.clone(), limits, stats.clone(), slot));
            }
            Err(_) => {
                stats.refused.fetch_add(1, Relaxed);
                if let Ok(r) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(refuse(stream, limits.max_connections, r));
                }
            }
        }
    }
}

enum AcceptError {
    PeerGone,
    Transient,
    Fatal,
}

fn accept_error(e: &io::Error) -> AcceptError {
    use io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
    ) {
        return AcceptError::PeerGone;
    }
    // From accept(2): errors to treat like EAGAIN (this process or the system is short of
    // something for a while, or the network or peer failed).
    let transient = [
        Errno::MFILE,
        Errno::NFILE,
        Errno::NOBUFS,
        Errno::NOMEM,
        Errno::PROTO,
        Errno::PERM,
        Errno::NETDOWN,
        Errno::NETUNREACH,
        Errno::NOPROTOOPT,
        Errno::HOSTDOWN,
        Errno::HOSTUNREACH,
        Errno::OPNOTSUPP,
    ];
    match e.raw_os_error() {
        Some(n) if transient.contains(&Errno::from_raw_os_error(n)) => AcceptError::Transient,
        _ => AcceptError::Fatal,
    }
}

async fn connection(
    stream: TcpStream,
    app: Router,
    limits: Limits,
    stats: Arc<Stats>,
    slot: OwnedSemaphorePermit,
) {
    stats.open.fetch_add(1, Relaxed);
    let _ = stream.set_nodelay(true);
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let served = http
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
        .await;
    if let Err(e) = served {
        if e.is_timeout() {
            stats.timed_out.fetch_add(1, Relaxed);
        } else {
            tracing::debug!("http connection: {e}");
        }
    }
    stats.open.fetch_sub(1, Relaxed);
    drop(slot);
}

/// Answers 503 and closes, reading what the peer sent meanwhile (closing a socket with unread
/// data resets it, and the peer would see the reset rather than the answer).
async fn refuse(stream: TcpStream, cap: usize, _slot: OwnedSemaphorePermit) {
    let body = format!("{{\"error\": \"too many connections (the cap is {cap}); retry later\"}}");
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    // The send buffer of a fresh socket takes a few hundred bytes without waiting.
    if stream.try_write(reply.as_bytes()).is_err() {
        return;
    }
    let _ = rustix::net::shutdown(&stream, rustix::net::Shutdown::Write);
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut left = 64 * 1024usize;
        while left > 0 {
            if stream.readable().await.is_err() {
                return;
            }
            match stream.try_read(&mut buf) {
                Ok(0) => return,
                Ok(n) => left = left.saturating_sub(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(500), drain).await;
}

#[cfg(test)]
mod tests;
