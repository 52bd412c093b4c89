//! The one-sided fast path of the `shm` page server: the client maps the server's source itself
//! and installs faulted units straight from that mapping, so no server thread and no staging copy
//! sit on the fault path (the way a same-host RDMA READ, or UCX's CMA transport, leaves the remote
//! CPU out).
//!
//! The server announces, after its hello, its pid and the descriptor number of the file or memfd
//! it serves (a live file, or the memfd holding a snapshot). The client opens
//! `/proc/PID/fd/N` read-only, which the kernel allows only to a process that may also
//! `process_vm_readv` the server (same credentials, ptrace access mode read), and maps it
//! shared and read-only. Where that is refused, the client keeps using RC READs over the
//! fabric's shm connection.
//!
//! The mapping outlives the server: pages of a file or memfd stay reachable through it after the
//! server exits, so a server's death does not poison a region served this way. A file that
//! shrinks while mapped reads as zeros past its new end (the crate's SIGBUS handler guards the
//! mapping as it guards the server's own), the same outcome as an RC READ of it.
use crate::error::{Error, Result};
use std::fs::File;
use std::os::fd::AsRawFd;

const MAGIC: &[u8; 4] = b"RSHM";
/// Bytes of the announcement: magic, pid, fd, length.
pub(crate) const LEN: usize = 4 + 4 + 4 + 8;

/// Where a client finds the server's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Share {
    pub pid: u32,
    pub fd: i32,
    pub len: u64,
}

impl Share {
    /// The announcement's bytes.
    pub fn emit(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4..8].copy_from_slice(&self.pid.to_le_bytes());
        b[8..12].copy_from_slice(&self.fd.to_le_bytes());
        b[12..20].copy_from_slice(&self.len.to_le_bytes());
        b
    }
    /// Reads an announcement; None if `b` does not start with one (older servers, udp).
    pub fn parse(b: &[u8]) -> Option<Share> {
        let b = b.get(..LEN)?;
        if &b[..4] != MAGIC {
            return None;
        }
        let word = |r: std::ops::Range<usize>| b[r].try_into().ok();
        Some(Share {
            pid: u32::from_le_bytes(word(4..8)?),
            fd: i32::from_le_bytes(word(8..12)?),
            len: u64::from_le_bytes(b[12..20].try_into().ok()?),
        })
    }
}

/// The server's source, mapped read-only in the client.
pub(crate) struct PeerMap {
    map: crate::sys::Mapping,
    len: usize,
    slot: Option<usize>,
}

// SAFETY: the mapping is read-only shared memory owned by this value; sharing its address
// between threads is sound (readers only).
unsafe impl Send for PeerMap {}
// SAFETY: as above.
unsafe impl Sync for PeerMap {}

impl PeerMap {
    /// Maps `share` (whose source holds at least `len` bytes).
    pub fn open(share: Share, len: u64) -> Result<PeerMap> {
        if share.len < len {
            return Err(Error::Protocol(format!(
                "shm share of {} bytes is shorter than the source of {len}",
                share.len
            )));
        }
        let len = usize::try_from(len).map_err(|_| Error::Invalid("source too large".into()))?;
        let path = format!("/proc/{}/fd/{}", share.pid, share.fd);
        let f = File::open(&path).map_err(|e| Error::io(format!("open {path}"), e))?;
        let map = crate::sys::Mapping::file_shared_readonly(f.as_raw_fd(), len)
            .map_err(|e| Error::io(format!("mmap {path}"), e))?;
        let (p, mapped) = (map.ptr() as u64, map.mapped_len());
        let slot = crate::sigbus::register_served(p, p + mapped as u64)
            .map_err(|e| Error::io("install the SIGBUS handler", e))?;
        if slot.is_none() {
            tracing::warn!("too many guarded mappings: a shrinking shm source ends the process");
        }
        Ok(PeerMap { map, len, slot })
    }
    /// `[offset, offset+len)` of the source, if it lies inside.
    pub fn get(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: [start, end) lies inside the live read-only mapping, which lives as long as
        // `self`; the file may change underneath (it is served live), which readers accept.
        Some(unsafe { std::slice::from_raw_parts(self.map.ptr().add(start), len) })
    }
}

impl Drop for PeerMap {
    fn drop(&mut self) {
        // Unguard before the mapping goes (fields drop after this).
        if let Some(s) = self.slot {
            crate::sigbus::unregister_served(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcement_round_trips_and_junk_is_ignored() {
        let s = Share {
            pid: 4242,
            fd: 7,
            len: 1 << 33,
        };
        assert_eq!(Share::parse(&s.emit()), Some(s));
        assert_eq!(Share::parse(&s.emit()[..LEN - 1]), None);
        assert_eq!(Share::parse(b"XSHM0000000000000000"), None);
        assert_eq!(Share::parse(&[]), None);
    }

    #[test]
    fn a_refused_or_short_share_is_an_error() {
        let gone = Share {
            pid: u32::MAX,
            fd: 3,
            len: 4096,
        };
        assert!(PeerMap::open(gone, 4096).is_err());
        let short = Share {
            pid: std::process::id(),
            fd: 0,
            len: 10,
        };
        assert!(PeerMap::open(short, 4096).is_err());
    }
}
