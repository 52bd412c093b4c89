//! userfaultfd: opening one (with the API handshake), registering ranges, and the install and
//! wake ioctls, plus reading its fault messages.
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
        // _IO(0xAA, 0x00)
        const USERFAULTFD_IOC_NEW: u64 = 0xAA00;
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
