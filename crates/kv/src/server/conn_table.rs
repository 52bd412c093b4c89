//! The connection table behind `stats conns`: listeners, UDP sockets and client connections
//! keyed by file descriptor, printed in memcached's format (`<fd>:addr`, `<fd>:state`, …).
//! Entries are shared with their connection, which updates its state and last-command time
//! with relaxed atomic stores, so the hot path takes no lock.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnKind {
    /// A TCP listening socket.
    Listen,
    /// A UDP socket.
    Udp,
    /// An accepted client connection.
    Client,
}

/// memcached state names, by the values stored in [`ConnEntry`].
const STATES: [&str; 6] = [
    "conn_listening",
    "conn_read",
    "conn_new_cmd",
    "conn_parse_cmd",
    "conn_nread",
    "conn_swallow",
];
/// A connection waiting for its next request.
pub const STATE_READ: u8 = 1;
/// A client connection that has not sent a request yet.
pub const STATE_NEW_CMD: u8 = 2;
/// A connection whose requests are being run.
pub const STATE_PARSE_CMD: u8 = 3;
/// A connection that sent a command and waits for the rest of its data (a value).
pub const STATE_NREAD: u8 = 4;
/// A connection discarding the value of a refused store.
pub const STATE_SWALLOW: u8 = 5;

/// One socket's line group.
#[derive(Debug)]
pub struct ConnEntry {
    kind: ConnKind,
    addr: String,
    listen_addr: Option<String>,
    state: AtomicU8,
    last_cmd: AtomicU32,
}

impl ConnEntry {
    /// Records that requests are being run now (`now` on the server's relative clock).
    pub fn busy(&self, now: u32) {
        self.state.store(STATE_PARSE_CMD, Relaxed);
        self.last_cmd.store(now, Relaxed);
    }

    /// Records that the connection waits for more input.
    pub fn idle(&self) {
        self.state.store(STATE_READ, Relaxed);
    }

    /// Records what a connection waits for after its input was run: the data of a command
    /// already received (`conn_nread`), the rest of a refused value (`conn_swallow`), or a new
    /// command.
    pub fn waiting(&self, state: u8) {
        self.state.store(state, Relaxed);
    }

    /// When the connection last ran a command, if it now waits for a new one (memcached's
    /// idle timeout only closes connections in `conn_new_cmd` or `conn_read`).
    pub fn idle_since(&self) -> Option<u32> {
        match self.state.load(Relaxed) {
            STATE_READ | STATE_NEW_CMD => Some(self.last_cmd.load(Relaxed)),
            _ => None,
        }
    }
}

/// memcached's `tcp:1.2.3.4:11211` / `tcp6:[::1]:11211` spelling.
pub fn addr_text(proto: &str, a: &SocketAddr) -> String {
    match a {
        SocketAddr::V4(v) => format!("{proto}:{}:{}", v.ip(), v.port()),
        SocketAddr::V6(v) => format!("{proto}6:[{}]:{}", v.ip(), v.port()),
    }
}

/// Every known socket, by descriptor.
#[derive(Debug, Default)]
pub struct ConnTable {
    entries: Mutex<BTreeMap<i32, Arc<ConnEntry>>>,
}

impl ConnTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, Arc<ConnEntry>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a socket and returns its shared entry.
    pub fn add(
        &self,
        fd: i32,
        kind: ConnKind,
        addr: String,
        listen_addr: Option<String>,
        now: u32,
    ) -> Arc<ConnEntry> {
        let state = match kind {
            ConnKind::Listen => 0,
            ConnKind::Udp => STATE_READ,
            ConnKind::Client => STATE_NEW_CMD,
        };
        let e = Arc::new(ConnEntry {
            kind,
            addr,
            listen_addr,
            state: AtomicU8::new(state),
            last_cmd: AtomicU32::new(now),
        });
        self.lock().insert(fd, e.clone());
        e
    }

    /// Forgets a closed socket.
    pub fn remove(&self, fd: i32) {
        self.lock().remove(&fd);
    }

    /// The `stats conns` lines, in descriptor order.
    pub fn lines(&self, now: u32) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (fd, e) in self.lock().iter() {
            if e.kind == ConnKind::Udp {
                out.push((format!("{fd}:UDP"), "UDP".to_string()));
            }
            out.push((format!("{fd}:addr"), e.addr.clone()));
            if let Some(l) = &e.listen_addr {
                out.push((format!("{fd}:listen_addr"), l.clone()));
            }
            let st = STATES[e.state.load(Relaxed) as usize % STATES.len()];
            out.push((format!("{fd}:state"), st.to_string()));
            let secs = now.saturating_sub(e.last_cmd.load(Relaxed));
            out.push((format!("{fd}:secs_since_last_cmd"), secs.to_string()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_memcached_layout() {
        let t = ConnTable::default();
        let l: SocketAddr = "127.0.0.1:11211".parse().unwrap();
        let c: SocketAddr = "[::1]:5000".parse().unwrap();
        let e = t.add(
            9,
            ConnKind::Client,
            addr_text("tcp", &c),
            Some(addr_text("tcp", &l)),
            5,
        );
        t.add(3, ConnKind::Listen, addr_text("tcp", &l), None, 1);
        t.add(4, ConnKind::Udp, addr_text("udp", &l), None, 1);
        e.busy(7);
        let got: Vec<String> = t
            .lines(8)
            .into_iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        assert_eq!(
            got,
            [
                "3:addr tcp:127.0.0.1:11211",
                "3:state conn_listening",
                "3:secs_since_last_cmd 7",
                "4:UDP UDP",
                "4:addr udp:127.0.0.1:11211",
                "4:state conn_read",
                "4:secs_since_last_cmd 7",
                "9:addr tcp6:[::1]:5000",
                "9:listen_addr tcp:127.0.0.1:11211",
                "9:state conn_parse_cmd",
                "9:secs_since_last_cmd 1",
            ]
        );
        t.remove(9);
        assert_eq!(t.lines(8).len(), 7);
    }
}
