//! The access check every remote access goes through, whoever carries it out: the responder
//! for requests that arrive (udp, tcp, shm copy path) and the requester of one-sided shm, which
//! writes into and reads from a region the peer granted it. One function, so the two paths
//! cannot drift apart: the key names the region, the region's rights contain what the access
//! needs, and `[va, va+len)` lies inside it (checked arithmetic, so hostile values near
//! `u64::MAX` are refused, not wrapped).
use std::sync::Arc;

use remora_mem::{Access, AccessError, Pd, Region};

/// Where a region lies and what it allows: all the check needs to know of it.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Address of its first byte (in the owner's address space).
    pub base: u64,
    /// Length in bytes.
    pub size: u64,
    /// Remote rights.
    pub access: Access,
}

impl Window {
    /// A registered region's window.
    pub fn of(r: &Region) -> Window {
        Window {
            base: r.addr(),
            size: r.len() as u64,
            access: r.access(),
        }
    }
}

/// Checks an access of `len` bytes at `va` needing `need` against `w`; returns the offset of
/// `va` in the region. A zero-length access is allowed anywhere (clamped into the region), as
/// verbs allow it.
pub fn check(w: &Window, va: u64, len: u64, need: Access) -> Result<usize, AccessError> {
    if !w.access.contains(need) {
        return Err(AccessError::Denied {
            need,
            have: w.access,
        });
    }
    if len == 0 {
        return Ok(va.saturating_sub(w.base).min(w.size) as usize);
    }
    let inside = va >= w.base
        && va
            .checked_add(len)
            .is_some_and(|end| end <= w.base.saturating_add(w.size));
    if !inside {
        return Err(AccessError::OutOfBounds {
            va,
            len,
            base: w.base,
            size: w.size,
        });
    }
    Ok((va - w.base) as usize)
}

/// The responder's check: `rkey` names a region of `pd`, then [`check`]. Returns the region
/// (kept alive for the access) and the offset.
pub fn check_remote(
    pd: &Pd,
    rkey: u32,
    va: u64,
    len: u64,
    need: Access,
) -> Result<(Arc<Region>, usize), AccessError> {
    let region = pd.by_rkey(rkey).ok_or(AccessError::UnknownKey(rkey))?;
    let off = check(&Window::of(&region), va, len, need)?;
    Ok((region, off))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_refuses_rights_bounds_and_wrapping_ranges() {
        let w = Window {
            base: 0x1000,
            size: 0x1000,
            access: Access::REMOTE_READ,
        };
        assert_eq!(
            check(&w, 0x1800, 0x800, Access::REMOTE_READ).unwrap(),
            0x800
        );
        assert!(matches!(
            check(&w, 0x1000, 1, Access::REMOTE_WRITE),
            Err(AccessError::Denied { .. })
        ));
        for (va, len) in [
            (0x1801, 0x800),
            (0xfff, 2),
            (u64::MAX - 1, 4),
            (0x1000, u64::MAX),
        ] {
            assert!(matches!(
                check(&w, va, len, Access::REMOTE_READ),
                Err(AccessError::OutOfBounds { .. })
            ));
        }
        assert_eq!(check(&w, 0x9000, 0, Access::REMOTE_READ).unwrap(), 0x1000);
        let pd = Pd::new();
        assert!(matches!(
            check_remote(&pd, 7, 0, 1, Access::REMOTE_READ),
            Err(AccessError::UnknownKey(7))
        ));
    }
}
