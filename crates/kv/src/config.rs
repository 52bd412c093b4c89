//! memcached's command line (`-p 11211 -m 64 -t 4 -vv -o a=b,c …`, and every long option of
//! memcached 1.6.18: `--port=11211 --daemon …`), parsed by hand because clustered short flags,
//! getopt_long's prefixes and comma-separated `-o` suboptions do not fit a derive parser.
//! Invalid values are refused with memcached's messages.
//!
//! Split by job: `args` splits the command line into flags, this module applies them and
//! checks the result, `suboptions` applies `-o`, `migrate` remora's `--migrate-…` options,
//! `service` remora's `--metrics` and `--log-format`, and `usage` holds the `-h` and `-i` texts.
//! What they make, the [`Settings`] (with the `-Y` [`AuthFile`]), is defined here too, below the
//! handler that reads it.

mod args;
mod auth_file;
mod migrate;
mod service;
mod settings;
mod suboptions;
mod usage;

pub use auth_file::AuthFile;
pub use service::LogFormat;
pub use settings::{Settings, StorageKind, MEMCACHED_VERSION, VERSION};
pub use usage::{license, usage};

/// A refused command line; the message is memcached's wording.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The I/O loop of the TCP and unix-socket worker threads (`-o io=uring|epoll`, a remora
/// suboption). epoll is the default: io_uring was not faster on every benchmark workload
/// (docs/bench/kv.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoDriver {
    /// io_uring: one `io_uring_enter` per loop turn for all of a thread's connections. Falls
    /// back to epoll (logged once) where a ring cannot be set up.
    Uring,
    /// mio/epoll: a read and a write per request batch, edge-triggered readiness.
    #[default]
    Epoll,
}

/// memcached `-o` suboptions that `stats` and `stats settings` report, and the two that change
/// what the server does (`idle_timeout`, `read_buf_mem_limit`). Defaults are memcached
/// 1.6.18's ("modern": slab reassignment, the LRU crawler and maintainer on).
#[derive(Debug, Clone, PartialEq)]
pub struct Tunables {
    /// `idle_timeout=N`: seconds a waiting connection may stay silent (0 = forever).
    pub idle_timeout: u32,
    /// `read_buf_mem_limit=MB`, in bytes (0 = unlimited): each worker thread's share bounds the
    /// read buffers and response objects its connections hold, as in memcached.
    pub read_buf_mem_limit: u64,
    /// `slab_reassign` / `no_slab_reassign`.
    pub slab_reassign: bool,
    /// `slab_automove[=0|1|2]`.
    pub slab_automove: u32,
    /// `slab_automove_window=N`: automover runs a class' window spans (memcached's 30).
    pub slab_automove_window: u32,
    /// `slab_automove_ratio=R`: an evicting class takes a page from the oldest class when its
    /// tail age is below R times the oldest's (memcached's 0.8).
    pub slab_automove_ratio: f64,
    /// `slab_chunk_max=N`.
    pub slab_chunk_max: i64,
    /// `lru_crawler` / `no_lru_crawler`.
    pub lru_crawler: bool,
    /// `lru_maintainer` / `no_lru_maintainer`.
    pub lru_maintainer: bool,
    /// `lru_segmented` / `no_lru_segmented`.
    pub lru_segmented: bool,
    /// `hot_lru_pct=N`: the hot LRU's share of a class' bytes (memcached's 20).
    pub hot_lru_pct: u32,
    /// `warm_lru_pct=N` (40).
    pub warm_lru_pct: u32,
    /// `hot_max_factor=F`: hot items idle beyond F times the cold tail's age drop (0.2).
    pub hot_max_factor: f64,
    /// `warm_max_factor=F` (2.0).
    pub warm_max_factor: f64,
    /// `temporary_ttl=N` given: items with a TTL up to `temporary_ttl` go to the temp LRU.
    pub temp_lru: bool,
    /// `temporary_ttl=N` (61).
    pub temporary_ttl: u32,
    /// `maxconns_fast` / `no_maxconns_fast`.
    pub maxconns_fast: bool,
    /// `hash_algorithm=murmur3|jenkins|xxh3`.
    pub hash_algorithm: String,
    /// `hashpower=N`.
    pub hashpower_init: u32,
}

