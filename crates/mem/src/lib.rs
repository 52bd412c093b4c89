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
//!
//! ```
//! use remora_mem::{Access, Buffer, Mode, PageIn, Pd};
//!
//! let pd = Pd::new();
//! let region = pd.register(Buffer::memfd("doc", 1 << 16)?, Access::ALL, Mode::OnDemand)?;
//! // What a responder does with the RETH of an incoming WRITE:
//! let acc = pd
//!     .check_remote(region.rkey(), region.addr() + 4096, 5, Access::REMOTE_WRITE)
//!     .expect("key, bounds and rights are fine");
//! if !acc.region.is_resident(acc.offset, acc.len) {
//!     acc.region.page_in(acc.offset, PageIn::Block(4))?; // PART's PI4
//! }
//! acc.region.write_at(acc.offset, b"hello")?;
//! // A forged key or an address past the end is refused, never a crash.
//! assert!(pd.check_remote(region.rkey() ^ 0x100, region.addr(), 5, Access::REMOTE_WRITE).is_err());
//! assert!(pd.check_remote(region.rkey(), u64::MAX - 1, 5, Access::REMOTE_WRITE).is_err());
//! # Ok::<(), remora_mem::Error>(())
//! ```
#![warn(missing_docs)]

pub mod access;
pub mod buffer;
pub mod error;
pub mod grant;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Buffer>();
        check::<Region>();
        check::<Pd>();
        check::<ResidencyMap>();
        check::<RemoteAccess>();
        check::<Error>();
        check::<AccessError>();
    }

    #[test]
    fn debug_output_stays_short_for_big_regions() {
        let pd = Pd::new();
        let r = pd
            .register(
                Buffer::anonymous(64 << 20).unwrap(),
                Access::ALL,
                Mode::OnDemand,
            )
            .unwrap();
        let text = format!("{pd:?} {r:?}");
        assert!(text.len() < 1000, "{} bytes of Debug output", text.len());
        assert!(text.contains("pages: 16384"));
    }
}
