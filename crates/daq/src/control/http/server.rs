//! The control service's HTTP server: [`super::router`] on a runtime of its own, its
//! threads in the idle scheduling class so that the acquisition keeps the cores.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::router;
use crate::control::service::Service;
use remora_http::{Limits, Stats};

/// Puts the calling thread in the idle scheduling class (SCHED_IDLE): it runs only on cycles the
/// acquisition leaves, and never preempts it. A nice value is not enough: a woken nice-10
/// thread still takes a core from a 2-thread pipeline stage at its join, which measured as a few
/// percent of the end-to-end rate on a 2-core machine.
fn lower_priority() {
    if let Err(e) = crate::sys::set_idle_scheduling() {
        tracing::debug!("moving the HTTP threads to SCHED_IDLE: {e}");
    }
}

/// How a [`Server`] is reached and bounded.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// The token every API call must carry; `None`: none (loopback only, the caller decides).
    /// An empty token is refused.
    pub token: Option<String>,
    /// Connection cap and header timeout.
    pub limits: Limits,
}

/// A server running on a thread of its own.
pub struct Server {
    addr: SocketAddr,
    stats: Arc<Stats>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Binds `listen` and serves `svc` on two worker threads (the acquisition needs the cores
    /// more than the API does), within `opts.limits`.
    pub fn spawn(svc: Service, listen: SocketAddr, opts: ServerOptions) -> std::io::Result<Server> {
        if opts.token.as_deref() == Some("") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an empty token would lock every call out",
            ));
        }
        if opts.limits.max_connections == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a connection cap of 0 would refuse every client",
            ));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(4)
            .thread_name("daq-http")
            .on_thread_start(lower_priority)
            .enable_all()
            .build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind(listen))?;
        let addr = listener.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let stats = Arc::new(Stats::default());
        let app = {
            let _guard = rt.enter();
            router(svc, opts.token, stats.clone())
        };
        let limits = opts.limits;
        let served_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name("daq-http-main".into())
            .spawn(move || {
                lower_priority();
                rt.block_on(async move {
                    // Not a graceful shutdown: status streams stay open as long as their pages.
                    tokio::select! {
                        r = remora_http::serve(listener, app, limits, served_stats) => {
                            if let Err(e) = r {
                                tracing::warn!("http server: {e}");
                            }
                        }
                        _ = rx => {}
                    }
                });
                // Streams (the status events) never end by themselves: do not wait for them.
                rt.shutdown_timeout(Duration::from_millis(200));
            })?;
        Ok(Server {
            addr,
            stats,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the accept loop did: connections open, refused over the cap, timed out.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Stops serving (open streams are cut).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
