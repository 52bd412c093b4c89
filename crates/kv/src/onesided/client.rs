//! A GET client that reads one-sidedly where it can and asks the server where it must, and
//! follows the server through a restart (`-e`) or a migration (`kv migrate`).
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use remora_fabric::Transport;

use super::text::{self, resolve, stats_grant, text_conn, trouble, Trouble};
use super::FabricFetch;
use crate::arena::remote::{Got, Reader, RemoteItem};

/// Redirects followed in a row before a GET gives up (a loop of moved servers).
const MAX_HOPS: usize = 4;

/// A GET client of `kv serve --one-sided`: one-sided READs first, the text protocol's `mg` on
/// the server's port for what they cannot decide ([`Got::Fallback`]: contention past the
/// reader's bound, a chunked or large item, a long chain) and when READs fail (the server
/// stopped granting, or went).
///
/// When the text connection fails (the server stopped, say for a warm restart) `get` connects
/// again to the same address, and when the server answers with a migration's redirect
/// (`SERVER_ERROR migrated to HOST:PORT`) it connects to the address named; either way it asks
/// the server's `stats` for the grant there (`one_sided_grant`) and reads one-sidedly again
/// when there is one. It keeps trying for [`reconnect_for`](Client::reconnect_for), then
/// returns the error: a GET answers from a server or not at all.
pub struct Client {
    fetch: Option<FabricFetch>,
    reader: Option<Reader>,
    text: std::io::BufReader<std::net::TcpStream>,
    /// The server's text address (a redirect moves it).
    addr: SocketAddr,
    /// How to READ a grant; `None`: the text protocol only ([`text_only`](Self::text_only)).
    transport: Option<Transport>,
    /// GETs answered by `mg` instead of READs.
    pub fallbacks: u64,
    /// GETs READs decided (hits and misses).
    pub reads: u64,
    /// Connections made again after the first: a lost connection or a redirect.
    pub reconnects: u64,
    /// How long a GET keeps trying to reach a server that went (5 s unless set).
    pub reconnect_for: Duration,
}

/// A server reached: its text connection and address, and its grant's reader if it has one.
struct Dialed {
    text: std::io::BufReader<TcpStream>,
    addr: SocketAddr,
    grant: Option<(FabricFetch, Reader)>,
}

impl Client {
    /// Connects to the server's text port `text` and its grant listener `grant`. A grant that
    /// cannot be had leaves the client on the text protocol (every GET falls back). After a
    /// reconnection the grant is found by `stats`, as [`open`](Self::open) finds it.
    pub fn connect(
        text: SocketAddr,
        grant: SocketAddr,
        transport: Transport,
    ) -> io::Result<Client> {
        let stream = text_conn(text)?;
        let grant = take_grant(grant, transport);
        Ok(Client::over(
            Dialed {
                text: std::io::BufReader::new(stream),
                addr: text,
                grant,
            },
            Some(transport),
        ))
    }

    /// Connects to the server's text port `text` and finds its grant listener there: the
    /// `one_sided_grant` line of `stats` (`--one-sided`). No such line, or a grant that cannot
    /// be had: the text protocol only. A server that moved (a migration) is followed.
    pub fn open(text: SocketAddr, transport: Transport) -> io::Result<Client> {
        Ok(Client::over(dial(text, Some(transport))?, Some(transport)))
    }

    /// Connects to the server's text port `text` and asks for no grant: every GET by `mg`,
    /// following the server through a restart or a migration as the others do.
    pub fn text_only(text: SocketAddr) -> io::Result<Client> {
        Ok(Client::over(dial(text, None)?, None))
    }

    fn over(d: Dialed, transport: Option<Transport>) -> Client {
        let (fetch, reader) = d.grant.map_or((None, None), |(f, r)| (Some(f), Some(r)));
        Client {
            fetch,
            reader,
            text: d.text,
            addr: d.addr,
            transport,
            fallbacks: 0,
            reads: 0,
            reconnects: 0,
            reconnect_for: Duration::from_secs(5),
        }
    }

    /// The reader, to tune its bounds ([`Reader::tries`], [`Reader::max_value`]); `None` when
    /// the client reads through the text protocol only.
    pub fn reader_mut(&mut self) -> Option<&mut Reader> {
        self.reader.as_mut()
    }

    /// The server's text address now (another one after a migration's redirect).
    pub fn server(&self) -> SocketAddr {
        self.addr
    }

    /// The item of `key`: by READs where they decide, else by `mg` (following the server
    /// through a restart or a migration).
    pub fn get(&mut self, key: &[u8]) -> io::Result<Option<RemoteItem>> {
        // The same keys as the text protocol, however the GET goes.
        text::check_key(key)?;
        if let (Some(f), Some(r)) = (self.fetch.as_mut(), self.reader.as_mut()) {
            let now = r.now();
            match r.get(f, key, now) {
                Ok(Got::Hit(it)) => {
                    self.reads += 1;
                    return Ok(Some(it));
                }
                Ok(Got::Miss) => {
                    self.reads += 1;
                    return Ok(None);
                }
                Ok(Got::Fallback(_)) => {}
                Err(e) => {
                    // The grant is gone (revoked, or the server went): the text protocol
                    // until a reconnection finds a grant again.
                    tracing::debug!("one-sided reads off: {e}");
                    (self.fetch, self.reader) = (None, None);
                }
            }
        }
        self.fallbacks += 1;
        self.on_server(|c| c.mg(key))
    }

