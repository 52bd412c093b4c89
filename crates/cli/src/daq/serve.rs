//! `remora daq serve` (the control service with its REST API and live view) and the served form
//! of a one-shot run (`remora daq run --serve`, `remora demo`).
//!
//! What a client may make the service do is bounded here, at the start: a token on every API
//! call (random unless given), files only beneath the directories named (`--data-dir`,
//! `--input-dir`), a memory budget for what a configuration implies, a connection cap and a
//! header timeout; root on a non-loopback address only when asked for (`--allow-root`).
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use remora_daq::access::{Access, Files, MemoryBudget};
use remora_daq::config::Config;
use remora_daq::control::http::{new_token, Limits, Server, ServerOptions};
use remora_daq::control::{Service, ServiceOptions, State};
use remora_daq::manager::Summary;

/// Arguments of `remora daq serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// A configuration to load at start (the service is then `configured`). It is the
    /// operator's: its paths are taken as written (relative ones from its folder), unlike those
    /// of configurations sent to the service.
    config: Option<PathBuf>,
    /// Address of the HTTP API and live view (loopback unless you ask otherwise).
    #[arg(long, default_value = "127.0.0.1:8750")]
    listen: SocketAddr,
    /// Token every API call must carry (`Authorization: Bearer TOKEN` or `?token=TOKEN`);
    /// default: a random one, printed with the page's address. Also from REMORA_DAQ_TOKEN.
    #[arg(
        long,
        env = "REMORA_DAQ_TOKEN",
        hide_env_values = true,
        conflicts_with = "no_token"
    )]
    token: Option<String>,
    /// No token: anyone who can reach the address may configure and start runs. Refused on a
    /// non-loopback address.
    #[arg(long)]
    no_token: bool,
    /// Serve on a non-loopback address while running as root (configurations from the network
    /// then run as root; an unprivileged user is the better choice).
    #[arg(long)]
    allow_root: bool,
    /// Directory beneath which configurations sent to the service write their output
    /// (`output.file` is relative to it). Default: `data` in the working directory, when it
    /// exists; without one, such configurations write no files.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Directory beneath which configurations sent to the service read calibration (gain,
    /// pedestal), geometry, PONI and source files. Default: the data directory.
    #[arg(long, value_name = "DIR")]
    input_dir: Option<PathBuf>,
    /// Most memory a configuration may imply (frames, rings, calibration, processing), in bytes,
    /// or with a suffix K, M, G or T (powers of 1024). Default: half of this host's memory.
    #[arg(long, value_name = "BYTES", value_parser = remora_daq::access::budget::parse_bytes)]
    memory_budget: Option<u64>,
    /// Connections open at once; the next one is answered 503 and closed.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
    /// Seconds a client has to send a request's headers before its connection is closed.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS", value_parser = parse_seconds)]
    header_timeout: f64,
    /// Shortest time between two preview images taken from the pipeline (ms).
    #[arg(long, default_value_t = 500)]
    preview_ms: u64,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 3600.0 => Ok(v),
        _ => Err(format!("{s:?}: seconds, above 0 and at most 3600")),
    }
}

fn options(preview_ms: u64, access: Access) -> ServiceOptions {
    ServiceOptions {
        preview_every: Duration::from_millis(preview_ms.max(10)),
        access,
        ..ServiceOptions::default()
    }
}

/// The token to serve with: the one given (never empty), a fresh one, or none with `no_token`
/// on loopback. Refuses a root process on a non-loopback address without `allow_root`.
fn token_for(
    token: Option<String>,
    no_token: bool,
    allow_root: bool,
    listen: SocketAddr,
) -> anyhow::Result<Option<String>> {
    let loopback = listen.ip().is_loopback();
    let token = match token {
        Some(t) if t.is_empty() => bail!(
            "--token (or REMORA_DAQ_TOKEN) is empty: that would lock every call out. Give a \
             token, leave it out for a random one, or use --no-token on a loopback address"
        ),
        Some(t) => Some(t),
        None if no_token => {
            if !loopback {
                bail!(
                    "--no-token on {listen}: anyone who can reach it could start runs and write \
                     files as this user. Use a token (the default), or listen on loopback"
                );
            }
            None
        }
        None => Some(new_token().context("making a token")?),
    };
    if !loopback && remora_daq::control::running_as_root() && !allow_root {
        bail!(
            "refusing to serve on {listen} as root: configurations from the network would run as \
             root. Run the service as an unprivileged user, listen on loopback, or pass \
             --allow-root if you mean it"
        );
    }
    Ok(token)
}

/// The page's address, with the token as Jupyter prints it.
fn page_url(addr: SocketAddr, token: Option<&str>) -> String {
    match token {
        Some(t) => format!("http://{addr}/?token={t}"),
        None => format!("http://{addr}/"),
    }
}

