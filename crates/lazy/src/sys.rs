//! Raw userfaultfd, mmap and signal plumbing. Every `unsafe` block of the crate's kernel interface
//! lives here, each with its own SAFETY note; the rest of the crate calls these safe wrappers.
//!
//! The structures mirror `<linux/userfaultfd.h>` (6.6+, for `UFFDIO_POISON`); they are declared
//! here because `libc` does not carry them and the host headers may be older than the kernel.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const UFFDIO: u64 = 0xAA;
const fn iowr(nr: u64, size: usize) -> u64 {
    (3 << 30) | ((size as u64) << 16) | (UFFDIO << 8) | nr
}
const fn ior(nr: u64, size: usize) -> u64 {
    (2 << 30) | ((size as u64) << 16) | (UFFDIO << 8) | nr
}

/// `UFFD_API`.
const UFFD_API: u64 = 0xAA;
/// Features this crate knows about.
pub const FEATURE_SIGBUS: u64 = 1 << 7;
/// `UFFD_FEATURE_POISON` (Linux 6.6).
pub const FEATURE_POISON: u64 = 1 << 14;
/// `UFFD_EVENT_PAGEFAULT`.
pub const EVENT_PAGEFAULT: u8 = 0x12;
const REGISTER_MODE_MISSING: u64 = 1;

#[repr(C)]
#[derive(Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}
#[repr(C)]
#[derive(Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}
#[repr(C)]
#[derive(Default)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}
#[repr(C)]
#[derive(Default)]
struct UffdioZeropage {
    range: UffdioRange,
    mode: u64,
    zeropage: i64,
}
#[repr(C)]
#[derive(Default)]
struct UffdioPoison {
    range: UffdioRange,
    mode: u64,
    updated: i64,
}

/// One `struct uffd_msg` (32 bytes); only the page-fault member is read.
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct UffdMsg {
    /// Event kind (`EVENT_PAGEFAULT` is the only one requested).
    pub event: u8,
    reserved1: u8,
    reserved2: u16,
    reserved3: u32,
    /// `pagefault.flags`.
    pub flags: u64,
    /// `pagefault.address`: the faulting address (page-aligned unless EXACT_ADDRESS).
    pub address: u64,
    /// `pagefault.feat.ptid` and padding.
    pub ptid: u64,
}

const UFFDIO_API: u64 = iowr(0x3F, std::mem::size_of::<UffdioApi>());
const UFFDIO_REGISTER: u64 = iowr(0x00, std::mem::size_of::<UffdioRegister>());
const UFFDIO_UNREGISTER: u64 = ior(0x01, std::mem::size_of::<UffdioRange>());
const UFFDIO_WAKE: u64 = ior(0x02, std::mem::size_of::<UffdioRange>());
const UFFDIO_COPY: u64 = iowr(0x03, std::mem::size_of::<UffdioCopy>());
const UFFDIO_ZEROPAGE: u64 = iowr(0x04, std::mem::size_of::<UffdioZeropage>());
const UFFDIO_POISON: u64 = iowr(0x08, std::mem::size_of::<UffdioPoison>());

fn ioctl<T>(fd: RawFd, req: u64, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is a live, exclusively borrowed `#[repr(C)]` struct whose size is encoded in
    // `req`; the kernel reads and writes only within it.
    let r = unsafe { libc::ioctl(fd, req as _, arg as *mut T) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Opens a userfaultfd (non-blocking, close-on-exec) through `/dev/userfaultfd` or the syscall,
/// performs the API handshake with `features` and returns the fd and the features the kernel
/// supports.
pub fn open_uffd(features: u64) -> io::Result<(OwnedFd, u64)> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: plain syscall with integer arguments; a non-negative result is a new fd we own.
    let raw = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    let fd = if raw >= 0 {
        // SAFETY: `raw` is a fresh fd returned by the kernel and owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(raw as RawFd) }
    } else {
        // Kernels with vm.unprivileged_userfaultfd=0 still allow /dev/userfaultfd to its owner.
        let first = io::Error::last_os_error();
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/userfaultfd")
            .map_err(|_| first)?;
        const USERFAULTFD_IOC_NEW: u64 = 0xAA00; // _IO(0xAA, 0x00)
                                                 // SAFETY: USERFAULTFD_IOC_NEW takes the open flags by value and returns a new fd.
        let r = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW as _, flags) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above, a fresh fd owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(r) }
    };
    let mut api = UffdioApi {
        api: UFFD_API,
        features,
        ioctls: 0,
    };
    ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api)?;
    Ok((fd, api.features))
}

/// The features this kernel's userfaultfd supports (probed once with a throw-away fd).
pub fn supported_features() -> io::Result<u64> {
    static PROBE: std::sync::OnceLock<Result<u64, i32>> = std::sync::OnceLock::new();
    let r = PROBE.get_or_init(|| {
        open_uffd(0)
            .map(|(_, f)| f)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
    });
    r.map_err(io::Error::from_raw_os_error)
}

