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

mod client;
mod fetch;
mod grants;
mod text;

pub use client::Client;
pub use fetch::FabricFetch;
pub use grants::{GrantServer, Grants};

use std::io;
use std::time::Duration;

use remora_fabric::{Progress, QpOptions, Transport};

fn fab(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// Queue-pair options for grant connections: RC, polled by the reader's own thread.
pub(crate) fn options(transport: Transport, progress: Progress) -> QpOptions {
    QpOptions {
        transport,
        retry_timeout: Duration::from_millis(20),
        retry_count: 7,
        progress,
        ..QpOptions::default()
    }
}
