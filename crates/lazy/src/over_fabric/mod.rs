//! The page server over `remora-fabric`: the client READs pages one-sidedly from the server's
//! registered region (RC READ over `udp`, or `shm`/`tcp` through the fabric's stream
//! transports), so no server thread touches the urgent path. The region table (address, length,
//! rkey) and the [`Hello`](crate::protocol::Hello) (segments, zero map) travel as private data
//! at connect.
//!
//! A file or memfd source is mapped shared, read-only, and that mapping is registered: clients
//! READ the file's current pages (the page cache), so bytes written after the server started
//! are served, with no copy at start. Other sources (the server's own bytes, a live process,
//! whose memory cannot be registered) are copied into a registered region at start: clients READ
//! that snapshot. The tcp page server, by contrast, reads every source at each request.
//!
//! Over `shm` the server also hands its bytes over (`shmmap.rs`): a read-only descriptor of the
//! file or memfd behind the region (a snapshot is then taken into a memfd), which the client maps
//! and installs units straight from; or, for a live process, a pidfd, and the client reads the
//! process with `process_vm_readv` under its own credentials, so it sees the process's current
//! memory. The queue pair stays as the fallback and for push.
//!
//! The length served is the file's length at start. If the file shrinks while served, a READ of
//! a page past its new end is either refused (the on-demand region cannot page it in) or, if the
//! page was in, raises SIGBUS in the server; the crate's SIGBUS handler then replaces the page
//! with a zero page, so the READ returns zeros and the page stays zero for the server's life.
//!
//! Progress (who drives a queue pair's receive side and timers, [`Progress`]): the server's
//! queue pairs keep the fabric's receive thread, since nothing in the server ever polls them and
//! its responders must answer READs at any time. A client's udp queue pairs default to
//! [`Progress::Poll`] ([`FabricFetcher::default_progress`]): the thread that posts a READ is the
//! one that waits for its completion, so it receives the response itself instead of being woken
//! by a second thread. That is safe because of how the client uses its queue pairs:
//! - each is used by one thread at a time: a fetch (from a handler thread, a SIGBUS handler, the
//!   working-set thread; prefetched units travel in the same READ) takes a queue pair out of the
//!   pool for the whole READ, and the push thread has a queue pair of its own; every queue pair
//!   has its own udp device (one per `connect`), so no two threads compete to drive one;
//! - the client only requests and the server only responds: the requester's timers
//!   (retransmission, RNR wait) run only while a READ is outstanding, which is exactly while a
//!   thread waits on it, and a responder expects no answer to its READ responses. A queue pair
//!   back in the pool, with nothing outstanding, needs no driving; what arrives for it meanwhile
//!   (a late duplicate) is read and dropped by the next fetch;
//! - a READ that fails or times out drops its queue pair rather than pooling it, so no queue pair
//!   with an outstanding request is left undriven.
//!
//! shm and tcp client queue pairs keep the receive thread by default; a `Poll` asked for there
//! through [`FabricFetcher::connect_with`] is the fabric's to accept (shm) or refuse (tcp).
//!
//! Where things are:
//! - `server.rs`: [`FabricServer`] registers the source (live mapping or snapshot), listens, and
//!   keeps each client's queue pair, whose responder serves the READs.
//! - `client.rs`: [`FabricFetcher`] connects, takes the shm fast path where offered, and
//!   implements [`PageFetcher`](crate::PageFetcher) over a pool of queue pairs.
//! - `read.rs`: one queue pair with its staging region, the READ and its wait, the push stream.
//! - `hello.rs`: the private data at connect (region table, hello, shm announcement).
//! - `shmmap.rs`: the shm hand-over (a mapped descriptor or a pidfd) on both sides.
use crate::error::Error;
use remora_fabric::{Progress, QpOptions, Transport};
use std::net::SocketAddr;
use std::time::Duration;

mod client;
mod hello;
mod read;
mod server;
mod shmmap;

pub use client::FabricFetcher;
pub use server::{FabricServer, FabricServerHandle};

/// Queue-pair options: RC, with a retransmission timeout long enough for a busy 2-core host (the
/// page fault deadline, not the RC retry limit, decides when a server counts as dead), and the
/// progress mode asked for (the server: always [`Progress::Thread`]).
fn qp_options(transport: Transport, peer: Option<SocketAddr>, progress: Progress) -> QpOptions {
    // RoCE path MTU: 4096 on loopback; 1024 fits a 1500-byte Ethernet MTU (veth, most links).
    let mtu = match peer {
        Some(a) if !a.ip().is_loopback() => 1024,
        _ => 4096,
    };
    QpOptions {
        transport,
        mtu,
        retry_timeout: Duration::from_millis(20),
        retry_count: 7,
        progress,
        ..QpOptions::default()
    }
}

fn fab(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Protocol(format!("{what}: {e}"))
}
