//! `lru_crawler`: the LRU crawler's commands with memcached's replies, and `metadump`'s
//! lines. memcached crawls in a background thread and answers `OK` at once; remora crawls
//! under the store's lock before it answers (a crawl is a walk over memory, milliseconds per
//! hundred thousand items), so `lru_crawler_running` is never seen set.

use std::sync::atomic::Ordering::Relaxed;

use super::*;
use crate::protocol::text::Crawler;
use crate::storage::{Dump, MetaLine};

/// memcached's MAX_NUMBER_OF_SLAB_CLASSES: class ids run from 1 to 63.
const CLASS_IDS: usize = 64;

/// The LRU crawler's settings, as `lru_crawler enable|disable|sleep|tocrawl` leave them.
pub struct CrawlerState {
    /// The crawler runs (`-o lru_crawler`, `lru_crawler enable`).
    pub enabled: AtomicBool,
    /// `lru_crawler sleep`: microseconds between items (memcached's pacing; remora's crawl
    /// is not paced, the value is kept for `stats settings`).
    pub sleep: AtomicU32,
    /// `lru_crawler tocrawl`: items crawled per class from the tail (0: all).
    pub tocrawl: AtomicU32,
    /// Crawls started (`lru_crawler_starts`).
    pub starts: AtomicU64,
}

impl CrawlerState {
    /// The state at start-up.
    pub fn new(enabled: bool) -> CrawlerState {
        CrawlerState {
            enabled: AtomicBool::new(enabled),
            sleep: AtomicU32::new(100),
            tocrawl: AtomicU32::new(0),
            starts: AtomicU64::new(0),
        }
    }
}

/// What a class list names.
#[derive(Debug, PartialEq, Eq)]
enum Classes {
    All,
    Hash,
    Ids(Vec<usize>),
}

/// Parses `all`, `hash` or comma-separated class ids (memcached's `lru_crawler_crawl`);
/// `None`: an id out of range (`BADCLASS`).
fn classes(arg: &[u8]) -> Option<Classes> {
    match arg {
        b"all" => Some(Classes::All),
        b"hash" => Some(Classes::Hash),
        _ => arg
            .split(|&b| b == b',')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let id = std::str::from_utf8(p).ok()?.parse::<usize>().ok()?;
                (1..CLASS_IDS).contains(&id).then_some(id)
            })
            .collect::<Option<Vec<_>>>()
            .filter(|v| !v.is_empty())
            .map(Classes::Ids),
    }
}

/// Appends `key` URI-encoded as memcached's `uriencode` does (unreserved characters kept,
/// others `%XX`).
fn uriencode(out: &mut Out, key: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        }
    }
}

/// One `metadump` line, memcached's format (it ends in a bare newline); times are Unix times,
/// `exp=-1` for an item that never expires.
pub fn put_metadump_line(out: &mut Out, m: &MetaLine, process_started: i64) {
    out.extend_from_slice(b"key=");
    uriencode(out, &m.key);
    let exp = if m.exptime == 0 {
        -1
    } else {
        i64::from(m.exptime) + process_started
    };
    let line = format!(
        " exp={exp} la={} cas={} fetch={} cls={} size={}\n",
        i64::from(m.time) + process_started,
        m.cas,
        if m.fetched { "yes" } else { "no" },
        m.class,
        m.size
    );
    out.extend_from_slice(line.as_bytes());
}

