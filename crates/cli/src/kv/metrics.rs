//! `remora kv serve --metrics ADDR`: the cache's `stats` for Prometheus, under the names and
//! labels of Prometheus' memcached_exporter, so that its dashboards and alerts work unchanged.
//!
//! Read as the exporter reads memcached: the lines `stats` and `stats settings` answer, taken
//! at each scrape ([`Cache::stats`]), without a connection. Differences from the exporter:
//! `memcached_uptime_seconds` is a gauge (the exporter calls it a counter, but a counter's name
//! ends in `_total`), and the per-slab families (`memcached_slab_*`) are left out.
use std::collections::HashMap;
use std::sync::Arc;

use remora_http::metrics::{registry, Families, Registry, Value};
use remora_kv::handler::Cache;

/// `stats` name, metric name, help: counters.
const COUNTERS: &[(&str, &str, &str)] = &[
    (
        "bytes_read",
        "memcached_read_bytes_total",
        "Total number of bytes read by this server from network.",
    ),
    (
        "bytes_written",
        "memcached_written_bytes_total",
        "Total number of bytes sent by this server to network.",
    ),
    (
        "total_connections",
        "memcached_connections_total",
        "Total number of connections opened since the server started running.",
    ),
    (
        "rejected_connections",
        "memcached_connections_rejected_total",
        "Total number of connections rejected due to hitting the -c limit in maxconns_fast mode.",
    ),
    (
        "conn_yields",
        "memcached_connections_yielded_total",
        "Total number of connections yielded running due to hitting the -R limit.",
    ),
    (
        "listen_disabled_num",
        "memcached_connections_listener_disabled_total",
        "Number of times that the server has hit its connections limit and disabled its listener.",
    ),
    (
        "total_items",
        "memcached_items_total",
        "Total number of items stored during the life of this instance.",
    ),
    (
        "evictions",
        "memcached_items_evicted_total",
        "Total number of valid items removed from cache to free memory for new items.",
    ),
    (
        "reclaimed",
        "memcached_items_reclaimed_total",
        "Total number of times an entry was stored using memory from an expired entry.",
    ),
    (
        "store_too_large",
        "memcached_item_too_large_total",
        "The number of times an item exceeded the max-item-size when being stored.",
    ),
    (
        "store_no_memory",
        "memcached_item_no_memory_total",
        "The number of times an item could not be stored due to no more memory.",
    ),
    (
        "lru_crawler_starts",
        "memcached_lru_crawler_starts_total",
        "Times an LRU crawler was started.",
    ),
    (
        "direct_reclaims",
        "memcached_direct_reclaims_total",
        "Times worker threads had to directly reclaim or evict items.",
    ),
    (
        "crawler_items_checked",
        "memcached_lru_crawler_items_checked_total",
        "Total items examined by LRU Crawler.",
    ),
    (
        "crawler_reclaimed",
        "memcached_lru_crawler_reclaimed_total",
        "Total items freed by LRU Crawler.",
    ),
    (
        "moves_to_cold",
        "memcached_lru_crawler_moves_to_cold_total",
        "Total number of items moved from HOT/WARM to COLD LRU's.",
    ),
    (
        "moves_to_warm",
        "memcached_lru_crawler_moves_to_warm_total",
        "Total number of items moved from COLD to WARM LRU.",
    ),
    (
        "moves_within_lru",
        "memcached_lru_crawler_moves_within_lru_total",
        "Total number of items reshuffled within HOT or WARM LRU's.",
    ),
    (
        "rusage_user",
        "memcached_process_user_cpu_seconds_total",
        "Accumulated user time for this process.",
    ),
    (
        "rusage_system",
        "memcached_process_system_cpu_seconds_total",
        "Accumulated system time for this process.",
    ),
];

/// `stats` name, metric name, help: gauges.
const GAUGES: &[(&str, &str, &str)] = &[
    (
        "uptime",
        "memcached_uptime_seconds",
        "Number of seconds since the server started.",
    ),
    (
        "time",
        "memcached_time_seconds",
        "current UNIX time according to the server.",
    ),
    (
        "curr_connections",
        "memcached_current_connections",
        "Current number of open connections.",
    ),
    (
        "bytes",
        "memcached_current_bytes",
        "Current number of bytes used to store items.",
    ),
    (
        "limit_maxbytes",
        "memcached_limit_bytes",
        "Number of bytes this server is allowed to use for storage.",
    ),
    (
        "curr_items",
        "memcached_current_items",
        "Current number of items stored by this instance.",
    ),
    (
        "total_malloced",
        "memcached_malloced_bytes",
        "Number of bytes of memory allocated to slab pages.",
    ),
    (
        "accepting_conns",
        "memcached_accepting_connections",
        "The server is currently accepting new connections.",
    ),
];

