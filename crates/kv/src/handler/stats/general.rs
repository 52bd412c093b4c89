//! `stats` alone: memcached 1.6.18's general lines, in its order, written section by section
//! (process, connections, buffers, commands, server, hash table, background threads, logger,
//! items).

use super::*;
use crate::storage::StoreCounters;
use std::collections::HashMap;

/// Lines of a stats group, in order.
type Lines = Vec<(String, String)>;

/// Worker counters summed over workers, by name.
type Totals<'a> = HashMap<&'a str, u64>;

/// A summed worker counter, as text (0 if there is none of that name).
fn total(t: &Totals<'_>, k: &str) -> String {
    t.get(k).copied().unwrap_or(0).to_string()
}

impl Cache {
    /// `stats`: memcached 1.6.18's names in its order, with the groups it prints only under
    /// some settings (`idle_kicks` with an idle timeout, `rejected_connections` with
    /// `maxconns_fast`, slab reassignment, LRU crawler and maintainer counters while those are
    /// on). Counters of parts remora does not have (slab arena, LRU crawler and maintainer,
    /// logger, NAPI) read 0.
    pub(super) fn stats_general(&self, now: u32) -> Lines {
        let mut v: Lines = Vec::new();
        self.stats_process(now, &mut v);
        self.stats_connections(&mut v);
        let t: Totals<'_> = self.totals().into_iter().collect();
        let c = self.store.counters();
        stats_buffers(&t, &mut v);
        stats_commands(&t, &c, &mut v);
        self.stats_server(&t, &mut v);
        self.stats_hash_table(&mut v);
        self.stats_background(&c, &mut v);
        self.stats_logger(&mut v);
        self.stats_storage(&c, &mut v);
        // remora's own: where one-sided readers get the arena's grant (`--one-sided` only,
        // until revoked), so a client that knows the text port finds it.
        if let Some(g) = self.one_sided.as_ref().filter(|g| !g.revoked()) {
            v.push(("one_sided_grant".into(), g.local_addr().to_string()));
        }
        v
    }

    /// The process: its id, clocks, version and CPU times.
    fn stats_process(&self, now: u32, v: &mut Lines) {
        let mut put = |k: &str, val: String| v.push((k.to_string(), val));
        let (ut, st) = rusage();
        put("pid", std::process::id().to_string());
        put("uptime", (now - 2).to_string());
        put("time", unix_now().to_string());
        put("version", VERSION.to_string());
        // memcached reports its event library; remora has none (its loops are mio and
        // io_uring), so it names itself.
        put(
            "libevent",
            concat!("remora-", env!("CARGO_PKG_VERSION")).into(),
        );
        put(
            "pointer_size",
            (8 * std::mem::size_of::<usize>()).to_string(),
        );
        put("rusage_user", ut);
        put("rusage_system", st);
    }

    /// Connections: the limit, those open and accepted, and those refused.
    fn stats_connections(&self, v: &mut Lines) {
        let mut put = |k: &str, val: String| v.push((k.to_string(), val));
        let tun = &self.settings.tunables;
        put("max_connections", self.settings.maxconns.to_string());
        put(
            "curr_connections",
            self.conns.curr.load(Relaxed).to_string(),
        );
        put(
            "total_connections",
            self.conns.total.load(Relaxed).to_string(),
        );
        if tun.maxconns_fast {
            put(
                "rejected_connections",
                self.conns.rejected.load(Relaxed).to_string(),
            );
        }
        put(
            "connection_structures",
            self.conns.curr.load(Relaxed).to_string(),
        );
    }

    /// The server: bytes moved, the memory limit, the listener and the worker threads.
    fn stats_server(&self, t: &Totals<'_>, v: &mut Lines) {
        let mut put = |k: &str, val: String| v.push((k.to_string(), val));
        let n = |k: &str| total(t, k);
        let tun = &self.settings.tunables;
        if tun.idle_timeout > 0 {
            put("idle_kicks", n("idle_kicks"));
        }
        put("bytes_read", n("bytes_read"));
        put("bytes_written", n("bytes_written"));
        put("limit_maxbytes", self.store.mem_limit().to_string());
        put("accepting_conns", "1".into());
        put("listen_disabled_num", "0".into());
        put("time_in_listen_disabled_us", "0".into());
        put("threads", self.settings.threads.to_string());
        put("conn_yields", n("conn_yields"));
    }

    /// The hash table: its size and whether it is growing.
    fn stats_hash_table(&self, v: &mut Lines) {
        let mut put = |k: &str, val: String| v.push((k.to_string(), val));
        let tun = &self.settings.tunables;
        // The arena's one table grows as memcached's does; the heap store's tables are per
        // shard, so it reports the starting size.
        let start = if tun.hashpower_init > 0 {
            tun.hashpower_init
        } else {
            16
        };
        let (power, expanding) = self.store.hash_table().unwrap_or((start, false));
        put("hash_power_level", power.to_string());
        put("hash_bytes", (8u64 << power).to_string());
        put("hash_is_expanding", u8::from(expanding).to_string());
    }

