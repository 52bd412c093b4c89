//! The adapter between protocols and storage: runs parsed requests against the [`Store`],
//! counts them, and appends replies to a connection's output buffer.
//!
//! This module holds the settings, the shared [`Engine`], the per-connection [`Session`] and the
//! dispatch loop ([`process`]); each protocol's executor has its own module (`text_cmds`,
//! `meta_cmds`, `binary_cmds`), and `stats` builds the `stats` groups.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::conns::{ConnEntry, ConnTable};
use crate::out::Out;
use crate::prefix::{PrefixOp, PrefixStats};
use crate::protocol::binary::{self, op, status};
use crate::protocol::meta::{self, MetaCommand, MetaFlags, MetaKind};
use crate::protocol::reply::{put_i64, put_u64, put_value_header, Fail, Reply};
use crate::protocol::text::{self, Command, GetKind, StoreCmd};
use crate::protocol::Limits;
use crate::stats::{inc, ConnCounters, Counters};
use crate::storage::{
    ArithOutcome, DeleteOutcome, ReadOpts, Store, StoreConfig, StoreMode, StoreOutcome,
};

mod binary_cmds;
mod meta_cmds;
mod stats;
mod text_cmds;

use binary_cmds::{put_bin_error, run_binary};
use meta_cmds::run_meta;
use text_cmds::run_text;

/// The version string this server reports.
pub const VERSION: &str = concat!("1.6.18-remora-", env!("CARGO_PKG_VERSION"));

/// Settings echoed by `stats settings` and used by the handler.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `-m` in bytes.
    pub maxbytes: usize,
    /// `-c`.
    pub maxconns: usize,
    /// `-p`.
    pub tcpport: u16,
    /// `-U`.
    pub udpport: u16,
    /// `-t`.
    pub threads: usize,
    /// `-I`.
    pub item_size_max: usize,
    /// `-C` not given.
    pub cas_enabled: bool,
    /// `-M` not given.
    pub evictions: bool,
    /// `-A`.
    pub shutdown_enabled: bool,
    /// `-F` not given.
    pub flush_enabled: bool,
    /// `-R`.
    pub reqs_per_event: usize,
    /// `-b`.
    pub backlog: i32,
    /// `-s`.
    pub domain_socket: Option<String>,
    /// `-a` (octal).
    pub umask: u32,
    /// `-B`.
    pub binding_protocol: String,
    /// `-l`.
    pub interfaces: Vec<String>,
    /// `-v` count: 2 or more echoes every text command to stderr, like memcached's `-vv`.
    pub verbose: u8,
    /// `-f`.
    pub growth_factor: f64,
    /// `-n`.
    pub chunk_size: usize,
    /// `-D`: the prefix delimiter of `stats detail` (giving it also turns detail on).
    pub prefix_delimiter: u8,
    /// `stats detail` recording from the start (`-D`).
    pub detail_enabled: bool,
    /// `-o track_sizes`: `stats sizes` keeps memcached's item size histogram.
    pub track_sizes: bool,
    /// `-k`: lock all pages in memory.
    pub lock_memory: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            maxbytes: 64 << 20,
            maxconns: 1024,
            tcpport: 11211,
            udpport: 0,
            threads: 4,
            item_size_max: 1 << 20,
            cas_enabled: true,
            evictions: true,
            shutdown_enabled: false,
            flush_enabled: true,
            reqs_per_event: 20,
            backlog: 1024,
            domain_socket: None,
            umask: 0o700,
            binding_protocol: "auto-negotiate".into(),
            interfaces: Vec::new(),
            verbose: 0,
            growth_factor: 1.25,
            chunk_size: 48,
            prefix_delimiter: b':',
            detail_enabled: false,
            track_sizes: false,
            lock_memory: false,
        }
    }
}

