//! A GET client that reads one-sidedly where it can and asks the server where it must.
use std::io;
use std::net::SocketAddr;

use remora_fabric::Transport;

use super::FabricFetch;
use crate::arena::remote::{Got, Reader, RemoteItem};

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
