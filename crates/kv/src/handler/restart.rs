//! Warm restart's metadata file, as memcached keeps it: with `-e FILE`, a graceful stop writes
//! `FILE.meta` (a `Tmain` tag line, then `Kkey value` lines: the settings the arena was made
//! with and the state that lives outside it: clock, CAS, flush state, hash table size, log
//! ids); a start reads it and deletes it. No file: a clean cache. An empty or corrupt file:
//! memcached aborts, and so does this (a start must not guess). Settings that differ: a clean
//! cache. The arena's header stays the authority on the arena; the file must agree with it
//! (epoch, CAS, hash table size), else the start is cold too.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use remora_mem::{Pd, Region};

use crate::arena::{ArenaConfig, ArenaError, Opened};
use crate::storage::{ArenaStore, Opening, RestartState, StoreConfig};

use super::{unix_now, Settings};

/// The keys a valid file has (memcached requires its 17; `mmap_oldbase` means nothing to an
/// arena addressed by offsets, so it is not written).
const KEYS: [&str; 16] = [
    "slab_config",
    "maxbytes",
    "chunk_size",
    "item_size_max",
    "slab_chunk_size_max",
    "slab_page_size",
    "use_cas",
    "slab_reassign",
    "current_time",
    "process_started",
    "stop_time",
    "current_cas",
    "oldest_cas",
    "logger_gid",
    "hashpower",
    "oldest_live",
];

/// A warm start: what the metadata file restores besides the arena.
pub(crate) struct Warm {
    /// Unix time of the relative clock's zero.
    pub(crate) epoch: i64,
    /// The next log line id.
    pub(crate) logger_gid: u64,
}

fn meta_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".meta");
    PathBuf::from(s)
}

/// The settings a saved arena must have been made with, as memcached writes them.
fn settings_kv(s: &Settings, page_size: usize) -> Vec<(&'static str, String)> {
    let b = |v: bool| if v { "true" } else { "false" }.to_string();
    vec![
        ("slab_config", s.growth_factor.to_string()),
        ("maxbytes", s.maxbytes.to_string()),
        ("chunk_size", s.chunk_size.to_string()),
        ("item_size_max", s.item_size_max.to_string()),
        ("slab_chunk_size_max", s.tunables.slab_chunk_max.to_string()),
        ("slab_page_size", page_size.to_string()),
        ("use_cas", b(s.cas_enabled)),
        ("slab_reassign", b(s.tunables.slab_reassign)),
    ]
}

/// The metadata as text: the tag line, then one `Kkey value` line per setting and state
/// (what `FILE.meta` holds, and what a migration source sends its target).
pub(crate) fn meta_text(
    s: &Settings,
    st: &RestartState,
    epoch: i64,
    now: u32,
    logger_gid: u64,
) -> String {
    let mut text = String::from("Tmain\n");
    let mut kv = settings_kv(s, st.page_size);
    kv.extend([
        ("current_time", now.to_string()),
        ("process_started", epoch.to_string()),
        ("stop_time", unix_now().to_string()),
        ("current_cas", st.cas.to_string()),
        ("oldest_cas", st.flush_cas.to_string()),
        ("logger_gid", logger_gid.to_string()),
        ("hashpower", st.hash_power.to_string()),
        ("oldest_live", st.oldest_live.to_string()),
    ]);
    for (k, v) in kv {
        text.push_str(&format!("K{k} {v}\n"));
    }
    text
}

/// Writes `FILE.meta` after the arena was marked clean (a graceful stop).
pub(super) fn write_meta(
    file: &Path,
    s: &Settings,
    st: &RestartState,
    epoch: i64,
    now: u32,
    logger_gid: u64,
) -> std::io::Result<()> {
    let text = meta_text(s, st, epoch, now, logger_gid);
    // Written aside and renamed: a stop cut short leaves no half file, so the next start is
    // clean rather than refused.
    let path = meta_path(file);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)
}

