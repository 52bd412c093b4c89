//! Lazy memory: regions whose pages are filled on demand from a page server through userfaultfd,
//! with prefetch and background push (the remote-page-fault side of post-copy migration, after
//! OPERA's CRIU lazy-pages work).
//!
//! What it does:
//! - [`LazyRegion`]: an anonymous mapping registered with userfaultfd (missing mode). Each fault on
//!   a unit (4 KB to 2 MB) is fetched once from a [`PageFetcher`] and installed with
//!   `UFFDIO_COPY` (`UFFDIO_ZEROPAGE` for zero ranges), by handler threads or by the faulting
//!   thread itself (`UFFD_FEATURE_SIGBUS`), with [`Prefetch`] policies, a recorded
//!   [`WorkingSet`], and a background push that streams the rest on a separate connection and
//!   restarts after each fault. A dead server ends in poisoned units (SIGBUS on access) and an
//!   error, never a hang.
//! - [`PageServer`]: serves a [`PageSource`] (a file, a memfd, its own memory, or a live process
//!   through `process_vm_readv`) over TCP with a small [`protocol`].
//! - With the `fabric` feature (default): `FabricServer` / `FabricFetcher` serve a registered
//!   source over remora-fabric, the client READing units one-sidedly (udp RC, shm): a file or
//!   memfd is registered as a live shared mapping, other sources as a copy taken at start.
//!   Over shm the client maps the served file or memfd itself and installs units straight from
//!   it (no server thread, no staging copy), or reads a served live process with
//!   `process_vm_readv`, falling back to READs where the kernel refuses.
//!
//! What it does not: it is Linux-only (userfaultfd, 6.6+ for `UFFDIO_POISON`); it does not
//! track write-protection or dirty pages (no pre-copy); a region's pages come from one server;
//! over udp a live process is served as a copy taken at start, not its current memory (tcp
//! reads it at each request, and over shm the client reads it itself).
#![warn(missing_docs)]

pub mod error;
pub mod fetch;
#[cfg(feature = "fabric")]
pub mod over_fabric;
pub mod prefetch;
pub mod procmaps;
pub mod protocol;
pub mod region;
pub mod server;
mod sigbus;
pub mod source;
mod sys;
pub mod yardstick;

pub use error::{Error, Result};
pub use fetch::{
    FetchError, Fetched, LocalFetcher, PageFetcher, PushChunk, PushNext, PushStream, TcpFetcher,
};
#[cfg(feature = "fabric")]
pub use over_fabric::{FabricFetcher, FabricServer, FabricServerHandle};
pub use prefetch::{Prefetch, Prefetcher, WorkingSet};
pub use region::{LazyRegion, Mode, Options, Progress, Stats};
pub use server::{PageServer, ServerHandle};
pub use source::{FileSource, MemorySource, PageSource, ProcessSource};
