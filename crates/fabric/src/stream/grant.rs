//! One-sided shm grants: which regions may be granted (sealed memfds), a GRANT's access bits,
//! a peer's granted region mapped here; shared by `direct` and `io` (which checks the seals too).
use std::os::fd::{BorrowedFd, OwnedFd};

use remora_mem::{grant, Access, Buffer, Region};

use crate::engine::access::{self, Window};

/// `code` bits of a GRANT frame.
pub(super) const GRANT_READ: u8 = 1;
pub(super) const GRANT_WRITE: u8 = 2;

/// A region of the peer mapped here.
pub(super) struct Grant {
    rkey: u32,
    window: Window,
    map: Buffer,
}

impl Grant {
    /// Maps a granted memfd (read-only unless the grant includes remote write).
    pub(super) fn map(
        fd: OwnedFd,
        base: u64,
        len: u64,
        rkey: u32,
        code: u8,
    ) -> Result<Grant, String> {
        let write = code & GRANT_WRITE != 0;
        let len = usize::try_from(len).map_err(|_| "granted region too large".to_string())?;
        let map = Buffer::map_memfd_with(fd, len, write).map_err(|e| e.to_string())?;
        let mut rights = Access::NONE;
        if code & GRANT_READ != 0 {
            rights |= Access::REMOTE_READ;
        }
        if write {
            rights |= Access::REMOTE_WRITE;
        }
        Ok(Grant {
            rkey,
            // The mapping is page-rounded; the grant is what the peer registered.
            window: Window {
                base,
                size: map.len() as u64,
                access: rights,
            },
            map,
        })
    }

    pub(super) fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Where `[va, va+len)` of the granted region is mapped here, if it lies inside and the
    /// grant carries `need`.
    pub(super) fn check(&self, va: u64, len: usize, need: Access) -> Option<*mut u8> {
        let off = access::check(&self.window, va, len as u64, need)
            .map_err(|e| tracing::debug!(error = %e, "one-sided access refused"))
            .ok()?;
        // SAFETY: the check put off + len within the window, which is the mapping's length.
        Some(unsafe { self.map.as_ptr().add(off) })
    }
}

/// Whether a memfd is sealed against shrinking (a peer mapping it can never fault past its end).
pub(super) fn sealed(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_get_seals(fd).is_ok_and(|s| s.contains(rustix::fs::SealFlags::SHRINK))
}

/// What of a region to grant the peer: `None` unless it is a sealed memfd with remote rights;
/// else the frame's access code and the descriptor to hand over (read-only without write).
pub(super) fn grantable(r: &Region) -> Option<(u8, OwnedFd)> {
    let fd = r.memfd()?;
    let a = r.access();
    let code = (a.contains(Access::REMOTE_READ) as u8 * GRANT_READ)
        | (a.contains(Access::REMOTE_WRITE) as u8 * GRANT_WRITE);
    if !sealed(fd) || code == 0 {
        return None;
    }
    // Frozen seals: a peer holding the writable descriptor cannot add F_SEAL_FUTURE_WRITE
    // and so break every other peer's writable mapping. A read-only grant cannot be reopened
    // writable (see `remora_mem::grant`).
    let handed = if code & GRANT_WRITE != 0 {
        grant::seal_seals(fd).ok()?;
        fd.try_clone_to_owned().ok()?
    } else {
        grant::read_only(fd, grant::Writes::Continue).ok()?
    };
    Some((code, handed))
}
