//! Handing a memfd to another process (with `SCM_RIGHTS`) so that the peer gets exactly the
//! rights it was granted and no way to widen them.
//!
//! Two ways around a grant exist on Linux, and this module closes both:
//! - **Reopening.** A descriptor names an inode; its holder may open that inode again through
//!   `/proc/self/fd/N` with any access the inode's mode allows. A memfd is created with mode
//!   0777, so a read-only descriptor reopened `O_RDWR` writes into the server's memory.
//!   [`read_only`] drops the inode's write bits before handing out a read-only descriptor
//!   (descriptors already open keep their access: the kernel checks the mode at open only), and
//!   seals the memfd with `F_SEAL_FUTURE_WRITE` when its owner writes it no more, which holds
//!   even against a peer of the same user.
//! - **Sealing.** Any holder of a writable descriptor may add seals. A peer adding
//!   `F_SEAL_FUTURE_WRITE` makes every later writable mapping fail (every other peer's grant);
//!   `F_SEAL_SEAL` freezes the set for good. [`seal_seals`] sets `F_SEAL_SEAL` before a
//!   descriptor leaves the process.
//!
//! A regular file's descriptor, or one this process holds read-only itself, is reopened
//! read-only as it is: its mode is its owner's to set, and a peer can reopen it only as its own
//! user could open the file.
//!
//! ```
//! use remora_mem::{grant, Buffer};
//! use std::os::fd::AsFd;
//!
//! let buf = Buffer::memfd("doc", 4096)?;
//! let fd = buf.fd().unwrap();
//! let ro = grant::read_only(fd.as_fd(), grant::Writes::Continue)?;
//! // What a peer would try: the seals are frozen, and (for another user) a writable reopen
//! // of the inode is refused by its mode.
//! assert!(rustix::fs::fcntl_add_seals(fd, rustix::fs::SealFlags::WRITE).is_err());
//! assert_eq!(rustix::fs::fstat(&ro)?.st_mode & 0o222, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{self, Mode, OFlags, SealFlags};
use rustix::io::Errno;

/// Whether the owner of a memfd goes on writing it after granting it read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// The owner writes it through mappings it holds now (a live registered region).
    Continue,
    /// The contents are final (a snapshot): no one, the owner included, may write it again
    /// through `write(2)` or a new mapping.
    Done,
}

/// Sets `F_SEAL_SEAL` on a memfd, so that no holder of a descriptor can add seals; a no-op if
/// it is already set or `fd` is not a memfd (regular files have no seals).
pub fn seal_seals(fd: BorrowedFd<'_>) -> io::Result<()> {
    match fs::fcntl_get_seals(fd) {
        Ok(s) if s.contains(SealFlags::SEAL) => Ok(()),
        Ok(_) => Ok(fs::fcntl_add_seals(fd, SealFlags::SEAL)?),
        Err(Errno::INVAL) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A read-only descriptor of the file behind `fd` to hand to a peer, which can never be made
/// writable: for a memfd, the inode's write bits are dropped, `F_SEAL_FUTURE_WRITE` is added
/// when `writes` is [`Writes::Done`], and the seals are sealed. `fd` must be writable for a
/// memfd (the owner's own descriptor) and stays writable.
pub fn read_only(fd: BorrowedFd<'_>, writes: Writes) -> io::Result<OwnedFd> {
    let ours = fs::fcntl_getfl(fd)?.intersection(OFlags::RWMODE) != OFlags::RDONLY;
    match fs::fcntl_get_seals(fd) {
        // Held read-only (a file the operator named): its inode is not ours to change.
        _ if !ours => {}
        Ok(seals) => {
            if writes == Writes::Done && !seals.contains(SealFlags::FUTURE_WRITE) {
                if seals.contains(SealFlags::SEAL) {
                    return Err(io::Error::other(
                        "the memfd's seals are sealed without F_SEAL_FUTURE_WRITE",
                    ));
                }
                fs::fcntl_add_seals(fd, SealFlags::FUTURE_WRITE)?;
            }
            let st = fs::fstat(fd)?;
            let mode = Mode::from_raw_mode(st.st_mode) & !Mode::from_raw_mode(0o7222);
            fs::fchmod(fd, mode)?;
            seal_seals(fd)?;
        }
        Err(Errno::INVAL) => {}
        Err(e) => return Err(e.into()),
    }
    // A new open file description: its access is read-only whatever ours is.
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    Ok(fs::open(
        path.as_str(),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Buffer;
    use std::os::fd::AsFd;

    fn memfd() -> Buffer {
        Buffer::memfd("grant-test", 4096).unwrap()
    }

    #[test]
    fn a_read_only_grant_has_no_write_bits_and_frozen_seals() {
        let b = memfd();
        let fd = b.fd().unwrap();
        let ro = read_only(fd.as_fd(), Writes::Continue).unwrap();
        let st = fs::fstat(&ro).unwrap();
        assert_eq!(st.st_mode & 0o222, 0, "mode {:o}", st.st_mode);
        assert!(fs::fcntl_get_seals(fd).unwrap().contains(SealFlags::SEAL));
        assert_eq!(
            fs::fcntl_add_seals(fd, SealFlags::FUTURE_WRITE),
            Err(Errno::PERM)
        );
        // The owner keeps writing through the mapping it has.
        // SAFETY: the buffer maps 4096 writable bytes and nothing else uses it.
        unsafe { b.as_ptr().write(7) };
        assert_eq!(
            fs::fcntl_getfl(&ro).unwrap() & OFlags::RWMODE,
            OFlags::RDONLY
        );
    }

    #[test]
    fn a_finished_memfd_refuses_new_writable_mappings_even_to_its_owner() {
        let b = memfd();
        let fd = b.fd().unwrap();
        let _ro = read_only(fd.as_fd(), Writes::Done).unwrap();
        let seals = fs::fcntl_get_seals(fd).unwrap();
        assert!(seals.contains(SealFlags::FUTURE_WRITE | SealFlags::SEAL));
        assert!(Buffer::map_memfd_with(fd.try_clone_to_owned().unwrap(), 4096, true).is_err());
        assert_eq!(rustix::io::write(fd, b"x"), Err(Errno::PERM));
    }

    #[test]
    fn granting_twice_is_fine() {
        let b = memfd();
        let fd = b.fd().unwrap();
        read_only(fd.as_fd(), Writes::Done).unwrap();
        read_only(fd.as_fd(), Writes::Done).unwrap();
        read_only(fd.as_fd(), Writes::Continue).unwrap();
        seal_seals(fd.as_fd()).unwrap();
    }

    #[test]
    fn a_regular_file_is_reopened_read_only_and_left_as_it_is() {
        let dir = std::env::temp_dir().join(format!("remora-grant-{}", std::process::id()));
        std::fs::write(&dir, b"abc").unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&dir)
            .unwrap();
        let before = fs::fstat(&f).unwrap().st_mode;
        let ro = read_only(f.as_fd(), Writes::Done).unwrap();
        assert_eq!(fs::fstat(&f).unwrap().st_mode, before);
        assert_eq!(
            fs::fcntl_getfl(&ro).unwrap() & OFlags::RWMODE,
            OFlags::RDONLY
        );
        seal_seals(f.as_fd()).unwrap();
        std::fs::remove_file(&dir).unwrap();
    }
}
