//! The adapter between protocols and storage: runs parsed requests against the [`Store`],
//! counts them, and appends replies to a connection's output buffer.

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

    /// Sums counters over workers.
    pub fn totals(&self) -> Vec<(&'static str, u64)> {
        let w = self.lock_workers();
        let mut acc: Vec<(&'static str, u64)> = Counters::default().snapshot();
        for c in w.iter() {
            for (a, (_, v)) in acc.iter_mut().zip(c.snapshot()) {
                a.1 += v;
            }
        }
        acc
    }

    fn stats_general(&self, now: u32) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = Vec::new();
        let mut put = |k: &str, val: String| v.push((k.to_string(), val));
        let (ut, st) = rusage();
        put("pid", std::process::id().to_string());
        put("uptime", (now - 2).to_string());
        put("time", unix_now().to_string());
        put("version", VERSION.to_string());
        put(
            "pointer_size",
            (8 * std::mem::size_of::<usize>()).to_string(),
        );
        put("rusage_user", ut);
        put("rusage_system", st);
        put("max_connections", self.settings.maxconns.to_string());
        put(
            "curr_connections",
            self.conns.curr.load(Relaxed).to_string(),
        );
        put(
            "total_connections",
            self.conns.total.load(Relaxed).to_string(),
        );
        put(
            "rejected_connections",
            self.conns.rejected.load(Relaxed).to_string(),
        );
        put(
            "connection_structures",
            self.conns.curr.load(Relaxed).to_string(),
        );
        let t = self.totals();
        let mut yields = 0;
        for (k, val) in &t {
            // Counted per worker like the others, but printed where memcached prints it.
            if *k == "conn_yields" {
                yields = *val;
                continue;
            }
            put(k, val.to_string());
        }
        put("limit_maxbytes", self.store.mem_limit().to_string());
        put("accepting_conns", "1".into());
        put("listen_disabled_num", "0".into());
        put("threads", self.settings.threads.to_string());
        put("conn_yields", yields.to_string());
        put("hash_power_level", "16".into());
        put("hash_bytes", "524288".into());
        put("hash_is_expanding", "0".into());
        let c = self.store.counters();
        put("bytes", c.bytes.to_string());
        put("curr_items", c.curr_items.to_string());
        put("total_items", c.total_items.to_string());
        put("expired_unfetched", c.expired_unfetched.to_string());
        put("evicted_unfetched", c.evicted_unfetched.to_string());
        put("evictions", c.evictions.to_string());
        put("reclaimed", c.reclaimed.to_string());
        v
    }

    fn stats_settings(&self) -> Vec<(String, String)> {
        let s = &self.settings;
        let yn = |b: bool| if b { "yes" } else { "no" }.to_string();
        let oo = |b: bool| if b { "on" } else { "off" }.to_string();
        vec![
            ("maxbytes".into(), self.store.mem_limit().to_string()),
            ("maxconns".into(), s.maxconns.to_string()),
            ("tcpport".into(), s.tcpport.to_string()),
            ("udpport".into(), s.udpport.to_string()),
            (
                "inter".into(),
                if s.interfaces.is_empty() {
                    "NULL".into()
                } else {
                    s.interfaces.join(",")
                },
            ),
            ("verbosity".into(), self.verbosity.load(Relaxed).to_string()),
            ("oldest".into(), "0".into()),
            ("evictions".into(), oo(s.evictions)),
            (
                "domain_socket".into(),
                s.domain_socket.clone().unwrap_or_else(|| "NULL".into()),
            ),
            ("umask".into(), format!("{:o}", s.umask)),
            ("growth_factor".into(), format!("{:.2}", s.growth_factor)),
            ("chunk_size".into(), s.chunk_size.to_string()),
            ("num_threads".into(), s.threads.to_string()),
            (
                "stat_key_prefix".into(),
                char::from(s.prefix_delimiter).to_string(),
            ),
            ("detail_enabled".into(), yn(self.prefixes.enabled())),
            ("reqs_per_event".into(), s.reqs_per_event.to_string()),
            ("cas_enabled".into(), yn(s.cas_enabled)),
            ("tcp_backlog".into(), s.backlog.to_string()),
            ("binding_protocol".into(), s.binding_protocol.clone()),
            ("auth_enabled_sasl".into(), "no".into()),
            ("item_size_max".into(), s.item_size_max.to_string()),
            ("maxconns_fast".into(), "yes".into()),
            ("hashpower_init".into(), "0".into()),
            ("slab_reassign".into(), "no".into()),
            ("lru_crawler".into(), "no".into()),
            ("lru_maintainer_thread".into(), "no".into()),
            ("temp_lru".into(), "no".into()),
            ("track_sizes".into(), yn(s.track_sizes)),
        ]
    }

    fn stats_items(&self) -> Vec<(String, String)> {
        // No slab classes: everything is reported as one class.
        let c = self.store.counters();
        if c.curr_items == 0 {
            return Vec::new();
        }
        vec![
            ("items:1:number".into(), c.curr_items.to_string()),
            ("items:1:evicted".into(), c.evictions.to_string()),
            (
                "items:1:evicted_unfetched".into(),
                c.evicted_unfetched.to_string(),
            ),
            (
                "items:1:expired_unfetched".into(),
                c.expired_unfetched.to_string(),
            ),
            ("items:1:reclaimed".into(), c.reclaimed.to_string()),
        ]
    }

    fn stats_slabs(&self) -> Vec<(String, String)> {
        let c = self.store.counters();
        vec![
            (
                "active_slabs".into(),
                u8::from(c.curr_items > 0).to_string(),
            ),
            ("total_malloced".into(), c.bytes.to_string()),
        ]
    }

    /// The stats lines for a group, or `None` for an unknown group.
    pub fn stats(&self, group: Option<&[u8]>) -> Option<Vec<(String, String)>> {
        let now = self.now();
        match group {
            None => Some(self.stats_general(now)),
            Some(b"settings") => Some(self.stats_settings()),
            Some(b"items") => Some(self.stats_items()),
            Some(b"slabs") => Some(self.stats_slabs()),
            Some(b"sizes") => Some(match self.store.sizes() {
                // memcached's histogram: item size rounded up to 32 bytes, non-zero buckets.
                Some(h) => h
                    .into_iter()
                    .map(|(size, n)| (size.to_string(), n.to_string()))
                    .collect(),
                // Without `-o track_sizes` memcached prints only this line.
                None => vec![("sizes_status".into(), "disabled".into())],
            }),
            Some(b"conns") => Some(self.conn_table.lines(now)),
            _ => None,
        }
    }
}

