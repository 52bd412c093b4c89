//! Registered memory regions for remora.
//!
//! What it does: maps buffers (private anonymous, memfd shared with other processes, 2 MB huge
//! pages) or wraps memory the caller owns; registers them in a protection domain ([`Pd`]) that
//! hands out local and remote keys; records access rights; pins regions (`mlock`) or leaves
//! them on-demand with a per-page residency bitmap and PART's page-in policies; and performs
//! the bounds-and-rights check ([`Pd::check_remote`]) that every remote access goes through.
//!
//! What it does not: move data between hosts (that is `remora-fabric`), handle page faults
//! from remote memory (`remora-lazy`), or manage GPU memory (`remora-accel`; GPU host mappings
//! can be registered as external buffers). Linux only.
#![warn(missing_docs)]

pub mod access;
pub mod buffer;
pub mod error;
pub mod pd;
pub mod region;
pub mod residency;
mod sys;

pub use access::Access;
pub use buffer::{Backing, Buffer};
pub use error::{AccessError, Error, Result};
pub use pd::{Pd, RemoteAccess};
pub use region::{Mode, Region};
pub use residency::{PageIn, ResidencyMap};

/// Base page size regions are tracked in (x86-64).
pub const PAGE_SIZE: usize = 4096;
/// Size of the huge pages [`Buffer::huge_pages`] maps (2 MB).
pub const HUGE_PAGE_SIZE: usize = 2 << 20;