impl Default for Tunables {
    fn default() -> Tunables {
        Tunables {
            idle_timeout: 0,
            read_buf_mem_limit: 0,
            slab_reassign: true,
            slab_automove: 1,
            slab_automove_window: 30,
            slab_automove_ratio: 0.8,
            slab_chunk_max: 512 * 1024,
            lru_crawler: true,
            lru_maintainer: true,
            lru_segmented: true,
            hot_lru_pct: 20,
            warm_lru_pct: 40,
            hot_max_factor: 0.2,
            warm_max_factor: 2.0,
            temp_lru: false,
            temporary_ttl: 61,
            maxconns_fast: true,
            hash_algorithm: "murmur3".into(),
            hashpower_init: 0,
        }
    }
}

/// Everything `remora kv serve` was told.
#[derive(Debug, Clone)]
pub struct Config {
    /// Settings shared with the handler.
    pub settings: Settings,
    /// Addresses to listen on (`-l`); empty means all interfaces.
    pub listen: Vec<String>,
    /// `-u`: user to run as.
    pub user: Option<String>,
    /// `-v` count.
    pub verbose: u8,
    /// `-P`: pid file.
    pub pid_file: Option<String>,
    /// `-d`: run as a daemon (the caller forks; see [`crate::daemon`]).
    pub daemonize: bool,
    /// `-r`: raise the core file size limit (and, with `-d`, keep the working directory, as
    /// memcached does).
    pub enable_coredumps: bool,
    /// Warnings to log at start-up (ignored suboptions, flags without an effect in remora).
    pub warnings: Vec<String>,
    /// `-h` / `-i` / `-V` asked for: print and exit.
    pub info: Option<String>,
    /// Worker I/O loop.
    pub io: IoDriver,
    /// `--migrate-from HOST:PORT` (remora): pull a running cache from another server
    /// (post-copy live migration) instead of starting empty.
    pub migrate: Option<crate::migrate::MigrateFrom>,
    /// `--metrics HOST:PORT` (remora): serve Prometheus `/metrics` there.
    pub metrics: Option<std::net::SocketAddr>,
    /// `--log-format text|json` (remora), when given.
    pub log_format: Option<LogFormat>,
    /// `-o slab_chunk_max` was given (`no_modern` leaves it alone then).
    chunk_max_given: bool,
    /// `-N`: NAPI IDs memcached would select worker threads by (checked against `-t`).
    napi_ids: i64,
}

fn err<T>(m: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(m.into()))
}

/// Which transports' ports were given (`-U N` alone puts TCP on N too).
#[derive(Default)]
struct Given {
    tcp: bool,
    udp: bool,
}

/// Parses a size with an optional k/m/g suffix (as `-I` accepts).
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1usize << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

