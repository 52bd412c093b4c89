//! The target's side: `--migrate-from SOURCE` asks the source for its arena, maps it as a
//! lazy region, opens it restored, and, once the server listens, takes over and watches the
//! copy to its end (see the module above).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_lazy::{LazyRegion, Mode, Options, TcpFetcher};

use super::gate::lock;
use super::{Role, State, EXIT_SOURCE_LOST, LIVENESS, REPORT_EVERY};
use crate::arena::{Mapping, Opened};
use crate::handler::restart::{self, Warm};
use crate::handler::{store_config, tune_arena, Cache, Settings};
use crate::storage::{ArenaStore, EntryStore};

/// `--migrate-from HOST:PORT` and its options: where to pull the cache from, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrateFrom {
    /// The source's memcached address.
    pub source: String,
    /// `--migrate-secret-file FILE` / `--migrate-secret S`: what the source was armed with.
    pub secret: String,
    /// `--migrate-push-rate BYTES`: most bytes per second the background copy takes
    /// (faults are never held back); `None`: as fast as it goes.
    pub push_rate: Option<u64>,
    /// `--migrate-wait SECS`: how long to keep asking a source not armed yet.
    pub wait: Duration,
    /// `--migrate-unit BYTES`: the fault unit (4 KiB to 2 MiB, a power of two).
    pub unit: usize,
}

impl MigrateFrom {
    /// Pulling from `source`, showing `secret`, with the defaults: no push limit, 30 s of
    /// waiting, 64 KiB units.
    pub fn new(source: &str, secret: &str) -> MigrateFrom {
        MigrateFrom {
            source: source.to_string(),
            secret: secret.to_string(),
            push_rate: None,
            wait: Duration::from_secs(30),
            unit: 64 << 10,
        }
    }
}

/// A pulled cache's control channel, until the server takes over.
pub(crate) struct Link {
    out: TcpStream,
    lines: BufReader<TcpStream>,
    source: String,
    region: Arc<LazyRegion>,
}

struct Offer {
    out: TcpStream,
    lines: BufReader<TcpStream>,
    port: u16,
    len: u64,
    meta: Vec<String>,
}

fn read_line(r: &mut BufReader<TcpStream>) -> Option<String> {
    let mut l = String::new();
    match r.read_line(&mut l) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(l.trim_end_matches(['\r', '\n']).to_string()),
    }
}

/// Asks the source for its arena until it is armed or `from.wait` passes.
fn ask(from: &MigrateFrom) -> Result<Offer, String> {
    let addr: SocketAddr = from
        .source
        .to_socket_addrs()
        .map_err(|e| format!("source address {}: {e}", from.source))?
        .next()
        .ok_or_else(|| format!("source address {} resolves to nothing", from.source))?;
    let until = Instant::now() + from.wait;
    let mut said_waiting = false;
    loop {
        let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("cannot reach the source {addr}: {e}"))?;
        let _ = sock.set_nodelay(true);
        let _ = sock.set_read_timeout(Some(LIVENESS));
        let mut out = sock.try_clone().map_err(|e| e.to_string())?;
        let mut lines = BufReader::new(sock);
        out.write_all(format!("migrate begin {}\r\n", from.secret).as_bytes())
            .map_err(|e| format!("source {addr}: {e}"))?;
        let first = read_line(&mut lines)
            .ok_or_else(|| format!("the source {addr} closed or did not answer `migrate begin`"))?;
        if first.starts_with("SERVER_ERROR migration not armed") && Instant::now() < until {
            if !said_waiting {
                eprintln!(
                    "[migrate] waiting for the source {addr} to be armed \
                     (`remora kv migrate --to ...` there), up to {} s",
                    from.wait.as_secs()
                );
                said_waiting = true;
            }
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let mut head = first.split(' ');
        let (Some("MIGRATE"), Some(port), Some(len)) = (head.next(), head.next(), head.next())
        else {
            return Err(format!("the source {addr} refused: {first}"));
        };
        let (Ok(port), Ok(len)) = (port.parse::<u16>(), len.parse::<u64>()) else {
            return Err(format!("the source {addr} sent a malformed offer: {first}"));
        };
        let mut meta = Vec::new();
        loop {
            match read_line(&mut lines) {
                Some(l) if l == "END" => break,
                Some(l) if meta.len() < 64 => meta.push(l),
                _ => return Err(format!("the source {addr} sent a truncated offer")),
            }
        }
        return Ok(Offer {
            out,
            lines,
            port,
            len,
            meta,
        });
    }
}

