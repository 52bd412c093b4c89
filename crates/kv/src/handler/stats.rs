//! `stats` and its groups: counters summed over workers, settings, items, slabs, conns (the
//! general group, `stats` alone, is in [`general`]).

use super::*;

mod general;

impl Cache {
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

    /// `stats settings`: memcached 1.6.18's lines (as Debian builds it, with extstore and TLS
    /// settings at their defaults).
    fn stats_settings(&self) -> Vec<(String, String)> {
        let s = &self.settings;
        let tun = &s.tunables;
        let yn = |b: bool| if b { "yes" } else { "no" }.to_string();
        let oo = |b: bool| if b { "on" } else { "off" }.to_string();
        let lines: Vec<(&str, String)> = vec![
            ("maxbytes", self.store.mem_limit().to_string()),
            ("maxconns", s.maxconns.to_string()),
            ("tcpport", s.tcpport.to_string()),
            ("udpport", s.udpport.to_string()),
            (
                "inter",
                if s.interfaces.is_empty() {
                    "NULL".into()
                } else {
                    s.interfaces.join(",")
                },
            ),
            ("verbosity", self.verbosity.load(Relaxed).to_string()),
            ("oldest", "0".into()),
            ("evictions", oo(s.evictions)),
            (
                "domain_socket",
                s.domain_socket.clone().unwrap_or_else(|| "NULL".into()),
            ),
            ("umask", format!("{:o}", s.umask)),
            ("shutdown_command", yn(s.shutdown_enabled)),
            ("growth_factor", format!("{:.2}", s.growth_factor)),
            ("chunk_size", s.chunk_size.to_string()),
            ("num_threads", s.threads.to_string()),
            ("num_threads_per_udp", s.threads.to_string()),
            (
                "stat_key_prefix",
                char::from(s.prefix_delimiter).to_string(),
            ),
            ("detail_enabled", yn(self.prefixes.enabled())),
            ("reqs_per_event", s.reqs_per_event.to_string()),
            ("cas_enabled", yn(s.cas_enabled)),
            ("tcp_backlog", s.backlog.to_string()),
            ("binding_protocol", s.binding_protocol.clone()),
            ("auth_enabled_sasl", "no".into()),
            (
                "auth_enabled_ascii",
                s.auth
                    .as_ref()
                    .map_or("no".into(), |(path, _)| path.clone()),
            ),
            ("item_size_max", s.item_size_max.to_string()),
            ("maxconns_fast", yn(tun.maxconns_fast)),
            ("hashpower_init", tun.hashpower_init.to_string()),
            ("slab_reassign", yn(tun.slab_reassign)),
            (
                "slab_automove",
                self.slab_automove.load(Relaxed).to_string(),
            ),
            (
                "slab_automove_ratio",
                format!(
                    "{:.2}",
                    f64::from_bits(self.slab_automove_ratio.load(Relaxed))
                ),
            ),
            ("slab_automove_window", tun.slab_automove_window.to_string()),
            ("slab_chunk_max", tun.slab_chunk_max.to_string()),
            ("lru_crawler", yn(self.crawler.enabled.load(Relaxed))),
            (
                "lru_crawler_sleep",
                self.crawler.sleep.load(Relaxed).to_string(),
            ),
            (
                "lru_crawler_tocrawl",
                self.crawler.tocrawl.load(Relaxed).to_string(),
            ),
            ("tail_repair_time", "0".into()),
            ("flush_enabled", yn(s.flush_enabled)),
            ("dump_enabled", yn(s.dump_enabled)),
            ("hash_algorithm", tun.hash_algorithm.clone()),
            ("lru_maintainer_thread", yn(tun.lru_maintainer)),
            ("lru_segmented", yn(tun.lru_segmented)),
            ("hot_lru_pct", tun.hot_lru_pct.to_string()),
            ("warm_lru_pct", tun.warm_lru_pct.to_string()),
            ("hot_max_factor", format!("{:.2}", tun.hot_max_factor)),
            ("warm_max_factor", format!("{:.2}", tun.warm_max_factor)),
            ("temp_lru", yn(tun.temp_lru)),
            ("temporary_ttl", tun.temporary_ttl.to_string()),
            ("idle_timeout", tun.idle_timeout.to_string()),
            ("watcher_logbuf_size", s.watcher_logbuf_size.to_string()),
            ("worker_logbuf_size", "65536".into()),
            ("read_buf_mem_limit", tun.read_buf_mem_limit.to_string()),
            ("track_sizes", yn(s.track_sizes)),
            ("inline_ascii_response", "no".into()),
            ("ext_item_size", "512".into()),
            ("ext_item_age", "4294967295".into()),
            ("ext_low_ttl", "0".into()),
            ("ext_recache_rate", "2000".into()),
            ("ext_wbuf_size", "4194304".into()),
            ("ext_compact_under", "0".into()),
            ("ext_drop_under", "0".into()),
            ("ext_max_sleep", "1000000".into()),
            ("ext_max_frag", "0.80".into()),
            ("slab_automove_freeratio", "0.010".into()),
            ("ext_drop_unread", "no".into()),
            ("ssl_enabled", "no".into()),
            ("ssl_chain_cert", "(null)".into()),
            ("ssl_key", "(null)".into()),
            ("ssl_verify_mode", "0".into()),
            ("ssl_keyformat", "1".into()),
            ("ssl_ciphers", "NULL".into()),
            ("ssl_ca_cert", "NULL".into()),
            ("ssl_wbuf_size", "16384".into()),
            ("ssl_session_cache", "no".into()),
            ("ssl_kernel_tls", "no".into()),
            ("ssl_min_version", "tlsv1.2".into()),
            ("num_napi_ids", "(null)".into()),
            (
                "memory_file",
                s.memory_file
                    .as_ref()
                    .map_or("(null)".into(), |p| p.display().to_string()),
            ),
        ];
        lines.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn stats_items(&self) -> Vec<(String, String)> {
        let Some(classes) = self.store.slabs(self.now()) else {
            return self.stats_items_heap();
        };
        let mut v = Vec::new();
        let tun = &self.settings.tunables;
        // memcached's names in its order, less `evicted_time` and `hits_to_*`.
        for c in classes.iter().filter(|c| c.stats.used > 0) {
            let st = &c.stats;
            let mut put =
                |k: &str, val: u64| v.push((format!("items:{}:{k}", c.id), val.to_string()));
            put("number", st.used);
            if tun.lru_maintainer {
                put("number_hot", st.lru_items[crate::arena::HOT]);
                put("number_warm", st.lru_items[crate::arena::WARM]);
                put("number_cold", st.lru_items[crate::arena::COLD]);
                if tun.temp_lru {
                    put("number_temp", st.lru_items[crate::arena::TEMP]);
                }
                put("age_hot", u64::from(c.age_hot));
                put("age_warm", u64::from(c.age_warm));
            }
            put("age", u64::from(c.age));
            put("mem_requested", st.requested);
            put("evicted", st.evicted);
            put("evicted_nonzero", st.evicted_nonzero);
            put("outofmemory", st.outofmemory);
            // remora's LRU links are never found broken: nothing to repair.
            put("tailrepairs", 0);
            put("reclaimed", st.reclaimed);
            put("expired_unfetched", st.expired_unfetched);
            put("evicted_unfetched", st.evicted_unfetched);
            if tun.lru_maintainer {
                put("evicted_active", st.evicted_active);
            }
            put("crawler_reclaimed", st.crawler_reclaimed);
            put("crawler_items_checked", st.crawler_checked);
            put("lrutail_reflocked", st.reflocked);
            if tun.lru_maintainer {
                put("moves_to_cold", st.moves_to_cold);
                put("moves_to_warm", st.moves_to_warm);
                put("moves_within_lru", st.moves_within_lru);
                put("direct_reclaims", st.direct_reclaims);
            }
        }
        v
    }

    /// The heap store has no slab classes: everything is reported as class 1.
    fn stats_items_heap(&self) -> Vec<(String, String)> {
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

    /// memcached's `stats slabs`: each class with pages, then `active_slabs` and
    /// `total_malloced` (bytes of pages handed to classes). memcached's per-class command
    /// counters (`get_hits`, `cmd_set`, ...) are not kept per class and not shown.
    fn stats_slabs(&self) -> Vec<(String, String)> {
        let Some(classes) = self.store.slabs(self.now()) else {
            let c = self.store.counters();
            return vec![
                (
                    "active_slabs".into(),
                    u8::from(c.curr_items > 0).to_string(),
                ),
                ("total_malloced".into(), c.bytes.to_string()),
            ];
        };
        let mut v = Vec::new();
        let mut active = 0;
        for c in classes.iter().filter(|c| c.stats.pages > 0) {
            let st = &c.stats;
            let total = u64::from(st.pages) * u64::from(st.chunks_per_page);
            let mut put = |k: &str, val: String| v.push((format!("{}:{k}", c.id), val));
            put("chunk_size", st.chunk_size.to_string());
            put("chunks_per_page", st.chunks_per_page.to_string());
            put("total_pages", st.pages.to_string());
            put("total_chunks", total.to_string());
            // As memcached counts them: chunked items' headers and chains, and chunks
            // replies still send, are used too.
            put("used_chunks", (total - st.free).to_string());
            put("free_chunks", st.free.to_string());
            // Pages are cut into free chunks whole: none wait at a page's end.
            put("free_chunks_end", "0".into());
            active += 1;
        }
        v.push(("active_slabs".into(), active.to_string()));
        v.push((
            "total_malloced".into(),
            self.store.counters().malloced.to_string(),
        ));
        v
    }

    /// `slabs reassign SRC DST` with memcached's replies. The move happens before the reply
    /// (memcached's runs in a background thread after `OK`).
    pub fn slabs_reassign(&self, args: Option<(i32, i32)>, out: &mut Out) {
        let line: &[u8] = if !self.settings.tunables.slab_reassign {
            b"CLIENT_ERROR slab reassignment disabled"
        } else if let Some((src, dst)) = args {
            self.reassign(src, dst)
        } else {
            b"CLIENT_ERROR bad command line format"
        };
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }

    fn reassign(&self, src: i32, dst: i32) -> &'static [u8] {
        if src == dst {
            return b"SAME src and dst class are identical";
        }
        let classes = self.store.slabs(self.now()).unwrap_or_default();
        let pages = |id: i32| {
            classes
                .iter()
                .find(|c| c.id as i32 == id)
                .map_or(0, |c| c.stats.pages)
        };
        // -1: the first class (after dst) with a spare page, as memcached picks.
        let src = if src == -1 {
            classes
                .iter()
                .find(|c| c.id as i32 != dst && c.stats.pages > 1)
                .map_or(-1, |c| c.id as i32)
        } else {
            src
        };
        let largest = self.store.class_count() as i32;
        if !(0..=largest).contains(&src) || !(0..=largest).contains(&dst) {
            return b"BADCLASS invalid src or dst class id";
        }
        if pages(src) < 2 {
            return b"NOSPARE source class has no spare pages";
        }
        match self.store.reassign(src as usize, dst as usize, self.now()) {
            Ok(_) => b"OK",
            Err(crate::arena::ArenaError::Busy(_)) => b"BUSY currently processing reassign request",
            Err(_) => b"NOSPARE source class has no spare pages",
        }
    }

    /// `stats reset`: zeroes the per-thread counters (and the store's read counters), as
    /// memcached does; item counts and totals stay.
    pub fn reset_stats(&self) {
        for w in self.lock_workers().iter() {
            w.reset();
        }
        self.store.reset_read_counters();
        self.prefixes.clear();
    }

    /// `stats cachedump <class> <limit>`: memcached's `ITEM <key> [<bytes> b; <exptime> s]` lines
    /// (exptime as a Unix time, 0 = never) and `END`, at most `limit` items (0 = all) and 2 MB.
    /// Each slab class lists its own items (the heap store reports every item as class 1).
    pub fn cachedump(&self, class: Option<&[u8]>, limit: Option<&[u8]>, now: u32, out: &mut Out) {
        /// memcached's MAX_NUMBER_OF_SLAB_CLASSES.
        const CLASSES: u32 = 64;
        /// memcached's cap on one dump's reply.
        const MEMLIMIT: usize = 2 << 20;
        if !self.settings.dump_enabled {
            out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
            return;
        }
        let (Some(class), Some(limit)) = (class, limit) else {
            Reply::Fail(Fail::BadCommandLine).write(out);
            return;
        };
        let num = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u32>().ok();
        let (Some(class), Some(limit)) = (num(class), num(limit)) else {
            Reply::Fail(Fail::BadFormat).write(out);
            return;
        };
        if class >= CLASSES {
            Reply::Fail(Fail::IllegalSlabId).write(out);
            return;
        }
        let items = self.store.dump(class as usize, limit as usize, now);
        let mut len = 0;
        for (key, bytes, exptime) in items {
            let exp = if exptime == 0 {
                0
            } else {
                i64::from(exptime) + self.process_started
            };
            let line = format!(" [{bytes} b; {exp} s]\r\n");
            let n = 5 + key.len() + line.len();
            if len + n + 6 > MEMLIMIT {
                break;
            }
            len += n;
            out.extend_from_slice(b"ITEM ");
            out.extend_from_slice(&key);
            out.extend_from_slice(line.as_bytes());
        }
        Reply::End.write(out);
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
            Some(b"migration") => Some(self.migration.stats()),
            _ => None,
        }
    }
}
