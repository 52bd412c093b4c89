//! `remora`: the command-line program. Thin glue: each area's subcommands live in their own module
//! and call the public API of the crates below.
use clap::{Parser, Subcommand};

mod daq;
mod fabric;
mod kv;
mod lazy;
mod matching;
mod resize;

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
    /// Exact SIFT descriptor matching of keypoint files (MicMac `mm3d Ann`), one pair or a batch.
    Match(matching::MatchArgs),
    /// JPEG/PNG resizing with ImageMagick's options and geometry (`remora resize IN -resize
    /// 500x500 -o OUT`), batches on all cores, and the HTTP resize service (`remora resize serve`).
    Resize(Box<resize::ResizeArgs>),
    /// Whole-system benchmarks by area.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Runs the end-to-end demonstration (`make demo`): a 4M acquisition into an HDF5 file.
    Demo {
        /// Folder for the demo's configuration and output file.
        #[arg(long, default_value = ".")]
        out: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Same as `remora fabric bench`.
    Fabric(fabric::BenchArgs),
    /// Page-fault-tolerant transfers (PART): pin/touch vs PIO/PI4/PIA, fault timeouts, fault
    /// frequency, one fault taken apart, head-of-line blocking (udp RC, both ends in-process).
    Part(fabric::PartBenchArgs),
    /// JUNGFRAU processing: each stage and the chained pipeline, GB/s of raw input.
    Jungfrau(daq::BenchArgs),
    /// Same as `remora lazy bench` (remote page-fault latency, OPERA's micro-benchmark).
    Lazy(lazy::BenchArgs),
    /// The whole acquisition (emulator → fabric → receiver → pipeline) and the pipeline alone.
    Acquisition(daq::AcqBenchArgs),
    /// Descriptor matching: remora vs OpenCV BFMatcher and FLANN and FAISS, same data and threads.
    Match(matching::BenchArgs),
    /// JPEG resizing: remora vs vipsthumbnail and ImageMagick, same files and cores, with SSIM.
    Resize(resize::BenchArgs),
    /// Post-copy live migration of a populated cache (`remora kv serve --migrate-from`) against
    /// stop-and-copy (dump and reload): downtime a client sees, time to full copy.
    Migrate(kv::bench::BenchArgs),
}

/// Logs go to stderr, coloured only when stderr is a terminal and `NO_COLOR` is unset or empty
/// (<https://no-color.org/>), so that piped or captured logs carry no escape sequences.
fn init_logging(verbose: u8) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    // wgpu warns at every device opening that host-visible storage buffers are slow on a
    // discrete GPU: remora asks for them on purpose (results written where the host reads
    // them, only the bytes a frame produced), so that notice stays out of the default log.
    let default = format!("{default},wgpu_core::instance=error");
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(use_colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .init();
}

/// Whether log lines may carry ANSI colours.
fn use_colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

fn main() -> std::process::ExitCode {
    // `remora resize` takes ImageMagick's single-dash options (`-resize 50%`): see resize::im_args.
    let cli = Cli::parse_from(resize::im_args(std::env::args_os()));
    init_logging(cli.verbose);
    match run(cli.cmd) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {}", report(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, joined by ": ", leaving out a cause whose text is
/// already there: library errors that print their source in their own message and also return
/// it from `source()` would otherwise be reported twice (regression:
/// missing_file_is_reported_once_with_its_path).
fn report(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if line.contains(&msg) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&msg);
    }
    line
}

fn run(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Fabric(c) => fabric::run(c),
        Cmd::Kv(c) => kv::run(c),
        Cmd::Lazy(c) => lazy::run(c),
        Cmd::Bench(BenchCmd::Fabric(a)) => fabric::bench(a),
        Cmd::Bench(BenchCmd::Part(a)) => fabric::part_bench(a),
        Cmd::Bench(BenchCmd::Jungfrau(a)) => daq::bench(a),
        Cmd::Bench(BenchCmd::Lazy(a)) => lazy::run(lazy::Cmd::Bench(a)),
        Cmd::Bench(BenchCmd::Acquisition(a)) => daq::bench_acquisition(a),
        Cmd::Bench(BenchCmd::Match(a)) => matching::bench(a),
        Cmd::Bench(BenchCmd::Resize(a)) => resize::bench(a),
        Cmd::Bench(BenchCmd::Migrate(a)) => kv::bench::run(a),
        Cmd::Match(a) => matching::run(a),
        Cmd::Resize(a) => resize::run(*a),
        Cmd::Daq(c) => daq::run(c),
        Cmd::Demo { out } => daq::demo(&out),
    }
}

#[cfg(test)]
mod tests {
    use super::{report, use_colour};
    use std::ffi::OsString;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some(OsString::new())));
        assert!(!use_colour(true, Some(OsString::from("1"))));
        assert!(!use_colour(false, None));
    }

    #[test]
    fn report_leaves_out_a_cause_already_in_the_message() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        #[derive(Debug)]
        struct Wraps(std::io::Error);
        impl std::fmt::Display for Wraps {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "open /x: {}", self.0)
            }
        }
        impl std::error::Error for Wraps {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Wraps(io)).context("lazy serve");
        assert_eq!(report(&e), "lazy serve: open /x: No such file");
    }
}
