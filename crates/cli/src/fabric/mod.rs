//! `remora fabric ...`: a responder (`serve`), perftest-shaped benchmarks (`bench`) and a
//! two-process demonstration of every transport (`demo`).
use std::net::SocketAddr;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand, ValueEnum};
use remora_fabric::{QpType, Transport};

mod bench;
mod demo;
mod serve;

pub use bench::bench;

/// Fabric subcommands.
#[derive(Subcommand)]
pub enum Cmd {
    /// Runs a responder: registers a region and serves one-sided WRITE/READ and SEND on it
    /// for every peer that connects, over udp, shm or tcp (the peer chooses).
    Serve(ServeArgs),
    /// Runs a benchmark against a responder (starts its own on loopback without --connect).
    Bench(BenchArgs),
    /// Two processes, 8 MiB written with WRITE-with-immediate and read back on each transport.
    Demo,
}

/// Arguments of `remora fabric serve`.
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    /// TCP address for connection setup.
    #[arg(long, default_value = "127.0.0.1:7471")]
    pub listen: SocketAddr,
    /// Size of the served region in bytes.
    #[arg(long, default_value_t = 64 << 20, value_parser = parse_size)]
    pub region_size: usize,
    /// Largest path MTU this side accepts (udp).
    #[arg(long, default_value_t = 4096)]
    pub mtu: usize,
    /// udp receive port (0: 4791 if free, else any).
    #[arg(long, default_value_t = 0)]
    pub udp_port: u16,
    /// Lock the region in memory (mlock) instead of serving it on demand.
    #[arg(long)]
    pub pinned: bool,
    /// Skip the ICRC check of received datagrams.
    #[arg(long)]
    pub no_icrc_check: bool,
    /// Exit after this many connections have come and gone (0: serve forever).
    #[arg(long, default_value_t = 0)]
    pub connections: usize,
    /// Queue pairs connected at once at most; further connections are closed at once and
    /// counted (as are those beyond 64 setups in progress).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub max_connections: u64,
}

/// The benchmarks, named after perftest's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// WRITE bandwidth (streaming, `--tx-depth` outstanding).
    WriteBw,
    /// WRITE latency: ping-pong of WRITE-with-immediate, one-way time.
    WriteLat,
    /// READ latency: round trip of one READ.
    ReadLat,
    /// SEND bandwidth into receive buffers the responder keeps posting.
    SendBw,
}

/// Arguments of `remora fabric bench`.
#[derive(Args, Clone, Debug)]
pub struct BenchArgs {
    /// Which test.
    #[arg(value_enum)]
    pub test: Test,
    /// Transport: udp (RoCEv2 datagrams), shm (same host) or tcp (framed stream).
    #[arg(long, default_value = "udp", value_parser = transport_parser())]
    pub transport: Transport,
    /// Message size in bytes (suffixes K, M, G allowed).
    #[arg(long, default_value = "65536", value_parser = parse_size)]
    pub size: usize,
    /// Messages (or round trips) to time.
    #[arg(long, default_value_t = 5000)]
    pub iters: usize,
    /// Path MTU (udp).
    #[arg(long, default_value_t = 4096)]
    pub mtu: usize,
    /// Queue pair type: rc (reliable) or uc (unreliable).
    #[arg(long, default_value = "rc", value_parser = qp_parser())]
    pub qp: QpType,
    /// Responder's setup address; without it a responder process is started on loopback.
    #[arg(long)]
    pub connect: Option<SocketAddr>,
    /// Outstanding requests for bandwidth tests.
    #[arg(long, default_value_t = 128)]
    pub tx_depth: usize,
    /// Untimed warm-up messages.
    #[arg(long, default_value_t = 100)]
    pub warmup: usize,
    /// Skip the ICRC check of received datagrams.
    #[arg(long)]
    pub no_icrc_check: bool,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `--transport`: the spellings `Transport::from_str` accepts, listed in `--help`.
fn transport_parser() -> impl TypedValueParser<Value = Transport> {
    PossibleValuesParser::new(["udp", "shm", "tcp"]).try_map(|s| s.parse::<Transport>())
}

/// `--qp`: the spellings `QpType::from_str` accepts, listed in `--help`.
fn qp_parser() -> impl TypedValueParser<Value = QpType> {
    PossibleValuesParser::new(["rc", "uc"]).try_map(|s| s.parse::<QpType>())
}

/// Runs a fabric subcommand.
pub fn run(c: Cmd) -> anyhow::Result<()> {
    match c {
        Cmd::Serve(a) => serve::serve(a),
        Cmd::Bench(a) => bench(a),
        Cmd::Demo => demo::demo(),
    }
}

/// Parses `4096`, `64K`, `1M`, `2G` (binary multiples).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1usize << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1 << 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("invalid size {s:?} (e.g. 4096, 64K, 1M)"))
}

/// What the client asks the responder to do besides serving one-sided requests; the first
/// byte of the client's private data, followed by the client's region description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Serve one-sided requests only.
    Passive = 0,
    /// Answer each WRITE-with-immediate with a WRITE-with-immediate of the same size back.
    Pong = 1,
    /// Keep receive buffers posted for SENDs.
    Sink = 2,
    /// Print each WRITE-with-immediate arrival (the demo).
    Report = 3,
}

impl Role {
    pub(crate) fn from_byte(b: u8) -> Option<Role> {
        Some(match b {
            0 => Role::Passive,
            1 => Role::Pong,
            2 => Role::Sink,
            3 => Role::Report,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_suffixes_and_reject_garbage() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
