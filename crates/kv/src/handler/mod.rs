//! The adapter between protocols and storage: runs parsed requests against the [`Store`],
//! counts them, and appends replies to a connection's output buffer.
//!
//! This module holds the shared [`Cache`] and the per-connection [`Session`]; `dispatch` is a
//! connection's request loop ([`process`]); `exec` runs each command family once whatever the
//! protocol, and `text_cmds`, `meta_cmds` and `binary_cmds` map their protocol's requests to it
//! and encode the replies; `stats` builds the `stats` groups.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::logger::{CloseReason, Logger, StoreStatus};
use crate::out::Out;
use crate::prefix::{PrefixOp, PrefixStats};
use crate::protocol::binary::{self, op, status};
use crate::protocol::meta::{self, MetaCommand, MetaFlags, MetaKind};
use crate::protocol::reply::{put_i64, put_u64, put_value_header, Fail, Reply};
use crate::protocol::text::{self, Automove, Command, GetKind, ShutdownMode, StoreCmd};
use crate::protocol::Limits;
use crate::server::conn_table::{ConnEntry, ConnTable};
use crate::stats::{inc, ConnCounters, Counters};
use crate::storage::{
    DeleteOutcome, HeapStore, ReadOpts, Store, StoreConfig, StoreMode, StoreOutcome,
};
use restart::Warm;

pub mod auth;
mod binary_cmds;
pub mod crawler;
mod dispatch;
mod exec;
mod meta_cmds;
pub(crate) mod restart;
mod stats;
mod text_cmds;

use binary_cmds::{put_bin_error, run_binary};
use meta_cmds::run_meta;
use text_cmds::run_text;

pub use dispatch::{process, process_one};

pub use crate::config::{Settings, StorageKind, MEMCACHED_VERSION, VERSION};

/// Shared server state: the store, clocks, settings and counters.
pub struct Cache {
    /// The items.
    pub store: Box<Store>,
    /// Settings.
    pub settings: Settings,
    /// Connection counters.
    pub conns: ConnCounters,
    /// `stats detail` per-prefix counters.
    pub prefixes: PrefixStats,
    /// Sockets listed by `stats conns`.
    pub conn_table: ConnTable,
    /// `--one-sided`: the fabric listener granting the arena to one-sided readers.
    pub one_sided: Option<crate::onesided::GrantServer>,
    started: Instant,
    /// The relative clock's value when `started` was taken: 2 on a cold start, more on a
    /// warm restart (the restored items' times keep their meaning).
    clock_base: u32,
    process_started: i64,
    workers: Mutex<Vec<Arc<Counters>>>,
    verbosity: AtomicU64,
    /// `slab_automove` as `slabs automove N` last set it (`stats settings`).
    slab_automove: AtomicU64,
    /// `slab_automove_ratio` (an `f64`'s bits) as `slabs automove ratio R` last set it.
    slab_automove_ratio: AtomicU64,
    /// The LRU crawler's settings and starts.
    pub crawler: crawler::CrawlerState,
    /// The `watch` log streams.
    pub logger: Arc<Logger>,
    /// Set by `shutdown` (with `-A`): servers stop.
    pub shutdown: std::sync::atomic::AtomicBool,
    /// The stop is graceful (SIGUSR1, `shutdown graceful`): a `-e` memory file is saved.
    pub graceful: std::sync::atomic::AtomicBool,
    /// Post-copy live migration: the gate every request passes, and where the cache went.
    pub migration: crate::migrate::gate::Migration,
}

/// The store's share of the settings.
pub(crate) fn store_config(settings: &Settings) -> StoreConfig {
    StoreConfig {
        mem_limit: settings.maxbytes,
        item_max: settings.item_size_max,
        no_evict: !settings.evictions,
        use_cas: settings.cas_enabled,
        track_sizes: settings.track_sizes,
    }
}

