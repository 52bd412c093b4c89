//! A registered buffer: keys, rights, pinning mode, residency, and bounds-checked copies.

use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{self, FallocateFlags};
use rustix::io::Errno;
use rustix::mm::Advice;

use crate::access::Access;
use crate::buffer::{Backing, Buffer};
use crate::error::{Error, Result};
use crate::residency::{PageIn, ResidencyMap};
use crate::sys;

/// Whether a region's pages are locked in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Locked with `mlock` at registration and unlocked when the region drops; every page is
    /// resident for the region's life. Fails with [`Error::PinFailed`] when `RLIMIT_MEMLOCK`
    /// is too low.
    Pinned,
    /// Nothing is pinned: residency is tracked in a [`ResidencyMap`] and accesses to missing
    /// pages are expected to fault and be paged in (PART).
    OnDemand,
}

/// A registered buffer. Created by [`crate::Pd::register`] and shared as `Arc<Region>`.
///
/// The bounds-checked copies ([`Region::write_at`], [`Region::read_at`]) behave like DMA: a
/// copy that overlaps a concurrent write to the same bytes (another thread, another process
/// sharing the memfd, a remote WRITE being placed) may see or leave a mix of both, exactly as
/// with real RDMA. Ordering between transfers is the transport's business (completions), not
/// this type's.
#[derive(Debug)]
pub struct Region {
    buf: Buffer,
    access: Access,
    mode: Mode,
    lkey: u32,
    rkey: u32,
    /// Page-aligned start of the pages the buffer touches (differs from the buffer start only
    /// for unaligned external memory).
    span_start: usize,
    span_len: usize,
    residency: ResidencyMap,
}

impl Region {
    /// Builds the region: pins it or reads its residency from the kernel.
    pub(crate) fn new(
        buf: Buffer,
        access: Access,
        mode: Mode,
        lkey: u32,
        rkey: u32,
    ) -> Result<Region> {
        let ps = buf.page_size();
        let start = buf.as_ptr() as usize;
        let span_start = start & !(ps - 1);
        // `Buffer` guarantees start + len does not overflow; rounding up to a page can only
        // overflow at the very top of the address space, which user space never maps.
        let span_end = (start + buf.len())
            .checked_next_multiple_of(ps)
            .ok_or(Error::TooLarge { len: buf.len() })?;
        let span_len = span_end - span_start;
        if mode == Mode::Pinned {
            // SAFETY: the span covers exactly the pages the buffer lies in, all mapped
            // (mappings are page-granular); mlock does not change contents.
            if let Err(e) = unsafe { sys::lock(span_start as *mut u8, span_len) } {
                let lim = rustix::process::getrlimit(rustix::process::Resource::Memlock);
                // mlock can fail part way (e.g. a hole in external memory): undo what it did.
                // SAFETY: same range as above; munlock of unlocked pages is harmless.
                let _ = unsafe { sys::unlock(span_start as *mut u8, span_len) };
                return Err(Error::PinFailed {
                    len: span_len,
                    errno: e.raw_os_error(),
                    memlock_limit: lim.current,
                });
            }
        }
        let region = Region {
            buf,
            access,
            mode,
            lkey,
            rkey,
            span_start,
            span_len,
            residency: ResidencyMap::new(span_len, ps),
        };
        match mode {
            Mode::Pinned => region.residency.mark_resident(0..region.residency.pages()),
            Mode::OnDemand => {
                region.refresh_residency()?;
            }
        }
        Ok(region)
    }

    /// The virtual address remote peers use for the first byte.
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Always false (regions are never empty); for the `len`/`is_empty` convention.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The local key (for the local side's scatter/gather entries).
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key peers put in their RETH.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The rights granted.
    pub fn access(&self) -> Access {
        self.access
    }

    /// Pinned or on-demand.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// What backs the memory.
    pub fn backing(&self) -> Backing {
        self.buf.backing()
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.buf.as_ptr()
    }

    /// The memfd of a memfd-backed region.
    pub fn memfd(&self) -> Option<BorrowedFd<'_>> {
        self.buf.fd()
    }

