//! The memory an arena lives in: a `remora-mem` [`Buffer`] of anonymous memory, a memfd, or a
//! file (on tmpfs or hugetlbfs, for a warm restart: `-e PATH`). The arena addresses its
//! contents by offset only, so a mapping at another address (another process, another host
//! through lazy memory) reads the same items. A migration target maps the source's arena as a
//! `remora-lazy` region ([`Mapping::lazy`]): its pages arrive on first touch and by push.
use std::io;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::sync::Arc;

use remora_lazy::LazyRegion;
use remora_mem::{Access, Buffer, Mode, Pd, Region};

/// Where the arena's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// Private anonymous memory (gone with the process).
    Anonymous,
    /// A memfd (shareable with another process by descriptor).
    Memfd,
    /// A file, created or reused (survives the process: warm restart).
    File(PathBuf),
    /// Another server's arena, filled on demand from its page server (a migration target).
    Lazy,
}

/// The memory behind a mapping.
enum Memory {
    Buffer(Buffer),
    Lazy(Arc<LazyRegion>),
    /// Registered with a protection domain, so peers READ it one-sidedly (`--one-sided`).
    Registered(Arc<Region>),
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Memory::Buffer(b) => b.fmt(f),
            Memory::Lazy(r) => write!(f, "LazyRegion({} bytes)", r.len()),
            Memory::Registered(r) => write!(f, "Region({} bytes, rkey {:#x})", r.len(), r.rkey()),
        }
    }
}

/// The arena's `len` bytes of one buffer (whose length is rounded up to pages).
#[derive(Debug)]
pub struct Mapping {
    buf: Memory,
    len: usize,
    backing: Backing,
    /// The file existed with this length before it was mapped (its contents may be an arena).
    pub existed: bool,
    /// The file existed with another length (an arena of other settings), now resized.
    pub resized_from: Option<u64>,
}

fn io_err(e: remora_mem::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl Mapping {
    /// Maps `len` bytes of `backing`. A file of another length is resized (its old contents
    /// then cannot be an arena of this size, and `existed` is false).
    pub fn new(backing: Backing, len: usize) -> io::Result<Mapping> {
        let resized_from = match &backing {
            Backing::File(p) => std::fs::metadata(p)
                .ok()
                .map(|m| m.len())
                .filter(|&l| l != 0 && l != len as u64),
            _ => None,
        };
        let (buf, existed) = match &backing {
            Backing::Anonymous => (Buffer::anonymous(len).map_err(io_err)?, false),
            Backing::Memfd => (
                Buffer::memfd("remora-kv-arena", len).map_err(io_err)?,
                false,
            ),
            Backing::File(p) => Buffer::file(p, len).map_err(io_err)?,
            Backing::Lazy => {
                return Err(io::Error::other(
                    "a lazy arena is mapped from a migration source (Mapping::lazy)",
                ))
            }
        };
        Ok(Mapping {
            buf: Memory::Buffer(buf),
            len,
            backing,
            existed,
            resized_from,
        })
    }

    /// The arena another server handed over, mapped lazily: it opens as that server's
    /// arena (a clean one restores), and its pages are fetched as they are touched.
    pub fn lazy(region: Arc<LazyRegion>) -> Mapping {
        Mapping {
            len: region.len(),
            buf: Memory::Lazy(region),
            backing: Backing::Lazy,
            existed: true,
            resized_from: None,
        }
    }

    /// Registers the mapping's memory with `pd` for remote READs only (never remote writes),
    /// paged on demand: the region a remotely readable arena ([`super::remote`]) is granted
    /// through. A lazy arena cannot be registered. A file (`-e`) registers as well; unlike a
    /// sealed memfd it is not mapped by shm peers, whose READs its queue pairs then serve.
    pub fn register(self, pd: &Pd) -> io::Result<(Mapping, Arc<Region>)> {
        let Memory::Buffer(buf) = self.buf else {
            return Err(io::Error::other(
                "only an arena in anonymous memory, a memfd or a file can be registered",
            ));
        };
        let region = pd
            .register(buf, Access::REMOTE_READ, Mode::OnDemand)
            .map_err(io_err)?;
        let map = Mapping {
            buf: Memory::Registered(region.clone()),
            ..self
        };
        Ok((map, region))
    }

    /// The first byte: the arena reads and writes through it under its owner's lock while
    /// replies read pinned values through [`Pin`](super::Pin)s (bytes nobody writes while
    /// pinned).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        match &self.buf {
            Memory::Buffer(b) => b.as_ptr(),
            Memory::Lazy(r) => r.as_ptr(),
            Memory::Registered(r) => r.as_ptr(),
        }
    }

    /// Gives the memory of `len` bytes at `offset` (page-aligned) back to the system; they
    /// read as zeroes afterwards (a page handed back to no class, memcached's freeing of
    /// pages beyond a lowered `cache_memlimit`). Best effort: the bytes stay valid either way.
    pub fn discard(&self, offset: usize, len: usize) {
        if offset + len > self.len || offset % 4096 != 0 {
            return;
        }
        use rustix::mm::{madvise, Advice};
        let advice = match self.backing {
            // MADV_DONTNEED: rustix's `Advice::DontNeed` is POSIX_MADV_DONTNEED, a no-op on Linux.
            Backing::Anonymous => Advice::LinuxDontNeed,
            // Shared memory: DONTNEED would keep the file's pages; REMOVE frees them.
            Backing::Memfd | Backing::File(_) => Advice::LinuxRemove,
            // A dropped page of a lazy region faults in from the source again (stale bytes,
            // or none once the source is gone): zero it in place instead.
            Backing::Lazy => {
                // SAFETY: as below; the arena rereads the page as zeroes.
                unsafe { std::ptr::write_bytes(self.as_ptr().add(offset), 0, len) };
                return;
            }
        };
        // SAFETY: the range lies inside the mapping; the arena calls this only for a page no
        // class owns and no pin reads, and rereads it as zeroes.
        let _ = unsafe { madvise(self.as_ptr().add(offset).cast(), len, advice) };
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: a mapping has at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the buffer maps at least `len` bytes and lives as long as `self`; the
        // exclusive borrow of `self` is the only way to these bytes.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr(), self.len) }
    }

    /// The bytes, read-only.
    pub fn view(&self) -> &[u8] {
        // SAFETY: as in `bytes`, shared.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// Writes a memfd- or file-backed arena's pages out (a graceful stop), registered or not.
    pub fn sync(&self) -> io::Result<()> {
        match &self.buf {
            Memory::Buffer(b) => b.sync().map_err(io_err),
            Memory::Registered(r) if matches!(self.backing, Backing::File(_)) => {
                use rustix::mm::{msync, MsyncFlags};
                // SAFETY: the region's own live shared mapping of `r.len()` bytes, kept by
                // `self`; msync changes no byte.
                unsafe { msync(r.as_ptr().cast(), r.len(), MsyncFlags::SYNC) }
                    .map_err(io::Error::from)
            }
            Memory::Lazy(_) | Memory::Registered(_) => Ok(()),
        }
    }

    /// What backs it.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// The memfd or file descriptor, to hand the arena to another process.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.buf {
            Memory::Buffer(b) => b.fd(),
            Memory::Lazy(_) => None,
            Memory::Registered(r) => r.memfd(),
        }
    }
}