/// The arena settings that live outside the arena: the LRU's segments and memcached's
/// `T_MEMD_INITIAL_MALLOC` test hook.
pub(crate) fn tune_arena(a: &crate::storage::ArenaStore, settings: &Settings) {
    if let Some(n) = std::env::var("T_MEMD_INITIAL_MALLOC")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        a.set_premalloc(n);
    }
    let t = &settings.tunables;
    a.set_lru(crate::arena::LruConfig {
        segmented: t.lru_segmented,
        hot_pct: t.hot_lru_pct,
        warm_pct: t.warm_lru_pct,
        hot_max_factor: t.hot_max_factor,
        warm_max_factor: t.warm_max_factor,
        temp_ttl: t.temp_lru.then_some(t.temporary_ttl),
    });
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Cache {
    /// Creates the cache for these settings, in anonymous memory; see [`Cache::open`].
    pub fn new(settings: Settings) -> Cache {
        let mut settings = settings;
        settings.memory_file = None;
        Cache::open(settings).expect("an anonymous arena")
    }

    /// Creates the cache for these settings: the arena in `memory_file` when one is given,
    /// restored when a graceful stop left it clean with the same settings.
    pub fn open(settings: Settings) -> Result<Cache, crate::arena::ArenaError> {
        if settings.one_sided.is_some() {
            return Cache::open_one_sided(settings);
        }
        let config = store_config(&settings);
        let (store, warm): (Box<Store>, _) = match settings.storage {
            StorageKind::Heap => (Box::new(HeapStore::new(config)), None),
            StorageKind::Arena => {
                let (a, warm, _) = restart::open_arena(&settings, config, None)?;
                tune_arena(&a, &settings);
                (Box::new(a), warm)
            }
        };
        Ok(Cache::with_store(settings, store, warm))
    }

    /// [`Cache::open`] with `--one-sided`: the arena remotely readable and registered for
    /// remote READs (a fresh memfd, or the `-e` file, restored as without `--one-sided`), and
    /// a fabric listener granting it.
    fn open_one_sided(settings: Settings) -> Result<Cache, crate::arena::ArenaError> {
        use crate::arena::ArenaError;
        let addr = settings.one_sided.expect("--one-sided");
        let refuse = |what: &str, why: &str| {
            Err(ArenaError::Config(format!(
                "--one-sided with {what} is not supported ({why})"
            )))
        };
        if settings.storage != StorageKind::Arena {
            return refuse("-o storage=heap", "one-sided readers read the slab arena");
        }
        if settings.auth.is_some() {
            return refuse(
                "-Y (authentication)",
                "one-sided readers are not authenticated: the grant is the capability",
            );
        }
        let pd = std::sync::Arc::new(remora_mem::Pd::new());
        let (store, warm, region) =
            restart::open_arena(&settings, store_config(&settings), Some(&pd))?;
        let region = region.expect("a registered arena");
        tune_arena(&store, &settings);
        let mut cache = Cache::with_store(settings, Box::new(store), warm);
        cache.one_sided = Some(crate::onesided::GrantServer::start(addr, pd, region)?);
        Ok(cache)
    }

    /// The cache over a store made elsewhere (a migration target's lazily mapped arena);
    /// `warm` carries the clock and log ids of a restored arena.
    pub(crate) fn with_store(
        settings: Settings,
        mut store: Box<Store>,
        warm: Option<Warm>,
    ) -> Cache {
        let now_unix = unix_now();
        // Relative clock starts at 2 so 0 and 1 keep their special meanings.
        let (mut process_started, mut clock_base) = (now_unix - 2, 2u32);
        let mut logger_gid = 0;
        if let Some(w) = warm {
            process_started = w.epoch;
            clock_base = (now_unix - w.epoch).clamp(2, u32::MAX as i64) as u32;
            logger_gid = w.logger_gid;
        }
        store.publish_epoch(process_started);
        let prefixes = PrefixStats::new(settings.prefix_delimiter);
        prefixes.set_enabled(settings.detail_enabled);
        let automove = settings.tunables.slab_automove as u64;
        let settings_ratio = settings.tunables.slab_automove_ratio;
        let lru_crawler = settings.tunables.lru_crawler;
        let logger = Logger::new(settings.watcher_logbuf_size);
        logger.set_gid(logger_gid);
        {
            let l = logger.clone();
            store.set_evict_hook(Box::new(move |e| l.eviction(e)));
        }
        Cache {
            store,
            settings,
            conns: ConnCounters::default(),
            prefixes,
            conn_table: ConnTable::default(),
            one_sided: None,
            started: Instant::now(),
            clock_base,
            process_started,
            workers: Mutex::new(Vec::new()),
            verbosity: AtomicU64::new(0),
            logger,
            slab_automove: AtomicU64::new(automove),
            slab_automove_ratio: AtomicU64::new(settings_ratio.to_bits()),
            crawler: crawler::CrawlerState::new(lru_crawler),
            shutdown: std::sync::atomic::AtomicBool::new(false),
            graceful: std::sync::atomic::AtomicBool::new(false),
            migration: crate::migrate::gate::Migration::default(),
        }
    }

    /// Unix time of the relative clock's zero.
    pub fn process_started(&self) -> i64 {
        self.process_started
    }

    /// Seconds on the relative clock.
    pub fn now(&self) -> u32 {
        self.started.elapsed().as_secs() as u32 + self.clock_base
    }

    /// A graceful stop with `-e`: the arena is left clean and `FILE.meta` written (last, so
    /// a stop cut short leaves no metadata and the next start is clean).
    pub fn close_for_restart(&self) -> std::io::Result<()> {
        // Before the arena is saved: one-sided readers' READs fail from here on (they fall
        // back, and find the next server by reconnecting), so none reads the arena while it
        // is closed, or after this process let go of it.
        if let Some(g) = &self.one_sided {
            g.revoke();
        }
        let now = self.now();
        self.store.close(self.process_started)?;
        match (&self.settings.memory_file, self.store.restart_state()) {
            (Some(file), Some(st)) => restart::write_meta(
                file,
                &self.settings,
                &st,
                self.process_started,
                now,
                self.logger.gid(),
            ),
            _ => Ok(()),
        }
    }

    /// Parser limits.
    pub fn limits(&self) -> Limits {
        Limits {
            item_max: self.settings.item_size_max,
            max_line: 2048,
            max_get_line: 1 << 20,
            item_overhead: crate::storage::ITEM_OVERHEAD,
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
        crate::storage::exptime(e, now, self.process_started)
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
    /// Response objects this connection may hold unsent (`-o read_buf_mem_limit`: memcached's
    /// per-thread share of response bundles); `usize::MAX` = unlimited.
    pub resp_limit: usize,
    /// Response objects taken since the output was last empty.
    pub(crate) resps: std::cell::Cell<usize>,
    /// Where the current [`process`] call's replies begin: they are dropped when a response
    /// object cannot be had, as memcached culls unsent responses.
    batch: Option<crate::out::Mark>,
    /// The connection's socket (TCP or unix; `None` for UDP and in-process sessions): `watch`
    /// hands a duplicate of it to the log streams.
    pub fd: Option<i32>,
    /// The client's address (`None` for a unix-socket peer), for `conn_new` / `conn_close`.
    pub peer: Option<std::net::SocketAddr>,
    /// How the connection ends, for `conn_close` lines (`None` once handed to the log
    /// streams by `watch`, which memcached does not log as a close).
    pub close_reason: Option<CloseReason>,
    /// Passed `-Y`'s ASCII authentication (meaningless without `-Y`).
    pub authenticated: bool,
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
            resp_limit: usize::MAX,
            resps: std::cell::Cell::new(0),
            batch: None,
            fd: None,
            peer: None,
            close_reason: Some(CloseReason::Normal),
            authenticated: false,
        }
    }

    /// A TCP or unix-socket connection on descriptor `fd` was accepted: remembers the socket
    /// and its peer and logs `conn_new` to `watch connevents`.
    pub fn opened(&mut self, eng: &Cache, fd: i32) {
        self.fd = Some(fd);
        // SAFETY: `fd` is the connection's open socket; ManuallyDrop keeps it open.
        let sock = std::mem::ManuallyDrop::new(unsafe {
            <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd)
        });
        self.peer = sock.peer_addr().ok();
        eng.logger.conn_new(self.peer, fd as i64);
    }

    /// The connection is being closed: logs `conn_close` to `watch connevents`.
    pub fn closed(&self, eng: &Cache) {
        if let (Some(fd), Some(reason)) = (self.fd, self.close_reason) {
            eng.logger.conn_close(self.peer, reason, fd as i64);
        }
    }

    /// The connection number watchers see (`cfd=`): its descriptor, -1 without one.
    fn cfd(&self) -> i64 {
        self.fd.map_or(-1, i64::from)
    }

    /// Takes a response object for one request or one more key of a multiget; false (counted
    /// in `response_obj_oom`) when the connection holds its limit of unsent ones.
    pub(crate) fn take_resp(&self) -> bool {
        if self.resps.get() >= self.resp_limit {
            inc(&self.counters.response_obj_oom);
            return false;
        }
        self.resps.set(self.resps.get() + 1);
        true
    }

    /// Drops the replies queued by the current [`process`] call.
    pub(crate) fn drop_batch(&self, out: &mut Out) {
        if let Some(m) = self.batch {
            out.truncate(m);
        }
    }
}

