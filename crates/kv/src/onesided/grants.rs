//! The server side: the listener that answers every connection with the arena's grant.
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

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