fn rusage() -> (String, String) {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    (
        format!("{}.{:06}", ru.ru_utime.tv_sec, ru.ru_utime.tv_usec),
        format!("{}.{:06}", ru.ru_stime.tv_sec, ru.ru_stime.tv_usec),
    )
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

/// Runs one text command.
fn run_text(
    eng: &Engine,
    s: &mut Session,
    cmd: Command<'_>,
    now: u32,
    out: &mut Out,
    out_limit: usize,
) -> Next {
    let vv = (eng.settings.verbose >= 2).then_some(s.id);
    let c = &*s.counters;
    match cmd {
        Command::Get {
            kind,
            exptime,
            keys,
        } => {
            let with_cas = matches!(kind, GetKind::Gets | GetKind::Gats);
            let touch = matches!(kind, GetKind::Gat | GetKind::Gats);
            let opts = ReadOpts {
                touch: touch.then_some(exptime),
                ..ReadOpts::default()
            };
            let exp = if touch { eng.exptime(exptime, now) } else { 0 };
            let skip = s.get_done;
            for (i, k) in text::keys(keys).enumerate().skip(skip) {
                if i > skip && out.len() >= out_limit {
                    // Output full: the rest is answered once it drained (the line stays
                    // unconsumed), so a client that does not read holds at most the limit.
                    s.get_done = i;
                    return Next::Later;
                }
                if !text::get_key_ok(k) {
                    s.get_done = 0;
                    Reply::Fail(Fail::BadFormat).write(out);
                    return Next::Go;
                }
                let hit = eng
                    .store
                    .get(k, now, opts, exp, |it| {
                        put_value_header(
                            out,
                            it.key,
                            it.flags,
                            it.value.len(),
                            with_cas.then_some(it.cas),
                        );
                        out.value(it.value, it.shared, it.key.len());
                        out.extend_from_slice(b"\r\n");
                    })
                    .is_some();
                if let (true, Some(id)) = (hit, vv) {
                    eprintln!(">{id} sending key {}", String::from_utf8_lossy(k));
                }
                eng.prefixes.record(k, PrefixOp::Get(hit));
                if touch {
                    inc(&c.cmd_touch);
                    inc(if hit { &c.touch_hits } else { &c.touch_misses });
                }
                inc(&c.cmd_get);
                inc(if hit { &c.get_hits } else { &c.get_misses });
            }
            s.get_done = 0;
            if let Some(id) = vv {
                eprintln!(">{id} END");
            }
            Reply::End.write(out);
        }
        Command::Store {
            cmd,
            key,
            flags,
            exptime,
            data,
            cas,
            noreply,
        } => {
            inc(&c.cmd_set);
            eng.prefixes.record(key, PrefixOp::Set);
            let mode = match cmd {
                StoreCmd::Set => StoreMode::Set,
                StoreCmd::Add => StoreMode::Add,
                StoreCmd::Replace => StoreMode::Replace,
                StoreCmd::Append => StoreMode::Append,
                StoreCmd::Prepend => StoreMode::Prepend,
                StoreCmd::Cas => StoreMode::Cas(cas),
            };
            let exp = eng.exptime(exptime, now);
            let r = match eng.store.store(mode, key, flags, exp, data, now) {
                StoreOutcome::Stored(_) => {
                    if cmd == StoreCmd::Cas {
                        inc(&c.cas_hits);
                    }
                    Reply::Stored
                }
                StoreOutcome::NotStored => Reply::NotStored,
                StoreOutcome::Exists => {
                    inc(&c.cas_badval);
                    Reply::Exists
                }
                StoreOutcome::NotFound => {
                    inc(&c.cas_misses);
                    Reply::NotFound
                }
                StoreOutcome::TooLarge => {
                    inc(&c.store_too_large);
                    Reply::Fail(Fail::TooLarge)
                }
                StoreOutcome::NoMemory => {
                    inc(&c.store_no_memory);
                    Reply::Fail(Fail::NoMemory)
                }
            };
            reply(vv, out, noreply, r);
        }
        Command::TooLarge {
            key,
            cmd,
            swallow,
            noreply,
            meta,
        } => {
            inc(&c.store_too_large);
            if !meta {
                // memcached counts a text store before it finds the value too large.
                eng.prefixes.record(key, PrefixOp::Set);
            }
            if matches!(cmd, StoreCmd::Set | StoreCmd::Cas) {
                eng.store.delete(key, now, None);
            }
            reply(vv, out, noreply, Reply::Fail(Fail::TooLarge));
            s.swallow = swallow;
        }
        Command::Delete { key, noreply } => {
            eng.prefixes.record(key, PrefixOp::Delete);
            let r = match eng.store.delete(key, now, None) {
                DeleteOutcome::Deleted => {
                    inc(&c.delete_hits);
                    Reply::Deleted
                }
                _ => {
                    inc(&c.delete_misses);
                    Reply::NotFound
                }
            };
            reply(vv, out, noreply, r);
        }
        Command::Arith {
            incr,
            key,
            delta,
            noreply,
        } => match eng.store.arith(key, incr, delta, now, None) {
            ArithOutcome::Value(v, _) => {
                inc(if incr { &c.incr_hits } else { &c.decr_hits });
                if !noreply {
                    put_u64(out, v);
                    out.extend_from_slice(b"\r\n");
                } else if let Some(id) = vv {
                    eprintln!(">{id} NOREPLY {v}");
                }
            }
            ArithOutcome::NotFound | ArithOutcome::Exists => {
                inc(if incr { &c.incr_misses } else { &c.decr_misses });
                reply(vv, out, noreply, Reply::NotFound);
            }
            ArithOutcome::NonNumeric => reply(vv, out, noreply, Reply::Fail(Fail::NonNumeric)),
        },
        Command::Touch {
            key,
            exptime,
            noreply,
        } => {
            inc(&c.cmd_touch);
            let hit = eng.store.touch(key, eng.exptime(exptime, now), now);
            inc(if hit { &c.touch_hits } else { &c.touch_misses });
            reply(
                vv,
                out,
                noreply,
                if hit { Reply::Touched } else { Reply::NotFound },
            );
        }
        Command::FlushAll { delay, noreply } => {
            if !eng.settings.flush_enabled {
                Reply::Fail(Fail::FlushDisabled).write(out);
                return Next::Go;
            }
            inc(&c.cmd_flush);
            if delay > 0 {
                eng.store
                    .flush(Some(eng.exptime(delay, now).saturating_sub(1)));
            } else {
                eng.store.flush(None);
            }
            reply(vv, out, noreply, Reply::Ok);
        }
        Command::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(VERSION.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Command::Verbosity { noreply } => reply(vv, out, noreply, Reply::Ok),
        Command::Quit => return Next::Close,
        Command::Shutdown => {
            if eng.settings.shutdown_enabled {
                eng.shutdown.store(true, Relaxed);
                return Next::Close;
            }
            Reply::Fail(Fail::ShutdownDisabled).write(out);
        }
        Command::CacheMemlimit { mb, noreply } => {
            match usize::try_from(mb)
                .ok()
                .and_then(|m| m.checked_mul(1 << 20))
            {
                Some(bytes) if bytes > 0 => {
                    eng.store.set_mem_limit(bytes, now);
                    reply(vv, out, noreply, Reply::Ok);
                }
                _ => reply(vv, out, noreply, Reply::Fail(Fail::BadFormat)),
            }
        }
        Command::Stats { arg, arg2 } => match arg {
            Some(b"reset") => {
                for w in eng.lock_workers().iter() {
                    w.reset();
                }
                eng.prefixes.clear();
                Reply::Reset.write(out);
            }
            Some(b"detail") => match arg2 {
                Some(b"on") | Some(b"off") => {
                    eng.prefixes.set_enabled(arg2 == Some(b"on"));
                    Reply::Ok.write(out)
                }
                Some(b"dump") => eng.prefixes.dump(out),
                _ => Reply::Fail(Fail::StatsDetailUsage).write(out),
            },
            _ => match eng.stats(arg) {
                Some(lines) => {
                    for (k, v) in lines {
                        out.extend_from_slice(b"STAT ");
                        out.extend_from_slice(k.as_bytes());
                        out.push(b' ');
                        out.extend_from_slice(v.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                    Reply::End.write(out);
                }
                None => Reply::Fail(Fail::Error).write(out),
            },
        },
        Command::Meta(m) => {
            inc(&c.cmd_meta);
            run_meta(eng, s, m, now, out);
        }
        Command::Fail(f) => Reply::Fail(f).write(out),
    }
    Next::Go
}

/// Appends the return flags the client asked for, in its order.
#[allow(clippy::too_many_arguments)]
fn meta_ret_flags(
    out: &mut Out,
    f: &MetaFlags<'_>,
    key_sent: &[u8],
    cas: u64,
    flags: u32,
    ttl: i64,
    size: usize,
    la: u32,
    hit_before: bool,
) {
    for tok in &f.raw[..f.n] {
        match tok[0] {
            b'c' => {
                out.extend_from_slice(b" c");
                put_u64(out, cas);
            }
            b'f' => {
                out.extend_from_slice(b" f");
                put_u64(out, flags as u64);
            }
            b'h' => out.extend_from_slice(if hit_before { b" h1" } else { b" h0" }),
            b'k' => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(key_sent);
            }
            b'l' => {
                out.extend_from_slice(b" l");
                put_u64(out, la as u64);
            }
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            b's' => {
                out.extend_from_slice(b" s");
                put_u64(out, size as u64);
            }
            b't' => {
                out.extend_from_slice(b" t");
                put_i64(out, ttl);
            }
            b'b' if f.raw[..f.n].iter().any(|t| t[0] == b'k') => out.extend_from_slice(b" b"),
            _ => {}
        }
    }
}

/// The return flags memcached 1.6.18 echoes on a miss: only `O`, `k` (and `b` with `k`).
fn meta_miss_flags(out: &mut Out, f: &MetaFlags<'_>, key_sent: &[u8]) {
    for tok in &f.raw[..f.n] {
        match tok[0] {
            b'k' => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(key_sent);
            }
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            b'b' if f.raw[..f.n].iter().any(|t| t[0] == b'k') => out.extend_from_slice(b" b"),
            _ => {}
        }
    }
}

fn ttl_left(exptime: u32, now: u32) -> i64 {
    if exptime == 0 {
        -1
    } else {
        exptime as i64 - now as i64
    }
}

fn run_meta(eng: &Engine, s: &mut Session, m: MetaCommand<'_>, now: u32, out: &mut Out) {
    let c = s.counters.clone();
    match m {
        MetaCommand::Noop => out.extend_from_slice(b"MN\r\n"),
        MetaCommand::Debug { key } => {
            let opts = ReadOpts {
                no_bump: true,
                ..ReadOpts::default()
            };
            let found = eng.store.get(key, now, opts, 0, |it| {
                out.extend_from_slice(b"ME ");
                out.extend_from_slice(key);
                out.extend_from_slice(b" exp=");
                put_i64(out, ttl_left(it.exptime, now));
                out.extend_from_slice(b" la=");
                put_u64(out, now.saturating_sub(it.last_access) as u64);
                out.extend_from_slice(b" cas=");
                put_u64(out, it.cas);
                out.extend_from_slice(if it.fetched {
                    b" fetch=yes"
                } else {
                    b" fetch=no"
                });
                out.extend_from_slice(b" cls=1 size=");
                put_u64(
                    out,
                    (it.key.len() + it.value.len() + crate::storage::ITEM_OVERHEAD) as u64,
                );
                out.extend_from_slice(b"\r\n");
            });
            if found.is_none() {
                out.extend_from_slice(b"EN\r\n");
            }
        }
        MetaCommand::Op {
            kind,
            key: key_sent,
            data,
            flags: f,
        } => {
            let mut decoded = std::mem::take(&mut s.scratch);
            let key: &[u8] = if f.base64 {
                if !meta::base64_decode(key_sent, &mut decoded) {
                    Reply::Fail(Fail::BadFormat).write(out);
                    s.scratch = decoded;
                    return;
                }
                &decoded
            } else {
                key_sent
            };
            if key.len() > crate::protocol::KEY_MAX {
                Reply::Fail(Fail::BadFormat).write(out);
            } else {
                let start = out.mark();
                match kind {
                    MetaKind::Get => meta_get(eng, &c, key, key_sent, &f, now, out),
                    MetaKind::Set => meta_set(eng, &c, key, key_sent, data, &f, now, out),
                    MetaKind::Delete => meta_delete(eng, &c, key, key_sent, &f, now, out),
                    MetaKind::Arith => meta_arith(eng, &c, key, key_sent, &f, now, out),
                }
                if f.opaque_too_long {
                    out.truncate(start);
                    Reply::Fail(Fail::OpaqueTooLong).write(out);
                }
            }
            s.scratch = decoded;
        }
    }
}

fn meta_get(
    eng: &Engine,
    c: &Counters,
    key: &[u8],
    key_sent: &[u8],
    f: &MetaFlags<'_>,
    now: u32,
    out: &mut Out,
) {
    let opts = ReadOpts {
        touch: f.ttl,
        no_bump: f.no_bump,
        meta: true,
        recache: f.recache,
        claim: false,
    };
    let exp = f.ttl.map_or(0, |t| eng.exptime(t, now));
    let emit = |out: &mut Out, it: crate::storage::ItemRef<'_>| {
        if f.value {
            out.extend_from_slice(b"VA ");
            put_u64(out, it.value.len() as u64);
        } else {
            out.extend_from_slice(b"HD");
        }
        meta_ret_flags(
            out,
            f,
            key_sent,
            it.cas,
            it.flags,
            ttl_left(it.exptime, now),
            it.value.len(),
            now.saturating_sub(it.last_access),
            it.fetched,
        );
        // memcached's order: a winner on a stale item gets "X W", a loser "Z X".
        match (it.win, it.stale) {
            (Some(true), true) => out.extend_from_slice(b" X W"),
            (Some(true), false) => out.extend_from_slice(b" W"),
            (Some(false), true) => out.extend_from_slice(b" Z X"),
            (Some(false), false) => out.extend_from_slice(b" Z"),
            (None, true) => out.extend_from_slice(b" X"),
            (None, false) => {}
        }
        out.extend_from_slice(b"\r\n");
        if f.value {
            out.value(it.value, it.shared, it.key.len());
            out.extend_from_slice(b"\r\n");
        }
    };
    inc(&c.cmd_get);
    if f.ttl.is_some() {
        inc(&c.cmd_touch);
    }
    let hit = eng
        .store
        .get(key, now, opts, exp, |it| emit(out, it))
        .is_some();
    if hit {
        inc(&c.get_hits);
        if f.ttl.is_some() {
            inc(&c.touch_hits);
        }
        return;
    }
    inc(&c.get_misses);
    if f.ttl.is_some() {
        inc(&c.touch_misses);
    }
    if let Some(ttl) = f.vivify {
        // Auto-vivify: create an empty placeholder and tell this client it won (W).
        let e = eng.exptime(ttl, now);
        if let StoreOutcome::Stored(_) = eng.store.store(StoreMode::Add, key, 0, e, b"", now) {
            let opts = ReadOpts {
                no_bump: true,
                meta: true,
                claim: true,
                ..ReadOpts::default()
            };
            if eng
                .store
                .get(key, now, opts, 0, |it| emit(out, it))
                .is_some()
            {
                return;
            }
        }
    }
    if !f.quiet {
        out.extend_from_slice(b"EN");
        meta_miss_flags(out, f, key_sent);
        out.extend_from_slice(b"\r\n");
    }
}

#[allow(clippy::too_many_arguments)]
fn meta_set(
    eng: &Engine,
    c: &Counters,
    key: &[u8],
    key_sent: &[u8],
    data: &[u8],
    f: &MetaFlags<'_>,
    now: u32,
    out: &mut Out,
) {
    inc(&c.cmd_set);
    let mut mode = match f.mode.unwrap_or(b'S') {
        b'E' => StoreMode::Add,
        b'A' => StoreMode::Append,
        b'P' => StoreMode::Prepend,
        b'R' => StoreMode::Replace,
        _ => StoreMode::Set,
    };
    if let Some(cas) = f.compare_cas {
        if mode == StoreMode::Set {
            mode = if f.invalidate {
                StoreMode::CasStale(cas)
            } else {
                StoreMode::Cas(cas)
            };
        }
    }
    let exp = eng.exptime(f.ttl.unwrap_or(0), now);
    let flags = f.client_flags.unwrap_or(0);
    let (code, cas) = match eng.store.store(mode, key, flags, exp, data, now) {
        StoreOutcome::Stored(cas) => (b"HD", cas),
        StoreOutcome::NotStored => (b"NS", 0),
        StoreOutcome::Exists => {
            inc(&c.cas_badval);
            (b"EX", 0)
        }
        StoreOutcome::NotFound => {
            inc(&c.cas_misses);
            (b"NF", 0)
        }
        StoreOutcome::TooLarge => {
            inc(&c.store_too_large);
            Reply::Fail(Fail::TooLarge).write(out);
            return;
        }
        StoreOutcome::NoMemory => {
            inc(&c.store_no_memory);
            Reply::Fail(Fail::NoMemory).write(out);
            return;
        }
    };
    if f.quiet && code == b"HD" {
        return;
    }
    out.extend_from_slice(code);
    meta_ret_flags(out, f, key_sent, cas, flags, -1, data.len(), 0, false);
    out.extend_from_slice(b"\r\n");
}

fn meta_delete(
    eng: &Engine,
    c: &Counters,
    key: &[u8],
    key_sent: &[u8],
    f: &MetaFlags<'_>,
    now: u32,
    out: &mut Out,
) {
    let r = if f.invalidate {
        let exp = f.ttl.map(|t| eng.exptime(t, now));
        eng.store.invalidate(key, now, f.compare_cas, exp)
    } else {
        eng.store.delete(key, now, f.compare_cas)
    };
    let code: &[u8] = match r {
        DeleteOutcome::Deleted => {
            inc(&c.delete_hits);
            if f.quiet {
                return;
            }
            b"HD"
        }
        DeleteOutcome::NotFound => {
            inc(&c.delete_misses);
            b"NF"
        }
        DeleteOutcome::Exists => b"EX",
    };
    out.extend_from_slice(code);
    meta_ret_flags(out, f, key_sent, 0, 0, -1, 0, 0, false);
    out.extend_from_slice(b"\r\n");
}

fn meta_arith(
    eng: &Engine,
    c: &Counters,
    key: &[u8],
    key_sent: &[u8],
    f: &MetaFlags<'_>,
    now: u32,
    out: &mut Out,
) {
    let incr = !matches!(f.mode, Some(b'D') | Some(b'-'));
    let delta = f.delta.unwrap_or(1);
    let mut r = eng.store.arith(key, incr, delta, now, f.compare_cas);
    let mut created = false;
    if r == ArithOutcome::NotFound {
        inc(if incr { &c.incr_misses } else { &c.decr_misses });
        if let Some(ttl) = f.vivify {
            let init = f.initial.unwrap_or(0);
            let e = eng.exptime(ttl, now);
            let v = init.to_string();
            r = match eng
                .store
                .store(StoreMode::Add, key, 0, e, v.as_bytes(), now)
            {
                StoreOutcome::Stored(cas) => {
                    created = true;
                    ArithOutcome::Value(init, cas)
                }
                _ => {
                    out.extend_from_slice(b"NS\r\n");
                    return;
                }
            };
        }
    } else if matches!(r, ArithOutcome::Value(..)) {
        inc(if incr { &c.incr_hits } else { &c.decr_hits });
    }
    match r {
        ArithOutcome::Value(v, cas) => {
            if let Some(t) = f.ttl {
                eng.store.touch(key, eng.exptime(t, now), now);
            }
            // memcached's `q` hides a successful ma reply even when it carries the value,
            // but not the reply for a counter it has just created.
            if f.quiet && !created {
                return;
            }

            let ttl = if f.raw[..f.n].iter().any(|t| t[0] == b't') {
                let o = ReadOpts {
                    no_bump: true,
                    ..ReadOpts::default()
                };
                eng.store
                    .get(key, now, o, 0, |it| ttl_left(it.exptime, now))
                    .unwrap_or(-1)
            } else {
                -1
            };
            if f.value {
                let mut num = Vec::new();
                put_u64(&mut num, v);
                out.extend_from_slice(b"VA ");
                put_u64(out, num.len() as u64);
                meta_ret_flags(out, f, key_sent, cas, 0, ttl, num.len(), 0, false);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&num);
                out.extend_from_slice(b"\r\n");
            } else {
                out.extend_from_slice(b"HD");
                meta_ret_flags(out, f, key_sent, cas, 0, ttl, 0, 0, false);
                out.extend_from_slice(b"\r\n");
            }
        }
        ArithOutcome::NotFound => {
            out.extend_from_slice(b"NF");
            meta_miss_flags(out, f, key_sent);
            out.extend_from_slice(b"\r\n");
        }
        ArithOutcome::Exists => {
            out.extend_from_slice(b"EX");
            meta_ret_flags(out, f, key_sent, 0, 0, -1, 0, 0, false);
            out.extend_from_slice(b"\r\n");
        }
        ArithOutcome::NonNumeric => Reply::Fail(Fail::NonNumeric).write(out),
    }
}