/// What to do after one text command.
enum Next {
    Go,
    Close,
    /// A multiget stopped at the output limit: run the same line again later.
    Later,
}

/// `watch fetchers`: logs the lookup memcached makes of `key` before it changes the item
/// (stores, deletes, incr/decr and touch all read it first), without bumping it.
fn log_lookup(eng: &Cache, key: &[u8], now: u32, cfd: i64) {
    if eng.logger.wants(crate::logger::watch::FETCHERS) {
        let peek = ReadOpts {
            no_bump: true,
            ..ReadOpts::default()
        };
        let size = eng.store.get(key, now, peek, 0, |it| it.value.len());
        eng.logger.item_get(key, size, cfd);
    }
}

/// `watch mutations`: logs a store's outcome (`exptime_abs` on the relative clock).
#[allow(clippy::too_many_arguments)]
fn log_store(
    eng: &Cache,
    key: &[u8],
    outcome: &StoreOutcome,
    mode: StoreMode,
    exptime_abs: u32,
    now: u32,
    size: usize,
    cfd: i64,
) {
    if !eng.logger.wants(crate::logger::watch::MUTATIONS) {
        return;
    }
    let status = match outcome {
        StoreOutcome::Stored(_) => StoreStatus::Stored,
        StoreOutcome::NotStored => StoreStatus::NotStored,
        StoreOutcome::Exists => StoreStatus::Exists,
        StoreOutcome::NotFound => StoreStatus::NotFound,
        StoreOutcome::TooLarge => StoreStatus::TooLarge,
        StoreOutcome::NoMemory => StoreStatus::NoMemory,
    };
    let cmd = match mode {
        StoreMode::Set => "set",
        StoreMode::Add => "add",
        StoreMode::Replace => "replace",
        StoreMode::Append(_) => "append",
        StoreMode::Prepend(_) => "prepend",
        _ => "cas",
    };
    let ttl = if exptime_abs == 0 {
        0
    } else {
        exptime_abs.saturating_sub(now)
    };
    eng.logger.item_store(key, status, cmd, ttl, size, cfd);
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
