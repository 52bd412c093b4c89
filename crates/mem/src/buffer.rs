//! The memory a region covers: fresh anonymous, memfd or huge-page mappings, or memory the
//! caller owns.

use std::any::Any;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{self, MemfdFlags, SealFlags};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::{sys, HUGE_PAGE_SIZE, PAGE_SIZE};

/// What kind of memory backs a [`Buffer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backing {
    /// Private anonymous memory (`mmap(MAP_PRIVATE|MAP_ANONYMOUS)`).
    Anonymous,
    /// A shared mapping of a memfd, which another process can map too.
    Memfd,
    /// Private anonymous 2 MB huge pages (`MAP_HUGETLB`).
    HugePages,
    /// A shared mapping of a file (on tmpfs or hugetlbfs, for memory that outlives the
    /// process: a warm restart).
    File,
    /// Memory the caller owns (a numpy array, a heap allocation, a GPU host mapping, ...).
    External,
}

/// A range of memory that a region can cover.
///
/// Buffers this crate mapped are unmapped on drop (and a memfd it holds is closed); external
/// memory is left alone. Lengths of mapped buffers are whole pages: `len()` is the requested
/// length rounded up to [`PAGE_SIZE`] (or [`HUGE_PAGE_SIZE`] for huge pages).
pub struct Buffer {
    ptr: *mut u8,
    len: usize,
    backing: Backing,
    fd: Option<OwnedFd>,
    /// What keeps external memory alive (a `Vec`, a Python array, ...), dropped with the
    /// Buffer.
    owner: Option<Box<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("backing", &self.backing)
            .field("fd", &self.fd)
            .field("owned", &self.owner.is_some())
            .finish()
    }
}

// SAFETY: a Buffer is an address range plus an owned fd. It either owns its mapping outright
// (no other handle to it exists in this process) or the caller of `external` promised the range
// stays valid for the Buffer's life. The raw pointer is never dereferenced through `&Buffer`
// except by the bounds-checked copies in `Region`, whose concurrent use has the same semantics
// as DMA into the memory (documented there); so moving or sharing the handle across threads is
// sound.
unsafe impl Send for Buffer {}
// SAFETY: see `Send`; `&Buffer` exposes only the address, length and fd.
unsafe impl Sync for Buffer {}

/// Rounds `len` up to a multiple of `unit` (a power of two), refusing 0 and lengths the address
/// space cannot hold.
pub(crate) fn round_len(len: usize, unit: usize) -> Result<usize> {
    if len == 0 {
        return Err(Error::ZeroLength);
    }
    let rounded = len
        .checked_add(unit - 1)
        .map(|l| l & !(unit - 1))
        .ok_or(Error::TooLarge { len })?;
    if rounded > isize::MAX as usize {
        return Err(Error::TooLarge { len });
    }
    Ok(rounded)
}

impl Buffer {
    /// Maps `len` bytes (rounded up to pages) of private anonymous memory, zero-filled and not
    /// yet resident.
    pub fn anonymous(len: usize) -> Result<Buffer> {
        let len = round_len(len, PAGE_SIZE)?;
        let ptr = sys::map_anonymous(len, false)
            .map_err(|e| Error::sys(format!("mmap {len} bytes anonymous"), e))?;
        Ok(Buffer {
            ptr,
            len,
            backing: Backing::Anonymous,
            fd: None,
            owner: None,
        })
    }

