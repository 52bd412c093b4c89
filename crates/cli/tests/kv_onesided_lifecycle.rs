//! One-sided readers (`remora_kv::onesided::Client`, over udp and over shm) while
//! `remora kv serve --one-sided` restarts warm (`-e FILE`, a graceful stop) or migrates
//! (`kv migrate`): every value they return was set for its key, none is older than a write
//! acknowledged before the GET began where the transport allows that promise, and they keep
//! getting answers: READs again after the restart (a re-grant), `mg` on the target after the
//! switch-over (its redirect). Every process started here is killed and reaped on drop.

mod kv_common;
mod migrate_common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kv_common::free_port;
use migrate_common::{dir, key, operator, serve_cmd, target, value, wait_listening, Conn, Proc};
use migrate_common::{Reply, EXE};
use remora_fabric::Transport;
use remora_kv::onesided::Client;

const KEYS: usize = 200;
/// Values of 20 to 116 bytes: within what one READ round brings, so READs decide them.
const BASE: usize = 20;

/// Generations of the values: `begun` once the first set of a round is sent, `done` once
/// every key of it was acknowledged.
#[derive(Default)]
struct Gens {
    begun: AtomicU64,
    done: AtomicU64,
}

/// What a reader saw.
#[derive(Default)]
struct Tally {
    gets: AtomicU64,
    /// GETs READs decided, as the client counts them.
    reads: AtomicU64,
    fallbacks: AtomicU64,
    reconnects: AtomicU64,
    /// Values never set for their key (or with other flags), or from a round not begun.
    wrong: AtomicU64,
    /// Values older than a round acknowledged before the GET began.
    stale: AtomicU64,
    /// Keys that were always set, reported absent.
    misses: AtomicU64,
    errors: AtomicU64,
    /// The newest generation returned.
    newest: AtomicU64,
    /// The client follows another server than the one it opened.
    moved: AtomicBool,
    notes: Mutex<Vec<String>>,
}

impl Tally {
    fn note(&self, s: String) {
        let mut n = self.notes.lock().unwrap();
        if n.len() < 10 {
            n.push(s);
        }
    }

    fn summary(&self, what: &str) -> String {
        let n = |a: &AtomicU64| a.load(SeqCst);
        format!(
            "{what}: {} gets, {} by READs, {} fallbacks, {} reconnects, {} wrong, {} stale, \
             {} misses, {} errors; first notes: {:?}",
            n(&self.gets),
            n(&self.reads),
            n(&self.fallbacks),
            n(&self.reconnects),
            n(&self.wrong),
            n(&self.stale),
            n(&self.misses),
            n(&self.errors),
            self.notes.lock().unwrap()
        )
    }
}

/// The generation `v` says it is, if it is exactly the value of `key` at that generation.
fn gen_of(key: &str, v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?;
    let gen: u64 = s
        .strip_prefix(key)?
        .strip_prefix("/v")?
        .split('/')
        .next()?
        .parse()
        .ok()?;
    (value(key, gen, BASE) == v).then_some(gen)
}

/// A reader: GETs every key in turn until `stop`, checking each answer.
fn reader(
    text: SocketAddr,
    transport: Transport,
    gens: Arc<Gens>,
    stop: Arc<AtomicBool>,
    t: Arc<Tally>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut c = Client::open(text, transport).expect("the server's text port");
        assert!(
            c.reader_mut().is_some(),
            "{transport:?}: no grant found by stats"
        );
        // Longer than a restart of a debug build on a busy machine takes.
        c.reconnect_for = Duration::from_secs(60);
        while !stop.load(SeqCst) {
            for i in 0..KEYS {
                let k = key(i);
                let floor = gens.done.load(SeqCst);
                let got = c.get(k.as_bytes());
                let ceiling = gens.begun.load(SeqCst);
                t.gets.fetch_add(1, SeqCst);
                match got {
                    Ok(Some(it)) => match gen_of(&k, &it.value) {
                        Some(g) if g <= ceiling && it.flags == g as u32 => {
                            if g < floor {
                                t.stale.fetch_add(1, SeqCst);
                                t.note(format!("{k}: generation {g} after {floor} was done"));
                            }
                            t.newest.fetch_max(g, SeqCst);
                        }
                        _ => {
                            t.wrong.fetch_add(1, SeqCst);
                            let v = String::from_utf8_lossy(&it.value).into_owned();
                            t.note(format!("{k}: wrong value {v:?} flags {}", it.flags));
                        }
                    },
                    Ok(None) => {
                        t.misses.fetch_add(1, SeqCst);
                        t.note(format!("{k}: a miss"));
                    }
                    Err(e) => {
                        t.errors.fetch_add(1, SeqCst);
                        t.note(format!("{k}: {e}"));
                    }
                }
                t.reads.store(c.reads, SeqCst);
                t.fallbacks.store(c.fallbacks, SeqCst);
                t.reconnects.store(c.reconnects, SeqCst);
                t.moved.store(c.server() != text, SeqCst);
                if stop.load(SeqCst) {
                    break;
                }
            }
        }
    })
}