    /// The items of `keys`, in order: the keys' READs walked together
    /// ([`Reader::get_many`], a round trip per step for the whole batch), each key READs cannot
    /// decide by `mg` (following the server as [`get`](Self::get) does).
    pub fn get_many(&mut self, keys: &[&[u8]]) -> io::Result<Vec<Option<RemoteItem>>> {
        keys.iter().try_for_each(|k| text::check_key(k))?;
        let mut got: Vec<Option<Got>> = vec![None; keys.len()];
        if let (Some(f), Some(r)) = (self.fetch.as_mut(), self.reader.as_mut()) {
            let now = r.now();
            match r.get_many(f, keys, now) {
                Ok(g) => got = g.into_iter().map(Some).collect(),
                Err(e) => {
                    tracing::debug!("one-sided reads off: {e}");
                    (self.fetch, self.reader) = (None, None);
                }
            }
        }
        let mut out = Vec::with_capacity(keys.len());
        for (key, g) in keys.iter().zip(got) {
            out.push(match g {
                Some(Got::Hit(it)) => {
                    self.reads += 1;
                    Some(it)
                }
                Some(Got::Miss) => {
                    self.reads += 1;
                    None
                }
                Some(Got::Fallback(_)) | None => {
                    self.fallbacks += 1;
                    self.on_server(|c| c.mg(key))?
                }
            });
        }
        Ok(out)
    }

    /// Stores `value` under `key` with the text protocol's `set` (writes are two-sided):
    /// true when stored. `exptime` as memcached takes it (seconds, or a unix time).
    pub fn set(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> io::Result<bool> {
        self.on_server(|c| text::set(&mut c.text, key, value, flags, exptime))
    }

    /// Deletes `key` with the text protocol's `delete`: true when it was there.
    pub fn delete(&mut self, key: &[u8]) -> io::Result<bool> {
        self.on_server(|c| text::delete(&mut c.text, key))
    }

    /// Whether GETs go by READs now (a grant is held).
    pub fn one_sided(&self) -> bool {
        self.reader.is_some()
    }

    /// Runs `op` on the text connection; when the server went (a restart) or moved (a
    /// migration's redirect), connects again, to the same address or the one named, until
    /// [`reconnect_for`](Self::reconnect_for) has passed.
    fn on_server<T>(&mut self, mut op: impl FnMut(&mut Self) -> io::Result<T>) -> io::Result<T> {
        let mut until = None;
        let mut hops = 0;
        loop {
            let e = match op(self) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let until = *until.get_or_insert_with(|| Instant::now() + self.reconnect_for);
            let to = match trouble(&e) {
                Trouble::Moved(_) if hops == MAX_HOPS => return Err(e),
                Trouble::Moved(to) => {
                    hops += 1;
                    resolve(&to)?
                }
                // A server that takes the connection and drops it again gives no answer.
                Trouble::Lost if Instant::now() >= until => return Err(e),
                Trouble::Lost => self.addr,
                Trouble::Other => return Err(e),
            };
            self.reconnect(to, until, &e)?;
        }
    }

    /// Connects to `to` again (the same server after a restart, or the one a redirect named)
    /// and finds its grant, trying until `until`; `why` is what went wrong.
    fn reconnect(&mut self, to: SocketAddr, until: Instant, why: &io::Error) -> io::Result<()> {
        tracing::debug!(%to, "reconnecting: {why}");
        (self.fetch, self.reader) = (None, None);
        loop {
            match dial(to, self.transport) {
                Ok(d) => {
                    (self.text, self.addr) = (d.text, d.addr);
                    (self.fetch, self.reader) =
                        d.grant.map_or((None, None), |(f, r)| (Some(f), Some(r)));
                    self.reconnects += 1;
                    return Ok(());
                }
                Err(e) if Instant::now() >= until => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("no server at {to} since `{why}`: {e}"),
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// `mg KEY v f c t`: the value, flags, CAS and time to live of `key`; the time to live
    /// becomes an expiry on the arena's clock where a reader knows it.
    fn mg(&mut self, key: &[u8]) -> io::Result<Option<RemoteItem>> {
        let clock = self.reader.as_ref().map(Reader::now);
        text::mg(&mut self.text, key, clock)
    }
}

/// The grant at `addr` and a reader of it; `None` (logged) when it cannot be had.
fn take_grant(addr: SocketAddr, transport: Transport) -> Option<(FabricFetch, Reader)> {
    let got = FabricFetch::connect(addr, transport).and_then(|mut f| {
        Reader::open(&mut f)
            .map(|r| (f, r))
            .map_err(|e| io::Error::other(e.to_string()))
    });
    got.map_err(|e| tracing::debug!("one-sided reads off: {e}"))
        .ok()
}

/// Connects to the text port at `to` (following redirects) and, given a transport, takes the
/// grant its `stats` names.
fn dial(mut to: SocketAddr, transport: Option<Transport>) -> io::Result<Dialed> {
    for _ in 0..=MAX_HOPS {
        let mut text = std::io::BufReader::new(text_conn(to)?);
        match stats_grant(&mut text)? {
            Err(moved) => to = resolve(&moved)?,
            Ok(grant) => {
                // A listener on every address names none: the server's own, then.
                let grant = grant.map(|g| match g.ip().is_unspecified() {
                    true => SocketAddr::new(to.ip(), g.port()),
                    false => g,
                });
                let grant = grant.zip(transport).and_then(|(g, t)| take_grant(g, t));
                return Ok(Dialed {
                    text,
                    addr: to,
                    grant,
                });
            }
        }
    }
    Err(io::Error::other(format!(
        "more than {MAX_HOPS} redirects in a row, the last to {to}"
    )))
}
