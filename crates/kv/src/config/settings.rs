//! The settings the command line makes (memcached's, echoed by `stats settings`) and the
//! version this server reports: below the handler, which reads them, so that the command line
//! and the handler do not import each other.

use std::sync::Arc;

use super::{AuthFile, Tunables};

/// The memcached release whose behaviour remora follows (what `-V` prints after `memcached `).
pub const MEMCACHED_VERSION: &str = "1.6.18";

/// The version string this server reports: [`MEMCACHED_VERSION`], then remora's.
pub const VERSION: &str = concat!("1.6.18-remora-", env!("CARGO_PKG_VERSION"));

/// Settings echoed by `stats settings` and used by the handler.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `-m` in bytes.
    pub maxbytes: usize,
    /// `-c`.
    pub maxconns: usize,
    /// `-p` (0 = no TCP, -1 = an ephemeral port).
    pub tcpport: i32,
    /// `-U` (0 = no UDP, -1 = an ephemeral port).
    pub udpport: i32,
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
    /// `-o` suboptions reported by `stats` / `stats settings` (idle timeout, buffer limit, …).
    pub tunables: Tunables,
    /// `-W` not given: `watch` is allowed.
    pub watch_enabled: bool,
    /// `-X` not given: `stats cachedump` and `lru_crawler metadump` are allowed.
    pub dump_enabled: bool,
    /// `-o watcher_logbuf_size=KB`, in bytes: each watcher's log buffer.
    pub watcher_logbuf_size: usize,
    /// `-Y FILE`: ASCII authentication, the file's path and its entries.
    pub auth: Option<(String, Arc<AuthFile>)>,
    /// `-o storage=`: where items live.
    pub storage: StorageKind,
    /// `-e PATH` / `-o memory_file=PATH`: the arena in a file, for warm restarts.
    pub memory_file: Option<std::path::PathBuf>,
    /// `--one-sided HOST:PORT` (remora's): the arena remotely readable and granted to
    /// one-sided readers by a fabric listener there (`remora_kv::onesided`).
    pub one_sided: Option<std::net::SocketAddr>,
}

/// Where items live (`-o storage=arena|heap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StorageKind {
    /// One arena with memcached's slab classes (the default).
    #[default]
    Arena,
    /// Per-item heap allocations (the reference implementation).
    Heap,
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
            tunables: Tunables::default(),
            watch_enabled: true,
            dump_enabled: true,
            watcher_logbuf_size: crate::logger::DEFAULT_BUF_SIZE,
            auth: None,
            storage: StorageKind::Arena,
            memory_file: None,
            one_sided: None,
        }
    }
}
