//! `remora resize serve`: the HTTP resize service of `remora_resize::service`, configured from
//! the command line and imgproxy's environment variables (`imgproxy_env`); prints the address it listens on (so that a script or test started on
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
use super::imgproxy_env::{self, FromEnv};

/// Arguments of `remora resize serve`. Most also read imgproxy's environment variable (named in
/// each help line, in imgproxy's units; see `imgproxy_env`); a flag wins over its variable.
#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the address is printed)
    /// [default: 127.0.0.1:8760; env: IMGPROXY_BIND].
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Folder whose files the URL API may read (`/…/plain/local:///PATH` or a relative path)
    /// [env: IMGPROXY_LOCAL_FILESYSTEM_ROOT].
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// URL prefix the service may fetch sources from (repeatable); none: no remote sources.
    #[arg(long, value_name = "PREFIX")]
    allow: Vec<String>,
    /// Resize workers [default: all cores; env: IMGPROXY_WORKERS, or IMGPROXY_CONCURRENCY].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    workers: Option<u32>,
    /// Jobs waiting for a worker before requests get 503 with Retry-After
    /// [default: 4 per worker; env: IMGPROXY_REQUESTS_QUEUE_SIZE].
    #[arg(long, value_name = "N")]
    queue: Option<u32>,
    /// Largest input in bytes [default: 67108864; env: IMGPROXY_MAX_SRC_FILE_SIZE].
    #[arg(long, value_name = "B")]
    max_bytes: Option<u64>,
    /// Largest input in pixels (from the header, before decoding; imgproxy's default 50 Mpx).
    /// Also the largest output [default: 50000000; env: IMGPROXY_MAX_SRC_RESOLUTION, in
    /// megapixels].
    #[arg(long, value_name = "P")]
    max_pixels: Option<u64>,
    /// Most memory one job may hold (input, pixels, codec and resampling buffers), estimated
    /// from the headers and the geometry before anything is allocated; a job over it gets 422.
    /// Bytes, or with K, M, G (binary: 512M = 512 MiB).
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = parse_bytes)]
    max_job_memory: u64,
    /// Longest a job may run on its worker (e.g. 10s, 500ms; 0: no limit); one past it gets 503
    /// [default: 10s; env: IMGPROXY_TIMEOUT, in seconds].
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    job_timeout: Option<Duration>,
    /// Longest a POST body may take to arrive once a worker slot is held; then 408
    /// [default: 10s; env: IMGPROXY_READ_REQUEST_TIMEOUT, in seconds].
    #[arg(long, value_name = "TIME", value_parser = parse_positive_duration)]
    body_timeout: Option<Duration>,
    /// Connections open at once (on each listener); the next one gets 503 and is closed
    /// [default: 1024; env: IMGPROXY_MAX_CLIENTS].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// Longest a request's head may take to arrive; then the connection is closed
    /// [default: 10s; env: IMGPROXY_READ_REQUEST_TIMEOUT, in seconds].
    #[arg(long, value_name = "TIME", value_parser = parse_positive_duration)]
    header_timeout: Option<Duration>,
    /// imgproxy signing key (hex digits, an even number of them); URLs must then carry an
    /// HMAC-SHA256 signature [env: IMGPROXY_KEY with IMGPROXY_SALT, used when neither flag is
    /// given].
    #[arg(long, value_name = "HEX", requires = "salt")]
    key: Option<String>,
    /// imgproxy signing salt (hex digits, an even number of them) [env: IMGPROXY_SALT].
    #[arg(long, value_name = "HEX", requires = "key")]
    salt: Option<String>,
    /// JPEG quality when a request names none (imgproxy's default 80)
    /// [default: 80; env: IMGPROXY_QUALITY].
    #[arg(long, value_name = "Q", value_parser = clap::value_parser!(u8).range(1..=100))]
    quality: Option<u8>,
    /// Separate address for Prometheus `/metrics` [default: none; /metrics is also served on
    /// the main address; env: IMGPROXY_PROMETHEUS_BIND].
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Where the resample runs: cpu, gpu (the Vulkan device REMORA_GPU allows; the service
    /// does not start without one) or auto (a real GPU when present). Decoding and encoding
    /// stay on the CPU workers.
    #[arg(long, value_name = "ENGINE", default_value = "cpu")]
    engine: String,
}

/// A key or salt in strict hex (see `decode_hex`), or an error naming the option or variable.
fn hex(name: &str, s: &str) -> anyhow::Result<Option<Vec<u8>>> {
    decode_hex(s).map(Some).map_err(|e| anyhow!("{name}: {e}"))
}

