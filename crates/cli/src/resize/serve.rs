//! `remora resize serve`: the HTTP resize service of `remora_resize::service`, configured from
//! the command line; prints the address it listens on (so that a script or test started on
//! port 0 can read it) and runs until stopped.
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context};
use clap::Args;
use remora_resize::service::{ServeOptions, Server};
use remora_resize::Limits;

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
    #[arg(long, value_name = "P", default_value_t = Limits::default().max_pixels)]
    max_pixels: u64,
    /// imgproxy signing key (hex); URLs must then carry an HMAC-SHA256 signature.
    #[arg(long, value_name = "HEX", requires = "salt")]
    key: Option<String>,
    /// imgproxy signing salt (hex).
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

fn hex(name: &str, s: &str) -> anyhow::Result<Vec<u8>> {
    if s.len() % 2 != 0 {
        bail!("--{name}: an even number of hex digits expected");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16)
                .map_err(|_| anyhow!("--{name}: hex digits expected"))
        })
        .collect()
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
            ..Limits::default()
        },
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
