//! The memory an arena lives in: anonymous memory, a memfd, or a file (on tmpfs or hugetlbfs,
//! for a warm restart: `-e PATH`). All three are one `mmap`; the arena addresses its contents
//! by offset only, so a mapping at another address (another process, another host through
//! lazy memory) reads the same items.
use std::ffi::CString;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Where the arena's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// Private anonymous memory (gone with the process).
    Anonymous,
    /// A memfd (shareable with another process by descriptor).
    Memfd,
    /// A file, created or reused (survives the process: warm restart).
    File(PathBuf),
}

/// One shared mapping of `len` bytes.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
    backing: Backing,
    fd: Option<OwnedFd>,
    /// The file existed with this length before it was mapped (its contents may be an arena).
    pub existed: bool,
}

// SAFETY: the mapping is plain memory owned by this value; the arena that holds it is used
// under the caller's lock.
unsafe impl Send for Mapping {}

fn os(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Mapping {
    /// Maps `len` bytes of `backing`. A file of another length is resized (its old contents
    /// then cannot be an arena of this size, and `existed` is false).
    pub fn new(backing: Backing, len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty arena"));
        }
        let (fd, existed) = match &backing {
            Backing::Anonymous => (None, false),
            Backing::Memfd => {
                let name = CString::new("remora-kv-arena").expect("no NUL");
                // SAFETY: a valid C string; flags are constants.
                let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
                if fd < 0 {
                    return Err(os("memfd_create"));
                }
                // SAFETY: a fresh descriptor this function owns.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                Self::size(&fd, len)?;
                (Some(fd), false)
            }
            Backing::File(p) => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(p)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
                let existed = f.metadata()?.len() == len as u64;
                let fd = OwnedFd::from(f);
                if !existed {
                    Self::size(&fd, len)?;
                }
                (Some(fd), existed)
            }
        };
        let (flags, raw) = match &fd {
            None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
            Some(f) => (libc::MAP_SHARED, f.as_raw_fd()),
        };
        // SAFETY: a new mapping chosen by the kernel; length checked non-zero.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                raw,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os("mmap"));
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
            backing,
            fd,
            existed,
        })
    }

    fn size(fd: &OwnedFd, len: usize) -> io::Result<()> {
        // SAFETY: a valid descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(os("ftruncate"));
        }
        Ok(())
    }

    /// The bytes.
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `ptr..ptr+len` is this value's live mapping, borrowed mutably through it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The bytes, read-only.
    pub fn view(&self) -> &[u8] {
        // SAFETY: as in `bytes`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Writes a file-backed arena's pages to the file (a graceful stop).
    pub fn sync(&self) -> io::Result<()> {
        if matches!(self.backing, Backing::File(_)) {
            // SAFETY: the live mapping.
            if unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) } != 0 {
                return Err(os("msync"));
            }
        }
        Ok(())
    }

    /// What backs it.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// The memfd or file descriptor, to hand the arena to another process.
    pub fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }

    /// The file's path, when file-backed.
    pub fn path(&self) -> Option<&Path> {
        match &self.backing {
            Backing::File(p) => Some(p),
            _ => None,
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping this value's own mapping once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
