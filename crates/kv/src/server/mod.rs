//! Network I/O: an acceptor thread hands TCP and unix connections round-robin to worker
//! threads, each running its own `mio` (epoll) loop (the default) or io_uring loop
//! (`-o io=uring`, falling back to epoll when a ring cannot be set up); `-t` threads per UDP
//! socket.
//!
//! Each connection reads what the kernel has, runs every whole request in it, and sends all
//! replies with one write: pipelined requests and multigets leave in few segments. Output is
//! capped per connection; a slow reader stops being read (and parsed) until it drains, so its
//! memory stays bounded and other connections are not affected.

mod conn;
pub mod conn_table;
mod readbuf;
mod udp;
mod uring;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Once};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::config::{Config, IoDriver};
use crate::handler::Cache;
use conn::Stream;
use conn_table::ConnKind;

/// Start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Could not bind a listening socket.
    #[error("failed to listen on {addr}: {source}")]
    Bind {
        /// What was being bound.
        addr: String,
        /// Cause.
        source: io::Error,
    },
    /// `-l` value is not an address.
    #[error("invalid listen address \"{0}\"")]
    BadAddress(String),
    /// Root without `-u`.
    #[error("can't run as root without the -u switch")]
    RootWithoutUser,
    /// `-u` could not be applied.
    #[error("failed to assume identity of user {0}")]
    User(String),
    /// Another I/O failure at start-up.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The item arena could not be made (`-m`, `-f`, `-n`, `-I`, `-e`).
    #[error("{0}")]
    Arena(#[from] crate::arena::ArenaError),
    /// `--migrate-from`: the cache could not be pulled from its source.
    #[error("migration: {0}")]
    Migrate(String),
}

/// A running server.
pub struct Server {
    /// Shared state.
    pub cache: Arc<Cache>,
    /// Bound TCP addresses.
    pub tcp_addrs: Vec<SocketAddr>,
    /// Bound UDP addresses.
    pub udp_addrs: Vec<SocketAddr>,
    /// The I/O loop the worker threads run.
    pub io_driver: IoDriver,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

const WAKER: Token = Token(usize::MAX);

/// How the acceptor wakes a worker after handing it a connection.
enum Wake {
    Mio(Waker),
    EventFd(Arc<OwnedFd>),
}

impl Wake {
    fn wake(&self) {
        match self {
            Wake::Mio(w) => {
                let _ = w.wake();
            }
            Wake::EventFd(fd) => uring::wake(fd),
        }
    }
}

static URING_FALLBACK: Once = Once::new();

/// memcached's LRU maintainer thread: once a second, dead items near the LRU tails are taken
/// back and pages beyond a lowered memory limit go back to the system.
fn maintainer(eng: Arc<Cache>, stop: Arc<AtomicBool>) {
    let stopped = || stop.load(Ordering::Relaxed) || eng.shutdown.load(Ordering::Relaxed);
    while !stopped() {
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(100));
            if stopped() {
                return;
            }
        }
        eng.maintain();
    }
}

/// Starts one worker thread on the chosen loop and returns how to wake it.
fn spawn_worker(
    i: usize,
    driver: IoDriver,
    rx: mpsc::Receiver<Stream>,
    eng: Arc<Cache>,
    stop: Arc<AtomicBool>,
) -> Result<(JoinHandle<()>, Wake, IoDriver), ServerError> {
    let (wtx, wrx) = mpsc::sync_channel::<io::Result<(Wake, IoDriver)>>(1);
    let t = std::thread::Builder::new()
        .name(format!("kv-worker-{i}"))
        .spawn(move || {
            // The ring is built on its own thread: it is single-issuer.
            if driver == IoDriver::Uring {
                match uring::build_ring().and_then(|r| Ok((r, uring::eventfd()?))) {
                    Ok((ring, efd)) => {
                        let efd = Arc::new(efd);
                        if wtx
                            .send(Ok((Wake::EventFd(efd.clone()), IoDriver::Uring)))
                            .is_ok()
                        {
                            uring::worker(ring, efd, rx, eng, stop);
                        }
                        return;
                    }
                    Err(e) => URING_FALLBACK.call_once(|| {
                        tracing::warn!("io_uring unavailable ({e}); using epoll");
                    }),
                }
            }
            let setup = Poll::new().and_then(|p| {
                let w = Waker::new(p.registry(), WAKER)?;
                Ok((p, w))
            });
            match setup {
                Ok((poll, waker)) => {
                    if wtx.send(Ok((Wake::Mio(waker), IoDriver::Epoll))).is_ok() {
                        conn::worker(poll, rx, eng, stop);
                    }
                }
                Err(e) => {
                    let _ = wtx.send(Err(e));
                }
            }
        })?;
    let (wake, used) = wrx
        .recv()
        .map_err(|_| io::Error::other("worker thread died at start"))??;
    Ok((t, wake, used))
}

