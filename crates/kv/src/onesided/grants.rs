//! The server side: the listener that answers every connection with the arena's grant, and
//! the revocation that ends it (a restart, a migration's switch-over).
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use remora_fabric::{Listener, Progress, Qp, RegionInfo, Transport};
use remora_mem::{Pd, Region};

use super::{fab, options};

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
/// READs over udp, and over shm when the arena is not a sealed memfd the peer maps) while at
/// most [`MAX_GRANTED`] others are newer, until [`revoke`](GrantServer::revoke).
pub struct GrantServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// What the granting thread and [`GrantServer::revoke`] share.
struct Shared {
    kept: Mutex<Kept>,
    /// The granted memory, kept while queue pairs may READ it.
    _region: Arc<Region>,
}

#[derive(Default)]
struct Kept {
    revoked: bool,
    qps: VecDeque<Qp>,
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
        let shared = Arc::new(Shared {
            kept: Mutex::new(Kept::default()),
            _region: region,
        });
        tracing::info!(%addr, "one-sided readers: the arena is granted at this fabric address");
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("kv-grants".into())
            .spawn(move || grant_loop(&grants, &sh))?;
        Ok(GrantServer { addr, shared })
    }

    /// Where readers connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether [`revoke`](Self::revoke) ended the granting.
    pub fn revoked(&self) -> bool {
        lock(&self.shared.kept).revoked
    }

    /// Stops granting for good: a connection from here on gets no grant (an empty answer,
    /// and its queue pair is closed at once), and every granted queue pair is closed now.
    /// A closed queue pair's responder is gone before this returns, so no READ of a peer over
    /// udp, or over shm from a `-e` file, is answered after it; a peer over shm that maps the
    /// sealed memfd checks before each READ the flag our queue pair sets in the ring it shares
    /// when it stops, so none of its READs starts after this returns either. The peer's READs
    /// fail and it falls back to the protocol.
    pub fn revoke(&self) {
        let qps = {
            let mut k = lock(&self.shared.kept);
            k.revoked = true;
            std::mem::take(&mut k.qps)
        };
        let n = qps.len();
        // Each drop stops its queue pair (its responder, its stream) before the next.
        drop(qps);
        if n > 0 {
            tracing::info!(closed = n, "one-sided readers: grants revoked");
        }
    }
}

impl std::fmt::Debug for GrantServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantServer")
            .field("addr", &self.addr)
            .field("revoked", &self.revoked())
            .finish()
    }
}

impl Drop for GrantServer {
    fn drop(&mut self) {
        self.revoke();
    }
}

fn lock(m: &Mutex<Kept>) -> std::sync::MutexGuard<'_, Kept> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The granting thread: the grant to every connection until revoked, none after.
fn grant_loop(grants: &Grants, sh: &Shared) {
    loop {
        let inc = match grants.listener.incoming() {
            Ok(i) => i,
            Err(e) => {
                tracing::debug!("one-sided grant listener: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let private: &[u8] = if lock(&sh.kept).revoked {
            &[]
        } else {
            &grants.grant
        };
        let qp = match inc.establish(private) {
            Ok((qp, _)) => qp,
            Err(e) => {
                tracing::debug!("one-sided grant refused: {e}");
                continue;
            }
        };
        let mut k = lock(&sh.kept);
        if k.revoked {
            // Revoked meanwhile (or granted nothing): the queue pair goes at once.
            drop(k);
            drop(qp);
            continue;
        }
        if k.qps.len() == MAX_GRANTED {
            k.qps.pop_front();
        }
        k.qps.push_back(qp);
    }
}