/// Takes the arena settings the source was started with (they decide the arena's layout);
/// returns the ones that differ from this server's flags.
fn adopt(meta: &[String], s: &mut Settings) -> Result<Vec<String>, String> {
    let mut changed = Vec::new();
    for l in meta {
        let Some((k, v)) = l[1.min(l.len())..].split_once(' ') else {
            continue;
        };
        let bad = || format!("the source sent a bad setting: {l}");
        let mut set = |name: &str, differs: bool| {
            if differs {
                changed.push(format!("{name} {v}"));
            }
        };
        match (l.as_bytes().first(), k) {
            (Some(b'K'), "slab_config") => {
                let f: f64 = v.parse().map_err(|_| bad())?;
                set("-f", f != s.growth_factor);
                s.growth_factor = f;
            }
            (Some(b'K'), "maxbytes") => {
                let n: usize = v.parse().map_err(|_| bad())?;
                set("maxbytes", n != s.maxbytes);
                s.maxbytes = n;
            }
            (Some(b'K'), "chunk_size") => {
                let n: usize = v.parse().map_err(|_| bad())?;
                set("-n", n != s.chunk_size);
                s.chunk_size = n;
            }
            (Some(b'K'), "item_size_max") => {
                let n: usize = v.parse().map_err(|_| bad())?;
                set("-I", n != s.item_size_max);
                s.item_size_max = n;
            }
            (Some(b'K'), "slab_chunk_size_max") => {
                let n: i64 = v.parse().map_err(|_| bad())?;
                set("slab_chunk_max", n != s.tunables.slab_chunk_max);
                s.tunables.slab_chunk_max = n;
            }
            (Some(b'K'), "use_cas") => {
                let on = v == "true";
                set("use_cas", on != s.cas_enabled);
                s.cas_enabled = on;
            }
            (Some(b'K'), "slab_reassign") => s.tunables.slab_reassign = v == "true",
            (Some(b'X'), "hashpower_init") => {
                let n: u32 = v.parse().map_err(|_| bad())?;
                set("hashpower", n != s.tunables.hashpower_init);
                s.tunables.hashpower_init = n;
            }
            _ => {}
        }
    }
    Ok(changed)
}

/// The chunks the source's replies held (`Xheld OFF…`), which the target frees.
fn held_offsets(meta: &[String]) -> Result<Vec<u64>, String> {
    let Some(l) = meta.iter().find(|l| l.starts_with("Xheld")) else {
        return Err("the source did not name its held chunks (another build?)".into());
    };
    l["Xheld".len()..]
        .split_whitespace()
        .map(|t| {
            t.parse()
                .map_err(|_| format!("the source sent a bad held chunk: {t}"))
        })
        .collect()
}

/// Pulls the cache from `from.source`: the arena mapped lazily and opened restored, the
/// cache made over it. The server takes over with [`take_over`] once it listens.
pub(crate) fn pull(from: &MigrateFrom, mut settings: Settings) -> Result<(Cache, Link), String> {
    let offer = ask(from)?;
    let t0 = Instant::now();
    let src_ip = offer
        .lines
        .get_ref()
        .peer_addr()
        .map_err(|e| e.to_string())?
        .ip();
    let changed = adopt(&offer.meta, &mut settings)?;
    if !changed.is_empty() {
        eprintln!(
            "[migrate] taking the source's arena settings: {}",
            changed.join(", ")
        );
    }
    settings.storage = crate::handler::StorageKind::Arena;
    if let Some(f) = settings.memory_file.take() {
        eprintln!(
            "[migrate] the pulled arena lives in memory: -e {} is not used",
            f.display()
        );
    }
    let mut ac = restart::arena_config(&settings);
    // What ArenaStore::open takes from the store's settings.
    ac.item_max = settings.item_size_max;
    ac.cas = settings.cas_enabled;
    ac.remote = offer.meta.iter().any(|l| l == "Xremote 1");
    if settings.one_sided.take().is_some() {
        eprintln!(
            "[migrate] --one-sided is not served by a migration target (its arena is mapped \
             lazily, which cannot be granted): readers use the text protocol here"
        );
    }
    if ac.mapped() as u64 != offer.len {
        return Err(format!(
            "the source's arena is {} bytes where its settings make {} here (another build?)",
            offer.len,
            ac.mapped()
        ));
    }
    let pages = SocketAddr::new(src_ip, offer.port);
    let fetcher = TcpFetcher::connect(pages, Duration::from_secs(5))
        .map_err(|e| format!("the source's page server {pages}: {e}"))?;
    let region = LazyRegion::open(
        Arc::new(fetcher),
        Options {
            unit: from.unit,
            mode: Mode::Thread { handlers: 2 },
            push: true,
            push_rate: from.push_rate,
            // Longer than the control channel's liveness: a lost source ends the process
            // before a fault could give up on it.
            deadline: LIVENESS * 3,
            ..Options::default()
        },
    )
    .map_err(|e| format!("mapping the source's arena: {e}"))?;
    let region = Arc::new(region);
    let config = store_config(&settings);
    let held = held_offsets(&offer.meta)?;
    let store = ArenaStore::from_mapping(config, ac, Mapping::lazy(region.clone()), Some(&held))
        .map_err(|e| format!("opening the source's arena: {e}"))?;
    let items = match store.opened() {
        Opened::Restored { items, .. } => *items,
        Opened::Cold(why) => {
            return Err(format!(
                "the source's arena did not open as a handed-over arena: {}",
                why.as_deref().unwrap_or("empty")
            ))
        }
    };
    let klines: Vec<String> = offer
        .meta
        .iter()
        .filter(|l| l.starts_with('K'))
        .cloned()
        .collect();
    let (st, epoch, gid) = restart::validate(&klines, &settings, store.arena_config().page_size)
        .map_err(|m| m.join("; "))?;
    let now = store.restart_state().ok_or("no arena state")?;
    if st.cas != now.cas || st.hash_power != now.hash_power {
        return Err(format!(
            "the source's state disagrees with its arena (CAS {} vs {}, hashpower {} vs {})",
            st.cas, now.cas, st.hash_power, now.hash_power
        ));
    }
    store.restore(&st);
    tune_arena(&store, &settings);
    let cache = Cache::with_store(
        settings,
        Box::new(store),
        Some(Warm {
            epoch,
            logger_gid: gid,
        }),
    );
    {
        let m = &cache.migration;
        // Until the source lets go, its cache is still the one clients write to: a client
        // that comes early waits.
        m.hold();
        m.copying.store(true, Ordering::Relaxed);
        let _ = m.region.set(region.clone());
        let mut st = lock(&m.status);
        st.role = Role::Target;
        st.state = State::HandingOver;
        st.peer = from.source.clone();
        st.bytes = offer.len;
        st.started = Some(t0);
    }
    eprintln!(
        "[migrate] mapped the arena of {} ({} MiB, {items} items) lazily in {:.2} ms",
        from.source,
        offer.len >> 20,
        t0.elapsed().as_secs_f64() * 1e3
    );
    Ok((
        cache,
        Link {
            out: offer.out,
            lines: offer.lines,
            source: from.source.clone(),
            region,
        },
    ))
}