/// Reads `FILE.meta`: `Ok(None)` when there is none; `Err` (refuse to start) when it is empty
/// or does not start with memcached's tag line, as memcached aborts then.
fn read_meta(file: &Path) -> Result<Option<Vec<String>>, String> {
    let path = meta_path(file);
    let text = match std::fs::read(&path) {
        Ok(t) => String::from_utf8_lossy(&t).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    let mut lines = text.lines();
    match lines.next() {
        None => Err(format!(
            "[restart] Failed to read a tag from metadata file {}",
            path.display()
        )),
        Some("Tmain") => Ok(Some(lines.map(str::to_string).collect())),
        Some(l) if l.starts_with('T') => Err(format!(
            "[restart] internal handler for metadata tag not found: {}: corrupt metadata \
             file {}",
            &l[1..],
            path.display()
        )),
        Some(_) => Err(format!(
            "[restart] corrupt metadata file {}",
            path.display()
        )),
    }
}

/// The saved state when every line is valid and the settings are these; else the lines
/// memcached prints before starting clean.
pub(crate) fn validate(
    lines: &[String],
    s: &Settings,
    page_size: usize,
) -> Result<(RestartState, i64, u64), Vec<String>> {
    let want = settings_kv(s, page_size);
    let mut got = std::collections::HashMap::new();
    for l in lines {
        let Some((k, v)) = l.strip_prefix('K').and_then(|r| r.split_once(' ')) else {
            return Err(vec![format!("[restart] invalid metadata line:\n\n{l}\n")]);
        };
        if !KEYS.contains(&k) {
            eprintln!("[restart] unknown/unhandled key: {k}");
            continue;
        }
        if let Some((_, w)) = want.iter().find(|(n, _)| *n == k) {
            if w != v {
                return Err(vec![format!(
                    "[restart] restart incompatible due to setting for [{k}] [old value: {v}]"
                )]);
            }
        }
        got.insert(k, v.to_string());
    }
    if KEYS.iter().any(|k| !got.contains_key(k)) {
        return Err(vec!["[restart] missing some metadata lines".into()]);
    }
    let bad = |k: &str| vec![format!("[restart] failed to parse {k}: {}", got[k])];
    fn num<T: std::str::FromStr>(
        got: &std::collections::HashMap<&str, String>,
        k: &str,
    ) -> Option<T> {
        got[k].parse().ok()
    }
    let stop: i64 = num(&got, "stop_time").ok_or_else(|| bad("stop_time"))?;
    // The clock went back past the stop: times in the arena would mean nothing.
    if unix_now() < stop {
        return Err(vec![
            "[restart] restart incompatible due to setting for [stop_time] (the clock went \
             back)"
                .into(),
        ]);
    }
    let st = RestartState {
        cas: num(&got, "current_cas").ok_or_else(|| bad("current_cas"))?,
        flush_cas: num(&got, "oldest_cas").ok_or_else(|| bad("oldest_cas"))?,
        oldest_live: num(&got, "oldest_live").ok_or_else(|| bad("oldest_live"))?,
        hash_power: num(&got, "hashpower").ok_or_else(|| bad("hashpower"))?,
        page_size,
    };
    let _: u32 = num(&got, "current_time").ok_or_else(|| bad("current_time"))?;
    let epoch: i64 = num(&got, "process_started").ok_or_else(|| bad("process_started"))?;
    let gid: u64 = num(&got, "logger_gid").ok_or_else(|| bad("logger_gid"))?;
    Ok((st, epoch, gid))
}

/// The arena layout `settings` ask for (`-m`, `-f`, `-n`, `slab_chunk_max`, `hashpower`).
pub(crate) fn arena_config(settings: &Settings) -> ArenaConfig {
    let mut ac = ArenaConfig::new(settings.maxbytes);
    ac.growth_factor = settings.growth_factor;
    ac.min_space = settings.chunk_size;
    ac.chunk_max = usize::try_from(settings.tunables.slab_chunk_max).unwrap_or(ac.chunk_max);
    let hp = settings.tunables.hashpower_init;
    if hp > 0 {
        ac.hash_power_init = hp;
        ac.hash_power = ac.hash_power.max(hp);
    }
    ac
}

/// The arena store and, when registered, the region to grant.
type StoreAndRegion = (ArenaStore, Option<Arc<Region>>);
/// [`open_arena`]'s store, the state of a warm start, and the region to grant.
pub(super) type OpenedArena = (ArenaStore, Option<Warm>, Option<Arc<Region>>);

/// Opens the arena store for `settings`: in the `-e` file when one is given, restored when a
/// graceful stop left it clean and its metadata file agrees; `Some` on a warm start. With `pd`
/// (`--one-sided`) the arena is remotely readable and registered with `pd` for remote READs,
/// and its region comes back too.
pub(super) fn open_arena(
    settings: &Settings,
    config: StoreConfig,
    pd: Option<&Pd>,
) -> Result<OpenedArena, ArenaError> {
    let ac = arena_config(settings);
    let open = |opening: &Opening| -> Result<StoreAndRegion, ArenaError> {
        match pd {
            Some(pd) => ArenaStore::open_registered(config, ac.clone(), opening, pd)
                .map(|(a, r)| (a, Some(r))),
            None => ArenaStore::open(config, ac.clone(), opening).map(|a| (a, None)),
        }
    };
    let Some(file) = &settings.memory_file else {
        let (a, region) = open(&Opening::Anonymous)?;
        return Ok((a, None, region));
    };
    // Before the arena is touched: an unreadable metadata file stops the start.
    let meta = read_meta(file).map_err(ArenaError::Metadata)?;
    let (mut a, region) = open(&Opening::File(file.clone()))?;
    let page_size = a.arena_config().page_size;
    // memcached prints its [restart] lines whatever the verbosity.
    let saved = match meta {
        None => {
            eprintln!("[restart] no metadata save file, starting with a clean cache");
            None
        }
        Some(lines) => {
            let _ = std::fs::remove_file(meta_path(file));
            match validate(&lines, settings, page_size) {
                Ok(v) => Some(v),
                Err(msgs) => {
                    for m in msgs {
                        eprintln!("{m}");
                    }
                    eprintln!("[restart] failed to validate metadata, starting with a clean cache");
                    None
                }
            }
        }
    };
    match (a.opened().clone(), saved) {
        (Opened::Restored { items, epoch }, Some((st, saved_epoch, gid))) => {
            let now = crate::storage::EntryStore::restart_state(&a).expect("an arena store");
            if saved_epoch != epoch || st.cas != now.cas || st.hash_power != now.hash_power {
                let why = format!(
                    "the metadata file disagrees with the arena (epoch {saved_epoch} vs \
                     {epoch}, CAS {} vs {}, hashpower {} vs {})",
                    st.cas, now.cas, st.hash_power, now.hash_power
                );
                eprintln!("[restart] starting cold: {why}");
                a.start_cold(why)?;
                return Ok((a, None, region));
            }
            a.restore(&st);
            eprintln!("[restart] restored the arena: {items} items, warm start");
            Ok((
                a,
                Some(Warm {
                    epoch,
                    logger_gid: gid,
                }),
                region,
            ))
        }
        (Opened::Restored { .. }, None) => {
            a.start_cold("no valid metadata file".into())?;
            Ok((a, None, region))
        }
        (Opened::Cold(Some(why)), _) => {
            eprintln!("[restart] starting cold: {why}");
            Ok((a, None, region))
        }
        (Opened::Cold(None), _) => Ok((a, None, region)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> RestartState {
        RestartState {
            cas: 42,
            flush_cas: 7,
            oldest_live: 0,
            hash_power: 17,
            page_size: 1 << 20,
        }
    }

    #[test]
    fn the_metadata_file_round_trips_and_other_settings_are_refused() {
        let dir = std::env::temp_dir().join(format!("remora-meta-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("arena");
        let s = Settings::default();
        assert_eq!(read_meta(&file), Ok(None));
        write_meta(&file, &s, &state(), 1_700_000_000, 99, 5).unwrap();
        let lines = read_meta(&file).unwrap().unwrap();
        let (st, epoch, gid) = validate(&lines, &s, 1 << 20).unwrap();
        assert_eq!((st, epoch, gid), (state(), 1_700_000_000, 5));
        let other = Settings {
            maxbytes: s.maxbytes * 2,
            ..s.clone()
        };
        let why = validate(&lines, &other, 1 << 20).unwrap_err();
        assert!(
            why[0].contains("setting for [maxbytes]"),
            "memcached's line: {why:?}"
        );
        // A line missing: not trusted.
        assert!(validate(&lines[1..], &s, 1 << 20).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_empty_or_untagged_metadata_file_stops_the_start() {
        let dir = std::env::temp_dir().join(format!("remora-meta-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("arena");
        std::fs::write(meta_path(&file), b"").unwrap();
        assert!(read_meta(&file)
            .unwrap_err()
            .contains("Failed to read a tag"));
        std::fs::write(meta_path(&file), b"Kmaxbytes 1\n").unwrap();
        assert!(read_meta(&file)
            .unwrap_err()
            .contains("corrupt metadata file"));
        std::fs::write(meta_path(&file), b"Tother\n").unwrap();
        assert!(read_meta(&file).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
