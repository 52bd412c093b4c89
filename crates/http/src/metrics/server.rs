//! A small `/metrics` server for services that have no HTTP front (`--metrics ADDR` on
//! `remora fabric serve`, `remora lazy serve`, `remora kv serve`).
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::{router, Registry};
use crate::{Limits, Stats};

/// A running `/metrics` server; dropping it stops it.
pub struct MetricsServer {
    addr: SocketAddr,
    stats: Arc<Stats>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Scrapers are few: a small cap keeps a flood of connections from costing the service more
/// than a few descriptors.
const MAX_SCRAPERS: usize = 64;

/// Binds `addr` now (an address in use is an error here, not later) and serves `registry` at
/// `GET /metrics` on a thread of its own, with a one-thread runtime, through [`crate::serve`]
/// (at most 64 connections, 10 s for a request's head).
///
/// ```
/// use std::sync::Arc;
/// let reg = Arc::new(remora_http::metrics::registry(|m| {
///     m.gauge("demo_up", "Whether the demo runs.", 1u64);
/// }));
/// let srv = remora_http::metrics::serve_metrics("127.0.0.1:0".parse().unwrap(), reg)?;
/// println!("scrape http://{}/metrics", srv.local_addr());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn serve_metrics(addr: SocketAddr, registry: Arc<Registry>) -> io::Result<MetricsServer> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let stats = Arc::new(Stats::default());
    let served = stats.clone();
    let limits = Limits {
        max_connections: MAX_SCRAPERS,
        header_timeout: Duration::from_secs(10),
    };
    let thread = std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => return tracing::warn!("metrics server: {e}"),
                };
                tokio::select! {
                    r = crate::serve(listener, router(registry), limits, served) => {
                        if let Err(e) = r {
                            tracing::warn!("metrics server: {e}");
                        }
                    }
                    _ = rx => {}
                }
            });
            rt.shutdown_timeout(Duration::from_millis(200));
        })?;
    Ok(MetricsServer {
        addr,
        stats,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

impl MetricsServer {
    /// The address it listens on (the port chosen when `addr` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What its accept loop did.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
