//! `remora daq serve` (the control service with its REST API and live view) and the served form
//! of a one-shot run (`remora daq run --serve`, `remora demo`).
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use remora_daq::config::Config;
use remora_daq::control::http::Server;
use remora_daq::control::{Service, ServiceOptions, State};
use remora_daq::manager::Summary;

/// Arguments of `remora daq serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// A configuration to load at start (the service is then `configured`).
    config: Option<PathBuf>,
    /// Address of the HTTP API and live view (loopback unless you ask otherwise).
    #[arg(long, default_value = "127.0.0.1:8750")]
    listen: SocketAddr,
    /// Token that mutating calls must carry as `Authorization: Bearer TOKEN` (also from the
    /// environment variable REMORA_DAQ_TOKEN).
    #[arg(long, env = "REMORA_DAQ_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Shortest time between two preview images taken from the pipeline (ms).
    #[arg(long, default_value_t = 500)]
    preview_ms: u64,
}

fn options(preview_ms: u64) -> ServiceOptions {
    ServiceOptions {
        preview_every: Duration::from_millis(preview_ms.max(10)),
        ..ServiceOptions::default()
    }
}

fn spawn(svc: &Service, token: Option<String>, listen: SocketAddr) -> anyhow::Result<Server> {
    if !listen.ip().is_loopback() && token.is_none() {
        tracing::warn!(
            "listening on {listen} without a token: anyone who can reach it can start runs and write files as this user (see --token)"
        );
    }
    Server::spawn(svc.clone(), token, listen).with_context(|| format!("listening on {listen}"))
}

pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let svc = Service::new(options(a.preview_ms));
    if let Some(p) = &a.config {
        let cfg = Config::load(p)?;
        svc.configure(cfg)?;
    }
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).context("signal handlers")?;
    let server = spawn(&svc, a.token, a.listen)?;
    println!("serving on http://{}", server.local_addr());
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
/// address goes to standard error (standard output stays for the summary).
pub fn run_served(
    cfg: Config,
    listen: SocketAddr,
    token: Option<String>,
) -> anyhow::Result<Summary> {
    let svc = Service::new(options(500));
    let frames = cfg.acquisition.frames;
    svc.configure(cfg)?;
    let server = spawn(&svc, token, listen)?;
    eprintln!("live view: http://{}/", server.local_addr());
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