fn spawn(
    svc: &Service,
    listen: SocketAddr,
    token: Option<String>,
    limits: Limits,
) -> anyhow::Result<Server> {
    if !listen.ip().is_loopback() {
        tracing::warn!(
            "listening on {listen}: plain HTTP, so the token crosses the network in clear; \
             serve on a trusted network or behind a TLS proxy"
        );
    }
    let opts = ServerOptions { token, limits };
    Server::spawn(svc.clone(), listen, opts).with_context(|| format!("listening on {listen}"))
}

/// The file rule for configurations sent to the service.
fn files(data_dir: Option<&Path>, input_dir: Option<&Path>) -> anyhow::Result<Files> {
    let data = match data_dir {
        Some(d) => {
            if !d.is_dir() {
                bail!("--data-dir {}: not a directory", d.display());
            }
            Some(d.to_path_buf())
        }
        None => {
            let d = PathBuf::from("data");
            if d.is_dir() {
                Some(d)
            } else {
                tracing::warn!(
                    "no ./data directory and no --data-dir: configurations sent to the service \
                     can name no output file"
                );
                None
            }
        }
    };
    let input = match input_dir {
        Some(d) => {
            if !d.is_dir() {
                bail!("--input-dir {}: not a directory", d.display());
            }
            Some(d.to_path_buf())
        }
        None => data.clone(),
    };
    Files::beneath(data.as_deref(), input.as_deref()).context("opening the data directories")
}

pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let token = token_for(a.token, a.no_token, a.allow_root, a.listen)?;
    let budget = a
        .memory_budget
        .map_or_else(MemoryBudget::half_of_host, MemoryBudget::new);
    let files = files(a.data_dir.as_deref(), a.input_dir.as_deref())?;
    let access = Access {
        files: files.clone(),
        memory: Some(budget),
    };
    let svc = Service::new(options(a.preview_ms, access));
    if let Some(p) = &a.config {
        let mut cfg = Config::load(p)?;
        // The operator's file keeps its paths; its memory is checked like any other.
        cfg.access.memory = Some(budget);
        svc.configure(cfg)
            .with_context(|| format!("loading {}", p.display()))?;
    }
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).context("signal handlers")?;
    let limits = Limits {
        max_connections: usize::try_from(a.max_connections).unwrap_or(usize::MAX),
        header_timeout: Duration::from_secs_f64(a.header_timeout),
    };
    let server = spawn(&svc, a.listen, token.clone(), limits)?;
    let dir = |d: Option<&Path>| d.map_or("none".into(), |p| p.display().to_string());
    tracing::info!(
        "data directory {}, input directory {}, memory budget {budget}, at most {} connections",
        dir(files.data_dir()),
        dir(files.input_dir()),
        limits.max_connections
    );
    println!(
        "serving on {}",
        page_url(server.local_addr(), token.as_deref())
    );
    std::io::stdout().flush().ok();
    if let Some(sig) = signals.forever().next() {
        tracing::info!("signal {sig}: stopping");
    }
    if matches!(svc.status().state, State::Running | State::Pedestal) {
        let _ = svc.stop();
        let st = svc.wait(Duration::from_secs(30));
        if let Some(m) = st.message {
            eprintln!("{m}");
        }
    }
    server.shutdown();
    Ok(())
}

/// Runs `cfg` once inside this process while serving the live view at `listen`; the page's
/// address (with its token: the one given, or a random one) goes to standard error (standard
/// output stays for the summary). Configurations sent to this service name no files.
pub fn run_served(
    cfg: Config,
    listen: SocketAddr,
    token: Option<String>,
    allow_root: bool,
) -> anyhow::Result<Summary> {
    let token = token_for(token, false, allow_root, listen)?;
    let svc = Service::new(options(500, ServiceOptions::default().access));
    let frames = cfg.acquisition.frames;
    svc.configure(cfg)?;
    let server = spawn(&svc, listen, token.clone(), Limits::default())?;
    eprintln!(
        "live view: {}",
        page_url(server.local_addr(), token.as_deref())
    );
    svc.start()?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(frames);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} frames {msg}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        b
    });
    let st = loop {
        let st = svc.wait(Duration::from_millis(200));
        if let Some(b) = &bar {
            let c = &st.counters;
            b.set_position(c.frames_complete + c.frames_partial);
            b.set_message(format!(
                "{} kept, {} overruns, {:.1} frames/s",
                c.kept, c.overruns, st.rates.fps
            ));
        }
        if !matches!(st.state, State::Running | State::Pedestal) {
            break st;
        }
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    server.shutdown();
    if st.state == State::Error {
        bail!("{}", st.message.unwrap_or_else(|| "the run failed".into()));
    }
    svc.summary().context("the run left no summary")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_token_and_no_token_off_loopback_are_refused() {
        let lo: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap();
        assert!(token_for(Some(String::new()), false, true, lo).is_err());
        assert!(token_for(None, true, true, any).is_err());
        assert_eq!(token_for(None, true, false, lo).unwrap(), None);
        assert_eq!(
            token_for(Some("t".into()), false, false, lo)
                .unwrap()
                .as_deref(),
            Some("t")
        );
        assert_eq!(
            token_for(None, false, false, lo).unwrap().unwrap().len(),
            32
        );
    }
}
