//! memcached's `-o` suboptions (`-o modern,idle_timeout=10,…`), with its refusals and wording.

use super::{atof, atoi, err, parse_size, Config, ConfigError, IoDriver};
use super::{Settings, StorageKind};

impl Config {
    /// Applies one `-o` value: comma-separated suboptions, each `name` or `name=value`.
    pub(super) fn suboptions(&mut self, v: &str, s: &mut Settings) -> Result<(), ConfigError> {
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
            self.suboption(sub, k, val, s)?;
        }
        Ok(())
    }

    /// One suboption `sub`, split into its name `k` and value `val`.
    fn suboption(
        &mut self,
        sub: &str,
        k: &str,
        val: Option<&str>,
        s: &mut Settings,
    ) -> Result<(), ConfigError> {
        if self.lru_suboption(k, val, s)? {
            return Ok(());
        }
        match (k, val) {
            ("track_sizes", None) => s.track_sizes = true,
            ("memory_file", Some(val)) => s.memory_file = Some(val.into()),
            ("storage", Some("arena")) => s.storage = StorageKind::Arena,
            ("storage", Some("heap")) => s.storage = StorageKind::Heap,
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
        Ok(())
    }

    /// The LRU maintainer's and crawler's suboptions; `false`: `k` is none of them.
    fn lru_suboption(
        &mut self,
        k: &str,
        val: Option<&str>,
        s: &mut Settings,
    ) -> Result<bool, ConfigError> {
        match (k, val) {
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
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// memcached `-o` suboptions accepted with a warning and kept in [`Tunables`](super::Tunables)
/// for `stats`: remora's storage has nothing they would change.
pub(super) const REPORTED: &[&str] = &[
    "modern",
    "no_modern",
    "maxconns_fast",
    "no_maxconns_fast",
    "lru_crawler",
    "no_lru_crawler",
    "hash_algorithm",
];

/// memcached `-o` suboptions accepted with a warning: remora has nothing they would change.
pub(super) const NO_EFFECT: &[&str] = &[
    "tail_repair_time",
    "worker_logbuf_size",
    "no_inline_ascii_resp",
    "drop_privileges",
    "no_drop_privileges",
    "resp_obj_mem_limit",
];
