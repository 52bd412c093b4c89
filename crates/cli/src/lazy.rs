//! `remora lazy serve` and `remora lazy bench`: the page server and OPERA's fault benchmark.
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use remora_fabric::{Progress, Transport};
use remora_lazy::{
    FabricFetcher, FabricServer, FileSource, LocalFetcher, MemorySource, Mode, PageFetcher,
    PageServer, PageSource, Prefetch, ProcessSource, TcpFetcher,
};
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

mod bench;
mod metrics;
use bench::Pattern;

/// Lazy-memory subcommands.
#[derive(Subcommand)]
pub enum Cmd {
    /// Serves a file, a process's memory or synthetic bytes to lazy regions.
    ///
    /// What clients see: a --file (or memfd) is served live on every transport: tcp reads it
    /// at each request, udp and shm register a shared read-only mapping of it, so bytes written
    /// to the file after the server started are served. Its length is fixed at start; pages
    /// past a later end read as zeros (tcp; udp/shm: zeros or a refused READ). A --pid is
    /// served live over tcp (process_vm_readv at each request) and over shm (the client reads
    /// the process with process_vm_readv itself); over udp, and over shm where the client may
    /// not read the process, clients READ a copy of its memory taken at start, since another
    /// process's memory cannot be registered: later writes by the process are not seen there
    /// (use --stop to keep it from changing).
    Serve(ServeArgs),
    /// Measures fault latency (OPERA's micro-benchmark).
    Bench(BenchArgs),
}

/// Page-server transports.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ServeTransport {
    /// The page-server protocol over TCP.
    Tcp,
    /// RC READ of the registered source over RoCEv2 datagrams (remora-fabric): a file is
    /// mapped live, a process or synthetic bytes are copied at start.
    Udp,
    /// The same over the fabric's same-host shm transport.
    Shm,
}

/// Arguments of `remora lazy serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Serve this file (or /proc/self/fd/N for a memfd), live on every transport.
    #[arg(long, conflicts_with_all = ["pid", "synthetic"])]
    file: Option<std::path::PathBuf>,
    /// Serve this process's memory (process_vm_readv): live over tcp and shm, a copy taken at
    /// start over udp.
    #[arg(long, conflicts_with = "synthetic")]
    pid: Option<i32>,
    /// Address range START-END (hex, 0x optional) of --pid; repeatable; default: its writable
    /// private mappings from /proc/PID/maps.
    #[arg(long = "range", requires = "pid", value_parser = parse_range)]
    ranges: Vec<(u64, u64)>,
    /// Stop the process (SIGSTOP) while serving it; SIGCONT on exit.
    #[arg(long, requires = "pid")]
    stop: bool,
    /// Serve this many bytes of synthetic data held in memory (used by `lazy bench`).
    #[arg(long)]
    synthetic: Option<usize>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Transport.
    #[arg(long, value_enum, default_value = "tcp")]
    transport: ServeTransport,
    /// Serve Prometheus metrics (reads of the source) at http://ADDR/metrics; no token: bind
    /// it to loopback or a private network.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("range `{s}`: expected START-END"))?;
    let hex = |x: &str| {
        u64::from_str_radix(x.trim_start_matches("0x"), 16)
            .map_err(|_| format!("range `{s}`: `{x}` is not hex"))
    };
    let (a, b) = (hex(a)?, hex(b)?);
    if b <= a {
        return Err(format!("range `{s}`: END must be above START"));
    }
    Ok((a, b - a))
}

/// Bench transports.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchTransport {
    /// Served from memory in the same process (the userfaultfd floor).
    Local,
    /// TCP page server.
    Tcp,
    /// RC READ over RoCEv2 datagrams (remora-fabric).
    Udp,
    /// RC READ over the fabric's shm transport.
    Shm,
}

/// Arguments of `remora lazy bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// Transport.
    #[arg(long, value_enum, default_value = "local")]
    transport: BenchTransport,
    /// Fault unit in bytes.
    #[arg(long, default_value_t = 4096, value_parser = parse_page_size)]
    page_size: usize,
    /// Faults per trial.
    #[arg(long, default_value_t = 1000)]
    faults: usize,
    /// Trials.
    #[arg(long, default_value_t = 50)]
    trials: usize,
    /// Access pattern: seq or random.
    #[arg(long, default_value = "random")]
    pattern: Pattern,
    /// Prefetch: none, next:N, adaptive.
    #[arg(long, default_value = "none")]
    prefetch: Prefetch,
    /// Resolution mode: thread, thread:N or sigbus.
    #[arg(long, default_value = "sigbus")]
    mode: Mode,
    /// Measure a running `remora lazy serve` at this address (tcp, udp or shm); without it
    /// the bench starts a private page server of synthetic data.
    #[arg(long)]
    connect: Option<SocketAddr>,
    /// Over shm, fetch every unit with an RC READ instead of mapping the server's source.
    #[arg(long)]
    shm_read: bool,
    /// Who drives the client's queue pairs (udp, shm): poll (the faulting thread receives its
    /// READ response itself) or thread (the fabric's receive thread). Default: poll on udp,
    /// thread on shm. The page server keeps its receive thread.
    #[arg(long, value_name = "poll|thread")]
    progress: Option<Progress>,
    /// Background push during each trial (the server streams the rest while faults go first).
    #[arg(long)]
    push: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn parse_page_size(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|_| format!("page size `{s}`"))?;
    if !n.is_power_of_two() || !(4096..=2 << 20).contains(&n) {
        return Err(format!(
            "page size {n}: a power of two from 4096 to 2097152"
        ));
    }
    Ok(n)
}