/// Runs the service until it is stopped.
pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    // A variable whose flag is given is not read: a value meant for imgproxy (a unix socket
    // in IMGPROXY_BIND, say) does not stop a service told otherwise.
    let overridden = overridden(&a);
    let env = imgproxy_env::read(|name| {
        (!overridden.contains(&name))
            .then(|| std::env::var_os(name))
            .flatten()
    })?;
    for w in &env.warnings {
        tracing::warn!("{w}");
    }
    let opts = options(a, env)?;
    let server = Server::spawn(opts).context("starting the resize service")?;
    println!("listening on http://{}", server.local_addr());
    if let Some(m) = server.metrics_addr() {
        println!("metrics on http://{m}/metrics");
    }
    std::io::stdout().flush()?;
    server.wait();
    Ok(())
}

/// The imgproxy variables the given flags stand in for.
fn overridden(a: &ServeArgs) -> Vec<&'static str> {
    let pairs: [(bool, &[&'static str]); 12] = [
        (a.listen.is_some(), &["IMGPROXY_BIND"]),
        (a.root.is_some(), &["IMGPROXY_LOCAL_FILESYSTEM_ROOT"]),
        (
            a.workers.is_some(),
            &["IMGPROXY_WORKERS", "IMGPROXY_CONCURRENCY"],
        ),
        (a.queue.is_some(), &["IMGPROXY_REQUESTS_QUEUE_SIZE"]),
        (a.max_bytes.is_some(), &["IMGPROXY_MAX_SRC_FILE_SIZE"]),
        (a.max_pixels.is_some(), &["IMGPROXY_MAX_SRC_RESOLUTION"]),
        (
            a.job_timeout.is_some(),
            &["IMGPROXY_TIMEOUT", "IMGPROXY_WRITE_TIMEOUT"],
        ),
        (
            a.body_timeout.is_some() && a.header_timeout.is_some(),
            &["IMGPROXY_READ_REQUEST_TIMEOUT", "IMGPROXY_READ_TIMEOUT"],
        ),
        (a.max_connections.is_some(), &["IMGPROXY_MAX_CLIENTS"]),
        (a.key.is_some(), &["IMGPROXY_KEY", "IMGPROXY_SALT"]),
        (a.quality.is_some(), &["IMGPROXY_QUALITY"]),
        (a.metrics.is_some(), &["IMGPROXY_PROMETHEUS_BIND"]),
    ];
    pairs
        .into_iter()
        .filter(|(given, _)| *given)
        .flat_map(|(_, vars)| vars.iter().copied())
        .collect()
}

/// The service's options: each flag, else its imgproxy variable, else remora's default.
fn options(a: ServeArgs, env: FromEnv) -> anyhow::Result<ServeOptions> {
    let default = ServeOptions::default();
    let workers = a
        .workers
        .or(env.workers)
        .map_or(default.workers, |n| n as usize);
    let limits = Limits::default();
    let max_pixels = a.max_pixels.or(env.max_pixels).unwrap_or(limits.max_pixels);
    // The pair comes from the flags when they are given (clap asks for both), else from the
    // environment: a key is never paired with a salt from elsewhere.
    let (key, salt) = match (a.key, a.salt, env.key_salt) {
        (Some(k), Some(s), _) => (hex("--key", &k)?, hex("--salt", &s)?),
        (_, _, Some((k, s))) => (hex("IMGPROXY_KEY", &k)?, hex("IMGPROXY_SALT", &s)?),
        _ => (None, None),
    };
    let job_timeout = a
        .job_timeout
        .or(env.job_timeout)
        .unwrap_or(Duration::from_secs(10));
    Ok(ServeOptions {
        listen: a.listen.or(env.listen).unwrap_or(default.listen),
        root: a.root.or(env.root),
        allow: a.allow,
        workers,
        queue: a.queue.or(env.queue).map_or(workers * 4, |n| n as usize),
        limits: Limits {
            max_input_bytes: a
                .max_bytes
                .or(env.max_bytes)
                .unwrap_or(limits.max_input_bytes),
            max_pixels,
            max_output_pixels: max_pixels,
            max_job_memory: a.max_job_memory,
            ..limits
        },
        job_timeout: (!job_timeout.is_zero()).then_some(job_timeout),
        body_timeout: a
            .body_timeout
            .or(env.read_timeout)
            .unwrap_or(default.body_timeout),
        max_connections: a
            .max_connections
            .or(env.max_connections)
            .map_or(default.max_connections, |n| n as usize),
        header_timeout: a
            .header_timeout
            .or(env.read_timeout)
            .unwrap_or(default.header_timeout),
        key,
        salt,
        default_quality: a.quality.or(env.quality).unwrap_or(default.default_quality),
        metrics: a.metrics.or(env.metrics),
        engine: a.engine.parse().context("--engine")?,
    })
}