impl Cache {
    /// Runs one `lru_crawler` subcommand.
    pub(super) fn lru_crawler(&self, cmd: Crawler<'_>, now: u32, out: &mut Out) {
        let st = &self.crawler;
        let line: &[u8] = match cmd {
            Crawler::Crawl(_) | Crawler::Metadump(_) if !st.enabled.load(Relaxed) => {
                b"CLIENT_ERROR lru crawler disabled"
            }
            Crawler::Crawl(arg) => match classes(arg) {
                None => b"BADCLASS invalid class id",
                // memcached walks the hash table only to dump.
                Some(Classes::Hash) => b"ERROR an unknown error happened",
                Some(Classes::All) => self.crawl(now, None),
                Some(Classes::Ids(ids)) => self.crawl(now, Some(&ids)),
            },
            Crawler::Metadump(_) if !self.settings.dump_enabled => b"ERROR metadump not allowed",
            Crawler::Metadump(_) if !out.is_empty() => {
                b"ERROR cannot pipeline other commands before metadump"
            }
            Crawler::Metadump(arg) => {
                let which = match classes(arg) {
                    None => {
                        out.extend_from_slice(b"BADCLASS invalid class id\r\n");
                        return;
                    }
                    Some(Classes::All) => Dump::All,
                    Some(Classes::Hash) => Dump::Hash,
                    Some(Classes::Ids(ids)) => Dump::Classes(ids),
                };
                st.starts.fetch_add(1, Relaxed);
                for m in self.store.metadump(now, &which).unwrap_or_default() {
                    put_metadump_line(out, &m, self.process_started);
                }
                b"END"
            }
            Crawler::Tocrawl(Some(n)) => {
                st.tocrawl.store(n, Relaxed);
                b"OK"
            }
            Crawler::Sleep(Some(n)) if n > 1_000_000 => {
                b"CLIENT_ERROR sleep must be one second or less"
            }
            Crawler::Sleep(Some(n)) => {
                st.sleep.store(n, Relaxed);
                b"OK"
            }
            Crawler::Tocrawl(None) | Crawler::Sleep(None) => {
                b"CLIENT_ERROR bad command line format"
            }
            Crawler::Enable => {
                st.enabled.store(true, Relaxed);
                b"OK"
            }
            Crawler::Disable => {
                st.enabled.store(false, Relaxed);
                b"OK"
            }
            Crawler::Unknown => b"ERROR",
        };
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }

    fn crawl(&self, now: u32, ids: Option<&[usize]>) -> &'static [u8] {
        self.crawler.starts.fetch_add(1, Relaxed);
        let max = self.crawler.tocrawl.load(Relaxed) as usize;
        self.store.crawl(now, ids, max);
        b"OK"
    }

    /// The LRU maintainer's pass (once a second from the server's maintainer thread).
    pub fn maintain(&self) -> u64 {
        if self.migration.copying() {
            return 0;
        }
        // A frozen or moved arena is not this server's to change.
        let _gate = match self.migration.enter() {
            crate::migrate::gate::Entry::Go(g) => g,
            crate::migrate::gate::Entry::Redirect(_) => return 0,
        };
        let now = self.now();
        let n = self.store.maintain(now);
        if self.settings.tunables.slab_reassign {
            let mode = self.slab_automove.load(Relaxed) as u32;
            let ratio = f64::from_bits(self.slab_automove_ratio.load(Relaxed));
            let window = self.settings.tunables.slab_automove_window;
            self.store.automove(now, mode, window, ratio);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_lists() {
        assert_eq!(classes(b"all"), Some(Classes::All));
        assert_eq!(classes(b"hash"), Some(Classes::Hash));
        assert_eq!(classes(b"1,3,63"), Some(Classes::Ids(vec![1, 3, 63])));
        assert_eq!(classes(b"0"), None);
        assert_eq!(classes(b"64"), None);
        assert_eq!(classes(b"1,x"), None);
        assert_eq!(classes(b","), None);
    }

    #[test]
    fn metadump_line_is_memcacheds() {
        let mut out = Out::new();
        let start = out.mark();
        let m = MetaLine {
            key: b"a b/%\xff".to_vec(),
            exptime: 0,
            time: 10,
            cas: 7,
            fetched: false,
            class: 1,
            size: 66,
            flags: 0,
        };
        put_metadump_line(&mut out, &m, 1000);
        let m2 = MetaLine {
            key: b"k-._~9".to_vec(),
            exptime: 20,
            fetched: true,
            ..m
        };
        put_metadump_line(&mut out, &m2, 1000);
        assert_eq!(
            out.text_since(start).unwrap(),
            &b"key=a%20b%2F%25%FF exp=-1 la=1010 cas=7 fetch=no cls=1 size=66\n\
               key=k-._~9 exp=1020 la=1010 cas=7 fetch=yes cls=1 size=66\n"[..]
        );
    }
}
