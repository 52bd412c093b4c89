//! GETs by one-sided READs of a remotely readable arena ([`crate::arena::remote`]) over the
//! fabric: the reader's [`Fetch`] as READs of the granted region on a queue pair (`shm` on the
//! same host, RoCEv2 `udp` from another), so a GET costs the server no thread at all over shm
//! and only its fabric responder over udp.
//!
//! The grant is the region's address, length and remote key, carried as the fabric's private
//! data at connect ([`Grants::serve`] answers each connection with it). The region is registered
//! for remote READs only ([`Mapping::register`](crate::arena::Mapping::register)): the fabric
//! refuses a WRITE into it and a READ outside it, and the peer can name no other memory.
//!
//! ```no_run
//! use remora_kv::arena::remote::{Got, Reader};
//! use remora_kv::onesided::FabricFetch;
//! use remora_fabric::Transport;
//! let mut f = FabricFetch::connect("127.0.0.1:7471".parse().unwrap(), Transport::Shm).unwrap();
//! let mut r = Reader::open(&mut f).unwrap();
//! let now = r.now(); // the server's relative clock, for expiry
//! match r.get(&mut f, b"key", now).unwrap() {
//!     Got::Hit(it) => println!("{} bytes", it.value.len()),
//!     Got::Miss => println!("absent"),
//!     Got::Fallback(why) => println!("ask the server ({why:?})"),
//! }
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_fabric::{Listener, Progress, Qp, QpOptions, RegionInfo, Status, Transport};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

use crate::arena::remote::{Fetch, Got, Reader, RemoteItem};

/// Bytes one READ brings at most (larger fetches are split).
const STAGE: usize = 1 << 20;
/// How long a READ may take before the fetch fails (the caller then falls back).
const READ_TIMEOUT: Duration = Duration::from_secs(2);

fn fab(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// Queue-pair options for grant connections: RC, polled by the reader's own thread.
fn options(transport: Transport, progress: Progress) -> QpOptions {
    QpOptions {
        transport,
        retry_timeout: Duration::from_millis(20),
        retry_count: 7,
        progress,
        ..QpOptions::default()
    }
}

/// The server side: a fabric listener that answers every connection with the arena's grant.
pub struct Grants {
    listener: Listener,
    grant: Vec<u8>,
}

impl Grants {
    /// Listens on `addr` (port 0: any) for READers of `region` over `transport`.
    pub fn bind(
        addr: SocketAddr,
        pd: Arc<Pd>,
        region: &Region,
        transport: Transport,
    ) -> io::Result<Grants> {
        let listener = Listener::bind(addr, pd, options(transport, Progress::Thread))
            .map_err(|e| fab("listen", e))?;
        Ok(Grants {
            listener,
            grant: RegionInfo::of(region).encode().to_vec(),
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    /// Accepts one connection, granting it the region; the queue pair must be kept while the
    /// peer reads (its responder answers the peer's READs over udp).
    pub fn accept(&self) -> io::Result<Qp> {
        let (qp, _) = self
            .listener
            .accept(&self.grant)
            .map_err(|e| fab("accept", e))?;
        Ok(qp)
    }
}

/// Most grant connections kept at once; the oldest goes when another comes.
const MAX_GRANTED: usize = 256;

/// `kv serve --one-sided`: a [`Grants`] listener on its own thread, answering every
/// connection with the grant and keeping its queue pair (whose responder serves the peer's
/// READs over udp) while at most [`MAX_GRANTED`] others are newer.
#[derive(Debug)]
pub struct GrantServer {
    addr: SocketAddr,
}

impl GrantServer {
    /// Binds `addr` and starts granting `region`.
    pub fn start(
        addr: SocketAddr,
        pd: Arc<Pd>,
        region: Arc<Region>,
    ) -> Result<GrantServer, crate::arena::ArenaError> {
        let grants = Grants::bind(addr, pd, &region, Transport::Udp)?;
        let addr = grants.local_addr();
        tracing::info!(%addr, "one-sided readers: the arena is granted at this fabric address");
        std::thread::Builder::new()
            .name("kv-grants".into())
            .spawn(move || {
                let _region = region;
                let mut kept = std::collections::VecDeque::new();
                loop {
                    match grants.accept() {
                        Ok(qp) => {
                            if kept.len() == MAX_GRANTED {
                                kept.pop_front();
                            }
                            kept.push_back(qp);
                        }
                        Err(e) => tracing::debug!("one-sided grant refused: {e}"),
                    }
                }
            })?;
        Ok(GrantServer { addr })
    }

    /// Where readers connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// A [`Fetch`] by one-sided READs of a granted arena.
pub struct FabricFetch {
    qp: Qp,
    stage: Arc<Region>,
    remote: RegionInfo,
    next: u64,
}

impl FabricFetch {
    /// Connects to a [`Grants`] listener and takes its grant.
    pub fn connect(addr: SocketAddr, transport: Transport) -> io::Result<FabricFetch> {
        let pd = Arc::new(Pd::new());
        let stage = pd
            .register(
                Buffer::anonymous(STAGE).map_err(|e| fab("staging buffer", e))?,
                Access::LOCAL_WRITE,
                Mode::OnDemand,
            )
            .map_err(|e| fab("staging buffer", e))?;
        let (qp, grant) = remora_fabric::connect(addr, pd, options(transport, Progress::Poll), &[])
            .map_err(|e| fab("connect", e))?;
        let remote = RegionInfo::decode(&grant).map_err(|e| fab("the server's grant", e))?;
        Ok(FabricFetch {
            qp,
            stage,
            remote,
            next: 1,
        })
    }

    /// The granted region: its address, length and remote key.
    pub fn grant(&self) -> &RegionInfo {
        &self.remote
    }

    /// READs `len` bytes at `va` of the peer into the staging region.
    fn read(&mut self, va: u64, len: usize) -> io::Result<()> {
        let id = self.next;
        self.next += 1;
        self.qp
            .post_read(id, &self.stage, 0, len, va, self.remote.rkey)
            .map_err(|e| fab("post READ", e))?;
        let deadline = Instant::now() + READ_TIMEOUT;
        let c = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "READ timed out"));
            }
            if let Some(c) = self.qp.spin(left.min(Duration::from_micros(200))) {
                break c;
            }
            if let Some(c) = self.qp.wait(left).map_err(|e| fab("completion", e))? {
                break c;
            }
        };
        match (c.wr_id == id, c.status) {
            (true, Status::Success) => Ok(()),
            (true, s) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("READ refused: {s:?}"),
            )),
            (false, _) => Err(fab("READ", format!("completion {} for {id}", c.wr_id))),
        }
    }
}