/// The server listens: tells the source to send its clients here, then watches the copy.
pub(crate) fn take_over(cache: &Arc<Cache>, mut link: Link) -> Result<(), String> {
    link.out
        .write_all(b"migrate serving\r\n")
        .map_err(|e| format!("the source {}: {e}", link.source))?;
    match read_line(&mut link.lines) {
        Some(l) if l == "OK" => {}
        other => {
            return Err(format!(
                "the source {} did not let go: {}",
                link.source,
                other.unwrap_or_else(|| "connection closed".into())
            ))
        }
    }
    cache.migration.set_state(State::Pulling);
    cache.migration.release();
    let c = cache.clone();
    std::thread::Builder::new()
        .name("kv-migrate".into())
        .spawn(move || watch(c, link))
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn watch(cache: Arc<Cache>, mut link: Link) {
    let m = &cache.migration;
    loop {
        link.region.wait_complete(REPORT_EVERY);
        let p = link.region.progress();
        if p.poisoned > 0 {
            let why = link.region.last_error().unwrap_or_default();
            return lost(&cache, &link, &format!("pages could not be fetched: {why}"));
        }
        if p.complete() {
            let _ = link.out.write_all(b"migrate done\r\n");
            let _ = read_line(&mut link.lines);
            m.copying.store(false, Ordering::Relaxed);
            let elapsed = {
                let mut st = lock(&m.status);
                st.state = State::Complete;
                st.copy_time = st.started.map(|s| s.elapsed());
                st.copy_time.unwrap_or_default()
            };
            let s = link.region.stats();
            eprintln!(
                "[migrate] the copy from {} is complete: {} MiB in {:.1} s ({} faults, {} units \
                 pushed, {} zero)",
                link.source,
                (p.units * link.region.unit()) >> 20,
                elapsed.as_secs_f64(),
                s.faults,
                s.units_pushed,
                s.units_zero
            );
            return;
        }
        let report = format!("migrate progress {} {}\r\n", p.present, p.units);
        let ok = link.out.write_all(report.as_bytes()).is_ok()
            && read_line(&mut link.lines).as_deref() == Some("OK");
        if !ok {
            return lost(
                &cache,
                &link,
                "the control connection closed or went silent",
            );
        }
    }
}

/// The source is gone before the copy was complete: what is missing cannot be served.
fn lost(cache: &Cache, link: &Link, why: &str) {
    let m = &cache.migration;
    m.set_moved(format!(
        "SERVER_ERROR migration from {} failed: the source left",
        link.source
    ));
    m.failures.fetch_add(1, Ordering::Relaxed);
    m.set_state(State::Failed);
    let p = link.region.progress();
    eprintln!(
        "[migrate] lost the source {} ({why}) with {} of {} units copied: the items not \
         copied cannot be served; exiting with status {EXIT_SOURCE_LOST}",
        link.source, p.present, p.units
    );
    std::process::exit(EXIT_SOURCE_LOST);
}