    /// The background jobs, each while it is on: slab reassignment, the LRU crawler and the
    /// LRU maintainer.
    fn stats_background(&self, c: &StoreCounters, v: &mut Lines) {
        let mut put = |k: &str, val: String| v.push((k.to_string(), val));
        let tun = &self.settings.tunables;
        if tun.slab_reassign {
            put("slab_reassign_rescues", c.reassign_rescues.to_string());
            put(
                "slab_reassign_chunk_rescues",
                c.reassign_chunk_rescues.to_string(),
            );
            put(
                "slab_reassign_evictions_nomem",
                c.reassign_evictions_nomem.to_string(),
            );
            put(
                "slab_reassign_inline_reclaim",
                c.reassign_inline_reclaim.to_string(),
            );
            put(
                "slab_reassign_busy_items",
                c.reassign_busy_items.to_string(),
            );
            // A busy page is not taken (its move fails) rather than waited on, so no item is
            // ever deleted while a move waits for it, and no move is running between
            // commands: a move runs under the store's lock, before its reply.
            put("slab_reassign_busy_deletes", "0".into());
            put("slab_reassign_running", "0".into());
            put("slabs_moved", c.slabs_moved.to_string());
        }
        if self.crawler.enabled.load(Relaxed) {
            // Crawls finish before their `OK`: none is ever seen running.
            put("lru_crawler_running", "0".into());
            put(
                "lru_crawler_starts",
                self.crawler.starts.load(Relaxed).to_string(),
            );
        }
        if tun.lru_maintainer {
            put(
                "lru_maintainer_juggles",
                c.lru_maintainer_juggles.to_string(),
            );
        }
    }

    /// The logger's counters, between memcached's allocation and NAPI counters (0 here).
    fn stats_logger(&self, v: &mut Lines) {
        let mut put = |k: &str, val: String| v.push((k.to_string(), val));
        let zero = |put: &mut dyn FnMut(&str, String), names: &[&str]| {
            for k in names {
                put(k, "0".into());
            }
        };
        zero(&mut put, &["malloc_fails", "log_worker_dropped"]);
        put("log_worker_written", self.logger.written().to_string());
        put("log_watcher_skipped", self.logger.skipped().to_string());
        put("log_watcher_sent", self.logger.sent().to_string());
        put("log_watchers", self.logger.watcher_count().to_string());
        zero(&mut put, &["unexpected_napi_ids", "round_robin_fallback"]);
    }

    /// The items: bytes and counts, evictions and reclaims, and the LRU maintainer's moves.
    fn stats_storage(&self, c: &StoreCounters, v: &mut Lines) {
        let mut put = |k: &str, val: String| v.push((k.to_string(), val));
        let tun = &self.settings.tunables;
        put("bytes", c.bytes.to_string());
        put("curr_items", c.curr_items.to_string());
        put("total_items", c.total_items.to_string());
        put("slab_global_page_pool", c.pool_pages.to_string());
        put("expired_unfetched", c.expired_unfetched.to_string());
        put("evicted_unfetched", c.evicted_unfetched.to_string());
        if tun.lru_maintainer {
            put("evicted_active", c.evicted_active.to_string());
        }
        put("evictions", c.evictions.to_string());
        put("reclaimed", c.reclaimed.to_string());
        put("crawler_reclaimed", c.crawler_reclaimed.to_string());
        put("crawler_items_checked", c.crawler_checked.to_string());
        put("lrutail_reflocked", c.lrutail_reflocked.to_string());
        if tun.lru_maintainer {
            put("moves_to_cold", c.moves_to_cold.to_string());
            put("moves_to_warm", c.moves_to_warm.to_string());
            put("moves_within_lru", c.moves_within_lru.to_string());
            put("direct_reclaims", c.direct_reclaims.to_string());
            put("lru_bumps_dropped", c.lru_bumps_dropped.to_string());
        }
    }
}

/// Per-connection buffers: response objects and read buffers (only their allocation failures
/// are counted; the rest read 0), and the descriptors memcached keeps back.
fn stats_buffers(t: &Totals<'_>, v: &mut Lines) {
    let mut put = |k: &str, val: String| v.push((k.to_string(), val));
    let n = |k: &str| total(t, k);
    put("response_obj_oom", n("response_obj_oom"));
    put("response_obj_count", "0".into());
    put("response_obj_bytes", "0".into());
    put("read_buf_count", "0".into());
    put("read_buf_bytes", "0".into());
    put("read_buf_bytes_free", "0".into());
    put("read_buf_oom", n("read_buf_oom"));
    // memcached keeps this many descriptors back from -c for its own use.
    put("reserved_fds", "20".into());
}

/// Commands: counts by kind, hits and misses (the store counts why a read missed).
fn stats_commands(t: &Totals<'_>, c: &StoreCounters, v: &mut Lines) {
    let mut put = |k: &str, val: String| v.push((k.to_string(), val));
    let n = |k: &str| total(t, k);
    for k in [
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "cmd_meta",
        "get_hits",
        "get_misses",
    ] {
        put(k, n(k));
    }
    // Counted by the store, which knows why a read missed.
    put("get_expired", c.get_expired.to_string());
    put("get_flushed", c.get_flushed.to_string());
    for k in [
        "delete_misses",
        "delete_hits",
        "incr_misses",
        "incr_hits",
        "decr_misses",
        "decr_hits",
        "cas_misses",
        "cas_hits",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "store_too_large",
        "store_no_memory",
        "auth_cmds",
        "auth_errors",
    ] {
        put(k, n(k));
    }
}

/// The process's user and system CPU times, as memcached prints them.
fn rusage() -> (String, String) {
    // Zeroes if it failed (it does not for this process), as memcached's zeroed struct.
    let (user, system) = crate::sys::cpu_times().unwrap_or_default();
    let text = |t: std::time::Duration| format!("{}.{:06}", t.as_secs(), t.subsec_micros());
    (text(user), text(system))
}
