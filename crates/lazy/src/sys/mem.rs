//! Memory: anonymous and read-only file mappings owned by a value, and `process_vm_readv`.
use std::io;
use std::os::fd::RawFd;

/// An anonymous private mapping, or a read-only shared mapping of a file, unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving the owner between threads or
// sharing `&Mapping` (which exposes only the address) is sound.
unsafe impl Send for Mapping {}
// SAFETY: see above; no interior state besides the fixed address range.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes aligned to `align` (a power of two, at least the page size), so that
    /// fault units never straddle the alignment.
    pub fn anonymous(len: usize, align: usize) -> io::Result<Mapping> {
        let total = len
            .checked_add(align)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = p as usize;
        let start = (base + align - 1) & !(align - 1);
        // Trim the unaligned head and the tail so exactly [start, start+len) stays mapped.
        // SAFETY: both trimmed ranges lie inside the mapping just created and are not used.
        unsafe {
            if start > base {
                libc::munmap(p, start - base);
            }
            let end = start + len;
            let map_end = base + total;
            if map_end > end {
                libc::munmap(end as *mut libc::c_void, map_end - end);
            }
        }
        Ok(Mapping {
            ptr: start as *mut u8,
            len,
        })
    }
    /// Maps the first `len` bytes (`len` > 0, rounded up to a page) of `fd` shared and read-only:
    /// the mapping shows the file's current pages, so writes through other descriptors or
    /// mappings are seen. Touching a page past the file's end (if it shrinks) raises SIGBUS.
    #[cfg_attr(not(feature = "fabric"), allow(dead_code))]
    pub fn file_shared_readonly(fd: RawFd, len: usize) -> io::Result<Mapping> {
        let len = len
            .checked_next_multiple_of(4096)
            .filter(|&l| l > 0 && l <= isize::MAX as usize)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a fresh shared read-only mapping of a descriptor the caller holds; no existing
        // memory is affected and nothing can write through it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: p as *mut u8,
            len,
        })
    }
    /// Length in bytes (whole pages).
    #[cfg_attr(not(feature = "fabric"), allow(dead_code))]
    pub fn mapped_len(&self) -> usize {
        self.len
    }
    /// Asks for 4 KB pages only (`MADV_NOHUGEPAGE`; best effort).
    pub fn no_huge_pages(&self) {
        // SAFETY: advice on exactly the range this value owns; it does not change its contents.
        unsafe {
            libc::madvise(
                self.ptr as *mut libc::c_void,
                self.len,
                libc::MADV_NOHUGEPAGE,
            );
        }
    }
    /// Start address.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range this value owns; no references outlive `self`.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// `process_vm_readv` of one remote range into `buf`; returns bytes read.
pub fn process_read(pid: i32, remote: u64, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: the local iovec covers `buf`, which is exclusively borrowed; the remote one is only
    // read by the kernel in the other process's address space (checked by the kernel).
    let r = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}
