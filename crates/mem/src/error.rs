//! Errors of the memory layer.

use crate::access::Access;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a buffer, registration or region operation failed.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed; `op` says what was attempted.
    #[error("{op} failed: {}", std::io::Error::from_raw_os_error(*.errno))]
    Syscall {
        /// What was attempted, e.g. `"mmap 4096 bytes anonymous"`.
        op: String,
        /// The raw `errno`.
        errno: i32,
    },
    /// A buffer or region of zero bytes was asked for.
    #[error("zero-length buffer")]
    ZeroLength,
    /// The length does not fit the address space (over `isize::MAX`, or overflows when rounded
    /// up to the page size or added to the start address).
    #[error("length {len} is too large for the address space")]
    TooLarge {
        /// The length asked for.
        len: usize,
    },
    /// A null pointer was given for caller-owned memory.
    #[error("null pointer for external memory")]
    NullPointer,
    /// No 2 MB huge pages are reserved (or too few for the length).
    #[error(
        "no 2 MB huge pages available for {len} bytes (reserve some with \
         `echo N > /proc/sys/vm/nr_hugepages`): {}",
        std::io::Error::from_raw_os_error(*.errno)
    )]
    HugePagesUnavailable {
        /// The length asked for, rounded up to huge pages.
        len: usize,
        /// The `errno` of the failed `mmap`.
        errno: i32,
    },
    /// `mlock` refused to pin the region, usually because `RLIMIT_MEMLOCK` is too low.
    #[error(
        "pinning {len} bytes failed: {} (RLIMIT_MEMLOCK soft limit: {}); raise it with \
         `ulimit -l` or register the region on-demand",
        std::io::Error::from_raw_os_error(*.errno),
        match .memlock_limit { Some(l) => format!("{l} bytes"), None => "unlimited".into() }
    )]
    PinFailed {
        /// Bytes that were to be locked (whole pages).
        len: usize,
        /// The `errno` of the failed `mlock`.
        errno: i32,
        /// The `RLIMIT_MEMLOCK` soft limit at the time, `None` if unlimited.
        memlock_limit: Option<u64>,
    },
    /// A local copy or page operation fell outside the region.
    #[error("range offset {offset} length {len} is outside the region of {size} bytes")]
    OutOfBounds {
        /// Offset asked for.
        offset: usize,
        /// Length asked for.
        len: usize,
        /// The region's size.
        size: usize,
    },
    /// A memfd received from elsewhere could not be mapped safely.
    #[error("memfd of {size} bytes cannot back a mapping of {len} bytes: {reason}")]
    BadMemfd {
        /// The file's size.
        size: u64,
        /// The length asked for.
        len: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `evict` was asked of a pinned region, whose pages must stay resident.
    #[error("cannot evict pages of a pinned region")]
    EvictPinned,
    /// The region has no write right, so its memory is treated as read-only.
    #[error("region is read-only (registered with {access})")]
    ReadOnly {
        /// The region's rights.
        access: Access,
    },
    /// The protection domain has no free key index left (2^24 - 1 regions).
    #[error("protection domain is full: no free key index")]
    KeysExhausted,
    /// No region is registered under this key.
    #[error("no region registered with key {0:#x}")]
    UnknownKey(u32),
}

/// Why a remote (or local) access was refused by [`crate::Pd::check_remote`].
///
/// On the wire every variant is a "remote access error" NAK (RC) or a counted drop (UC).
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum AccessError {
    /// The key names no registered region.
    #[error("unknown key {0:#x}")]
    UnknownKey(u32),
    /// `[va, va+len)` is not inside `[base, base+size)`.
    #[error("access va {va:#x} len {len} outside region base {base:#x} size {size}")]
    OutOfBounds {
        /// Virtual address asked for.
        va: u64,
        /// Length asked for.
        len: u64,
        /// The region's first address.
        base: u64,
        /// The region's size.
        size: u64,
    },
    /// The region's rights do not contain the rights the access needs.
    #[error("access needs {need} but the region grants {have}")]
    Denied {
        /// Rights the access needs.
        need: Access,
        /// Rights the region grants.
        have: Access,
    },
}

impl Error {
    pub(crate) fn sys(op: impl Into<String>, errno: rustix::io::Errno) -> Error {
        Error::Syscall {
            op: op.into(),
            errno: errno.raw_os_error(),
        }
    }
}
