//! The raw memory-management calls, each wrapped once with its safety argument.
//!
//! Everything here takes or returns raw addresses; the owning types (`Buffer`, `Region`) make
//! sure the addresses name live mappings they own or were promised.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use rustix::io::Errno;
use rustix::mm::{self, Advice, MapFlags, ProtFlags};

/// Maps `len` bytes of fresh private anonymous memory (2 MB huge pages if `huge`).
pub(crate) fn map_anonymous(len: usize, huge: bool) -> Result<*mut u8, Errno> {
    let mut flags = MapFlags::PRIVATE;
    if huge {
        flags |= MapFlags::HUGETLB | MapFlags::HUGE_2MB;
    }
    // SAFETY: a null hint lets the kernel pick an unused range, so no existing memory is
    // replaced; the new mapping is owned by the caller, who unmaps it.
    let p = unsafe {
        mm::mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            flags,
        )
    }?;
    Ok(p.cast())
}

/// Maps `len` bytes of `fd` from offset 0, shared and read-write.
pub(crate) fn map_shared(fd: BorrowedFd<'_>, len: usize) -> Result<*mut u8, Errno> {
    map_shared_with(fd, len, true)
}

/// A shared mapping of `fd`, writable or read-only.
pub(crate) fn map_shared_with(
    fd: BorrowedFd<'_>,
    len: usize,
    writable: bool,
) -> Result<*mut u8, Errno> {
    let prot = if writable {
        ProtFlags::READ | ProtFlags::WRITE
    } else {
        ProtFlags::READ
    };
    // SAFETY: as in `map_anonymous`, the kernel picks a fresh range; the caller checked that
    // the file covers `len` bytes (and sealed it against shrinking) so accesses cannot SIGBUS.
    let p = unsafe { mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0) }?;
    Ok(p.cast())
}

/// Writes a shared mapping's dirty pages to its file and waits (`msync(MS_SYNC)`).
///
/// # Safety
/// `[ptr, ptr+len)` must be a live mapping the caller owns.
pub(crate) unsafe fn sync(ptr: *mut u8, len: usize) -> Result<(), Errno> {
    // SAFETY: the caller's mapping; msync reads the page tables only.
    unsafe { mm::msync(ptr.cast(), len, mm::MsyncFlags::SYNC) }
}

/// Unmaps `[ptr, ptr+len)`.
///
/// # Safety
/// The range must be a mapping the caller created and nothing may use it afterwards.
pub(crate) unsafe fn unmap(ptr: *mut u8, len: usize) -> Result<(), Errno> {
    // SAFETY: forwarded to the caller.
    unsafe { mm::munmap(ptr.cast(), len) }
}

/// Locks `[ptr, ptr+len)` into memory (`mlock`, which also faults every page in).
///
/// # Safety
/// The range must be mapped memory the caller may use.
pub(crate) unsafe fn lock(ptr: *mut u8, len: usize) -> Result<(), Errno> {
    // SAFETY: forwarded; mlock does not change the contents.
    unsafe { mm::mlock(ptr.cast(), len) }
}

/// Unlocks `[ptr, ptr+len)`.
///
/// # Safety
/// As for [`lock`].
pub(crate) unsafe fn unlock(ptr: *mut u8, len: usize) -> Result<(), Errno> {
    // SAFETY: forwarded; munlock does not change the contents.
    unsafe { mm::munlock(ptr.cast(), len) }
}

/// `madvise` on a page-aligned range.
///
/// # Safety
/// The range must be mapped memory the caller owns; with `LinuxDontNeed` or `LinuxRemove` its
/// contents are discarded, so no reference to those bytes may be live.
pub(crate) unsafe fn advise(ptr: *mut u8, len: usize, advice: Advice) -> Result<(), Errno> {
    // SAFETY: forwarded to the caller.
    unsafe { mm::madvise(ptr.cast(), len, advice) }
}