/// `stats settings` name, metric name, help: gauges (with the LRU crawler on, as the exporter).
const SETTINGS: &[(&str, &str, &str)] = &[
    (
        "lru_crawler",
        "memcached_lru_crawler_enabled",
        "Whether the LRU crawler is enabled.",
    ),
    (
        "lru_crawler_sleep",
        "memcached_lru_crawler_sleep",
        "Microseconds to sleep between LRU crawls.",
    ),
    (
        "lru_crawler_tocrawl",
        "memcached_lru_crawler_to_crawl",
        "Max items to crawl per slab per run.",
    ),
    (
        "lru_maintainer_thread",
        "memcached_lru_crawler_maintainer_thread",
        "Split LRU mode and background threads.",
    ),
    (
        "hot_lru_pct",
        "memcached_lru_crawler_hot_percent",
        "Percent of slab memory reserved for HOT LRU.",
    ),
    (
        "warm_lru_pct",
        "memcached_lru_crawler_warm_percent",
        "Percent of slab memory reserved for WARM LRU.",
    ),
    (
        "hot_max_factor",
        "memcached_lru_crawler_hot_max_factor",
        "Set idle age of HOT LRU to COLD age * this",
    ),
    (
        "warm_max_factor",
        "memcached_lru_crawler_warm_max_factor",
        "Set idle age of WARM LRU to COLD age * this",
    ),
];

/// A `stats` value as a number: counts, `sec.usec` times, `yes`/`no`.
fn number(v: &str) -> Option<Value> {
    match v {
        "yes" => Some(Value::Int(1)),
        "no" => Some(Value::Int(0)),
        _ => v
            .parse::<u64>()
            .map(Value::Int)
            .or_else(|_| v.parse::<f64>().map(Value::Float))
            .ok(),
    }
}

/// The registry `--metrics` serves.
pub fn metrics(cache: Arc<Cache>) -> Registry {
    registry(move |m| {
        let stats: HashMap<String, String> =
            cache.stats(None).unwrap_or_default().into_iter().collect();
        let settings: HashMap<String, String> = cache
            .stats(Some(b"settings"))
            .unwrap_or_default()
            .into_iter()
            .collect();
        report(m, &stats, &settings);
    })
}

/// The exporter's families from `stats` and `stats settings` lines.
fn report(m: &mut Families, stats: &HashMap<String, String>, settings: &HashMap<String, String>) {
    let get = |k: &str| stats.get(k).and_then(|v| number(v));
    m.gauge(
        "memcached_up",
        "Could the memcached server be reached.",
        1u64,
    );
    if let Some(v) = stats.get("version") {
        m.gauge_with(
            "memcached_version",
            "The version of this memcached server.",
            &[("version", v)],
            1u64,
        );
    }
    for &(stat, name, help) in COUNTERS {
        if let Some(v) = get(stat) {
            m.counter(name, help, v);
        }
    }
    for &(stat, name, help) in GAUGES {
        if let Some(v) = get(stat) {
            m.gauge(name, help, v);
        }
    }
    if let Some(v) = settings.get("maxconns").and_then(|v| number(v)) {
        m.gauge(
            "memcached_max_connections",
            "Maximum number of clients allowed.",
            v,
        );
    }
    if settings.get("lru_crawler").map(String::as_str) == Some("yes") {
        for &(stat, name, help) in SETTINGS {
            if let Some(v) = settings.get(stat).and_then(|v| number(v)) {
                m.gauge(name, help, v);
            }
        }
    }
    commands(m, &get);
}

/// `memcached_commands_total{command, status}`, as the exporter derives it.
fn commands(m: &mut Families, get: &dyn Fn(&str) -> Option<Value>) {
    const HELP: &str =
        "Total number of all requests broken down by command (get, set, etc.) and status.";
    let mut put = |command: &str, status: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.counter_with(
                "memcached_commands_total",
                HELP,
                &[("command", command), ("status", status)],
                v,
            );
        }
    };
    for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
        put(op, "hit", get(&format!("{op}_hits")));
        put(op, "miss", get(&format!("{op}_misses")));
    }
    put("cas", "badval", get("cas_badval"));
    put("flush", "hit", get("cmd_flush"));
    // cmd_set counts CAS commands too; the exporter takes them out.
    let count = |k: &str| match get(k) {
        Some(Value::Int(n)) => n,
        _ => 0,
    };
    let cas: u64 = ["cas_misses", "cas_hits", "cas_badval"]
        .map(count)
        .iter()
        .sum();
    if get("cmd_set").is_some() {
        put(
            "set",
            "hit",
            Some(Value::Int(count("cmd_set").saturating_sub(cas))),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sets_and_gets_show_under_the_exporters_names() {
        let cache = Arc::new(Cache::new(Default::default()));
        let reg = metrics(cache);
        let t = remora_http::metrics::render(&reg, None).unwrap().1;
        for line in [
            "memcached_up 1\n",
            "# TYPE memcached_commands_total counter\n",
            "memcached_commands_total{command=\"get\",status=\"hit\"} 0\n",
            "memcached_commands_total{command=\"set\",status=\"hit\"} 0\n",
            "memcached_current_items 0\n",
            "memcached_limit_bytes ",
            "memcached_max_connections 1024\n",
            "memcached_version{version=\"",
        ] {
            assert!(t.contains(line), "{line:?} missing from\n{t}");
        }
    }
}