/// C `atof`, roughly: the longest leading prefix that parses as a number, 0 when none.
fn atof(s: &str) -> f64 {
    let s = s.trim_start();
    (1..=s.len())
        .rev()
        .filter(|&n| s.is_char_boundary(n))
        .find_map(|n| s[..n].parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// `atoi(v)` when it is more than 0, else `why` (memcached's check of several counts).
fn positive(v: &str, why: &str) -> Result<usize, ConfigError> {
    match atoi(v) {
        n if n > 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => err(why),
    }
}

/// C `atoi`: leading digits, 0 when none (memcached uses it for several flags).
fn atoi(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, d) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let digits: String = d.chars().take_while(|c| c.is_ascii_digit()).collect();
    let v = digits.parse::<i64>().unwrap_or(0);
    if neg {
        -v
    } else {
        v
    }
}

impl Config {
    /// Parses memcached-style arguments (without the program name). `-h`, `-i` and `-V` end
    /// the parse where they stand, as in memcached, leaving their text in [`Config::info`].
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Config, ConfigError> {
        let split = args::split(args)?;
        let mut s = Settings::default();
        let mut cfg = Config {
            settings: s.clone(),
            listen: Vec::new(),
            user: None,
            verbose: 0,
            pid_file: None,
            daemonize: false,
            enable_coredumps: false,
            warnings: Vec::new(),
            info: None,
            io: IoDriver::default(),
            migrate: None,
            metrics: None,
            log_format: None,
            chunk_max_given: false,
            napi_ids: 0,
        };
        cfg.migrate = migrate::migrate_options(&split.migrate)?;
        let service = service::service_options(&split.service)?;
        (cfg.metrics, cfg.log_format) = (service.metrics, service.log);
        let mut given = Given::default();
        for (c, v) in split.flags {
            cfg.flag(c, v.unwrap_or_default(), &mut s, &mut given)?;
            if cfg.info.is_some() {
                return Ok(cfg);
            }
        }
        cfg.check(&mut s, &given)?;
        s.one_sided = service.one_sided;
        s.interfaces = cfg.listen.clone();
        s.verbose = cfg.verbose;
        cfg.settings = s;
        Ok(cfg)
    }

    /// Applies short flag `c` with its value `v` (empty for flags without one).
    fn flag(
        &mut self,
        c: char,
        v: String,
        s: &mut Settings,
        given: &mut Given,
    ) -> Result<(), ConfigError> {
        match c {
            // memcached takes atoi's value: -1 (or any negative) asks for an ephemeral
            // port, 0 turns the transport off.
            'p' => {
                s.tcpport = atoi(&v).clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                given.tcp = true;
            }
            'U' => {
                s.udpport = atoi(&v).clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                given.udp = true;
            }
            'l' => self
                .listen
                .extend(v.split(',').filter(|x| !x.is_empty()).map(String::from)),
            's' => s.domain_socket = Some(v),
            'a' => match u32::from_str_radix(&v, 8) {
                Ok(m) => s.umask = m,
                Err(_) => return err("Invalid umask"),
            },
            'm' => {
                let mb = match v.trim().parse::<usize>() {
                    Ok(n) => n << 20,
                    Err(_) => parse_size(&v).unwrap_or(0),
                };
                s.maxbytes = mb;
            }
            'c' => s.maxconns = positive(&v, "Maximum connections must be greater than 0")?,
            't' => s.threads = positive(&v, "Number of threads must be greater than 0")?,
            'I' => {
                let Some(n) = parse_size(&v) else {
                    return err(format!("Invalid value for -I: {v}"));
                };
                s.item_size_max = n;
            }
            'M' => s.evictions = false,
            'C' => s.cas_enabled = false,
            'b' => s.backlog = atoi(&v).clamp(1, i32::MAX as i64) as i32,
            'B' => match v.as_str() {
                "auto" => s.binding_protocol = "auto-negotiate".into(),
                "ascii" | "binary" => s.binding_protocol = v.clone(),
                _ => {
                    return err(format!(
                        "Invalid value for binding protocol: {v}\n -- should be one of auto, binary, or ascii"
                    ))
                }
            },
            'R' => {
                s.reqs_per_event =
                    positive(&v, "Number of requests per event must be greater than 0")?
            }
            'F' => s.flush_enabled = false,
            'A' => s.shutdown_enabled = true,
            'u' => self.user = Some(v),
            'v' => self.verbose = self.verbose.saturating_add(1),
            'P' => self.pid_file = Some(v),
            'f' => match v.parse::<f64>() {
                Ok(f) if f > 1.0 => s.growth_factor = f,
                _ => return err("Factor must be greater than 1"),
            },
            'n' => s.chunk_size = positive(&v, "Chunk size must be greater than 0")?,
            'o' => self.suboptions(&v, s)?,
            'h' => self.info = Some(usage()),
            'i' => self.info = Some(license()),
            // Exactly memcached's line: scripts and tools parse it.
            'V' => self.info = Some(format!("memcached {}", MEMCACHED_VERSION)),
            'd' => self.daemonize = true,
            'r' => self.enable_coredumps = true,
            'D' => {
                let Some(&d) = v.as_bytes().first() else {
                    return err("No delimiter specified");
                };
                s.prefix_delimiter = d;
                s.detail_enabled = true;
            }
            'k' => s.lock_memory = true,
            // memcached on Linux accepts -L and runs (it preallocates its arena); remora
            // allocates per item, so there is no arena to back with huge pages.
            'L' => self.warnings.push(
                "option -L is accepted but has no effect in remora: item memory is allocated \
                 per item, not as one preallocated arena that huge pages could back"
                    .into(),
            ),
            'W' => s.watch_enabled = false,
            'X' => s.dump_enabled = false,
            'N' => {
                self.napi_ids = atoi(&v);
                if self.napi_ids <= 0 {
                    return err("Maximum number of NAPI IDs must be greater than 0");
                }
                self.warnings.push(
                    "option -N is accepted but has no effect in remora: connections go to the \
                     worker threads round-robin, not by the NAPI ID of their receive queue"
                        .into(),
                );
            }
            'Y' => {
                let file = AuthFile::load(std::path::Path::new(&v))
                    .map_err(ConfigError)?;
                s.auth = Some((v.clone(), std::sync::Arc::new(file)));
            }
            // Running without the authentication asked for would leave the cache open:
            // refused, as a memcached built without SASL refuses it.
            'S' => return err("This server is not built with SASL support."),
            // Likewise TLS: plaintext where encryption was asked for is refused.
            'Z' => return err("This server is not built with TLS support."),
            // memcached 1.6: items in a file that a graceful stop (SIGUSR1) leaves
            // restorable.
            'e' => s.memory_file = Some(v.into()),
            _ => return err(format!("Illegal argument \"{c}\"")),
        }
        Ok(())
    }

    /// memcached's checks of the flags together, once all are applied.
    fn check(&self, s: &mut Settings, given: &Given) -> Result<(), ConfigError> {
        if self.napi_ids > s.threads as i64 {
            return err(format!(
                "Number of napi_ids({}) cannot be greater than number of threads({})",
                self.napi_ids, s.threads
            ));
        }
        // memcached: ASCII authentication speaks only ASCII, over TCP and unix sockets.
        if s.auth.is_some() {
            if s.udpport != 0 {
                return err("Cannot use UDP with ascii authentication enabled (-U 0 to disable)");
            }
            match s.binding_protocol.as_str() {
                "binary" => {
                    return err("ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.")
                }
                _ => s.binding_protocol = "ascii".into(),
            }
        }
        // memcached: `-U N` alone puts TCP on the same port.
        if given.udp && s.udpport != 0 && !given.tcp {
            s.tcpport = s.udpport;
        }
        // memcached refuses a TCP port above 65535 up front and fails to bind any other
        // out-of-range value; -1 is its ephemeral port.
        if s.tcpport > 65535 || s.tcpport < -1 {
            return err(format!("ERROR: Invalid port number {}.", s.tcpport));
        }
        if s.udpport > 65535 || s.udpport < -1 {
            return err(format!("ERROR: Invalid UDP port number {}.", s.udpport));
        }
        if s.item_size_max < 1024 {
            return err("Item max size cannot be less than 1024 bytes.");
        }
        if s.item_size_max > 1 << 30 {
            return err("Cannot set item size limit higher than 1 gigabyte.");
        }
        if s.item_size_max > s.maxbytes / 2 {
            return err("Cannot set item size limit higher than 1/2 of memory max.");
        }
        // memcached's checks of slab_chunk_max against -I and its 1 MiB page (an -I above
        // a page brings no_modern's whole-page chunks back to half a page).
        if s.item_size_max > 1 << 20 && !self.chunk_max_given {
            s.tunables.slab_chunk_max = 1 << 19;
        }
        let (chunk, item, page) = (s.tunables.slab_chunk_max, s.item_size_max as i64, 1 << 20);
        if chunk > item {
            return err(format!(
                "slab_chunk_max (bytes: {chunk}) cannot be larger than -I (item_size_max {item})"
            ));
        }
        if chunk <= 0 || item % chunk != 0 {
            return err(format!(
                "-I (item_size_max: {item}) must be evenly divisible by slab_chunk_max (bytes: {chunk})"
            ));
        }
        if page % chunk != 0 {
            return err(format!(
                "slab_chunk_max (bytes: {chunk}) must divide evenly into {page} (slab_page_size)"
            ));
        }
        let t = &s.tunables;
        if t.hot_lru_pct + t.warm_lru_pct > 80 {
            return err("hot_lru_pct + warm_lru_pct cannot be more than 80% combined");
        }
        if t.temp_lru && !t.lru_maintainer {
            return err("temporary_ttl requires lru_maintainer to be enabled");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