    /// The residency map (pages relative to the page holding the first byte).
    pub fn residency(&self) -> &ResidencyMap {
        &self.residency
    }

    /// True if `[va, va+len)` lies inside the region (no overflow on hostile values).
    pub fn contains(&self, va: u64, len: u64) -> bool {
        let base = self.addr();
        va >= base
            && va
                .checked_add(len)
                .is_some_and(|end| end <= base + self.len() as u64)
    }

    /// Checks `[offset, offset+len)` against the region.
    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::OutOfBounds {
                offset,
                len,
                size: self.len(),
            }),
        }
    }

    /// Copies `src` into the region at `offset`. Bounds-checked; refused on regions without
    /// any write right. Rights are not otherwise checked: remote accesses go through
    /// [`crate::Pd::check_remote`] first.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check(offset, src.len())?;
        if !self.access.writable() {
            return Err(Error::ReadOnly {
                access: self.access,
            });
        }
        // SAFETY: [offset, offset+len) is inside the live buffer (checked above) and the memory
        // is writable (write right); `copy` allows src to overlap the region. Concurrent
        // writers race byte-wise like DMA, as documented on the type.
        unsafe { std::ptr::copy(src.as_ptr(), self.as_ptr().add(offset), src.len()) };
        Ok(())
    }

    /// Copies bytes at `offset` into `dst`. Bounds-checked.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len())?;
        // SAFETY: the source range is inside the live buffer (checked above); `dst` is a
        // unique borrow so it cannot alias the region through safe code, and `copy` tolerates
        // overlap anyway.
        unsafe { std::ptr::copy(self.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// The whole region as a byte slice.
    ///
    /// # Safety
    /// Nothing may write the bytes (locally, through another mapping, or remotely) while the
    /// slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the buffer is live for `&self`; the caller excludes writers.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len()) }
    }

    /// The whole region as a mutable byte slice.
    ///
    /// # Safety
    /// The caller must have exclusive access to the bytes while the slice lives (no other
    /// slice, copy, or remote access to them).
    #[allow(clippy::mut_from_ref)] // the region is shared memory; exclusivity is the caller's
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: the buffer is live for `&self`; the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr(), self.len()) }
    }

    /// Map pages touched by byte range `[offset, offset+len)` (which must be checked).
    fn pages_of(&self, offset: usize, len: usize) -> Range<usize> {
        let ps = self.residency.page_size();
        let lo = self.buf.as_ptr() as usize - self.span_start + offset;
        let hi = lo + len;
        lo / ps..hi.div_ceil(ps)
    }

    /// Address and length of map pages `pages`.
    fn page_bytes(&self, pages: &Range<usize>) -> (*mut u8, usize) {
        let ps = self.residency.page_size();
        (
            (self.span_start + pages.start * ps) as *mut u8,
            (pages.end - pages.start) * ps,
        )
    }

    /// Refreshes the map from the kernel (`mincore`) and returns the number of resident pages.
    ///
    /// A map page counts as resident when every system page in it is. For private anonymous
    /// memory a page that was only read maps the shared zero page and counts as resident
    /// although the first write will still fault.
    pub fn refresh_residency(&self) -> Result<usize> {
        let sys_ps = sys::page_size();
        let ps = self.residency.page_size();
        let per = ps / sys_ps;
        // Query in chunks so a huge region does not need a huge vector at once.
        const CHUNK_SYS_PAGES: usize = 1 << 16;
        let chunk_pages = (CHUNK_SYS_PAGES / per).max(1);
        let mut vec = vec![0u8; chunk_pages * per];
        let mut resident = vec![false; self.residency.pages()];
        let mut page = 0;
        while page < self.residency.pages() {
            let n = chunk_pages.min(self.residency.pages() - page);
            let (ptr, len) = self.page_bytes(&(page..page + n));
            // SAFETY: the range is whole pages of the span, page-aligned and mapped; `vec`
            // has one byte per system page of it.
            unsafe { sys::mincore(ptr, len, &mut vec[..n * per]) }
                .map_err(|e| Error::sys(format!("mincore {len} bytes"), e))?;
            for i in 0..n {
                resident[page + i] = vec[i * per..(i + 1) * per].iter().all(|b| b & 1 == 1);
            }
            page += n;
        }
        self.residency.set_all(|p| resident[p]);
        Ok(self.residency.resident_count())
    }

    /// The residency-map page holding byte `offset` (`None` past the end).
    pub fn page_of(&self, offset: usize) -> Option<usize> {
        (offset < self.len()).then(|| self.pages_of(offset, 1).start)
    }

    /// The first residency-map page of `[offset, offset+len)` that is not resident, if any
    /// (what the receive path records as the faulting page). `None` also if the range leaves
    /// the region.
    pub fn first_missing_page(&self, offset: usize, len: usize) -> Option<usize> {
        if len == 0 || self.check(offset, len).is_err() {
            return None;
        }
        self.residency.first_missing(self.pages_of(offset, len))
    }

    /// True if every page of `[offset, offset+len)` is resident per the map (no syscall).
    /// False if the range leaves the region.
    pub fn is_resident(&self, offset: usize, len: usize) -> bool {
        if self.check(offset, len).is_err() {
            return false;
        }
        if len == 0 {
            return true;
        }
        self.residency.all_resident(self.pages_of(offset, len))
    }

    /// Makes pages resident around `offset` per `policy` and marks them in the map; returns
    /// how many pages were newly made resident. Pages the map already holds are skipped.
    ///
    /// Uses `MADV_POPULATE_WRITE` (or `_READ` on regions without write rights) where the
    /// kernel has it (5.14+), else touches each page with a value-preserving atomic write; also
    /// touches where the kernel refuses the mapping, or faults on external memory (a
    /// userfaultfd in SIGBUS mode fills pages only on a user-space access).
    pub fn page_in(&self, offset: usize, policy: PageIn) -> Result<usize> {
        if offset >= self.len() {
            return Err(Error::OutOfBounds {
                offset,
                len: 1,
                size: self.len(),
            });
        }
        let page = self.pages_of(offset, 1).start;
        self.populate(policy.pages_for(page, self.residency.pages()))
    }

    /// Makes every page of `[offset, offset+len)` resident (e.g. the rest of one transfer,
    /// PIA bounded to that transfer); returns how many pages were newly made resident.
    pub fn page_in_range(&self, offset: usize, len: usize) -> Result<usize> {
        self.check(offset, len)?;
        if len == 0 {
            return Ok(0);
        }
        self.populate(self.pages_of(offset, len))
    }

    /// Populates the missing runs of map pages in `pages`.
    fn populate(&self, pages: Range<usize>) -> Result<usize> {
        let write = self.access.writable();
        let mut added = 0;
        let runs: Vec<Range<usize>> = self.residency.missing_runs(pages).collect();
        for run in runs {
            let (ptr, len) = self.page_bytes(&run);
            self.populate_bytes(ptr, len, write)?;
            added += self.residency.mark_resident_counted(run);
        }
        Ok(added)
    }

    fn populate_bytes(&self, ptr: *mut u8, len: usize, write: bool) -> Result<()> {
        if sys::populate_supported() {
            let advice = if write {
                Advice::LinuxPopulateWrite
            } else {
                Advice::LinuxPopulateRead
            };
            // SAFETY: whole mapped pages of this region's span; populating does not change
            // contents.
            match unsafe { sys::advise(ptr, len, advice) } {
                Ok(()) => return Ok(()),
                // The kernel has it but not for this mapping (e.g. VM_IO/PFN mappings of
                // device memory): touch instead.
                Err(Errno::INVAL) => {
                    tracing::debug!(len, "MADV_POPULATE_* refused here; touching pages instead");
                }
                // External memory under a userfaultfd in SIGBUS mode (a remora-lazy region's
                // default): the kernel answers its own faults there with EFAULT, and only a
                // touch from user space, whose SIGBUS the owner's handler resolves, brings the
                // pages in. Memory this crate mapped itself is never registered like that.
                Err(Errno::FAULT) if self.backing() == Backing::External => {
                    tracing::debug!(
                        len,
                        "MADV_POPULATE_* faulted (EFAULT); touching pages instead"
                    );
                }
                Err(e) => {
                    return Err(Error::sys(
                        format!(
                            "madvise(MADV_POPULATE_{}) {len} bytes",
                            if write { "WRITE" } else { "READ" }
                        ),
                        e,
                    ))
                }
            }
        }
        let step = sys::page_size();
        for off in (0..len).step_by(step) {
            // SAFETY: `ptr + off` is inside a whole mapped page of the span; it is writable if
            // the region has a write right (the `external` contract), and the touch keeps
            // the byte's value.
            unsafe {
                if write {
                    sys::touch_write(ptr.add(off));
                } else {
                    sys::touch_read(ptr.add(off));
                }
            }
        }
        Ok(())
    }

    /// Gives the pages touched by `[offset, offset+len)` back to the kernel and marks them
    /// missing; their contents are lost (anonymous and huge pages read back as zero, a memfd
    /// gets a hole, for every process mapping it). Refused on pinned regions.
    ///
    /// For external memory only pages lying wholly inside the buffer are given back, so bytes
    /// next to it are never discarded. Used by tests and PART experiments to cause faults.
    pub fn evict(&self, offset: usize, len: usize) -> Result<()> {
        if self.mode == Mode::Pinned {
            return Err(Error::EvictPinned);
        }
        self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let mut pages = self.pages_of(offset, len);
        if self.backing() == Backing::External {
            let ps = self.residency.page_size();
            let start = self.buf.as_ptr() as usize;
            let end = start + self.buf.len();
            if start % ps != 0 {
                pages.start = pages.start.max(1);
            }
            if end % ps != 0 {
                pages.end = pages.end.min(self.residency.pages() - 1);
            }
            if pages.start >= pages.end {
                return Ok(());
            }
        }
        // Mark first so the engine stops placing into these pages before they go.
        self.residency.mark_missing(pages.clone());
        let (ptr, bytes) = self.page_bytes(&pages);
        match self.backing() {
            Backing::Memfd | Backing::File => {
                // SAFETY: whole pages of this region's shared mapping; contents are discarded,
                // which is what evict promises; no Rust reference into them is held by safe
                // code (slices come only from the unsafe accessors).
                match unsafe { sys::advise(ptr, bytes, Advice::LinuxRemove) } {
                    Ok(()) => Ok(()),
                    Err(_) => self.punch_hole(ptr, bytes),
                }
            }
            _ => {
                // SAFETY: as above, for private (or caller-owned) memory.
                unsafe { sys::advise(ptr, bytes, Advice::LinuxDontNeed) }
                    .map_err(|e| Error::sys(format!("madvise(MADV_DONTNEED) {bytes} bytes"), e))
            }
        }
    }

    /// Fallback for `MADV_REMOVE`: punch a hole in the memfd, then drop our page table entries.
    fn punch_hole(&self, ptr: *mut u8, bytes: usize) -> Result<()> {
        let Some(fd) = self.buf.fd() else {
            return Err(Error::sys("punch hole (no memfd)", Errno::BADF));
        };
        let file_off = (ptr as usize - self.buf.as_ptr() as usize) as u64;
        fs::fallocate(
            fd.as_fd(),
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            file_off,
            bytes as u64,
        )
        .map_err(|e| Error::sys(format!("fallocate punch hole {bytes} bytes"), e))?;
        // SAFETY: as in `evict`.
        unsafe { sys::advise(ptr, bytes, Advice::LinuxDontNeed) }
            .map_err(|e| Error::sys(format!("madvise(MADV_DONTNEED) {bytes} bytes"), e))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.mode == Mode::Pinned {
            // SAFETY: the span was locked in `new` and is still mapped (the buffer drops after
            // this). For external memory overlapping another pinned region this also unlocks
            // that region's shared pages, since mlock does not count (documented on Pd).
            if let Err(e) = unsafe { sys::unlock(self.span_start as *mut u8, self.span_len) } {
                tracing::warn!(len = self.span_len, error = %e, "munlock failed");
            }
        }
    }
}