/// Shared server state: the store, clocks, settings and counters.
pub struct Engine {
    /// The items.
    pub store: Store,
    /// Settings.
    pub settings: Settings,
    /// Connection counters.
    pub conns: ConnCounters,
    /// `stats detail` per-prefix counters.
    pub prefixes: PrefixStats,
    /// Sockets listed by `stats conns`.
    pub conn_table: ConnTable,
    started: Instant,
    process_started: i64,
    workers: Mutex<Vec<Arc<Counters>>>,
    verbosity: AtomicU64,
    /// Set by `shutdown` (with `-A`): servers stop.
    pub shutdown: std::sync::atomic::AtomicBool,
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Engine {
    /// Creates the engine for these settings.
    pub fn new(settings: Settings) -> Engine {
        let store = Store::new(StoreConfig {
            mem_limit: settings.maxbytes,
            item_max: settings.item_size_max,
            no_evict: !settings.evictions,
            use_cas: settings.cas_enabled,
            track_sizes: settings.track_sizes,
        });
        let prefixes = PrefixStats::new(settings.prefix_delimiter);
        prefixes.set_enabled(settings.detail_enabled);
        Engine {
            store,
            settings,
            conns: ConnCounters::default(),
            prefixes,
            conn_table: ConnTable::default(),
            started: Instant::now(),
            // Relative clock starts at 2 so 0 and 1 keep their special meanings.
            process_started: unix_now() - 2,
            workers: Mutex::new(Vec::new()),
            verbosity: AtomicU64::new(0),
            shutdown: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Seconds on the relative clock.
    pub fn now(&self) -> u32 {
        self.started.elapsed().as_secs() as u32 + 2
    }

    /// Parser limits.
    pub fn limits(&self) -> Limits {
        Limits {
            item_max: self.settings.item_size_max,
            max_line: 2048,
            max_get_line: 1 << 20,
        }
    }

    /// A fresh counter set for one worker thread.
    pub fn register_worker(&self) -> Arc<Counters> {
        let c = Arc::new(Counters::default());
        self.lock_workers().push(c.clone());
        c
    }

    fn lock_workers(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Counters>>> {
        match self.workers.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn exptime(&self, e: i64, now: u32) -> u32 {
        Store::exptime(e, now, self.process_started)
    }
}

/// Which protocol a connection speaks (decided by its first byte, like memcached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// Not yet known.
    Unknown,
    /// ASCII (text and meta).
    Text,
    /// Binary.
    Binary,
}

/// Per-connection protocol state.
pub struct Session {
    /// Protocol in use.
    pub proto: Proto,
    /// Bytes of a refused value still to discard.
    pub swallow: usize,
    /// This worker's counters.
    pub counters: Arc<Counters>,
    /// Connection number shown in `-vv` output.
    pub id: u64,
    /// This connection's `stats conns` entry (TCP connections only).
    pub conn: Option<Arc<ConnEntry>>,
    /// Requests run per [`process`] call before the connection yields to others (`-R`).
    pub max_reqs: usize,
    /// Keys of the current text multiget already answered: a multiget stops when the output
    /// reaches its limit and resumes from here once it drained.
    get_done: usize,
    scratch: Vec<u8>,
}

/// What the connection should do after processing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Bytes of input used.
    pub consumed: usize,
    /// Close after flushing output.
    pub close: bool,
    /// Stopped after [`Session::max_reqs`] requests with input left: run again later, after
    /// other connections had their turn (counted in `conn_yields`).
    pub yielded: bool,
}

impl Session {
    /// A new session using a worker's counters.
    pub fn new(counters: Arc<Counters>) -> Session {
        Session {
            proto: Proto::Unknown,
            swallow: 0,
            counters,
            id: 0,
            conn: None,
            max_reqs: usize::MAX,
            get_done: 0,
            scratch: Vec::new(),
        }
    }
}

/// Processes as many whole requests from `input` as there are, appending replies to `out`.
/// Stops once `out` holds `out_limit` unsent bytes (back-pressure on slow readers): between
/// requests, and inside a text multiget, which leaves its line unconsumed and resumes with the
/// next key when called again on the same input.
pub fn process(
    eng: &Engine,
    s: &mut Session,
    input: &[u8],
    out: &mut Out,
    out_limit: usize,
) -> Outcome {
    run(eng, s, input, out, out_limit, false)
}

/// Runs the first request of `input` (after any bytes left to swallow) with no output limit:
/// a UDP reply must be whole before its datagrams can be numbered.
pub fn process_one(eng: &Engine, s: &mut Session, input: &[u8], out: &mut Out) -> Outcome {
    run(eng, s, input, out, usize::MAX, true)
}

/// What to do after one text command.
enum Next {
    Go,
    Close,
    /// A multiget stopped at the output limit: run the same line again later.
    Later,
}

fn run(
    eng: &Engine,
    s: &mut Session,
    input: &[u8],
    out: &mut Out,
    out_limit: usize,
    one: bool,
) -> Outcome {
    let lim = eng.limits();
    let now = eng.now();
    let mut pos = 0;
    let mut close = false;
    let mut yielded = false;
    let mut reqs = 0usize;
    if let Some(e) = &s.conn {
        e.busy(now);
    }
    let vv = eng.settings.verbose >= 2;
    while pos < input.len() && out.len() < out_limit {
        if one && reqs > 0 {
            break;
        }
        if reqs >= s.max_reqs {
            // memcached's -R: yield with input left so one pipelining client cannot hog the
            // worker thread.
            yielded = true;
            inc(&s.counters.conn_yields);
            break;
        }
        if s.swallow > 0 {
            let n = s.swallow.min(input.len() - pos);
            s.swallow -= n;
            pos += n;
            continue;
        }
        if s.proto == Proto::Unknown {
            s.proto = if input[pos] == binary::MAGIC_REQ {
                Proto::Binary
            } else {
                Proto::Text
            };
            if vv {
                let name = if s.proto == Proto::Binary {
                    "binary"
                } else {
                    "ascii"
                };
                eprintln!("{}: Client using the {name} protocol", s.id);
            }
            // -B ascii / -B binary: a client speaking the other protocol is dropped.
            let bound = eng.settings.binding_protocol.as_str();
            if (bound == "ascii" && s.proto == Proto::Binary)
                || (bound == "binary" && s.proto == Proto::Text)
            {
                close = true;
                break;
            }
        }
        let buf = &input[pos..];
        if s.proto == Proto::Binary {
            match binary::parse(buf, &lim) {
                binary::Parse::Incomplete => break,
                binary::Parse::Close => {
                    close = true;
                    break;
                }
                binary::Parse::TooLarge(h, body) => {
                    inc(&s.counters.store_too_large);
                    put_bin_error(out, &h, status::E2BIG);
                    reqs += 1;
                    pos += binary::HEADER_LEN;
                    s.swallow = body;
                }
                binary::Parse::Done(req, n) => {
                    pos += n;
                    reqs += 1;
                    if run_binary(eng, s, &req, now, out) {
                        close = true;
                        break;
                    }
                }
            }
        } else {
            match text::parse(buf, &lim) {
                text::Parse::Incomplete => break,
                text::Parse::Close => {
                    // memcached closes without a reply.
                    close = true;
                    break;
                }
                text::Parse::Done(cmd, n) => {
                    // A resumed multiget was echoed when it started.
                    if vv && s.get_done == 0 {
                        let l = text::line(buf).map_or(&buf[..0], |(l, _)| l);
                        eprintln!("<{} {}", s.id, String::from_utf8_lossy(l));
                    }
                    let echo = vv && echoes_reply(&cmd);
                    let mark = out.mark();
                    match run_text(eng, s, cmd, now, out, out_limit) {
                        Next::Later => break,
                        Next::Close => {
                            pos += n;
                            close = true;
                            break;
                        }
                        Next::Go => {
                            pos += n;
                            reqs += 1;
                        }
                    }
                    if echo {
                        echo_reply(s.id, out, mark);
                    }
                }
            }
        }
    }
    crate::stats::add(&s.counters.bytes_read, pos as u64);
    if let Some(e) = &s.conn {
        e.idle();
    }
    Outcome {
        consumed: pos,
        close,
        yielded,
    }
}

/// Whether `-vv` prints a command's reply line as memcached does (`>fd STORED`): gets print
/// their own lines, meta commands other than `mn` print none.
fn echoes_reply(cmd: &Command<'_>) -> bool {
    match cmd {
        Command::Get { .. } => false,
        Command::Meta(m) => matches!(m, MetaCommand::Noop),
        _ => true,
    }
}

/// `-vv`: prints a reply that is one line (multi-line ones, such as `stats`, memcached does
/// not print either).
fn echo_reply(id: u64, out: &Out, mark: crate::out::Mark) {
    let Some(t) = out.text_since(mark) else {
        return;
    };
    if let Some(line) = t.strip_suffix(b"\r\n") {
        if !line.contains(&b'\n') {
            eprintln!(">{id} {}", String::from_utf8_lossy(line));
        }
    }
}

/// Writes a reply unless `noreply`; under `-vv` (`vv` = the connection's id) a suppressed
/// reply is printed as memcached prints it (`>fd NOREPLY STORED`).
fn reply(vv: Option<u64>, out: &mut Out, noreply: bool, r: Reply) {
    if !noreply {
        r.write(out);
    } else if let Some(id) = vv {
        eprintln!(">{id} NOREPLY {}", r.text());
    }
}