/// Registers `[start, start+len)` in missing mode.
pub fn register(fd: RawFd, start: u64, len: u64) -> io::Result<()> {
    let mut reg = UffdioRegister {
        range: UffdioRange { start, len },
        mode: REGISTER_MODE_MISSING,
        ioctls: 0,
    };
    ioctl(fd, UFFDIO_REGISTER, &mut reg)
}

/// Unregisters a range (pending faults are woken and retried as ordinary faults).
pub fn unregister(fd: RawFd, start: u64, len: u64) -> io::Result<()> {
    let mut r = UffdioRange { start, len };
    ioctl(fd, UFFDIO_UNREGISTER, &mut r)
}

/// Wakes threads waiting on faults in the range.
pub fn wake(fd: RawFd, start: u64, len: u64) -> io::Result<()> {
    let mut r = UffdioRange { start, len };
    ioctl(fd, UFFDIO_WAKE, &mut r)
}

/// Outcome of one install ioctl: bytes done, and the error that stopped it, if any.
pub struct Partial {
    /// Bytes installed before the error (or all of them).
    pub done: u64,
    /// The errno that stopped the ioctl.
    pub err: Option<io::Error>,
}

/// `UFFDIO_COPY` of `len` bytes from `src` to `dst`, waking waiters unless `wake` is false
/// (SIGBUS mode: nobody waits in the kernel).
///
/// # Safety
/// `src..src+len` must be readable memory of this process for the duration of the call.
pub unsafe fn copy(fd: RawFd, dst: u64, src: *const u8, len: u64, wake: bool) -> Partial {
    const DONTWAKE: u64 = 1;
    let mut c = UffdioCopy {
        dst,
        src: src as u64,
        len,
        mode: if wake { 0 } else { DONTWAKE },
        copy: 0,
    };
    match ioctl(fd, UFFDIO_COPY, &mut c) {
        Ok(()) => Partial {
            done: len,
            err: None,
        },
        Err(e) => Partial {
            done: c.copy.max(0) as u64,
            err: Some(e),
        },
    }
}

/// `UFFDIO_ZEROPAGE` over the range (waking waiters).
pub fn zeropage(fd: RawFd, start: u64, len: u64) -> Partial {
    let mut z = UffdioZeropage {
        range: UffdioRange { start, len },
        mode: 0,
        zeropage: 0,
    };
    match ioctl(fd, UFFDIO_ZEROPAGE, &mut z) {
        Ok(()) => Partial {
            done: len,
            err: None,
        },
        Err(e) => Partial {
            done: z.zeropage.max(0) as u64,
            err: Some(e),
        },
    }
}

/// `UFFDIO_POISON` over the range: later accesses raise SIGBUS (`BUS_MCEERR_AR`).
pub fn poison(fd: RawFd, start: u64, len: u64) -> Partial {
    let mut p = UffdioPoison {
        range: UffdioRange { start, len },
        mode: 0,
        updated: 0,
    };
    match ioctl(fd, UFFDIO_POISON, &mut p) {
        Ok(()) => Partial {
            done: len,
            err: None,
        },
        Err(e) => Partial {
            done: p.updated.max(0) as u64,
            err: Some(e),
        },
    }
}

/// Reads up to `out.len()` messages without blocking; returns how many were read (0 if none).
pub fn read_msgs(fd: RawFd, out: &mut [UffdMsg]) -> io::Result<usize> {
    let size = std::mem::size_of_val(out);
    // SAFETY: `out` is a writable slice of plain-old-data `#[repr(C)]` messages of `size` bytes.
    let r = unsafe { libc::read(fd, out.as_mut_ptr() as *mut libc::c_void, size) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize / std::mem::size_of::<UffdMsg>())
}

/// Waits until `fd` is readable or `timeout_ms` passes; true if readable.
pub fn poll_in(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack.
    let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0 && p.revents & libc::POLLIN != 0)
}

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

/// Receives exactly `buf.len()` bytes from a stream socket, busy-polling with `MSG_DONTWAIT`
/// for up to `spin` before falling back to a blocking read (which honours the socket's read
/// timeout). Busy-polling saves the scheduler wake-up (several µs) on the fault path.
pub fn recv_exact_spin(
    s: &mut std::net::TcpStream,
    buf: &mut [u8],
    spin: std::time::Duration,
) -> io::Result<()> {
    use std::io::Read;
    let fd = s.as_raw_fd();
    let start = std::time::Instant::now();
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: receives into the unfilled tail of `buf`, which is exclusively borrowed.
        let r = unsafe {
            libc::recv(
                fd,
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
                libc::MSG_DONTWAIT,
            )
        };
        if r > 0 {
            got += r as usize;
            continue;
        }
        if r == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock if start.elapsed() < spin => std::hint::spin_loop(),
            io::ErrorKind::WouldBlock => return s.read_exact(&mut buf[got..]),
            io::ErrorKind::Interrupted => {}
            _ => return Err(e),
        }
    }
    Ok(())
}
