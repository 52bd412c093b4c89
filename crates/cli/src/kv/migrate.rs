//! `remora kv migrate`: the operator's command for post-copy live migration.
use std::time::Duration;

use anyhow::{bail, Context};
use remora_kv::migrate::client::{self, Printer, Progress};

/// `remora kv migrate` arguments.
#[derive(clap::Args)]
pub struct Args {
    /// Where clients go: the target's memcached address (HOST:PORT), started with
    /// `remora kv serve ... --migrate-from SOURCE`.
    #[arg(long)]
    to: String,
    /// The running source's memcached address (it must run with `-A`).
    #[arg(long, default_value = "127.0.0.1:11211")]
    source: String,
    /// A file holding the secret the target shows (`--migrate-secret-file` there), for a
    /// target started first; without it (or `--secret`) the source makes one up, printed
    /// here for the target.
    #[arg(long, value_name = "FILE", conflicts_with = "secret")]
    secret_file: Option<std::path::PathBuf>,
    /// The secret itself (other local users see it in `ps`; prefer --secret-file).
    #[arg(long, value_name = "S")]
    secret: Option<String>,
    /// Seconds to wait for the target to ask before disarming.
    #[arg(long, default_value_t = 60)]
    wait: u64,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `remora kv migrate`.
pub fn run(a: Args) -> anyhow::Result<()> {
    let mut printer = Printer::new();
    let mut report = |p: &Progress| {
        if let Some(l) = printer.line(p) {
            eprintln!("{l}");
        }
        std::ops::ControlFlow::Continue(())
    };
    let chosen = match (&a.secret_file, &a.secret) {
        (Some(f), _) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("--secret-file {}", f.display()))?
                .trim_end_matches(['\r', '\n'])
                .to_string(),
        ),
        (None, s) => s.clone(),
    };
    let armed = client::arm(&a.source, &a.to, chosen.as_deref())
        .map_err(|e| anyhow::anyhow!("remora kv migrate: {e}"))?;
    if chosen.is_none() {
        eprintln!(
            "[migrate] armed; start the target with --migrate-from {} and this secret \
             (one use) in --migrate-secret-file:\n{}",
            a.source, armed.secret
        );
    }
    let r = armed.follow(Duration::from_secs(a.wait), &mut report);
    match r {
        Ok(s) => {
            if a.json {
                println!(
                    "{{\"source\": \"{}\", \"target\": \"{}\", \"bytes\": {}, \"downtime_ms\": {}, \"total_s\": {:.3}}}",
                    a.source,
                    a.to,
                    s.bytes,
                    s.downtime_ms.map_or("null".into(), |d| format!("{d:.3}")),
                    s.total_s
                );
            } else {
                println!(
                    "migrated {} to {}: switch-over {}, full copy of {} MiB after {:.2} s",
                    a.source,
                    a.to,
                    s.downtime_ms
                        .map_or("unknown".into(), |d| format!("{d:.2} ms")),
                    s.bytes >> 20,
                    s.total_s
                );
            }
            Ok(())
        }
        Err(e) => bail!("remora kv migrate: {e}"),
    }
}
