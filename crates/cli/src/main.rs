//! `remora`: the command-line program. Thin glue: each area's subcommands live in their own module
//! and call the public API of the crates below.
use clap::{Parser, Subcommand};

mod daq;
mod fabric;
mod kv;
mod lazy;

/// remora: one-sided RDMA-style transfers, remote page faults and detector data processing.
#[derive(Parser)]
#[command(name = "remora", version, about, propagate_version = true)]
struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One-sided transfers over RoCEv2 datagrams, shared memory or TCP.
    #[command(subcommand)]
    Fabric(fabric::Cmd),
    /// A memcached-compatible cache (`remora kv serve <memcached flags>`).
    #[command(subcommand)]
    Kv(kv::Cmd),
    /// Memory that faults its pages in from a page server (userfaultfd), and the page server.
    #[command(subcommand)]
    Lazy(lazy::Cmd),
    /// JUNGFRAU detector processing (synthetic data, conversion, integration).
    #[command(subcommand)]
    Daq(daq::Cmd),
    /// Whole-system benchmarks by area.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Runs the end-to-end demonstration (`make demo`).
    Demo,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Same as `remora fabric bench`.
    Fabric(fabric::BenchArgs),
    /// JUNGFRAU processing: each stage and the chained pipeline, GB/s of raw input.
    Jungfrau(daq::BenchArgs),
    /// Same as `remora lazy bench` (remote page-fault latency, OPERA's micro-benchmark).
    Lazy(lazy::BenchArgs),
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match cli.cmd {
        Cmd::Fabric(c) => fabric::run(c),
        Cmd::Kv(c) => kv::run(c),
        Cmd::Lazy(c) => lazy::run(c),
        Cmd::Bench(BenchCmd::Fabric(a)) => fabric::bench(a),
        Cmd::Bench(BenchCmd::Jungfrau(a)) => daq::bench(a),
        Cmd::Bench(BenchCmd::Lazy(a)) => lazy::run(lazy::Cmd::Bench(a)),
        Cmd::Daq(c) => daq::run(c),
        Cmd::Demo => fabric::demo(),
    }
}