fn put_bin_error(out: &mut Out, h: &binary::Header, st: u16) {
    binary::put_response(
        out,
        h.opcode,
        st,
        h.opaque,
        0,
        &[],
        &[],
        binary::status_text(st),
    );
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Runs one binary request; returns true to close.
fn run_binary(
    eng: &Engine,
    s: &mut Session,
    req: &binary::Request<'_>,
    now: u32,
    out: &mut Out,
) -> bool {
    let c = &*s.counters;
    let h = &req.header;
    let (el, kl, vl) = (req.extras.len(), req.key.len(), req.value.len());
    // memcached answers invalid arguments and then closes the connection.
    let inval = |out: &mut Out| {
        put_bin_error(out, h, status::EINVAL);
        true
    };
    let resp = |out: &mut Out, st: u16, cas: u64, extras: &[u8], key: &[u8], val: &[u8]| {
        binary::put_response(out, h.opcode, st, h.opaque, cas, extras, key, val)
    };
    match h.opcode {
        op::GET | op::GETQ | op::GETK | op::GETKQ | op::GAT | op::GATQ | op::GATK | op::GATKQ => {
            let touch = matches!(h.opcode, op::GAT | op::GATQ | op::GATK | op::GATKQ);
            let want_extras = if touch { 4 } else { 0 };
            if el != want_extras || kl == 0 || vl != 0 || kl > crate::protocol::KEY_MAX {
                return inval(out);
            }
            let quiet = matches!(h.opcode, op::GETQ | op::GETKQ | op::GATQ | op::GATKQ);
            let with_key = matches!(h.opcode, op::GETK | op::GETKQ | op::GATK | op::GATKQ);
            let exptime = if touch {
                be32(req.extras) as i32 as i64
            } else {
                0
            };
            let opts = ReadOpts {
                touch: touch.then_some(exptime),
                ..ReadOpts::default()
            };
            let exp = if touch { eng.exptime(exptime, now) } else { 0 };
            inc(&c.cmd_get);
            if touch {
                inc(&c.cmd_touch);
            }
            let hit = eng
                .store
                .get(req.key, now, opts, exp, |it| {
                    let k: &[u8] = if with_key { it.key } else { &[] };
                    let flags = it.flags.to_be_bytes();
                    let (op, st) = (h.opcode, status::OK);
                    let v = it.value.len();
                    binary::put_response_head(out, op, st, h.opaque, it.cas, &flags, k, v);
                    out.value(it.value, it.shared, it.key.len());
                })
                .is_some();
            eng.prefixes.record(req.key, PrefixOp::Get(hit));
            inc(if hit { &c.get_hits } else { &c.get_misses });
            if touch {
                inc(if hit { &c.touch_hits } else { &c.touch_misses });
            }
            if !hit && !quiet {
                if with_key {
                    resp(out, status::KEY_ENOENT, 0, &[], req.key, &[]);
                } else {
                    put_bin_error(out, h, status::KEY_ENOENT);
                }
            }
        }
        op::SET | op::SETQ | op::ADD | op::ADDQ | op::REPLACE | op::REPLACEQ => {
            if el != 8 || kl == 0 || kl > crate::protocol::KEY_MAX {
                return inval(out);
            }
            inc(&c.cmd_set);
            eng.prefixes.record(req.key, PrefixOp::Set);
            let flags = be32(&req.extras[0..4]);
            let exptime = be32(&req.extras[4..8]) as i32 as i64;
            let base = match h.opcode {
                op::SET | op::SETQ => StoreMode::Set,
                op::ADD | op::ADDQ => StoreMode::Add,
                _ => StoreMode::Replace,
            };
            let mode = if h.cas != 0 && base != StoreMode::Add {
                StoreMode::Cas(h.cas)
            } else {
                base
            };
            let quiet = matches!(h.opcode, op::SETQ | op::ADDQ | op::REPLACEQ);
            let exp = eng.exptime(exptime, now);
            let r = eng.store.store(mode, req.key, flags, exp, req.value, now);
            bin_store_reply(c, out, h, base, r, quiet);
        }
        op::APPEND | op::APPENDQ | op::PREPEND | op::PREPENDQ => {
            if el != 0 || kl == 0 || kl > crate::protocol::KEY_MAX {
                return inval(out);
            }
            inc(&c.cmd_set);
            eng.prefixes.record(req.key, PrefixOp::Set);
            let mode = if matches!(h.opcode, op::APPEND | op::APPENDQ) {
                StoreMode::Append
            } else {
                StoreMode::Prepend
            };
            let quiet = matches!(h.opcode, op::APPENDQ | op::PREPENDQ);
            let r = eng.store.store(mode, req.key, 0, 0, req.value, now);
            bin_store_reply(c, out, h, mode, r, quiet);
        }
        op::DELETE | op::DELETEQ => {
            if el != 0 || kl == 0 || vl != 0 || kl > crate::protocol::KEY_MAX {
                return inval(out);
            }
            let quiet = h.opcode == op::DELETEQ;
            eng.prefixes.record(req.key, PrefixOp::Delete);
            let cas = (h.cas != 0).then_some(h.cas);
            match eng.store.delete(req.key, now, cas) {
                DeleteOutcome::Deleted => {
                    inc(&c.delete_hits);
                    if !quiet {
                        resp(out, status::OK, 0, &[], &[], &[]);
                    }
                }
                DeleteOutcome::NotFound => {
                    inc(&c.delete_misses);
                    put_bin_error(out, h, status::KEY_ENOENT);
                }
                DeleteOutcome::Exists => put_bin_error(out, h, status::KEY_EEXISTS),
            }
        }
        op::INCREMENT | op::INCREMENTQ | op::DECREMENT | op::DECREMENTQ => {
            if el != 20 || kl == 0 || vl != 0 || kl > crate::protocol::KEY_MAX {
                return inval(out);
            }
            let incr = matches!(h.opcode, op::INCREMENT | op::INCREMENTQ);
            let quiet = matches!(h.opcode, op::INCREMENTQ | op::DECREMENTQ);
            let delta = be64(&req.extras[0..8]);
            let initial = be64(&req.extras[8..16]);
            let exptime = be32(&req.extras[16..20]);
            let cas = (h.cas != 0).then_some(h.cas);
            let mut r = eng.store.arith(req.key, incr, delta, now, cas);
            if r == ArithOutcome::NotFound {
                inc(if incr { &c.incr_misses } else { &c.decr_misses });
                if exptime != u32::MAX {
                    let exp = eng.exptime(exptime as i32 as i64, now);
                    let v = initial.to_string();
                    r = match eng
                        .store
                        .store(StoreMode::Add, req.key, 0, exp, v.as_bytes(), now)
                    {
                        StoreOutcome::Stored(cas) => ArithOutcome::Value(initial, cas),
                        _ => ArithOutcome::Exists,
                    };
                }
            } else if matches!(r, ArithOutcome::Value(..)) {
                inc(if incr { &c.incr_hits } else { &c.decr_hits });
            }
            match r {
                ArithOutcome::Value(v, cas) => {
                    if !quiet {
                        resp(out, status::OK, cas, &[], &[], &v.to_be_bytes());
                    }
                }
                ArithOutcome::NotFound => put_bin_error(out, h, status::KEY_ENOENT),
                ArithOutcome::Exists => put_bin_error(out, h, status::KEY_EEXISTS),
                ArithOutcome::NonNumeric => put_bin_error(out, h, status::DELTA_BADVAL),
            }
        }
        op::QUIT | op::QUITQ => {
            if h.opcode == op::QUIT {
                resp(out, status::OK, 0, &[], &[], &[]);
            }
            return true;
        }
        op::FLUSH | op::FLUSHQ => {
            if (el != 0 && el != 4) || kl != 0 || vl != 0 {
                return inval(out);
            }
            if !eng.settings.flush_enabled {
                put_bin_error(out, h, status::EINVAL);
                return false;
            }
            inc(&c.cmd_flush);
            let delay = if el == 4 { be32(req.extras) as i64 } else { 0 };
            if delay > 0 {
                eng.store
                    .flush(Some(eng.exptime(delay, now).saturating_sub(1)));
            } else {
                eng.store.flush(None);
            }
            if h.opcode == op::FLUSH {
                resp(out, status::OK, 0, &[], &[], &[]);
            }
        }
        op::NOOP => resp(out, status::OK, 0, &[], &[], &[]),
        op::VERSION => resp(out, status::OK, 0, &[], &[], VERSION.as_bytes()),
        // memcached 1.6 answers binary verbosity as an unknown command; so do we.
        op::TOUCH => {
            if el != 4 || kl == 0 || vl != 0 || kl > crate::protocol::KEY_MAX {
                return inval(out);
            }
            inc(&c.cmd_touch);
            let exptime = be32(req.extras) as i32 as i64;
            let opts = ReadOpts {
                touch: Some(exptime),
                ..ReadOpts::default()
            };
            let hit = eng
                .store
                .get(req.key, now, opts, eng.exptime(exptime, now), |it| {
                    resp(out, status::OK, it.cas, &it.flags.to_be_bytes(), &[], &[]);
                })
                .is_some();
            eng.prefixes.record(req.key, PrefixOp::Get(hit));
            inc(if hit { &c.touch_hits } else { &c.touch_misses });
            if !hit {
                put_bin_error(out, h, status::KEY_ENOENT);
            }
        }
        op::STAT => {
            let group = (kl > 0).then_some(req.key);
            if group == Some(b"reset") {
                for w in eng.lock_workers().iter() {
                    w.reset();
                }
                eng.prefixes.clear();
                resp(out, status::OK, 0, &[], &[], &[]);
                return false;
            }
            match eng.stats(group) {
                Some(lines) => {
                    for (k, v) in lines {
                        resp(out, status::OK, 0, &[], k.as_bytes(), v.as_bytes());
                    }
                    resp(out, status::OK, 0, &[], &[], &[]);
                }
                None => put_bin_error(out, h, status::KEY_ENOENT),
            }
        }
        _ => put_bin_error(out, h, status::UNKNOWN_COMMAND),
    }
    false
}

fn bin_store_reply(
    c: &Counters,
    out: &mut Out,
    h: &binary::Header,
    base: StoreMode,
    r: StoreOutcome,
    quiet: bool,
) {
    match r {
        StoreOutcome::Stored(cas) => {
            if h.cas != 0 {
                inc(&c.cas_hits);
            }
            if !quiet {
                binary::put_response(out, h.opcode, status::OK, h.opaque, cas, &[], &[], &[]);
            }
        }
        StoreOutcome::NotStored => {
            let st = match base {
                StoreMode::Add => status::KEY_EEXISTS,
                StoreMode::Replace => status::KEY_ENOENT,
                _ => status::NOT_STORED,
            };
            put_bin_error(out, h, st);
        }
        StoreOutcome::Exists => {
            inc(&c.cas_badval);
            put_bin_error(out, h, status::KEY_EEXISTS);
        }
        StoreOutcome::NotFound => {
            inc(&c.cas_misses);
            put_bin_error(out, h, status::KEY_ENOENT);
        }
        StoreOutcome::TooLarge => {
            inc(&c.store_too_large);
            put_bin_error(out, h, status::E2BIG);
        }
        StoreOutcome::NoMemory => {
            inc(&c.store_no_memory);
            put_bin_error(out, h, status::ENOMEM);
        }
    }
}