/// `mincore`: one byte per system page of `[ptr, ptr+len)`, bit 0 set if resident.
///
/// # Safety
/// `ptr` must be page-aligned and the range mapped.
pub(crate) unsafe fn mincore(ptr: *mut u8, len: usize, vec: &mut [u8]) -> Result<(), Errno> {
    debug_assert!(vec.len() >= len.div_ceil(page_size()));
    // SAFETY: `vec` holds one byte per page of the range (checked by the caller and asserted
    // above), which is all the kernel writes.
    let rc = unsafe { libc::mincore(ptr.cast(), len, vec.as_mut_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    }
}

/// Faults the page holding `ptr` in for writing without changing its contents, even if
/// another thread writes the same byte at the same time (a compare-exchange of the value with
/// itself is a write access; a plain read-then-write could undo a concurrent write).
///
/// # Safety
/// `ptr` must point into mapped, writable memory.
pub(crate) unsafe fn touch_write(ptr: *mut u8) {
    // SAFETY: the caller guarantees the byte is mapped and writable; AtomicU8 has the size and
    // alignment of u8, and all concurrent access to region bytes in this crate is either
    // atomic like this or a documented RDMA-style race.
    let a = unsafe { AtomicU8::from_ptr(ptr) };
    let mut v = a.load(Ordering::Relaxed);
    while let Err(now) = a.compare_exchange_weak(v, v, Ordering::Relaxed, Ordering::Relaxed) {
        v = now;
    }
}

/// Faults the page holding `ptr` in for reading.
///
/// # Safety
/// `ptr` must point into mapped, readable memory.
pub(crate) unsafe fn touch_read(ptr: *mut u8) {
    // SAFETY: the caller guarantees the byte is mapped and readable; volatile keeps the read.
    let _ = unsafe { std::ptr::read_volatile(ptr) };
}

/// The system page size (4096 on x86-64).
pub(crate) fn page_size() -> usize {
    rustix::param::page_size()
}

/// Whether this kernel has `MADV_POPULATE_WRITE` (Linux 5.14+), probed once on a scratch page.
pub(crate) fn populate_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let len = page_size();
        let Ok(p) = map_anonymous(len, false) else {
            return false;
        };
        // SAFETY: `p` is the fresh private page mapped just above, unmapped right after.
        let ok = unsafe { advise(p, len, Advice::LinuxPopulateWrite) }.is_ok();
        // SAFETY: as above; nothing else refers to the scratch page.
        let _ = unsafe { unmap(p, len) };
        if !ok {
            tracing::debug!("MADV_POPULATE_WRITE unsupported; paging in by touching pages");
        }
        ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resident(p: *mut u8, len: usize) -> Vec<bool> {
        let mut v = vec![0u8; len / page_size()];
        // SAFETY: `p..p+len` is a live test mapping; one byte per page.
        unsafe { mincore(p, len, &mut v) }.unwrap();
        v.iter().map(|b| b & 1 == 1).collect()
    }

    /// The fallback used where MADV_POPULATE_* is missing: touching pages in, keeping values.
    #[test]
    fn touching_pages_in_keeps_their_contents() {
        let ps = page_size();
        let len = 4 * ps;
        let p = map_anonymous(len, false).unwrap();
        assert_eq!(resident(p, len), [false; 4]);
        // SAFETY: `p` is our fresh 4-page mapping, unmapped at the end.
        unsafe {
            p.add(ps + 7).write(0x5a);
            touch_write(p);
            touch_write(p.add(ps));
            touch_read(p.add(2 * ps));
        }
        assert_eq!(resident(p, len), [true, true, true, false]);
        // SAFETY: as above.
        unsafe {
            assert_eq!(p.add(ps + 7).read(), 0x5a);
            assert_eq!(p.read(), 0);
            unmap(p, len).unwrap();
        }
    }

    #[test]
    fn populate_is_probed() {
        // Linux 5.14+ everywhere remora runs; the probe must agree with a direct call.
        let len = page_size();
        let p = map_anonymous(len, false).unwrap();
        // SAFETY: fresh private page, unmapped right after.
        let direct = unsafe { advise(p, len, Advice::LinuxPopulateWrite) }.is_ok();
        // SAFETY: as above.
        unsafe { unmap(p, len) }.unwrap();
        assert_eq!(populate_supported(), direct);
    }
}
