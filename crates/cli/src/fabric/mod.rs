//! `remora fabric ...`: a responder (`serve`), perftest-shaped benchmarks (`bench`) and a
//! two-process demonstration of every transport (`demo`).
use std::net::SocketAddr;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand, ValueEnum};
use remora_fabric::{FaultMode, PageInPolicy, PartConfig, Progress, QpType, Transport};

mod bench;
mod demo;
mod part_bench;
mod serve;

pub use bench::bench;
pub use part_bench::{part_bench, PartBenchArgs};

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
    /// udp receive port (0: a listener takes 4791 when free, else any; a connecting side any).
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
    /// Serve Prometheus metrics (the counters SIGUSR1 prints) at http://ADDR/metrics; no
    /// token: bind it to loopback or a private network.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    #[command(flatten)]
    pub part: PartArgs,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// Who drives the queue pairs, shared by `serve` and `bench`.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct ProgressArgs {
    /// `thread`: a background receive thread per udp device (or per tcp/shm queue pair);
    /// `poll`: none on the data path, the thread that waits for completions receives, answers
    /// and runs the timers itself.
    #[arg(long, default_value = "thread", value_parser = PossibleValuesParser::new(["poll", "thread"]).try_map(|s| s.parse::<Progress>()))]
    pub progress: Progress,
    /// Wait for completions by busy polling (lowest latency, one core per waiting thread)
    /// instead of sleeping until something arrives.
    #[arg(long)]
    pub spin: bool,
    /// tcp with `--progress poll`: a busy-polling round holds a lone ACK back until the
    /// caller's next call, so that its next request carries it (one send per message in a
    /// ping-pong instead of two). A caller that stops calling leaves its peer's last requests
    /// unacknowledged, as in UCX; off by default.
    #[arg(long)]
    pub lazy_ack: bool,
}

impl ProgressArgs {
    /// The same flags, for a child `remora fabric serve`.
    pub fn to_args(self) -> Vec<String> {
        let mut v = vec!["--progress".into(), self.progress.to_string()];
        if self.spin {
            v.push("--spin".into());
        }
        if self.lazy_ack {
            v.push("--lazy-ack".into());
        }
        v
    }
}

/// Page-fault handling of a queue pair (PART), shared by `serve` and `bench`.
#[derive(Args, Clone, Debug)]
pub struct PartArgs {
    /// Where faults on non-resident pages of on-demand regions are taken (udp RC): `part` (the
    /// receive path never blocks: hold NAK, page-in worker, ERR) or `inline` (the receive thread
    /// takes the fault itself).
    #[arg(long, default_value = "part", value_parser = PossibleValuesParser::new(["part", "inline"]).try_map(|s| s.parse::<FaultMode>()))]
    pub faults: FaultMode,
    /// Pages brought in per fault: pio (the packet's), pi4 (its --page-in-block), pia (the rest
    /// of the message).
    #[arg(long, default_value = "pia", value_parser = PossibleValuesParser::new(["pio", "pi4", "pia"]).try_map(|s| s.parse::<PageInPolicy>()))]
    pub page_in: PageInPolicy,
    /// Block size of `--page-in pi4` (suffixes K, M).
    #[arg(long, default_value = "16K", value_parser = parse_size)]
    pub page_in_block: usize,
    /// Requester: resend this long after a fault NAK without waiting for the ERR (`100us`,
    /// `500us`, `1ms`, ...), or `off` to wait for the ERR.
    #[arg(long, default_value = "off", value_parser = parse_timeout)]
    pub fault_timeout: FaultTimeout,
    /// Responder: packets that may wait behind a page-in wave (PIA, PI4) instead of being sent
    /// again (their payloads are copied out: at most this many MTUs per queue pair while a wave
    /// runs); 0 stops the sender at every fault, as in the paper.
    #[arg(long, default_value_t = remora_fabric::DEFAULT_REORDER)]
    pub reorder: u32,
}

/// `--fault-timeout`'s value: `None` is `off`. An alias, because clap would take a field
/// spelled `Option<..>` for an optional flag and expect the parser to return the inner type.
pub type FaultTimeout = Option<std::time::Duration>;

/// The clap defaults: PART with PIA, 16 KiB blocks, no fault timeout.
impl Default for PartArgs {
    fn default() -> PartArgs {
        let d = PartConfig::default();
        PartArgs {
            faults: d.mode,
            page_in: d.policy,
            page_in_block: d.block,
            fault_timeout: d.fault_timeout,
            reorder: d.reorder,
        }
    }
}

impl PartArgs {
    /// The queue-pair setting.
    pub fn config(&self) -> PartConfig {
        PartConfig {
            mode: self.faults,
            policy: self.page_in,
            block: self.page_in_block.max(1),
            fault_timeout: self.fault_timeout,
            reorder: self.reorder,
        }
    }

    /// The same flags, for a child `remora fabric serve`.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--faults".into(),
            match self.faults {
                FaultMode::Part => "part".into(),
                FaultMode::Inline => "inline".into(),
            },
            "--page-in".into(),
            self.page_in.to_string(),
            "--page-in-block".into(),
            self.page_in_block.to_string(),
            "--fault-timeout".into(),
            match self.fault_timeout {
                None => "off".into(),
                Some(d) => format!("{}ns", d.as_nanos()),
            },
            "--reorder".into(),
            self.reorder.to_string(),
        ]
    }
}

/// Parses `off`, `100us`, `500us`, `1ms`, `2s` or `250ns`.
pub fn parse_timeout(s: &str) -> Result<Option<std::time::Duration>, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("off") || s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid timeout {s:?} (e.g. 100us, 1ms, off)"))?;
    let d = match unit {
        "ns" => std::time::Duration::from_nanos(n),
        "us" | "µs" => std::time::Duration::from_micros(n),
        "ms" => std::time::Duration::from_millis(n),
        "s" => std::time::Duration::from_secs(n),
        _ => {
            return Err(format!(
                "invalid timeout unit in {s:?} (ns, us, ms, s or off)"
            ))
        }
    };
    if d.is_zero() {
        return Err("a fault timeout of 0 would resend at once; use off or a duration".into());
    }
    Ok(Some(d))
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
    #[command(flatten)]
    pub part: PartArgs,
    /// Progress of both sides (the responder the bench starts gets the same flags).
    #[command(flatten)]
    pub progress: ProgressArgs,
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
    use super::{parse_size, parse_timeout};
    use std::time::Duration;

    #[test]
    fn fault_timeouts_parse_with_units_and_off() {
        assert_eq!(parse_timeout("off"), Ok(None));
        assert_eq!(parse_timeout("100us"), Ok(Some(Duration::from_micros(100))));
        assert_eq!(parse_timeout("1ms"), Ok(Some(Duration::from_millis(1))));
        assert_eq!(parse_timeout("250ns"), Ok(Some(Duration::from_nanos(250))));
        assert!(parse_timeout("0us").is_err());
        assert!(parse_timeout("10 parsecs").is_err());
        assert!(parse_timeout("us").is_err());
    }

    #[test]
    fn sizes_parse_with_binary_suffixes_and_reject_garbage() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