/// The addresses to bind for `port` (memcached's `-1`, an ephemeral port, binds port 0).
fn resolve(cfg: &Config, port: i32) -> Result<Vec<SocketAddr>, ServerError> {
    let port = u16::try_from(port.max(0)).map_err(|_| ServerError::BadAddress(port.to_string()))?;
    if cfg.listen.is_empty() {
        return Ok(vec![SocketAddr::new(IpAddr::from([0u8; 4]), port)]);
    }
    let mut v = Vec::new();
    for l in &cfg.listen {
        if let Ok(a) = l.parse::<SocketAddr>() {
            v.push(a);
        } else if let Ok(ip) = l.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>() {
            v.push(SocketAddr::new(ip, port));
        } else if l == "localhost" {
            v.push(SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port));
        } else {
            return Err(ServerError::BadAddress(l.clone()));
        }
    }
    Ok(v)
}

/// memcached's `MEMCACHED_PORT_FILENAME`: one `TCP INET: <port>` / `UDP INET6: <port>` line per
/// bound socket (each UDP socket once, not per worker's descriptor), written to `<path>.lck` and
/// renamed into place, so a reader sees the whole file or none.
fn write_port_file(
    path: &std::path::Path,
    tcp: &[TcpListener],
    udp: &[std::net::UdpSocket],
    threads: usize,
) -> Result<(), ServerError> {
    let mut text = String::new();
    let mut line = |proto: &str, a: SocketAddr| {
        let fam = if a.is_ipv4() { "INET" } else { "INET6" };
        text.push_str(&format!("{proto} {fam}: {}\n", a.port()));
    };
    for l in tcp {
        line("TCP", l.local_addr()?);
    }
    // `udp` holds each socket's descriptors (one per worker) together, the original last.
    for u in udp.iter().skip(threads.max(1) - 1).step_by(threads.max(1)) {
        line("UDP", u.local_addr()?);
    }
    let mut lck = path.as_os_str().to_owned();
    lck.push(".lck");
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&lck)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&lck, path)?;
    Ok(())
}

/// `-b`: listen() again with the asked backlog (Linux updates a listening socket's backlog).
fn set_backlog(fd: impl AsFd, backlog: i32) -> io::Result<()> {
    Ok(rustix::net::listen(fd, backlog)?)
}

/// `-k`: locks every current and future page in memory (`mlockall(MCL_CURRENT | MCL_FUTURE)`).
pub fn lock_memory() -> io::Result<()> {
    use rustix::mm::{mlockall, MlockAllFlags};
    Ok(mlockall(MlockAllFlags::CURRENT | MlockAllFlags::FUTURE)?)
}

fn drop_privileges(cfg: &Config) -> Result<(), ServerError> {
    let root = rustix::process::getuid().is_root();
    let Some(user) = &cfg.user else {
        if root {
            return Err(ServerError::RootWithoutUser);
        }
        return Ok(());
    };
    if !root {
        return Ok(());
    }
    let (uid, gid) = crate::sys::user_ids(user).map_err(|_| ServerError::User(user.clone()))?;
    if uid.is_root() {
        return Ok(());
    }
    // glibc's setgid/setuid, for every thread of the process (see `sys`).
    crate::sys::set_ids(uid, gid).map_err(|_| ServerError::User(user.clone()))
}

/// `migrate begin` reaches the cache through the server: the gate does not hold it.
fn let_migrate_begin(engine: &Arc<Cache>) {
    let weak = Arc::downgrade(engine);
    engine.migration.on_begin(Box::new(move |fd, secret| {
        let cache = weak.upgrade().ok_or("SERVER_ERROR no server")?;
        crate::migrate::source_begin(cache, fd, secret)
    }));
}

