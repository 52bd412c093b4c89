//! memcached's command line (`-p 11211 -m 64 -t 4 -vv -o a=b,c …`), parsed by hand because
//! clustered short flags and comma-separated `-o` suboptions do not fit a derive parser.
//! Invalid values are refused with memcached's messages.

use crate::handler::Settings;

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
    /// Warnings to log at start-up (ignored suboptions).
    pub warnings: Vec<String>,
    /// `-h` / `-V` asked for: print and exit.
    pub info: Option<String>,
    /// Worker I/O loop.
    pub io: IoDriver,
    /// `--migrate-from HOST:PORT` (remora): pull a running cache from another server
    /// (post-copy live migration) instead of starting empty.
    pub migrate: Option<crate::migrate::MigrateFrom>,
    /// `-o slab_chunk_max` was given (`no_modern` leaves it alone then).
    chunk_max_given: bool,
}

fn err<T>(m: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(m.into()))
}

/// remora's long options for post-copy migration (memcached has none of them).
const MIGRATE_OPTS: [&str; 6] = [
    "migrate-from",
    "migrate-secret",
    "migrate-secret-file",
    "migrate-push-rate",
    "migrate-wait",
    "migrate-unit",
];

fn migrate_options(
    opts: &[(&str, String)],
) -> Result<Option<crate::migrate::MigrateFrom>, ConfigError> {
    let Some((_, from)) = opts.iter().find(|(n, _)| *n == "migrate-from") else {
        if let Some((n, _)) = opts.first() {
            return err(format!("--{n} needs --migrate-from HOST:PORT"));
        }
        return Ok(None);
    };
    if !from.contains(':') {
        return err(format!("--migrate-from {from}: expected HOST:PORT"));
    }
    let mut secret = None;
    for (name, v) in opts {
        let given = match *name {
            "migrate-secret" => v.clone(),
            "migrate-secret-file" => match std::fs::read_to_string(v) {
                Ok(s) => s.trim_end_matches(['\r', '\n']).to_string(),
                Err(e) => return err(format!("--migrate-secret-file {v}: {e}")),
            },
            _ => continue,
        };
        if secret.is_some() {
            return err("give one of --migrate-secret and --migrate-secret-file, once");
        }
        if let Err(why) = crate::migrate::secret::check(&given) {
            return err(format!("--{name}: {why}"));
        }
        secret = Some(given);
    }
    let Some(secret) = secret else {
        return err(format!(
            "--migrate-from {from} needs the secret the source was armed with: \
             --migrate-secret-file FILE (or --migrate-secret S, which other users see in ps)"
        ));
    };
    let mut m = crate::migrate::MigrateFrom::new(from, &secret);
    for (name, v) in opts {
        match *name {
            "migrate-push-rate" => match parse_size(v) {
                Some(0) | None => {
                    return err(format!(
                        "--migrate-push-rate {v}: expected bytes per second (k, m, g allowed)"
                    ))
                }
                Some(r) => m.push_rate = Some(r as u64),
            },
            "migrate-wait" => match v.parse::<u64>() {
                Ok(s) => m.wait = std::time::Duration::from_secs(s),
                Err(_) => return err(format!("--migrate-wait {v}: expected seconds")),
            },
            "migrate-unit" => match parse_size(v) {
                Some(u) if u.is_power_of_two() && (4096..=2 << 20).contains(&u) => m.unit = u,
                _ => return err(format!("--migrate-unit {v}: a power of two from 4k to 2m")),
            },
            _ => {}
        }
    }
    Ok(Some(m))
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

const LONG: &[(&str, char)] = &[
    ("port", 'p'),
    ("udp-port", 'U'),
    ("listen", 'l'),
    ("unix-socket", 's'),
    ("unix-mask", 'a'),
    ("memory-limit", 'm'),
    ("conn-limit", 'c'),
    ("threads", 't'),
    ("max-item-size", 'I'),
    ("disable-evictions", 'M'),
    ("disable-cas", 'C'),
    ("listen-backlog", 'b'),
    ("protocol", 'B'),
    ("max-reqs-per-event", 'R'),
    ("disable-flush-all", 'F'),
    ("enable-shutdown", 'A'),
    ("user", 'u'),
    ("verbose", 'v'),
    ("extended", 'o'),
    ("help", 'h'),
    ("version", 'V'),
    ("pidfile", 'P'),
    ("slab-growth-factor", 'f'),
    ("slab-min-size", 'n'),
    ("lock-memory", 'k'),
    ("enable-coredumps", 'r'),
    ("enable-largepages", 'L'),
    ("auth-file", 'Y'),
    ("memory-file", 'e'),
];

fn takes_value(c: char) -> bool {
    "pUlsamctIbBRuoPfnDeY".contains(c)
}

impl Config {
    /// Parses memcached-style arguments (without the program name).
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Config, ConfigError> {
        let mut s = Settings::default();
        let mut cfg = Config {
            settings: s.clone(),
            listen: Vec::new(),
            user: None,
            verbose: 0,
            pid_file: None,
            warnings: Vec::new(),
            info: None,
            io: IoDriver::default(),
            migrate: None,
            chunk_max_given: false,
        };
        let mut migrate_opts: Vec<(&str, String)> = Vec::new();
        let mut opts: Vec<(char, Option<String>)> = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_ref();
            i += 1;
            if let Some(long) = a.strip_prefix("--") {
                let (name, val) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (long, None),
                };
                if let Some(opt) = MIGRATE_OPTS.iter().find(|o| **o == name) {
                    let v = match val {
                        Some(v) => v,
                        None if i < args.len() => {
                            i += 1;
                            args[i - 1].as_ref().to_string()
                        }
                        None => return err(format!("option '--{name}' requires an argument")),
                    };
                    migrate_opts.push((opt, v));
                    continue;
                }
                let Some(&(_, c)) = LONG.iter().find(|(n, _)| *n == name) else {
                    return err(format!("memcached: unrecognized option '--{name}'"));
                };
                let val = if takes_value(c) && val.is_none() {
                    if i >= args.len() {
                        return err(format!("memcached: option '--{name}' requires an argument"));
                    }
                    i += 1;
                    Some(args[i - 1].as_ref().to_string())
                } else {
                    val
                };
                opts.push((c, val));
                continue;
            }
            let Some(cluster) = a.strip_prefix('-').filter(|c| !c.is_empty()) else {
                return err(format!("Illegal argument \"{a}\""));
            };
            let chars: Vec<char> = cluster.chars().collect();
            let mut j = 0;
            while j < chars.len() {
                let c = chars[j];
                j += 1;
                if takes_value(c) {
                    let rest: String = chars[j..].iter().collect();
                    let v = if !rest.is_empty() {
                        rest
                    } else if i < args.len() {
                        i += 1;
                        args[i - 1].as_ref().to_string()
                    } else {
                        return err(format!("memcached: option requires an argument -- '{c}'"));
                    };
                    opts.push((c, Some(v)));
                    break;
                }
                opts.push((c, None));
            }
        }
        cfg.migrate = migrate_options(&migrate_opts)?;
        let (mut tcp_given, mut udp_given) = (false, false);
        for (c, v) in opts {
            let v = v.unwrap_or_default();
            match c {
                // memcached takes atoi's value: -1 (or any negative) asks for an ephemeral
                // port, 0 turns the transport off.
                'p' => {
                    s.tcpport = atoi(&v).clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                    tcp_given = true;
                }
                'U' => {
                    s.udpport = atoi(&v).clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                    udp_given = true;
                }
                'l' => cfg
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
                'c' => {
                    let n = atoi(&v);
                    if n <= 0 {
                        return err("Maximum connections must be greater than 0");
                    }
                    s.maxconns = n as usize;
                }
                't' => {
                    let n = atoi(&v);
                    if n <= 0 {
                        return err("Number of threads must be greater than 0");
                    }
                    s.threads = n as usize;
                }
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
                    let n = atoi(&v);
                    if n <= 0 {
                        return err("Number of requests per event must be greater than 0");
                    }
                    s.reqs_per_event = n as usize;
                }
                'F' => s.flush_enabled = false,
                'A' => s.shutdown_enabled = true,
                'u' => cfg.user = Some(v),
                'v' => cfg.verbose = cfg.verbose.saturating_add(1),
                'P' => cfg.pid_file = Some(v),
                'f' => match v.parse::<f64>() {
                    Ok(f) if f > 1.0 => s.growth_factor = f,
                    _ => return err("Factor must be greater than 1"),
                },
                'n' => {
                    let n = atoi(&v);
                    if n <= 0 {
                        return err("Chunk size must be greater than 0");
                    }
                    s.chunk_size = n as usize;
                }
                'o' => cfg.suboptions(&v, &mut s)?,
                'h' => cfg.info = Some(usage()),
                'V' => cfg.info = Some(format!("memcached {}", crate::handler::VERSION)),
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
                'L' => cfg.warnings.push(
                    "option -L is accepted but has no effect in remora: item memory is allocated \
                     per item, not as one preallocated arena that huge pages could back"
                        .into(),
                ),
                'W' => s.watch_enabled = false,
                'Y' => {
                    let file = crate::handler::auth::AuthFile::load(std::path::Path::new(&v))
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
                'r' | 'd' | 'X' | 'N' => cfg
                    .warnings
                    .push(format!("option -{c} is accepted but has no effect in remora")),
                _ => return err(format!("Illegal argument \"{c}\"")),
            }
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
        if udp_given && s.udpport != 0 && !tcp_given {
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
        if s.item_size_max > 1 << 20 && !cfg.chunk_max_given {
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
        s.interfaces = cfg.listen.clone();
        s.verbose = cfg.verbose;
        cfg.settings = s;
        Ok(cfg)
    }

    fn suboptions(&mut self, v: &str, s: &mut Settings) -> Result<(), ConfigError> {
        for sub in v.split(',').filter(|x| !x.is_empty()) {
            let (k, val) = match sub.split_once('=') {
                Some((k, val)) => (k, Some(val)),
                None => (sub, None),
            };
            if REPORTED.contains(&k) {
                self.warnings.push(format!(
                    "suboption \"{sub}\" accepted; remora has no equivalent (stats settings \
                     reports it)"
                ));
            }
            match (k, val) {
                ("track_sizes", None) => s.track_sizes = true,
                ("memory_file", Some(val)) => s.memory_file = Some(val.into()),
                ("storage", Some("arena")) => s.storage = crate::handler::StorageKind::Arena,
                ("storage", Some("heap")) => s.storage = crate::handler::StorageKind::Heap,
                ("storage", _) => {
                    return err(format!("Invalid value for storage: {sub} (arena or heap)"))
                }
                ("io", Some("uring")) => self.io = IoDriver::Uring,
                ("io", Some("epoll")) => self.io = IoDriver::Epoll,
                ("io", _) => return err(format!("Invalid value for io: {sub} (uring or epoll)")),
                ("item_size_max", Some(val)) => match parse_size(val) {
                    Some(n) => s.item_size_max = n,
                    None => return err(format!("Invalid value for item_size_max: {val}")),
                },
                // memcached's wording for each refusal.
                ("idle_timeout", None) => {
                    return err("Missing numeric argument for idle_timeout")
                }
                ("idle_timeout", Some(val)) => {
                    s.tunables.idle_timeout = atoi(val).clamp(0, u32::MAX as i64) as u32
                }
                ("read_buf_mem_limit", None) => return err("Missing read_buf_mem_limit argument"),
                ("read_buf_mem_limit", Some(val)) => match val.trim().parse::<u32>() {
                    Ok(mb) => s.tunables.read_buf_mem_limit = u64::from(mb) << 20,
                    Err(_) => return err("could not parse argument to read_buf_mem_limit"),
                },
                ("slab_reassign", None) => s.tunables.slab_reassign = true,
                ("no_slab_reassign", None) => s.tunables.slab_reassign = false,
                ("slab_automove", None) => s.tunables.slab_automove = 1,
                ("slab_automove", Some(val)) => match atoi(val) {
                    n @ 0..=2 => s.tunables.slab_automove = n as u32,
                    _ => return err("slab_automove must be between 0 and 2"),
                },
                ("no_slab_automove", None) => s.tunables.slab_automove = 0,
                ("slab_automove_window", None) => {
                    return err("Missing slab_automove_window argument")
                }
                ("slab_automove_window", Some(val)) => match atoi(val) {
                    n if n < 3 => return err("slab_automove_window must be > 2"),
                    n => s.tunables.slab_automove_window = n as u32,
                },
                ("slab_automove_ratio", None) => {
                    return err("Missing slab_automove_ratio argument")
                }
                ("slab_automove_ratio", Some(val)) => match val.trim().parse::<f64>() {
                    Ok(r) if r > 0.0 && r <= 1.0 => s.tunables.slab_automove_ratio = r,
                    _ => return err("slab_automove_ratio must be > 0 and < 1"),
                },
                ("slab_chunk_max", Some(val)) => match val.trim().parse::<i64>() {
                    Ok(n) => {
                        s.tunables.slab_chunk_max = n;
                        self.chunk_max_given = true;
                    }
                    Err(_) => self
                        .warnings
                        .push("could not parse argument to slab_chunk_max".into()),
                },
                ("lru_crawler", None) => s.tunables.lru_crawler = true,
                ("no_lru_crawler", None) => s.tunables.lru_crawler = false,
                ("lru_maintainer", None) => {
                    s.tunables.lru_maintainer = true;
                    s.tunables.lru_segmented = true;
                }
                ("no_lru_maintainer", None) => {
                    s.tunables.lru_maintainer = false;
                    s.tunables.lru_segmented = false;
                }
                ("lru_segmented", None) => s.tunables.lru_segmented = true,
                ("hot_lru_pct", None) => return err("Missing hot_lru_pct argument"),
                ("hot_lru_pct", Some(val)) => match atoi(val) {
                    n @ 1..=79 => s.tunables.hot_lru_pct = n as u32,
                    _ => return err("hot_lru_pct must be > 1 and < 80"),
                },
                ("warm_lru_pct", None) => return err("Missing warm_lru_pct argument"),
                ("warm_lru_pct", Some(val)) => match atoi(val) {
                    n @ 1..=79 => s.tunables.warm_lru_pct = n as u32,
                    _ => return err("warm_lru_pct must be > 1 and < 80"),
                },
                ("hot_max_factor", None) => return err("Missing hot_max_factor argument"),
                ("hot_max_factor", Some(val)) => match atof(val) {
                    f if f > 0.0 => s.tunables.hot_max_factor = f,
                    _ => return err("hot_max_factor must be > 0"),
                },
                ("warm_max_factor", None) => return err("Missing warm_max_factor argument"),
                ("warm_max_factor", Some(val)) => match atof(val) {
                    f if f > 0.0 => s.tunables.warm_max_factor = f,
                    _ => return err("warm_max_factor must be > 0"),
                },
                ("temporary_ttl", None) => return err("Missing temporary_ttl argument"),
                ("temporary_ttl", Some(val)) => {
                    s.tunables.temp_lru = true;
                    // memcached stores atoi's int in an unsigned setting.
                    s.tunables.temporary_ttl = atoi(val) as u32;
                }
                ("no_lru_segmented", None) => s.tunables.lru_segmented = false,
                ("maxconns_fast", None) => s.tunables.maxconns_fast = true,
                ("no_maxconns_fast", None) => s.tunables.maxconns_fast = false,
                ("modern", None) => {}
                ("no_modern", None) => {
                    // memcached: chunks up to a whole page unless slab_chunk_max was given.
                    if !self.chunk_max_given {
                        s.tunables.slab_chunk_max = 1 << 20;
                    }
                    s.tunables.slab_reassign = false;
                    s.tunables.slab_automove = 0;
                    s.tunables.maxconns_fast = false;
                    s.tunables.lru_segmented = false;
                    s.tunables.lru_crawler = false;
                    s.tunables.lru_maintainer = false;
                    s.tunables.hash_algorithm = "jenkins".into();
                }
                ("hash_algorithm", Some(a @ ("murmur3" | "jenkins" | "xxh3"))) => {
                    s.tunables.hash_algorithm = a.into()
                }
                ("hash_algorithm", _) => return err("Unknown hash_algorithm option (jenkins, murmur3, xxh3)"),
                ("watcher_logbuf_size", None) => return err("Missing watcher_logbuf_size argument"),
                ("watcher_logbuf_size", Some(val)) => match val.trim().parse::<u32>() {
                    // Kilobytes, as memcached.
                    Ok(kb) => s.watcher_logbuf_size = kb as usize * 1024,
                    Err(_) => return err("could not parse argument to watcher_logbuf_size"),
                },
                ("hashpower", Some(val)) => match atoi(val) {
                    n if n < 12 => {
                        return err(format!("Initial hashtable multiplier of {n} is too low"))
                    }
                    n if n > 32 => {
                        return err(format!("Initial hashtable multiplier of {n} is too high\nChoose a value based on \"STAT hash_power_level\" from a running instance"))
                    }
                    n => s.tunables.hashpower_init = n as u32,
                },
                (k, _) if NO_EFFECT.contains(&k) => self.warnings.push(format!(
                    "suboption \"{sub}\" accepted; remora has no equivalent"
                )),
                _ => self
                    .warnings
                    .push(format!("Illegal suboption \"{sub}\" ignored")),
            }
        }
        Ok(())
    }
}

/// memcached `-o` suboptions accepted with a warning and kept in [`Tunables`] for `stats`:
/// remora's storage has nothing they would change.
const REPORTED: &[&str] = &[
    "modern",
    "no_modern",
    "maxconns_fast",
    "no_maxconns_fast",
    "lru_crawler",
    "no_lru_crawler",
    "hash_algorithm",
];

/// memcached `-o` suboptions accepted with a warning: remora has nothing they would change.
const NO_EFFECT: &[&str] = &[
    "tail_repair_time",
    "worker_logbuf_size",
    "no_inline_ascii_resp",
    "drop_privileges",
    "no_drop_privileges",
    "resp_obj_mem_limit",
];

/// The `-h` text.
pub fn usage() -> String {
    let mut u = "remora kv serve: memcached-compatible cache\n\
     -p, --port=<num>          TCP port to listen on (default: 11211)\n\
     -U, --udp-port=<num>      UDP port to listen on (default: 0, off)\n\
     -s, --unix-socket=<file>  UNIX socket to listen on (disables network support)\n\
     -a, --unix-mask=<mask>    access mask for UNIX socket, in octal (default: 700)\n\
     -l, --listen=<addr>       interface to listen on (default: INADDR_ANY)\n\
     -m, --memory-limit=<num>  item memory in megabytes (default: 64)\n\
     -c, --conn-limit=<num>    max simultaneous connections (default: 1024)\n\
     -t, --threads=<num>       number of threads to use (default: 4)\n\
     -I, --max-item-size=<num> adjusts max item size (default: 1m, min: 1k, max: 1024m)\n\
     -M, --disable-evictions   return error on memory exhausted instead of evicting\n\
     -C, --disable-cas         disable use of CAS\n\
     -b, --listen-backlog=<num> set the backlog queue limit (default: 1024)\n\
     -B, --protocol=<name>     protocol - one of ascii, binary, or auto (default: auto)\n\
     -R, --max-reqs-per-event  maximum number of requests per event (default: 20)\n\
     -F, --disable-flush-all   disable flush_all command\n\
     -A, --enable-shutdown     enable ascii \"shutdown\" command\n\
     -Y, --auth-file=<file>    (EXPERIMENTAL) enable ASCII protocol authentication. format:\n\
                               user:pass\\nuser2:pass2\\n\n\
     -e, --memory-file=<file>  keep items in this file (tmpfs or hugetlbfs); SIGUSR1 stops\n\
                               gracefully and the next start with the same settings\n\
                               serves every unexpired item again (warm restart)\n\
     -u, --user=<user>         assume identity of <username> (only when run as root)\n\
     -v, --verbose             verbose (print errors/warnings while in event loop)\n\
     -o, --extended            comma separated list of extended options (below)\n"
        .to_string();
    u.push_str(
        r#"-vv                       very verbose: also print, as memcached does,
                          connections (<fd new auto-negotiating client connection,
                          fd: Client using the ascii protocol, <fd connection closed.),
                          each text command (<fd get foo) and the text replies
                          memcached prints (>fd STORED, >fd NOREPLY STORED,
                          >fd sending key foo, >fd END); not printed: replies to meta
                          commands other than mn, multi-line replies such as stats,
                          and binary-protocol requests
-o suboptions:
                          io=epoll|uring       worker I/O loop (default: epoll; uring
                                               falls back to epoll without a ring)
                          item_size_max=<num>  same as -I (up to 1 GiB)
                          slab_chunk_max=<num> largest chunk (default: half the 1 MiB
                                               page); larger items are chunked
                          track_sizes          keep the item size histogram (stats sizes)
                          idle_timeout=<secs>  close connections silent for longer
                                               (counted in stats idle_kicks)
                          read_buf_mem_limit=<mb> per-thread share bounds buffered requests
                                               and replies (SERVER_ERROR out of memory,
                                               stats response_obj_oom)
                          storage=arena|heap   where items live (default: arena, one
                                               mapping with memcached's slab classes)
                          memory_file=<path>   same as -e: the arena in a file that a
                                               graceful stop (SIGUSR1) leaves restorable
                          hashpower=<n>        log2 of the arena's hash buckets at start
                                               (default 16; doubles past 1.5 items each)
                          slab_reassign, no_slab_reassign  page moves (slabs reassign)
                          slab_automove[=0|1|2]  move pages by themselves (default 1)
                          slab_automove_window=<n>, slab_automove_ratio=<r>
                                               the automover's window and age ratio
                          accepted with a warning, no effect:
"#,
    );
    let mut line = String::new();
    let names: Vec<&str> = REPORTED.iter().chain(NO_EFFECT).copied().collect();
    for (i, n) in names.iter().enumerate() {
        line.push_str(n);
        line.push_str(if i + 1 < names.len() { ", " } else { "" });
        if line.len() > 55 || i + 1 == names.len() {
            u.push_str(&format!("{:26}{}\n", "", line.trim_end()));
            line.clear();
        }
    }
    u.push_str(&format!(
        "{:26}other suboptions: ignored with a warning\n",
        ""
    ));
    u
}

#[cfg(test)]
mod tests;