/// Runs a lazy subcommand.
pub fn run(c: Cmd) -> Result<()> {
    match c {
        Cmd::Serve(a) => serve(a),
        Cmd::Bench(a) => bench_cmd(a),
    }
}

/// Pseudo-random, never-zero bytes (so no page short-cuts as a zero page).
fn synthetic(n: usize) -> Vec<u8> {
    let mut x = 0x9e3779b97f4a7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as u8) | 1
        })
        .collect()
}

fn serve(a: ServeArgs) -> Result<()> {
    let src: Arc<dyn PageSource> = match (&a.file, a.pid, a.synthetic) {
        (Some(f), _, _) => {
            // FileSource's error names the path (regression: a missing --file was reported
            // twice, once by this context and once by the library).
            Arc::new(FileSource::open(f).context("lazy serve")?)
        }
        (None, Some(pid), _) => Arc::new(
            ProcessSource::new(pid, &a.ranges, a.stop)
                .with_context(|| format!("serve pid {pid}"))?,
        ),
        (None, None, Some(n)) => Arc::new(MemorySource::new(synthetic(n))),
        _ => bail!("lazy serve: give --file, --pid or --synthetic"),
    };
    if src.is_empty() {
        bail!("lazy serve: the source is empty");
    }
    let counted = Arc::new(metrics::Counted::new(src));
    let src: Arc<dyn PageSource> = counted.clone();
    // Bound before the first stdout line, so that a parent that read it can scrape at once.
    let _metrics = match a.metrics {
        Some(addr) => {
            let name = match a.transport {
                ServeTransport::Tcp => "tcp",
                ServeTransport::Udp => "udp",
                ServeTransport::Shm => "shm",
            };
            let reg = Arc::new(metrics::metrics(counted, name));
            let srv = remora_http::metrics::serve_metrics(addr, reg)
                .with_context(|| format!("--metrics {addr}"))?;
            tracing::info!("metrics on http://{}/metrics", srv.local_addr());
            Some(srv)
        }
        None => None,
    };
    let describe = src.describe();
    if let Some(t) = fabric_transport(a.transport) {
        // One-sided: clients READ the registered source (a file mapped live, others copied).
        let server = FabricServer::bind(a.listen, &*src, t).context("lazy serve")?;
        println!("listening on {}", server.local_addr());
        std::io::stdout().flush().ok();
        let what = if src.file().is_some() {
            "live mapping"
        } else if src.process().is_some() && t == Transport::Shm {
            "clients read the process live; READs get a copy taken at start"
        } else {
            "copy taken at start"
        };
        tracing::info!("serving {describe} over {t} ({what})");
        server.run();
        return Ok(());
    }
    let server = PageServer::bind(a.listen, src).context("lazy serve")?;
    let addr = server.local_addr()?;
    // The first stdout line is the address (`lazy bench` reads it).
    println!("listening on {addr}");
    std::io::stdout().flush().ok();
    tracing::info!("serving {describe}");
    server.run();
    Ok(())
}

fn fabric_transport(t: ServeTransport) -> Option<Transport> {
    match t {
        ServeTransport::Tcp => None,
        ServeTransport::Udp => Some(Transport::Udp),
        ServeTransport::Shm => Some(Transport::Shm),
    }
}

/// A page server child process; killed when dropped.
struct ServerChild(std::process::Child, SocketAddr);