impl Server {
    /// Binds every listener, drops privileges, and starts the threads.
    pub fn start(cfg: &Config) -> Result<Server, ServerError> {
        // A migration target pulls the cache from its source (still serving until the
        // listeners below are up and it takes over).
        let (cache, link) = match &cfg.migrate {
            None => (Cache::open(cfg.settings.clone())?, None),
            Some(m) => {
                let (c, l) =
                    crate::migrate::pull(m, cfg.settings.clone()).map_err(ServerError::Migrate)?;
                (c, Some(l))
            }
        };
        let engine = Arc::new(cache);
        let_migrate_begin(&engine);
        let stop = Arc::new(AtomicBool::new(false));
        let s = &cfg.settings;
        let mut tcp = Vec::new();
        let mut unix = None;
        let mut udp_socks = Vec::new();
        if let Some(path) = &s.domain_socket {
            let _ = std::fs::remove_file(path);
            let l = UnixListener::bind(path).map_err(|e| ServerError::Bind {
                addr: path.clone(),
                source: e,
            })?;
            use std::os::unix::fs::PermissionsExt;
            // -a is the socket's access mode (memcached calls it a mask; default 0700).
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(s.umask));
            set_backlog(&l, s.backlog).map_err(|e| ServerError::Bind {
                addr: path.clone(),
                source: e,
            })?;
            let now = engine.now();
            // memcached reads the listener's name into a sockaddr_in6, which keeps only the
            // first 26 bytes of the path: `stats conns` shows it cut there.
            let shown = String::from_utf8_lossy(&path.as_bytes()[..path.len().min(26)]);
            engine.conn_table.add(
                l.as_raw_fd(),
                ConnKind::Listen,
                format!("unix:{shown}"),
                None,
                now,
            );
            unix = Some(l);
        } else if s.tcpport != 0 {
            for a in resolve(cfg, s.tcpport)? {
                let l = TcpListener::bind(a).map_err(|e| ServerError::Bind {
                    addr: a.to_string(),
                    source: e,
                })?;
                set_backlog(&l, s.backlog).map_err(|e| ServerError::Bind {
                    addr: a.to_string(),
                    source: e,
                })?;
                tcp.push(l);
            }
        }
        if s.domain_socket.is_none() && s.udpport != 0 {
            for a in resolve(cfg, s.udpport)? {
                let u = std::net::UdpSocket::bind(a).map_err(|e| ServerError::Bind {
                    addr: a.to_string(),
                    source: e,
                })?;
                // Like memcached, each worker thread serves the socket through its own
                // descriptor (a dup), listed separately by `stats conns`.
                for _ in 1..s.threads {
                    udp_socks.push(u.try_clone()?);
                }
                udp_socks.push(u);
            }
        }
        drop_privileges(cfg)?;
        if s.domain_socket.is_none() {
            if let Some(path) = std::env::var_os("MEMCACHED_PORT_FILENAME") {
                write_port_file(path.as_ref(), &tcp, &udp_socks, s.threads)?;
            }
        }
        for l in &tcp {
            if let Ok(a) = l.local_addr() {
                let (fd, now) = (l.as_raw_fd(), engine.now());
                let addr = conn_table::addr_text("tcp", &a);
                engine.conn_table.add(fd, ConnKind::Listen, addr, None, now);
            }
        }
        for u in &udp_socks {
            if let Ok(a) = u.local_addr() {
                let (fd, now) = (u.as_raw_fd(), engine.now());
                let addr = conn_table::addr_text("udp", &a);
                engine.conn_table.add(fd, ConnKind::Udp, addr, None, now);
            }
        }
        let tcp_addrs = tcp.iter().filter_map(|l| l.local_addr().ok()).collect();
        let udp_addrs = udp_socks
            .iter()
            .filter_map(|u| u.local_addr().ok())
            .collect();

