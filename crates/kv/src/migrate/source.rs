//! The source's side: `migrate begin` from the target hands the connection to a controller
//! thread, which freezes the cache, serves the arena's pages and switches the clients over
//! (see the module above for the steps and the failures).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use remora_lazy::PageServer;

use super::gate::lock;
use super::page_source::ArenaSource;
use super::{Role, State, LIVENESS};
use crate::handler::{restart, Cache};

/// What `migrate begin` answers when it cannot start (the connection stays a client's).
pub(crate) fn refusal(eng: &Cache) -> Option<&'static str> {
    let m = &eng.migration;
    if eng.settings.storage != crate::handler::StorageKind::Arena {
        return Some("SERVER_ERROR migration needs the arena storage (not -o storage=heap)");
    }
    if !m.is_armed() {
        return Some(
            "SERVER_ERROR migration not armed: run `remora kv migrate --to HOST:PORT` on the source",
        );
    }
    if m.state() != State::Armed {
        return Some("SERVER_ERROR a migration is under way");
    }
    None
}

/// `migrate begin SECRET` on the connection whose socket is `fd`: takes the connection (a
/// duplicate of its socket) for the controller if SECRET is the one armed. The caller lets the
/// connection go without shutting the socket down. The server installs this as the gate's
/// [`Begin`](super::gate::Begin).
pub(crate) fn begin(
    cache: Arc<Cache>,
    fd: Option<std::os::fd::RawFd>,
    secret: &[u8],
) -> Result<(), &'static str> {
    let eng = &*cache;
    if let Some(why) = refusal(eng) {
        return Err(why);
    }
    let fd = fd.ok_or("SERVER_ERROR migration needs a TCP connection")?;
    // SAFETY: `fd` is the socket of the connection whose session runs this command; the worker
    // closes it only when the connection ends, after this command has returned.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let sock = TcpStream::from(
        rustix::io::fcntl_dupfd_cloexec(fd, 0)
            .map_err(|_| "SERVER_ERROR cannot take the connection")?,
    );
    // Last: a secret taken is a source disarmed.
    let to = eng.migration.take_armed(secret).ok_or(
        "SERVER_ERROR migrate begin: missing or wrong secret (the target's --migrate-secret-file)",
    )?;
    eng.migration.set_state(State::Freezing);
    let spawned = std::thread::Builder::new()
        .name("kv-migrate".into())
        .spawn(move || control(cache, sock, to));
    if spawned.is_err() {
        return Err("SERVER_ERROR cannot start the migration thread");
    }
    Ok(())
}

/// Extra metadata lines a target needs beyond a warm restart's: `-o hashpower` (it sizes the
/// mapping), whether the arena is remotely readable (its layout), and the chunks replies held
/// here, for the target to free.
fn extra_meta(eng: &Cache, held: &[u64]) -> String {
    let t = &eng.settings.tunables;
    let mut s = format!("Xhashpower_init {}\n", t.hashpower_init);
    if eng.one_sided.is_some() {
        // A remotely readable arena (`--one-sided`) has its own layout: the target opens it so.
        s.push_str("Xremote 1\n");
    }
    s.push_str("Xheld");
    for off in held {
        s.push_str(&format!(" {off}"));
    }
    s + "\n"
}

