//! The one-sided fast path of the `shm` page server: the client maps the server's source itself
//! and installs faulted units straight from that mapping, so no server thread and no staging copy
//! sit on the fault path (the way a same-host RDMA READ, or UCX's CMA transport, leaves the remote
//! CPU out).
//!
//! The server hands its bytes over explicitly, with `SCM_RIGHTS` on the fabric's `shm` setup
//! socket ([`remora_fabric::Listener::hand_over`]), and announces after its hello which handed-
//! over descriptor holds what:
//! - a file or memfd (a live file, or the memfd holding a snapshot): a read-only descriptor of
//!   it, which the client maps shared and read-only. A read-only descriptor grants reading only,
//!   whatever the server's own rights.
//! - a live process: a pidfd. The client reads the hello's segments (the process's addresses)
//!   with `process_vm_readv` under its own credentials, so it reaches only a process its own uid
//!   may read, and it checks after each read that the pidfd's process is still running, so a
//!   recycled pid never stands in for it. It sees the process's current memory rather than the
//!   snapshot the server took for READs.
//!
//! Nothing here names a process or descriptor by number across the connection. Where a
//! descriptor is missing or refused (mapping, credentials), the client keeps using RC READs over
//! the fabric's shm connection.
//!
//! The mapping outlives the server: pages of a file or memfd stay reachable through it after the
//! server exits, so a server's death does not poison a region served this way. A file that
//! shrinks while mapped reads as zeros past its new end (the crate's SIGBUS handler guards the
//! mapping as it guards the server's own), the same outcome as an RC READ of it.
use crate::error::{Error, Result};
use std::os::fd::{AsRawFd, OwnedFd};

/// Bytes of the announcement (`remora_wire::ctrl::share`): magic, kind, 0, index, length.
pub(crate) const LEN: usize = remora_wire::ctrl::share::SHARE_LEN;

/// What the handed-over descriptor is.
pub(crate) use remora_wire::ctrl::ShareKind as Kind;

/// Where a client finds the server's bytes: which of the handed-over descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Share {
    pub kind: Kind,
    /// Position among the descriptors the listener hands over.
    pub index: u32,
    pub len: u64,
}

impl Share {
    /// The announcement's bytes.
    pub fn emit(&self) -> [u8; LEN] {
        remora_wire::ctrl::ShareRepr {
            kind: self.kind,
            index: self.index,
            len: self.len,
        }
        .to_bytes()
    }

    /// Reads an announcement; None if `b` does not start with one (older servers, udp) or
    /// names an unknown kind.
    pub fn parse(b: &[u8]) -> Option<Share> {
        use remora_wire::ctrl::{SharePacket, ShareRepr};
        let r = SharePacket::new_checked(b)
            .and_then(|p| ShareRepr::parse(&p))
            .ok()?;
        Some(Share {
            kind: r.kind,
            index: r.index,
            len: r.len,
        })
    }
}

/// The server's source, mapped read-only in the client.
pub(crate) struct PeerMap {
    map: crate::sigbus::GuardedMap,
    len: usize,
}

impl PeerMap {
    /// Maps the handed-over descriptor `fd` of `share` (whose source holds at least `len`
    /// bytes), read-only.
    pub fn open(share: Share, fd: &OwnedFd, len: u64) -> Result<PeerMap> {
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
        let map = crate::sigbus::GuardedMap::open(fd.as_raw_fd(), len)
            .map_err(|e| Error::io("mmap the handed-over source", e))?;
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

/// A pidfd of `pid` (`pidfd_open`), which a client checks to know the process still runs.
pub(crate) fn pidfd(pid: i32) -> std::io::Result<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| std::io::Error::other(format!("pid {pid}")))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// The pid a pidfd refers to (`/proc/self/fdinfo`), if the process has not exited.
pub(crate) fn pid_of(pidfd: &OwnedFd) -> Option<i32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    let pid: i32 = info
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))?
        .trim()
        .parse()
        .ok()?;
    (pid > 0).then_some(pid)
}

/// True while the pidfd's process has not exited: a pidfd polls readable once it has, and a
/// pid is recycled only after that, so a read done before this returns true read that process.
pub(crate) fn still_running(pidfd: &OwnedFd) -> bool {
    let mut p = [rustix::event::PollFd::new(
        pidfd,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut p, Some(&zero)), Ok(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn announcement_round_trips_and_junk_is_ignored() {
        for kind in [Kind::Fd, Kind::Process] {
            let s = Share {
                kind,
                index: 1,
                len: 1 << 33,
            };
            assert_eq!(Share::parse(&s.emit()), Some(s));
            assert_eq!(Share::parse(&s.emit()[..LEN - 1]), None);
        }
        let mut b = Share {
            kind: Kind::Fd,
            index: 0,
            len: 1,
        }
        .emit();
        b[4] = 9;
        assert_eq!(Share::parse(&b), None, "unknown kind");
        assert_eq!(Share::parse(b"XSHM00000000000000000000"), None);
        assert_eq!(Share::parse(&[]), None);
    }

    #[test]
    fn a_short_share_or_a_write_through_a_read_only_handover_is_refused() {
        let f = tempfile_with(8192);
        let ro = remora_mem::grant::read_only(f.as_fd(), remora_mem::grant::Writes::Done).unwrap();
        let short = Share {
            kind: Kind::Fd,
            index: 0,
            len: 10,
        };
        assert!(PeerMap::open(short, &ro, 4096).is_err());
        let ok = Share { len: 8192, ..short };
        let m = PeerMap::open(ok, &ro, 8192).unwrap();
        assert_eq!(m.get(0, 4).unwrap(), &[7, 7, 7, 7]);
        // The handed-over descriptor cannot be written or mapped writable.
        let mut w = std::fs::File::from(ro);
        assert!(std::io::Write::write_all(&mut w, b"x").is_err());
    }

    #[test]
    fn a_pidfd_names_a_running_process_until_it_exits() {
        let me = pidfd(std::process::id() as i32).unwrap();
        assert_eq!(pid_of(&me), Some(std::process::id() as i32));
        assert!(still_running(&me));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let fd = pidfd(c.id() as i32).unwrap();
        c.wait().unwrap();
        assert!(!still_running(&fd), "an exited process is not running");
    }

    fn tempfile_with(len: usize) -> std::fs::File {
        let p = std::env::temp_dir().join(format!("remora-shmmap-{}", std::process::id()));
        std::fs::write(&p, vec![7u8; len]).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let _ = std::fs::remove_file(&p);
        f
    }
}
