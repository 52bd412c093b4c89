//! `remora fabric ...`: serve and bench.
use clap::{Args, Subcommand};

/// Fabric subcommands.
#[derive(Subcommand)]
pub enum Cmd {
    /// Runs a responder.
    Serve,
    /// Runs a benchmark.
    Bench(BenchArgs),
}

/// Arguments of `remora fabric bench`.
#[derive(Args)]
pub struct BenchArgs {}

pub fn run(_c: Cmd) -> anyhow::Result<()> {
    anyhow::bail!("fabric: work in progress")
}
pub fn bench(_a: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("fabric: work in progress")
}
pub fn demo() -> anyhow::Result<()> {
    anyhow::bail!("demo: work in progress")
}