        let mut threads = Vec::new();
        let mut handoff = Vec::new();
        let mut io_driver = cfg.io;
        for i in 0..s.threads {
            let (tx, rx) = mpsc::channel::<Stream>();
            let (t, wake, used) = spawn_worker(i, cfg.io, rx, engine.clone(), stop.clone())?;
            io_driver = used;
            handoff.push((tx, wake));
            threads.push(t);
        }
        for u in udp_socks {
            let eng = engine.clone();
            let stop = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("kv-udp".into())
                    .spawn(move || udp::serve(u, eng, stop))?,
            );
        }
        if s.tunables.lru_maintainer {
            let eng = engine.clone();
            let st = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("kv-maintainer".into())
                    .spawn(move || maintainer(eng, st))?,
            );
        }
        let eng = engine.clone();
        let st = stop.clone();
        let poll = Poll::new()?;
        threads.push(
            std::thread::Builder::new()
                .name("kv-accept".into())
                .spawn(move || acceptor(poll, tcp, unix, handoff, eng, st))?,
        );
        if let Some(link) = link {
            if let Err(e) = crate::migrate::take_over(&engine, link) {
                stop.store(true, Ordering::Relaxed);
                return Err(ServerError::Migrate(e));
            }
        }
        Ok(Server {
            cache: engine,
            tcp_addrs,
            udp_addrs,
            io_driver,
            stop,
            threads,
        })
    }

    /// Asks every thread to stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// A handle that stops the server from another thread (a signal handler's).
    pub fn stopper(&self) -> Stopper {
        Stopper {
            stop: self.stop.clone(),
            cache: self.cache.clone(),
        }
    }

    /// Waits until stopped (by [`Server::stop`], a [`Stopper`] or `shutdown`); after a
    /// graceful stop (SIGUSR1, `shutdown graceful`) a `-e` memory file is left clean, so the
    /// next start with the same settings restores its items.
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
        let graceful = self.cache.graceful.load(Ordering::Relaxed);
        if let (true, Some(path)) = (graceful, &self.cache.settings.memory_file) {
            // Every connection is closed: no reply holds an item any more.
            match self.cache.close_for_restart() {
                Ok(()) => eprintln!(
                    "[restart] memory file {} saved: the next start with the same settings \
                     is warm",
                    path.display()
                ),
                Err(e) => eprintln!(
                    "[restart] saving the memory file {} failed ({e}): the next start is cold",
                    path.display()
                ),
            }
        }
    }
}

/// Stops a [`Server`] from another thread.
#[derive(Clone)]
pub struct Stopper {
    stop: Arc<AtomicBool>,
    cache: Arc<Cache>,
}

impl Stopper {
    /// Stops the server now (SIGTERM, SIGINT): a `-e` memory file is not saved, so the next
    /// start is cold.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops the server gracefully (memcached's SIGUSR1): a `-e` memory file is saved.
    pub fn stop_gracefully(&self) {
        self.cache.graceful.store(true, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn acceptor(
    mut poll: Poll,
    mut tcp: Vec<TcpListener>,
    mut unix: Option<UnixListener>,
    handoff: Vec<(mpsc::Sender<Stream>, Wake)>,
    eng: Arc<Cache>,
    stop: Arc<AtomicBool>,
) {
    for (i, l) in tcp.iter_mut().enumerate() {
        if let Err(e) = poll.registry().register(l, Token(i), Interest::READABLE) {
            tracing::error!("register listener: {e}");
        }
    }
    let unix_token = Token(tcp.len());
    if let Some(u) = unix.as_mut() {
        if let Err(e) = poll.registry().register(u, unix_token, Interest::READABLE) {
            tracing::error!("register unix listener: {e}");
        }
    }
    let mut events = Events::with_capacity(64);
    let mut next = 0usize;
    let maxconns = eng.settings.maxconns as u64;
    loop {
        if stop.load(Ordering::Relaxed) || eng.shutdown.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
            for (_, w) in &handoff {
                w.wake();
            }
            return;
        }
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(100))) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!("acceptor poll: {e}");
            }
            continue;
        }
        // Try every listener each time round, not only those with events: listeners are
        // edge-triggered, and after a failed accept (EMFILE) no new edge may come.
        for token in (0..=tcp.len()).map(Token) {
            loop {
                let accepted = if token == unix_token {
                    match unix.as_ref().map(|u| u.accept()) {
                        Some(Ok((s, _))) => Ok(Stream::Unix(s)),
                        Some(Err(e)) => Err(e),
                        None => break,
                    }
                } else {
                    match tcp.get(token.0).map(|l| l.accept()) {
                        Some(Ok((s, _))) => {
                            let _ = s.set_nodelay(true);
                            Ok(Stream::Tcp(s))
                        }
                        Some(Err(e)) => Err(e),
                        None => break,
                    }
                };
                match accepted {
                    Ok(mut s) => {
                        if eng.conns.curr.load(Ordering::Relaxed) >= maxconns {
                            eng.conns.rejected.fetch_add(1, Ordering::Relaxed);
                            use std::io::Write;
                            let _ = s.write(b"ERROR Too many open connections\r\n");
                            continue;
                        }
                        eng.conns.curr.fetch_add(1, Ordering::Relaxed);
                        eng.conns.total.fetch_add(1, Ordering::Relaxed);
                        let (tx, w) = &handoff[next % handoff.len()];
                        next = next.wrapping_add(1);
                        if tx.send(s).is_ok() {
                            w.wake();
                        } else {
                            eng.conns.curr.fetch_sub(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        // EMFILE and friends: back off briefly instead of spinning.
                        tracing::warn!("accept: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                        break;
                    }
                }
            }
        }
    }
}