/// `set KEY GEN 0 N` (the flags carry the generation) on `c`, following a migration's
/// redirect and waiting out a server that is not there (yet); `c` and `addr` follow it.
fn set(c: &mut Conn, addr: &mut String, k: &str, gen: u64) {
    let v = value(k, gen, BASE);
    let mut req = format!("set {k} {gen} 0 {}\r\n", v.len()).into_bytes();
    req.extend_from_slice(&v);
    req.extend_from_slice(b"\r\n");
    let t0 = Instant::now();
    loop {
        let r = match c.send(&req).and_then(|()| c.line()) {
            Ok(l) if l == "STORED" => return,
            Ok(l) => Conn::other(l),
            Err(r) => r,
        };
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "set {k} at {addr}: {r:?}"
        );
        if let Reply::Redirect(to) = &r {
            *addr = to.clone();
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Ok(n) = Conn::open(addr, Duration::from_secs(30)) {
            *c = n;
        }
    }
}

/// Sets every key to generation `gen`.
fn set_round(c: &mut Conn, addr: &mut String, gens: &Gens, gen: u64) {
    gens.begun.fetch_max(gen, SeqCst);
    for i in 0..KEYS {
        set(c, addr, &key(i), gen);
    }
    gens.done.fetch_max(gen, SeqCst);
}

/// Waits up to `limit` for `cond`.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// `remora kv serve` on loopback `port` with `-A`, `--one-sided 127.0.0.1:GRANT` and `extra`,
/// listening; its stderr in `d/name.log`.
fn serve(d: &Path, name: &str, port: u16, grant: u16, extra: &[&str]) -> Proc {
    let g = format!("127.0.0.1:{grant}");
    let mut args = vec!["-A", "-m", "8", "--one-sided", &g];
    args.extend(extra);
    let mut p = Proc::spawn(
        serve_cmd("127.0.0.1", port, &args, None),
        d.join(format!("{name}.log")),
        name,
    );
    wait_listening(
        &mut p,
        &format!("127.0.0.1:{port}"),
        Duration::from_secs(30),
    );
    p
}

/// The `stats` lines of `addr` that name `name`.
fn stat_lines(addr: &str, name: &str) -> Vec<String> {
    let mut c = Conn::open(addr, Duration::from_secs(10)).unwrap();
    c.send(b"stats\r\n").unwrap();
    let mut found = Vec::new();
    loop {
        let l = c.line().expect("stats");
        if l == "END" {
            return found;
        }
        if l.split(' ').nth(1) == Some(name) {
            found.push(l);
        }
    }
}

fn logs(source: &Proc, target: &Proc, op: &Proc) -> String {
    format!(
        "source: {}\ntarget: {}\nmigrate: {}",
        source.log(),
        target.log(),
        op.log()
    )
}

struct Readers {
    stop: Arc<AtomicBool>,
    tallies: Vec<(Transport, Arc<Tally>)>,
    threads: Vec<JoinHandle<()>>,
}

fn start_readers(text: SocketAddr, gens: &Arc<Gens>) -> Readers {
    let stop = Arc::new(AtomicBool::new(false));
    let mut r = Readers {
        stop: stop.clone(),
        tallies: Vec::new(),
        threads: Vec::new(),
    };
    for transport in [Transport::Udp, Transport::Shm] {
        let t = Arc::new(Tally::default());
        r.threads.push(reader(
            text,
            transport,
            gens.clone(),
            stop.clone(),
            t.clone(),
        ));
        r.tallies.push((transport, t));
    }
    r
}

impl Readers {
    /// Waits until every reader's `what` passes `at_least`; false after `limit`.
    fn wait(&self, limit: Duration, what: fn(&Tally) -> u64, at_least: &[u64]) -> bool {
        wait_for(limit, || {
            self.tallies
                .iter()
                .zip(at_least)
                .all(|((_, t), &n)| what(t) >= n)
        })
    }

    fn each(&self, what: fn(&Tally) -> u64) -> Vec<u64> {
        self.tallies.iter().map(|(_, t)| what(t)).collect()
    }