    /// Creates a memfd named `name` of `len` bytes (rounded up to pages) and maps it shared.
    ///
    /// The file is sealed against shrinking and growing so that no holder of the fd can make
    /// another process's mapping fault with SIGBUS; [`Buffer::fd`] gives the fd to send.
    pub fn memfd(name: &str, len: usize) -> Result<Buffer> {
        let len = round_len(len, PAGE_SIZE)?;
        let fd = fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(|e| Error::sys(format!("memfd_create {name:?}"), e))?;
        fs::ftruncate(&fd, len as u64)
            .map_err(|e| Error::sys(format!("ftruncate memfd to {len} bytes"), e))?;
        fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW)
            .map_err(|e| Error::sys("seal memfd against resizing", e))?;
        let ptr = sys::map_shared(fd.as_fd(), len)
            .map_err(|e| Error::sys(format!("mmap {len} bytes of memfd shared"), e))?;
        Ok(Buffer {
            ptr,
            len,
            backing: Backing::Memfd,
            fd: Some(fd),
            owner: None,
        })
    }

    /// Maps `len` bytes (rounded up to pages) of the file at `path` shared, creating it when
    /// missing; the flag says whether the file already had exactly that length (its contents
    /// may then be what an earlier process left). A file of another length is resized.
    ///
    /// Unlike a memfd the file cannot be sealed: it is the caller's to keep from being shrunk
    /// while mapped (another process truncating it would make accesses fault with SIGBUS).
    pub fn file(path: &std::path::Path, len: usize) -> Result<(Buffer, bool)> {
        let len = round_len(len, PAGE_SIZE)?;
        let what = |e: std::io::Error| {
            Error::sys(
                format!("{}", path.display()),
                Errno::from_io_error(&e).unwrap_or(Errno::IO),
            )
        };
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(what)?;
        let existed = f.metadata().map_err(what)?.len() == len as u64;
        if !existed {
            f.set_len(len as u64).map_err(what)?;
        }
        let fd = OwnedFd::from(f);
        let ptr = sys::map_shared(fd.as_fd(), len)
            .map_err(|e| Error::sys(format!("mmap {len} bytes of {}", path.display()), e))?;
        Ok((
            Buffer {
                ptr,
                len,
                backing: Backing::File,
                fd: Some(fd),
                owner: None,
            },
            existed,
        ))
    }

    /// Writes a shared buffer's pages to its file and waits (nothing to do for private
    /// memory).
    pub fn sync(&self) -> Result<()> {
        if matches!(self.backing, Backing::Memfd | Backing::File) {
            // SAFETY: this Buffer's own live mapping.
            unsafe { sys::sync(self.ptr, self.len) }
                .map_err(|e| Error::sys(format!("msync {} bytes", self.len), e))?;
        }
        Ok(())
    }

    /// Maps `len` bytes (rounded up to 2 MB) of private anonymous 2 MB huge pages.
    ///
    /// Huge pages come from the pool reserved in `/proc/sys/vm/nr_hugepages`; the kernel
    /// reserves them at map time, so a short pool gives [`Error::HugePagesUnavailable`] here
    /// rather than a SIGBUS later.
    pub fn huge_pages(len: usize) -> Result<Buffer> {
        let len = round_len(len, HUGE_PAGE_SIZE)?;
        let ptr = sys::map_anonymous(len, true).map_err(|e| match e {
            Errno::NOMEM | Errno::INVAL | Errno::NOSYS => Error::HugePagesUnavailable {
                len,
                errno: e.raw_os_error(),
            },
            e => Error::sys(format!("mmap {len} bytes of huge pages"), e),
        })?;
        Ok(Buffer {
            ptr,
            len,
            backing: Backing::HugePages,
            fd: None,
            owner: None,
        })
    }

    /// Maps `len` bytes (rounded up to pages) of a memfd received from another process, shared.
    ///
    /// The fd is untrusted: the file must already hold `len` bytes and must be (or be made)
    /// sealed against shrinking, otherwise the sender could truncate it and make our accesses
    /// fault with SIGBUS; both are checked and refused with [`Error::BadMemfd`].
    pub fn map_memfd(fd: OwnedFd, len: usize) -> Result<Buffer> {
        Buffer::map_memfd_with(fd, len, true)
    }

    /// As [`Buffer::map_memfd`], mapped read-only unless `writable`: the way to map a memfd
    /// that was handed over read-only (a writable shared mapping of it would be refused).
    pub fn map_memfd_with(fd: OwnedFd, len: usize, writable: bool) -> Result<Buffer> {
        let map_len = round_len(len, PAGE_SIZE)?;
        let st = fs::fstat(&fd).map_err(|e| Error::sys("fstat received memfd", e))?;
        let size = st.st_size.max(0) as u64;
        if size < len as u64 {
            return Err(Error::BadMemfd {
                size,
                len,
                reason: "file is shorter than the mapping",
            });
        }
        // Adding the seal fails (EPERM) if the sender sealed the seals; it is enough that
        // SHRINK is among them afterwards.
        let _ = fs::fcntl_add_seals(&fd, SealFlags::SHRINK);
        let seals = fs::fcntl_get_seals(&fd).map_err(|_| Error::BadMemfd {
            size,
            len,
            reason: "not a memfd (no seals)",
        })?;
        if !seals.contains(SealFlags::SHRINK) {
            return Err(Error::BadMemfd {
                size,
                len,
                reason: "file can be shrunk (no F_SEAL_SHRINK and sealing refused)",
            });
        }
        let ptr = sys::map_shared_with(fd.as_fd(), map_len, writable)
            .map_err(|e| Error::sys(format!("mmap {map_len} bytes of received memfd"), e))?;
        Ok(Buffer {
            ptr,
            len: map_len,
            backing: Backing::Memfd,
            fd: Some(fd),
            owner: None,
        })
    }

    /// Wraps memory the caller owns; it is not freed on drop.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay mapped, valid and not be freed for the Buffer's life (and the
    /// life of any region registered over it). It must be writable unless the region over it is
    /// registered without write rights. Evicting such a region discards the pages' contents
    /// like `MADV_DONTNEED` does.
    pub unsafe fn external(ptr: *mut u8, len: usize) -> Result<Buffer> {
        if ptr.is_null() {
            return Err(Error::NullPointer);
        }
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        if len > isize::MAX as usize || (ptr as usize).checked_add(len).is_none() {
            return Err(Error::TooLarge { len });
        }
        Ok(Buffer {
            ptr,
            len,
            backing: Backing::External,
            fd: None,
            owner: None,
        })
    }

    /// Like [`Buffer::external`], and keeps `owner` alive until the Buffer drops (after any
    /// region over it is unpinned), e.g. the Python array whose data `ptr` points to.
    ///
    /// # Safety
    /// As for [`Buffer::external`], with "the Buffer's life" covered by `owner`: the memory
    /// must stay valid while `owner` lives and nothing may free or move it meanwhile.
    pub unsafe fn external_owned(
        ptr: *mut u8,
        len: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Buffer> {
        // SAFETY: forwarded to the caller.
        let mut b = unsafe { Buffer::external(ptr, len) }?;
        b.owner = Some(owner);
        Ok(b)
    }

    /// A buffer over a `Vec`'s heap memory, which the Buffer keeps (external
    /// backing: no copy, not page-aligned). Refuses an empty vector.
    pub fn from_vec(mut v: Vec<u8>) -> Result<Buffer> {
        let (ptr, len) = (v.as_mut_ptr(), v.len());
        // SAFETY: the Vec's heap buffer does not move when the Vec is moved into the Box, is
        // never resized (nothing else can reach the Vec) and lives until the Buffer drops;
        // it is writable.
        unsafe { Buffer::external_owned(ptr, len, Box::new(v)) }
    }

    /// First byte of the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes (whole pages for mapped buffers).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: buffers are never empty. Present for the `len`/`is_empty` convention.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What backs the buffer.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// The memfd (or file) behind a [`Backing::Memfd`] ([`Backing::File`]) buffer (dup it to
    /// send to another process).
    ///
    /// Named `fd` because `Buffer::memfd` is the constructor; `Region::memfd` gives the same.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// The page size the kernel uses for this buffer's pages.
    pub fn page_size(&self) -> usize {
        match self.backing {
            Backing::HugePages => HUGE_PAGE_SIZE,
            _ => PAGE_SIZE.max(sys::page_size()),
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.backing == Backing::External {
            // The owner (if any) drops with the fields, after this.
            return;
        }
        // SAFETY: this Buffer created the mapping and is its only owner; regions over it hold
        // the Buffer, so none is alive once it drops.
        if let Err(e) = unsafe { sys::unmap(self.ptr, self.len) } {
            tracing::warn!(len = self.len, error = %e, "munmap failed");
        }
        // The OwnedFd closes itself.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_buffer_keeps_its_bytes_for_the_next_mapping() {
        let dir = std::env::temp_dir().join(format!("remora-mem-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("buf");
        let (b, existed) = Buffer::file(&p, 5000).unwrap();
        assert!(!existed && b.len() == 8192 && b.backing() == Backing::File && b.fd().is_some());
        // SAFETY: the buffer's own mapping.
        unsafe { b.as_ptr().add(4097).write(42) };
        b.sync().unwrap();
        drop(b);
        let (b, existed) = Buffer::file(&p, 8192).unwrap();
        // SAFETY: as above.
        assert!(existed && unsafe { b.as_ptr().add(4097).read() } == 42);
        drop(b);
        // Another length: resized, not reused.
        assert!(!Buffer::file(&p, 3 * 4096).unwrap().1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn round_len_limits() {
        assert!(matches!(round_len(0, 4096), Err(Error::ZeroLength)));
        assert_eq!(round_len(1, 4096).unwrap(), 4096);
        assert_eq!(round_len(4096, 4096).unwrap(), 4096);
        assert_eq!(round_len(4097, 4096).unwrap(), 8192);
        assert!(matches!(
            round_len(usize::MAX, 4096),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            round_len(isize::MAX as usize, 4096),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn anonymous_is_zeroed_and_rounded() {
        let b = Buffer::anonymous(5000).unwrap();
        assert_eq!(b.len(), 8192);
        assert_eq!(b.backing(), Backing::Anonymous);
        assert!(b.fd().is_none());
        // SAFETY: the buffer owns 8192 fresh bytes.
        let s = unsafe { std::slice::from_raw_parts(b.as_ptr(), b.len()) };
        assert!(s.iter().all(|&x| x == 0));
    }

    #[test]
    fn hostile_lengths_error() {
        assert!(matches!(Buffer::anonymous(0), Err(Error::ZeroLength)));
        assert!(matches!(
            Buffer::anonymous(usize::MAX),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            Buffer::memfd("x", usize::MAX - 5),
            Err(Error::TooLarge { .. })
        ));
        assert!(Buffer::memfd("bad\0name", 4096).is_err());
        // SAFETY: these calls are refused before the pointer is used.
        unsafe {
            assert!(matches!(
                Buffer::external(std::ptr::null_mut(), 10),
                Err(Error::NullPointer)
            ));
            assert!(matches!(
                Buffer::external(usize::MAX as *mut u8, 10),
                Err(Error::TooLarge { .. })
            ));
        }
    }
}