impl Fetch for FabricFetch {
    fn fetch(&mut self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(STAGE);
            let va = self
                .remote
                .addr
                .checked_add(off + done as u64)
                .ok_or_else(|| fab("READ", "address overflows"))?;
            self.read(va, n)?;
            self.stage
                .read_at(0, &mut buf[done..done + n])
                .map_err(|e| fab("staging buffer", e))?;
            done += n;
        }
        Ok(())
    }
}

/// A GET client of `kv serve --one-sided`: one-sided READs first, the text protocol's `mg` on
/// the server's port for what they cannot decide ([`Got::Fallback`]: contention past the
/// reader's bound, a chunked or large item, a long chain) and when READs fail (the server
/// stopped granting, or went).
pub struct Client {
    fetch: Option<FabricFetch>,
    reader: Option<Reader>,
    text: std::io::BufReader<std::net::TcpStream>,
    /// GETs answered by `mg` instead of READs.
    pub fallbacks: u64,
}

impl Client {
    /// Connects to the server's text port `text` and its grant listener `grant`. A grant that
    /// cannot be had leaves the client on the text protocol (every GET falls back).
    pub fn connect(
        text: SocketAddr,
        grant: SocketAddr,
        transport: Transport,
    ) -> io::Result<Client> {
        let stream = std::net::TcpStream::connect(text)?;
        stream.set_nodelay(true)?;
        let (fetch, reader) = match FabricFetch::connect(grant, transport) {
            Ok(mut f) => match Reader::open(&mut f) {
                Ok(r) => (Some(f), Some(r)),
                Err(e) => {
                    tracing::debug!("one-sided reads off: {e}");
                    (None, None)
                }
            },
            Err(e) => {
                tracing::debug!("one-sided reads off: {e}");
                (None, None)
            }
        };
        Ok(Client {
            fetch,
            reader,
            text: std::io::BufReader::new(stream),
            fallbacks: 0,
        })
    }

    /// The reader, to tune its bounds ([`Reader::tries`], [`Reader::max_value`]); `None` when
    /// the client reads through the text protocol only.
    pub fn reader_mut(&mut self) -> Option<&mut Reader> {
        self.reader.as_mut()
    }

    /// The item of `key`: by READs where they decide, else by `mg`.
    pub fn get(&mut self, key: &[u8]) -> io::Result<Option<RemoteItem>> {
        if let (Some(f), Some(r)) = (self.fetch.as_mut(), self.reader.as_mut()) {
            let now = r.now();
            match r.get(f, key, now) {
                Ok(Got::Hit(it)) => return Ok(Some(it)),
                Ok(Got::Miss) => return Ok(None),
                Ok(Got::Fallback(_)) => {}
                Err(e) => {
                    // The grant is gone: the text protocol from here on.
                    tracing::debug!("one-sided reads off: {e}");
                    (self.fetch, self.reader) = (None, None);
                }
            }
        }
        self.fallbacks += 1;
        self.mg(key)
    }

    /// `mg KEY v f c t`: the value, flags, CAS and time to live of `key`.
    fn mg(&mut self, key: &[u8]) -> io::Result<Option<RemoteItem>> {
        use std::io::{BufRead, Read, Write};
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        if key.is_empty()
            || key.len() > 250
            || key
                .iter()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a text-protocol key",
            ));
        }
        let w = self.text.get_mut();
        w.write_all(b"mg ")?;
        w.write_all(key)?;
        w.write_all(b" v f c t\r\n")?;
        let mut line = String::new();
        self.text.read_line(&mut line)?;
        let mut t = line.split_whitespace();
        match t.next() {
            Some("EN") => return Ok(None),
            Some("VA") => {}
            _ => return Err(bad(format!("mg: {}", line.trim_end()))),
        }
        let n: usize = t
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(format!("mg: {}", line.trim_end())))?;
        let (mut flags, mut cas, mut ttl) = (0u32, 0u64, -1i64);
        for tok in t {
            let (k, v) = tok.split_at(1);
            match k {
                "f" => flags = v.parse().unwrap_or(0),
                "c" => cas = v.parse().unwrap_or(0),
                "t" => ttl = v.parse().unwrap_or(-1),
                _ => {}
            }
        }
        let mut value = vec![0u8; n + 2];
        self.text.read_exact(&mut value)?;
        if !value.ends_with(b"\r\n") {
            return Err(bad("mg: a value without its CRLF".into()));
        }
        value.truncate(n);
        let exptime = match (ttl, &self.reader) {
            (t, Some(r)) if t >= 0 => r
                .now()
                .saturating_add(t.clamp(0, i64::from(u32::MAX)) as u32),
            _ => 0,
        };
        Ok(Some(RemoteItem {
            value,
            flags,
            cas,
            exptime,
        }))
    }
}
