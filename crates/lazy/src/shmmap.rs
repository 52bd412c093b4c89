//! The one-sided fast path of the `shm` page server: the client maps the server's source itself
//! and installs faulted units straight from that mapping, so no server thread and no staging copy
//! sit on the fault path (the way a same-host RDMA READ, or UCX's CMA transport, leaves the remote
//! CPU out).
//!
//! The server announces, after its hello, where its bytes are:
//! - a file or memfd (a live file, or the memfd holding a snapshot): its pid and descriptor
//!   number. The client opens `/proc/PID/fd/N` read-only, which the kernel allows only to a
//!   process that may also `process_vm_readv` the server (same credentials, ptrace access mode
//!   read), and maps it shared and read-only;
//! - a live process: its pid. The client reads the hello's segments (the process's addresses)
//!   with `process_vm_readv` itself, so it sees the process's current memory rather than the
//!   snapshot the server took for READs.
//!
//! Where the kernel refuses either, the client keeps using RC READs over the fabric's shm
//! connection.
//!
//! The mapping outlives the server: pages of a file or memfd stay reachable through it after the
//! server exits, so a server's death does not poison a region served this way. A file that
//! shrinks while mapped reads as zeros past its new end (the crate's SIGBUS handler guards the
//! mapping as it guards the server's own), the same outcome as an RC READ of it.
use crate::error::{Error, Result};
use std::fs::File;
use std::os::fd::AsRawFd;

const MAGIC: &[u8; 4] = b"RSHM";
/// Bytes of the announcement: magic, kind, pid, fd, length.
pub(crate) const LEN: usize = 4 + 4 + 4 + 4 + 8;

/// What the announced pid and fd name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Descriptor `fd` of process `pid` is the source (file or memfd).
    Fd = 1,
    /// Process `pid`'s memory at the hello's segments is the source.
    Process = 2,
}

/// Where a client finds the server's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Share {
    pub kind: Kind,
    pub pid: u32,
    pub fd: i32,
    pub len: u64,
}

impl Share {
    /// The announcement's bytes.
    pub fn emit(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4..8].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..16].copy_from_slice(&self.fd.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }
    /// Reads an announcement; None if `b` does not start with one (older servers, udp) or
    /// names an unknown kind.
    pub fn parse(b: &[u8]) -> Option<Share> {
        let b = b.get(..LEN)?;
        if &b[..4] != MAGIC {
            return None;
        }
        let word = |at: usize| -> Option<[u8; 4]> { b[at..at + 4].try_into().ok() };
        let kind = match u32::from_le_bytes(word(4)?) {
            1 => Kind::Fd,
            2 => Kind::Process,
            _ => return None,
        };
        Some(Share {
            kind,
            pid: u32::from_le_bytes(word(8)?),
            fd: i32::from_le_bytes(word(12)?),
            len: u64::from_le_bytes(b[16..24].try_into().ok()?),
        })
    }
}

/// The server's source, mapped read-only in the client.
pub(crate) struct PeerMap {
    map: crate::sigbus::GuardedMap,
    len: usize,
}

impl PeerMap {
    /// Maps `share` (whose source holds at least `len` bytes).
    pub fn open(share: Share, len: u64) -> Result<PeerMap> {
        if share.kind != Kind::Fd {
            return Err(Error::Protocol("shm share names no descriptor".into()));
        }
        if share.len < len {
            return Err(Error::Protocol(format!(
                "shm share of {} bytes is shorter than the source of {len}",
                share.len
            )));
        }
        let len = usize::try_from(len).map_err(|_| Error::Invalid("source too large".into()))?;
        let path = format!("/proc/{}/fd/{}", share.pid, share.fd);
        let f = File::open(&path).map_err(|e| Error::io(format!("open {path}"), e))?;
        let map = crate::sigbus::GuardedMap::open(f.as_raw_fd(), len)
            .map_err(|e| Error::io(format!("mmap {path}"), e))?;
        Ok(PeerMap { map, len })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcement_round_trips_and_junk_is_ignored() {
        for kind in [Kind::Fd, Kind::Process] {
            let s = Share {
                kind,
                pid: 4242,
                fd: 7,
                len: 1 << 33,
            };
            assert_eq!(Share::parse(&s.emit()), Some(s));
            assert_eq!(Share::parse(&s.emit()[..LEN - 1]), None);
        }
        let mut b = Share {
            kind: Kind::Fd,
            pid: 1,
            fd: 1,
            len: 1,
        }
        .emit();
        b[4] = 9;
        assert_eq!(Share::parse(&b), None, "unknown kind");
        assert_eq!(Share::parse(b"XSHM00000000000000000000"), None);
        assert_eq!(Share::parse(&[]), None);
    }

    #[test]
    fn a_refused_or_short_share_is_an_error() {
        let gone = Share {
            kind: Kind::Fd,
            pid: u32::MAX,
            fd: 3,
            len: 4096,
        };
        assert!(PeerMap::open(gone, 4096).is_err());
        let short = Share {
            kind: Kind::Fd,
            pid: std::process::id(),
            fd: 0,
            len: 10,
        };
        assert!(PeerMap::open(short, 4096).is_err());
    }
}
