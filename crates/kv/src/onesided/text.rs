//! The text protocol a one-sided client still speaks: `mg` for what READs cannot decide,
//! `set` and `delete` (writes are two-sided), `stats` to find the grant, and what a failed
//! request says about the server (gone, moved, or answering).
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::arena::remote::RemoteItem;

/// How long a connection attempt to a text port may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A key the text protocol carries (1 to 250 bytes, no spaces or control bytes).
pub(super) fn check_key(key: &[u8]) -> io::Result<()> {
    let ok = !key.is_empty()
        && key.len() <= 250
        && !key
            .iter()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control());
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a text-protocol key (1 to 250 bytes, no spaces or control bytes)",
        ))
    }
}

/// One reply line without its CRLF; `cmd: ` and an empty line when the connection closed.
fn answer(text: &mut BufReader<TcpStream>, cmd: &str) -> io::Result<String> {
    let mut line = String::new();
    if text.read_line(&mut line)? == 0 {
        return Err(invalid(cmd, ""));
    }
    Ok(line.trim_end().to_string())
}

fn invalid(cmd: &str, line: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{cmd}: {line}"))
}

/// `mg KEY v f c t`: the value, flags, CAS and time to live of `key`; with `clock` (the
/// arena's relative clock now) the time to live becomes an expiry on that clock.
pub(super) fn mg(
    text: &mut BufReader<TcpStream>,
    key: &[u8],
    clock: Option<u32>,
) -> io::Result<Option<RemoteItem>> {
    check_key(key)?;
    let w = text.get_mut();
    w.write_all(b"mg ")?;
    w.write_all(key)?;
    w.write_all(b" v f c t\r\n")?;
    let line = answer(text, "mg")?;
    let mut t = line.split_whitespace();
    match t.next() {
        Some("EN") => return Ok(None),
        Some("VA") => {}
        _ => return Err(invalid("mg", &line)),
    }
    let n: usize = t
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| invalid("mg", &line))?;
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
    text.read_exact(&mut value)?;
    if !value.ends_with(b"\r\n") {
        return Err(invalid("mg", "a value without its CRLF"));
    }
    value.truncate(n);
    let exptime = match (ttl, clock) {
        (t, Some(now)) if t >= 0 => now.saturating_add(t.clamp(0, i64::from(u32::MAX)) as u32),
        _ => 0,
    };
    Ok(Some(RemoteItem {
        value,
        flags,
        cas,
        exptime,
    }))
}

/// `set KEY FLAGS EXPTIME LEN` and the value: true when stored, false when not (`NOT_STORED`).
pub(super) fn set(
    text: &mut BufReader<TcpStream>,
    key: &[u8],
    value: &[u8],
    flags: u32,
    exptime: i64,
) -> io::Result<bool> {
    check_key(key)?;
    let mut req = Vec::with_capacity(key.len() + value.len() + 64);
    req.extend_from_slice(b"set ");
    req.extend_from_slice(key);
    req.extend_from_slice(format!(" {flags} {exptime} {}\r\n", value.len()).as_bytes());
    req.extend_from_slice(value);
    req.extend_from_slice(b"\r\n");
    text.get_mut().write_all(&req)?;
    match answer(text, "set")?.as_str() {
        "STORED" => Ok(true),
        "NOT_STORED" => Ok(false),
        other => Err(invalid("set", other)),
    }
}

/// `delete KEY`: true when it was there.
pub(super) fn delete(text: &mut BufReader<TcpStream>, key: &[u8]) -> io::Result<bool> {
    check_key(key)?;
    let w = text.get_mut();
    w.write_all(b"delete ")?;
    w.write_all(key)?;
    w.write_all(b"\r\n")?;
    match answer(text, "delete")?.as_str() {
        "DELETED" => Ok(true),
        "NOT_FOUND" => Ok(false),
        other => Err(invalid("delete", other)),
    }
}

/// What a failed `mg` says about the server.
#[derive(Debug, PartialEq)]
pub(super) enum Trouble {
    /// The connection broke or closed: the server stopped (a restart, say).
    Lost,
    /// The cache moved (a migration): `HOST:PORT` it went to.
    Moved(String),
    /// Anything else: an answer, not a missing server.
    Other,
}

/// Whether `e` means the server went, moved, or answered.
pub(super) fn trouble(e: &io::Error) -> Trouble {
    use io::ErrorKind::*;
    match e.kind() {
        BrokenPipe | ConnectionReset | ConnectionAborted | NotConnected | UnexpectedEof => {
            Trouble::Lost
        }
        InvalidData => {
            // "COMMAND: the server's line", as `answer` words it.
            let m = e.to_string();
            match m.split_once(": ") {
                // The connection closed before a line came.
                Some((_, "")) => Trouble::Lost,
                Some((_, l)) => l
                    .strip_prefix("SERVER_ERROR migrated to ")
                    .map_or(Trouble::Other, |to| Trouble::Moved(to.trim().to_string())),
                None => Trouble::Other,
            }
        }
        _ => Trouble::Other,
    }
}

/// The first address `to` ("HOST:PORT") resolves to.
pub(super) fn resolve(to: &str) -> io::Result<SocketAddr> {
    to.to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{to} resolves to nothing")))
}

/// A connection to a text port, without Nagle's delay.
pub(super) fn text_conn(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Asks `stats` and finds `STAT one_sided_grant HOST:PORT`: `Ok(Some(addr))`, `Ok(None)`
/// without one, `Err(HOST:PORT)` when the server answers with a migration's redirect.
pub(super) fn stats_grant(
    text: &mut BufReader<TcpStream>,
) -> io::Result<Result<Option<SocketAddr>, String>> {
    text.get_mut().write_all(b"stats\r\n")?;
    let mut grant = None;
    loop {
        let mut line = String::new();
        if text.read_line(&mut line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection during `stats`",
            ));
        }
        let line = line.trim_end();
        if line == "END" {
            return Ok(Ok(grant));
        }
        if let Some(to) = line.strip_prefix("SERVER_ERROR migrated to ") {
            return Ok(Err(to.trim().to_string()));
        }
        let mut t = line.split(' ');
        match (t.next(), t.next(), t.next()) {
            (Some("STAT"), Some("one_sided_grant"), Some(a)) => grant = a.parse().ok(),
            (Some("STAT"), _, _) => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("stats: {line}"),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_mg_tells_a_lost_server_from_a_moved_one_and_from_an_answer() {
        let data = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        assert_eq!(trouble(&data("mg: ")), Trouble::Lost);
        assert_eq!(
            trouble(&io::Error::from(io::ErrorKind::UnexpectedEof)),
            Trouble::Lost
        );
        assert_eq!(
            trouble(&io::Error::from(io::ErrorKind::ConnectionReset)),
            Trouble::Lost
        );
        assert_eq!(
            trouble(&data("mg: SERVER_ERROR migrated to 10.0.0.2:11211")),
            Trouble::Moved("10.0.0.2:11211".into())
        );
        assert_eq!(
            trouble(&data(
                "mg: SERVER_ERROR migration from h:1 failed: the source left"
            )),
            Trouble::Other
        );
        assert_eq!(
            trouble(&data("mg: a value without its CRLF")),
            Trouble::Other
        );
        assert_eq!(
            trouble(&data("set: SERVER_ERROR migrated to 10.0.0.2:11211")),
            Trouble::Moved("10.0.0.2:11211".into())
        );
        assert_eq!(trouble(&data("delete: ")), Trouble::Lost);
        assert_eq!(
            trouble(&io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a text-protocol key"
            )),
            Trouble::Other
        );
    }
}