impl Drop for ServerChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_server(bytes: usize, transport: &str) -> Result<ServerChild> {
    let exe = std::env::current_exe().context("find the remora executable")?;
    let mut child = std::process::Command::new(exe)
        .args([
            "lazy",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--transport",
            transport,
        ])
        .arg("--synthetic")
        .arg(bytes.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("start the page server")?;
    let out = child.stdout.take().context("server stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(out)
        .read_line(&mut line)
        .context("read the server's address")?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok());
    match addr {
        Some(addr) => Ok(ServerChild(child, addr)),
        None => {
            let _ = child.kill();
            bail!("page server did not start (said `{}`)", line.trim())
        }
    }
}

fn bench_cmd(a: BenchArgs) -> Result<()> {
    let bytes = a
        .faults
        .checked_mul(a.page_size)
        .context("--faults x --page-size overflows")?;
    if a.faults == 0 || a.trials == 0 {
        bail!("--faults and --trials must be at least 1");
    }
    if let (Some(p), BenchTransport::Local | BenchTransport::Tcp) = (a.progress, a.transport) {
        bail!(
            "--progress {p} sets how the fabric's queue pairs are driven: it applies to \
             --transport udp and shm"
        );
    }
    if a.connect.is_some() && a.transport == BenchTransport::Local {
        bail!(
            "--connect measures a running page server: give its transport too \
             (--transport tcp, udp or shm)"
        );
    }
    let mut _child = None;
    let mut shm_path: Option<&str> = None;
    let mut progress: Option<Progress> = None;
    let fetcher: Arc<dyn PageFetcher> = match a.transport {
        BenchTransport::Local => Arc::new(LocalFetcher::memory(Arc::new(MemorySource::new(
            synthetic(bytes),
        )))),
        BenchTransport::Tcp | BenchTransport::Udp | BenchTransport::Shm => {
            let name = match a.transport {
                BenchTransport::Udp => "udp",
                BenchTransport::Shm => "shm",
                _ => "tcp",
            };
            let addr = match a.connect {
                Some(addr) => addr,
                None => {
                    // Regression (lazy_bench_without_connect_says_it_starts_its_own_server):
                    // a running `lazy serve` was ignored without a word.
                    eprintln!(
                        "lazy bench: starting a private {name} page server with {bytes} bytes of \
                         synthetic data; to measure a running `remora lazy serve`, pass \
                         --connect ADDR (the address it prints)"
                    );
                    let c = spawn_server(bytes, name)?;
                    let addr = c.1;
                    _child = Some(c);
                    addr
                }
            };
            let fabric = |t: Transport| {
                let p = a
                    .progress
                    .unwrap_or_else(|| FabricFetcher::default_progress(t));
                FabricFetcher::connect_with(addr, t, p)
                    .with_context(|| format!("connect to page server {addr} over {t}"))
            };
            match a.transport {
                BenchTransport::Udp => {
                    let f = fabric(Transport::Udp)?;
                    progress = Some(f.progress());
                    Arc::new(f)
                }
                BenchTransport::Shm => {
                    let f = fabric(Transport::Shm)?;
                    progress = Some(f.progress());
                    let f = if a.shm_read { f.without_mapping() } else { f };
                    if !a.shm_read && !f.is_mapped() {
                        tracing::warn!("the server's source could not be mapped: using READs");
                    }
                    shm_path = Some(if f.is_mapped() { "mapped" } else { "read" });
                    Arc::new(f)
                }
                _ => Arc::new(
                    TcpFetcher::connect(addr, Duration::from_secs(5))
                        .with_context(|| format!("connect to page server {addr}"))?,
                ),
            }
        }
    };
    let cfg = bench::Config {
        unit: a.page_size,
        faults: a.faults,
        trials: a.trials,
        pattern: a.pattern,
        prefetch: a.prefetch,
        mode: a.mode,
        push: a.push,
    };
    let r = bench::run(fetcher, &cfg).context("lazy bench")?;
    let mode = match a.mode {
        Mode::Sigbus => "sigbus".to_string(),
        Mode::Thread { handlers } => format!("thread:{handlers}"),
    };
    if a.json {
        let v = serde_json::json!({
            "transport": r.transport,
            "page_size": a.page_size,
            "faults": a.faults,
            "trials": a.trials,
            "pattern": format!("{:?}", a.pattern).to_lowercase(),
            "prefetch": a.prefetch.to_string(),
            "mode": mode,
            "push": a.push,
            "mean_us": r.mean_us,
            "std_us": r.std_us,
            "p50_us": r.p50_us,
            "p99_us": r.p99_us,
            "trial_std_us": r.trial_std_us,
            "scan_ms": r.scan_ms,
            "memcpy_ms": r.memcpy_ms,
            "memcpy_fresh_ms": r.memcpy_fresh_ms,
            "shm_path": shm_path,
            "progress": progress.map(|p| p.to_string()),
            "faults_per_trial": r.faults_per_trial,
            "kernel_fault_us": r.kernel_fault_us,
            "bare_sigbus_fault_us": r.bare_sigbus_fault_us,
            "bare_install_ms": r.bare_install_ms,
        });
        println!("{v}");
    } else {
        let progress = progress.map_or(String::new(), |p| format!(" progress {p}"));
        println!(
            "{} {} B {:?} prefetch {} mode {}{}: {:.2} ± {:.2} µs per access \
             (p50 {:.2}, p99 {:.2}); {:.0} faults/trial; scan {:.2} ms vs local memcpy {:.2} ms \
             ({:.2} ms into fresh pages)",
            r.transport,
            a.page_size,
            a.pattern,
            a.prefetch,
            mode,
            progress,
            r.mean_us,
            r.std_us,
            r.p50_us,
            r.p99_us,
            r.faults_per_trial,
            r.scan_ms,
            r.memcpy_ms,
            r.memcpy_fresh_ms
        );
    }
    Ok(())
}
