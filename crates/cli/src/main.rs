//! `remora`: the command-line program. Thin glue: each area's subcommands live in their own module
//! and call the public API of the crates below.
use clap::{Parser, Subcommand};

mod daq;
mod fabric;
mod kv;
mod lazy;
mod logging;
mod matching;
mod plot;
mod resize;

/// remora: one-sided RDMA-style transfers, remote page faults and detector data processing.
#[derive(Parser)]
#[command(name = "remora", version, about, propagate_version = true)]
struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Log lines as text, or as one JSON object per line (for log collectors).
    #[arg(
        long,
        value_enum,
        default_value_t,
        global = true,
        env = "REMORA_LOG_FORMAT",
        value_name = "FORMAT"
    )]
    log_format: logging::LogFormat,
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
    /// kv GETs by one-sided READs of `remora kv serve --one-sided` (shm or udp) against
    /// memcached's single GETs: GETs/s and server CPU per GET, same client threads and keys.
    KvOnesided(kv::bench::onesided::OnesidedArgs),
}

fn main() -> std::process::ExitCode {
    // `remora resize` takes ImageMagick's single-dash options (`-resize 50%`): see resize::im_args.
    let cli = Cli::parse_from(resize::im_args(std::env::args_os()));
    let log = logging::Logging {
        verbose: cli.verbose,
        format: cli.log_format,
    };
    // `kv serve` takes its options from memcached's command line, `--log-format` among them:
    // it sets logging up once it has read them.
    if !matches!(cli.cmd, Cmd::Kv(kv::Cmd::Serve { .. })) {
        log.init();
    }
    match run(cli.cmd, log) {
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

fn run(cmd: Cmd, log: logging::Logging) -> anyhow::Result<()> {
    match cmd {
        Cmd::Fabric(c) => fabric::run(c),
        Cmd::Kv(c) => kv::run(c, log),
        Cmd::Lazy(c) => lazy::run(c),
        Cmd::Bench(BenchCmd::Fabric(a)) => fabric::bench(a),
        Cmd::Bench(BenchCmd::Part(a)) => fabric::part_bench(a),
        Cmd::Bench(BenchCmd::Jungfrau(a)) => daq::bench(a),
        Cmd::Bench(BenchCmd::Lazy(a)) => lazy::run(lazy::Cmd::Bench(a)),
        Cmd::Bench(BenchCmd::Acquisition(a)) => daq::bench_acquisition(a),
        Cmd::Bench(BenchCmd::Match(a)) => matching::bench(a),
        Cmd::Bench(BenchCmd::Resize(a)) => resize::bench(a),
        Cmd::Bench(BenchCmd::Migrate(a)) => kv::bench::run(a),
        Cmd::Bench(BenchCmd::KvOnesided(a)) => kv::bench::onesided::run(a),
        Cmd::Match(a) => matching::run(a),
        Cmd::Resize(a) => resize::run(*a),
        Cmd::Daq(c) => daq::run(c),
        Cmd::Demo { out } => daq::demo(&out),
    }
}

#[cfg(test)]
mod tests {
    use super::report;

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
