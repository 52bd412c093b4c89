//! `stats` and its groups: counters summed over workers, settings, items, slabs, conns.

use super::*;

impl Engine {
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
