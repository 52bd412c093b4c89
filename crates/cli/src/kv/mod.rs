//! `remora kv …`: the memcached-compatible cache.
use std::path::Path;

use anyhow::Context;
use clap::Subcommand;

pub mod bench;
mod metrics;
mod migrate;

/// `remora kv` subcommands.
#[derive(Subcommand)]
pub enum Cmd {
    /// Serves memcached's protocols; takes memcached's flags (`-p 11211 -m 64 -t 4 -U 0 …`,
    /// `--port=11211 --daemon …`).
    // memcached's own -h and -V (memcached's version line), not clap's.
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Serve {
        /// memcached command-line flags, passed through unchanged.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Moves a running cache to another server by post-copy live migration: arms the source
    /// (`--source`) to hand its arena to the server started with `--migrate-from SOURCE`,
    /// sending clients to `--to`, and follows the copy to its end.
    Migrate(migrate::Args),
}

/// Runs a `remora kv` subcommand; `log` is set up here for `serve` (once its own
/// `--log-format` is read), by the caller for the others.
pub fn run(cmd: Cmd, log: crate::logging::Logging) -> anyhow::Result<()> {
    match cmd {
        Cmd::Serve { args } => serve(&raw_serve_args().unwrap_or(args), log),
        Cmd::Migrate(a) => migrate::run(a),
    }
}

/// The arguments after `kv serve`, taken from the raw command line: the global `-v` flag
/// would otherwise swallow memcached's `-v`/`-vv`.
fn raw_serve_args() -> Option<Vec<String>> {
    let all: Vec<String> = std::env::args().collect();
    let kv = all.iter().position(|a| a == "kv")?;
    let serve = kv + 1 + all[kv + 1..].iter().position(|a| a == "serve")?;
    Some(all[serve + 1..].to_vec())
}

fn serve(args: &[String], mut log: crate::logging::Logging) -> anyhow::Result<()> {
    let parsed = remora_kv::Config::parse(args);
    if let Ok(Some(f)) = parsed.as_ref().map(|c| c.log_format) {
        log.format = f.into();
    }
    log.init();
    let mut cfg = match parsed {
        Ok(c) => c,
        Err(e) => {
            // memcached prints the bare message and exits with EX_USAGE.
            eprintln!("{e}");
            std::process::exit(64);
        }
    };
    if let Some(info) = &cfg.info {
        println!("{info}");
        return Ok(());
    }
    for w in &cfg.warnings {
        tracing::warn!("{w}");
        if cfg.verbose > 0 {
            eprintln!("{w}");
        }
    }
    if cfg.enable_coredumps && remora_kv::daemon::enable_coredumps().is_err() {
        // memcached's wording and exit code (EX_OSERR).
        eprintln!("failed to ensure corefile creation");
        std::process::exit(71);
    }
    // Before anything starts a thread: fork copies only the calling one.
    let ready = cfg.daemonize.then(|| daemonize(&mut cfg)).transpose()?;
    if cfg.settings.lock_memory {
        // After the fork (locks are not inherited); memcached's wording, and like memcached it
        // carries on unlocked.
        if let Err(e) = remora_kv::server::lock_memory() {
            // strerror(3) text, without Rust's " (os error N)".
            let e = e.to_string();
            let msg = e.split(" (os error").next().unwrap_or(&e);
            eprintln!("warning: -k invalid, mlockall() failed: {msg}");
        }
    }
    let server = match remora_kv::Server::start(&cfg) {
        Ok(s) => s,
        Err(remora_kv::ServerError::RootWithoutUser) => {
            eprintln!("can't run as root without the -u switch");
            std::process::exit(64);
        }
        Err(e) => return Err(e).context("starting remora kv"),
    };
    if let Some(p) = &cfg.pid_file {
        let running = remora_kv::daemon::write_pid_file(Path::new(p))
            .with_context(|| format!("writing pid file {p}"))?;
        if let Some(pid) = running {
            eprintln!("WARNING: The pid file contained the following (running) pid: {pid}");
        }
    }
    tracing::info!("remora kv: worker I/O loop {:?}", server.io_driver);
    // After the fork (-d): the daemon serves the metrics; memcached_exporter's port is 9150.
    let _metrics = match cfg.metrics {
        Some(addr) => {
            let reg = std::sync::Arc::new(metrics::metrics(server.cache.clone()));
            let srv = remora_http::metrics::serve_metrics(addr, reg)
                .with_context(|| format!("--metrics {addr}"))?;
            tracing::info!("metrics on http://{}/metrics", srv.local_addr());
            if cfg.verbose > 0 {
                eprintln!("metrics on http://{}/metrics", srv.local_addr());
            }
            Some(srv)
        }
        None => None,
    };
    if cfg.verbose > 0 {
        for a in &server.tcp_addrs {
            eprintln!("server listening (tcp) on {a}");
        }
        for a in &server.udp_addrs {
            eprintln!("server listening (udp) on {a}");
        }
    }
    handle_signals(&server)?;
    if let Some(ready) = ready {
        ready.serving().context("daemon: detaching")?;
    }
    let cache = server.cache.clone();
    server.join();
    if let (true, Some(p)) = (cfg.daemonize, &cfg.pid_file) {
        // As memcached: a daemon removes its pid file when it stops (not when killed).
        let _ = std::fs::remove_file(p);
    }
    if cache.migration.state() == remora_kv::migrate::State::Done {
        eprintln!("remora kv: the cache moved away (migration complete); stopped");
    }
    Ok(())
}

/// `-d`: forks into the background (see `remora_kv::daemon`). The daemon leaves its working
/// directory once it serves (unless `-r`), so the paths it uses after that are made absolute
/// first: the pid file it removes at exit and the memory file a graceful stop saves.
fn daemonize(cfg: &mut remora_kv::Config) -> anyhow::Result<remora_kv::daemon::Ready> {
    if let Some(p) = &cfg.pid_file {
        cfg.pid_file = Some(std::path::absolute(p)?.to_string_lossy().into_owned());
    }
    if let Some(f) = &cfg.settings.memory_file {
        cfg.settings.memory_file = Some(std::path::absolute(f)?);
    }
    let detach = remora_kv::daemon::Detach {
        keep_cwd: cfg.enable_coredumps,
        keep_stdio: cfg.verbose > 0,
    };
    remora_kv::daemon::daemonize(detach).context("daemon")
}

/// memcached's signals: SIGUSR1 stops gracefully (a `-e` memory file is saved for a warm
/// restart); SIGTERM and SIGINT stop at once.
fn handle_signals(server: &remora_kv::Server) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    let stopper = server.stopper();
    let mut signals = signal_hook::iterator::Signals::new([SIGUSR1, SIGTERM, SIGINT])
        .context("signal handlers")?;
    std::thread::Builder::new()
        .name("kv-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                if sig == SIGUSR1 {
                    eprintln!("Gracefully stopping");
                    stopper.stop_gracefully();
                } else {
                    eprintln!("Signal handled: {}.", signal_name(sig));
                    stopper.stop();
                }
            }
        })
        .context("signal thread")?;
    Ok(())
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        signal_hook::consts::SIGINT => "Interrupt",
        signal_hook::consts::SIGTERM => "Terminated",
        _ => "Signal",
    }
}
