//! `remora resize serve`: the HTTP resize service of `remora_resize::service`, configured from
//! the command line; prints the address it listens on (so that a script or test started on
//! port 0 can read it) and runs until stopped.
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::Args;
use remora_resize::service::imgproxy::decode_hex;
use remora_resize::service::{ServeOptions, Server};
use remora_resize::Limits;

use super::args::{parse_bytes, parse_duration, parse_positive_duration};

/// Arguments of `remora resize serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8760")]
    listen: SocketAddr,
    /// Folder whose files the URL API may read (`/…/plain/local:///PATH` or a relative path).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// URL prefix the service may fetch sources from (repeatable); none: no remote sources.
    #[arg(long, value_name = "PREFIX")]
    allow: Vec<String>,
    /// Resize workers [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    workers: Option<u32>,
    /// Jobs waiting for a worker before requests get 503 with Retry-After [default: 4 per worker].
    #[arg(long, value_name = "N")]
    queue: Option<u32>,
    /// Largest input in bytes.
    #[arg(long, value_name = "B", default_value_t = Limits::default().max_input_bytes)]
    max_bytes: u64,
    /// Largest input in pixels (from the header, before decoding; imgproxy's default 50 Mpx).
    /// Also the largest output.
    #[arg(long, value_name = "P", default_value_t = Limits::default().max_pixels)]
    max_pixels: u64,
    /// Most memory one job may hold (input, pixels, codec and resampling buffers), estimated
    /// from the headers and the geometry before anything is allocated; a job over it gets 422.
    /// Bytes, or with K, M, G (binary: 512M = 512 MiB).
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = parse_bytes)]
    max_job_memory: u64,
    /// Longest a job may run on its worker (e.g. 10s, 500ms; 0: no limit); one past it gets 503.
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = parse_duration)]
    job_timeout: Duration,
    /// Longest a POST body may take to arrive once a worker slot is held; then 408.
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = parse_positive_duration)]
    body_timeout: Duration,
    /// Connections open at once (on each listener); the next one gets 503 and is closed.
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Longest a request's head may take to arrive; then the connection is closed.
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = parse_positive_duration)]
    header_timeout: Duration,
    /// imgproxy signing key (hex digits, an even number of them); URLs must then carry an
    /// HMAC-SHA256 signature.
    #[arg(long, value_name = "HEX", requires = "salt")]
    key: Option<String>,
    /// imgproxy signing salt (hex digits, an even number of them).
    #[arg(long, value_name = "HEX", requires = "key")]
    salt: Option<String>,
    /// JPEG quality when a request names none (imgproxy's default 80).
    #[arg(long, value_name = "Q", default_value_t = 80,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    quality: u8,
    /// Separate address for Prometheus `/metrics` [default: none; /metrics is also served on
    /// the main address].
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Where the resample runs: cpu, gpu (the Vulkan device REMORA_GPU allows; the service
    /// does not start without one) or auto (a real GPU when present). Decoding and encoding
    /// stay on the CPU workers.
    #[arg(long, value_name = "ENGINE", default_value = "cpu")]
    engine: String,
}

/// A key or salt in strict hex (see `decode_hex`), or an error naming the option.
fn hex(name: &str, s: &str) -> anyhow::Result<Vec<u8>> {
    decode_hex(s).map_err(|e| anyhow!("--{name}: {e}"))
}

/// Runs the service until it is stopped.
pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let workers = a.workers.map(|n| n as usize).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let opts = ServeOptions {
        listen: a.listen,
        root: a.root,
        allow: a.allow,
        workers,
        queue: a.queue.map_or(workers * 4, |n| n as usize),
        limits: Limits {
            max_input_bytes: a.max_bytes,
            max_pixels: a.max_pixels,
            max_output_pixels: a.max_pixels,
            max_job_memory: a.max_job_memory,
            ..Limits::default()
        },
        job_timeout: (!a.job_timeout.is_zero()).then_some(a.job_timeout),
        body_timeout: a.body_timeout,
        max_connections: a.max_connections as usize,
        header_timeout: a.header_timeout,
        key: a.key.as_deref().map(|k| hex("key", k)).transpose()?,
        salt: a.salt.as_deref().map(|s| hex("salt", s)).transpose()?,
        default_quality: a.quality,
        metrics: a.metrics,
        engine: a.engine.parse().context("--engine")?,
    };
    let server = Server::spawn(opts).context("starting the resize service")?;
    println!("listening on http://{}", server.local_addr());
    if let Some(m) = server.metrics_addr() {
        println!("metrics on http://{m}/metrics");
    }
    std::io::stdout().flush()?;
    server.wait();
    Ok(())
}