    fn finish(self) -> Vec<(Transport, Arc<Tally>)> {
        self.stop.store(true, SeqCst);
        for t in self.threads {
            t.join().expect("a reader panicked");
        }
        self.tallies
    }
}

fn reads(t: &Tally) -> u64 {
    t.reads.load(SeqCst)
}
fn reconnects(t: &Tally) -> u64 {
    t.reconnects.load(SeqCst)
}
fn newest(t: &Tally) -> u64 {
    t.newest.load(SeqCst)
}
fn moved(t: &Tally) -> u64 {
    u64::from(t.moved.load(SeqCst))
}

/// Every answer was a value set for its key, no GET failed or missed an item that was set.
#[track_caller]
fn assert_sound(what: &str, t: &Tally) {
    let s = t.summary(what);
    eprintln!("{s}");
    assert_eq!(t.wrong.load(SeqCst), 0, "{s}");
    assert_eq!(t.misses.load(SeqCst), 0, "{s}");
    assert_eq!(t.errors.load(SeqCst), 0, "{s}");
}

#[test]
fn readers_fall_back_through_a_warm_restart_and_read_one_sidedly_again_after_it() {
    let d = dir("onesided-restart");
    let file = d.join("arena");
    let f = file.to_str().unwrap().to_string();
    let (port, grant) = (free_port(), free_port());
    let addr = format!("127.0.0.1:{port}");
    let mut srv = serve(&d, "first", port, grant, &["-e", &f]);
    assert_eq!(
        stat_lines(&addr, "one_sided_grant"),
        [format!("STAT one_sided_grant 127.0.0.1:{grant}")],
        "stats names the grant listener"
    );
    let gens = Arc::new(Gens::default());
    let mut c = Conn::open(&addr, Duration::from_secs(10)).unwrap();
    let mut at = addr.clone();
    set_round(&mut c, &mut at, &gens, 1);
    let readers = start_readers(addr.parse().unwrap(), &gens);
    assert!(
        readers.wait(Duration::from_secs(30), reads, &[50, 50]),
        "READs decide GETs before the restart: {:?}",
        readers.each(reads)
    );
    set_round(&mut c, &mut at, &gens, 2);
    // A graceful stop saves the arena; the readers' grants are revoked on the way.
    assert_eq!(c.ask("shutdown graceful"), Reply::Closed);
    let st = srv.wait_exit(Duration::from_secs(60));
    assert!(st.is_some_and(|s| s.success()), "{st:?}: {}", srv.log());
    assert!(srv.log().contains("saved: the next start"), "{}", srv.log());
    let before = readers.each(reads);
    let srv2 = serve(&d, "second", port, grant, &["-e", &f]);
    assert!(
        srv2.log().contains("warm start"),
        "the --one-sided arena restores: {}",
        srv2.log()
    );
    // Back on READs: each reader connected again, found the grant by stats and reads.
    let after: Vec<u64> = before.iter().map(|n| n + 200).collect();
    let back = readers.wait(Duration::from_secs(60), reconnects, &[1, 1])
        && readers.wait(Duration::from_secs(60), reads, &after);
    let mut c = Conn::open(&addr, Duration::from_secs(10)).unwrap();
    set_round(&mut c, &mut at, &gens, 3);
    let fresh = readers.wait(Duration::from_secs(60), newest, &[3, 3]);
    let tallies = readers.finish();
    for (transport, t) in &tallies {
        assert_sound(&format!("{transport:?}"), t);
        assert_eq!(t.stale.load(SeqCst), 0, "{}", t.summary("stale values"));
    }
    assert!(back, "READs did not resume after the restart: {:?}", {
        tallies
            .iter()
            .map(|(_, t)| t.summary(""))
            .collect::<Vec<_>>()
    });
    assert!(
        fresh,
        "the readers never saw the values set after the restart"
    );
    drop(srv2);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_server_without_one_sided_names_no_grant_and_the_client_reads_by_mg() {
    let d = dir("onesided-none");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut p = Proc::spawn(
        serve_cmd("127.0.0.1", port, &[], None),
        d.join("plain.log"),
        "plain",
    );
    wait_listening(&mut p, &addr, Duration::from_secs(30));
    assert!(stat_lines(&addr, "one_sided_grant").is_empty());
    let (gens, mut at) = (Gens::default(), addr.clone());
    let mut c = Conn::open(&addr, Duration::from_secs(10)).unwrap();
    set_round(&mut c, &mut at, &gens, 1);
    let mut cl = Client::open(addr.parse().unwrap(), Transport::Udp).unwrap();
    assert!(cl.reader_mut().is_none(), "no grant to be had");
    let it = cl.get(key(7).as_bytes()).unwrap().expect("set");
    assert_eq!(gen_of(&key(7), &it.value), Some(1));
    assert_eq!((cl.reads, cl.fallbacks), (0, 1));
    // `--one-sided` with what it cannot serve is still refused, with the reason.
    let out = std::process::Command::new(EXE)
        .args(["kv", "serve", "-p", &free_port().to_string()])
        .args(["--one-sided", "127.0.0.1:0", "-o", "storage=heap"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--one-sided with -o storage=heap"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn readers_follow_a_migration_to_the_target_and_never_return_a_value_it_overwrote() {
    let d = dir("onesided-migrate");
    let (port, grant) = (free_port(), free_port());
    let src = format!("127.0.0.1:{port}");
    let mut source = serve(&d, "source", port, grant, &[]);
    let gens = Arc::new(Gens::default());
    let mut c = Conn::open(&src, Duration::from_secs(10)).unwrap();
    let mut at = src.clone();
    set_round(&mut c, &mut at, &gens, 1);
    let readers = start_readers(src.parse().unwrap(), &gens);
    assert!(
        readers.wait(Duration::from_secs(30), reads, &[50, 50]),
        "READs decide GETs on the source: {:?}",
        readers.each(reads)
    );
    // A writer sets round after round, on the source and then, redirected, on the target.
    let stop_writer = Arc::new(AtomicBool::new(false));
    let writer = {
        let (gens, stop) = (gens.clone(), stop_writer.clone());
        std::thread::spawn(move || {
            let mut gen = 1;
            while !stop.load(SeqCst) {
                gen += 1;
                set_round(&mut c, &mut at, &gens, gen);
                std::thread::sleep(Duration::from_millis(5));
            }
            at
        })
    };
    // The copy is held to 512 kB/s: the source stays up (its arena frozen) after the switch,
    // about 10 s for the 5 MB of units that are not zero (zero units go at once), so that a
    // reader the machine's load stalls for seconds still asks it and hears the redirect. At
    // 2 MB/s it stayed 2 s, and a CI run under load saw the udp reader miss it.
    let (mut tgt, tgt_addr) = target(
        &d,
        "127.0.0.1",
        &src,
        &["--migrate-push-rate", "512k"],
        None,
    );
    let mut op = operator(&d, &src, &tgt_addr);
    let switched = readers.wait(Duration::from_secs(120), moved, &[1, 1]);
    // Rounds set on the target after the switch: the readers see them.
    let later = gens.done.load(SeqCst) + 2;
    let written = wait_for(Duration::from_secs(60), || gens.done.load(SeqCst) >= later);
    let fresh = readers.wait(Duration::from_secs(60), newest, &[later, later]);
    stop_writer.store(true, SeqCst);
    let writer_at = writer.join().expect("the writer");
    let tallies = readers.finish();
    for (transport, t) in &tallies {
        eprintln!("{}", t.summary(&format!("{transport:?}")));
    }
    assert!(
        switched,
        "the readers never went to the target; {}",
        logs(&source, &tgt, &op)
    );
    assert_eq!(writer_at, tgt_addr, "the writer was sent to the target");
    assert!(
        written && fresh,
        "rounds on the target unseen ({later}); {}",
        logs(&source, &tgt, &op)
    );
    for (transport, t) in &tallies {
        assert_sound(&format!("{transport:?}"), t);
        assert!(
            t.fallbacks.load(SeqCst) > 0 && reconnects(t) > 0,
            "{}",
            t.summary("moved")
        );
    }
    // No READ is answered once the source revoked its grants, before the target took a write
    // (over udp the source's responders are gone; over shm the reader's direct copy checks the
    // flag the source's queue pair sets when it stops): no GET returns a value older than a
    // round acknowledged before it began.
    for (transport, t) in &tallies {
        assert_eq!(
            t.stale.load(SeqCst),
            0,
            "{}",
            t.summary(&format!("{transport:?}"))
        );
    }
    let st = op.wait_exit(Duration::from_secs(120));
    assert!(
        st.is_some_and(|s| s.success()),
        "{st:?}; {}",
        logs(&source, &tgt, &op)
    );
    let st = source.wait_exit(Duration::from_secs(60));
    assert!(
        st.is_some_and(|s| s.success()),
        "the source did not stop: {st:?}; {}",
        logs(&source, &tgt, &op)
    );
    assert!(
        tgt.running(),
        "the target serves on; {}",
        logs(&source, &tgt, &op)
    );
    let _ = std::fs::remove_dir_all(&d);
}