fn control(eng: Arc<Cache>, sock: TcpStream, to: String) {
    let m = &eng.migration;
    let t0 = Instant::now();
    let peer = sock.peer_addr().map_or("?".to_string(), |a| a.to_string());
    let _ = sock.set_nonblocking(false);
    let _ = sock.set_nodelay(true);
    let mut out = match sock.try_clone() {
        Ok(o) => o,
        Err(e) => return abort_early(&eng, &format!("cannot use the connection: {e}")),
    };
    // Freeze: requests under way finish, new ones wait here.
    let freeze = m.gate.write().unwrap_or_else(|p| p.into_inner());
    let epoch = eng.process_started();
    let Some(h) = eng.store.hand_over(epoch) else {
        drop(freeze);
        let _ = out.write_all(b"SERVER_ERROR the arena cannot be handed over\r\n");
        return abort_early(&eng, "the store refused to hand its arena over");
    };
    let meta = restart::meta_text(&eng.settings, &h.state, epoch, eng.now(), eng.logger.gid())
        + &extra_meta(&eng, &h.held);
    let len = h.map.len() as u64;
    let src = Arc::new(ArenaSource {
        map: h.map,
        zero_map: h.zero_map,
    });
    let ip = sock.local_addr().map_or([127, 0, 0, 1].into(), |a| a.ip());
    let server = PageServer::bind(SocketAddr::new(ip, 0), src).and_then(|s| s.spawn());
    let mut server = match server {
        Ok(s) => s,
        Err(e) => {
            eng.store.take_back();
            drop(freeze);
            let _ = out.write_all(format!("SERVER_ERROR page server: {e}\r\n").as_bytes());
            return abort_early(&eng, &format!("cannot start the page server: {e}"));
        }
    };
    {
        let mut st = lock(&m.status);
        st.state = State::HandingOver;
        st.bytes = len;
        st.started = Some(t0);
    }
    // Lines end in CRLF, as the rest of the text protocol.
    let hello = format!(
        "MIGRATE {} {len} {to}\r\n{}END\r\n",
        server.addr().port(),
        meta.replace('\n', "\r\n")
    );
    let mut lines = BufReader::new(sock);
    let _ = lines.get_ref().set_read_timeout(Some(LIVENESS));
    let answer = out
        .write_all(hello.as_bytes())
        .ok()
        .and_then(|_| read_line(&mut lines));
    if answer.as_deref() != Some("migrate serving") {
        // The target never took over: nothing it did counts, the arena is ours again.
        server.kill();
        eng.store.take_back();
        drop(freeze);
        m.aborts.fetch_add(1, Ordering::Relaxed);
        m.set_state(State::Aborted);
        eprintln!(
            "[migrate] the target {peer} left before it took over ({}): serving again, every item kept",
            answer.map_or("connection closed or silent".into(), |a| format!("it said `{a}`"))
        );
        return;
    }
    // One-sided readers (`--one-sided`) read this arena without passing the gate, and the
    // freeze does not stop them. Once the target takes writes (after our `OK`), a READ of this
    // frozen arena would return a value the target has since overwritten, or miss a key it
    // has since set: so the grants end here, before the `OK`, and the readers' READs fail
    // (they fall back to `mg`, whose redirect sends them to the target). A READ answered
    // before this read the frozen arena, which was current until the target's first write.
    if let Some(g) = &eng.one_sided {
        g.revoke();
    }
    m.set_moved(format!("SERVER_ERROR migrated to {to}"));
    drop(freeze);
    let downtime = t0.elapsed();
    {
        let mut st = lock(&m.status);
        st.state = State::Moved;
        st.downtime = Some(downtime);
    }
    let _ = out.write_all(b"OK\r\n");
    eprintln!(
        "[migrate] {peer} serves the cache now (clients sent to {to}); switch-over took {:.2} ms; \
         copying {} MiB on demand and by push",
        downtime.as_secs_f64() * 1e3,
        len >> 20
    );
    while let Some(line) = read_line(&mut lines) {
        if let Some(rest) = line.strip_prefix("migrate progress ") {
            let mut it = rest.split(' ').map(|x| x.parse::<u64>().unwrap_or(0));
            lock(&m.status).reported = (it.next().unwrap_or(0), it.next().unwrap_or(0));
            if out.write_all(b"OK\r\n").is_err() {
                break;
            }
        } else if line == "migrate done" {
            let _ = out.write_all(b"OK\r\n");
            server.kill();
            // Whatever happens to this process now, its arena is not a cache to restart.
            eng.store.take_back();
            {
                let mut st = lock(&m.status);
                st.state = State::Done;
                st.copy_time = st.started.map(|s| s.elapsed());
                st.reported.0 = st.reported.1;
            }
            eprintln!("[migrate] the copy to {peer} is complete: stopping");
            eng.shutdown.store(true, Ordering::Relaxed);
            return;
        } else {
            break;
        }
    }
    // The target left after taking over: writes it acknowledged are gone with it, and this
    // arena is older than they were. Its page server goes first, so a target cut off but
    // alive cannot read the arena while it changes.
    server.kill();
    eng.store.flush_now(eng.now());
    eng.store.take_back();
    m.failures.fetch_add(1, Ordering::Relaxed);
    m.set_state(State::Failed);
    m.clear_moved();
    eprintln!(
        "[migrate] the target {peer} left after taking over: serving again with every item \
         flushed (values written there since are lost with it)"
    );
}

fn abort_early(eng: &Cache, why: &str) {
    let m = &eng.migration;
    m.aborts.fetch_add(1, Ordering::Relaxed);
    m.set_state(State::Aborted);
    lock(&m.status).role = Role::Source;
    eprintln!("[migrate] not migrating: {why}");
}

/// One line without its CR/LF; `None` on end of stream, a timeout or an error.
fn read_line(r: &mut BufReader<TcpStream>) -> Option<String> {
    let mut l = String::new();
    match r.read_line(&mut l) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(l.trim_end_matches(['\r', '\n']).to_string()),
    }
}
