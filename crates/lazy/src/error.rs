//! Errors of the lazy-region library.
use std::time::Duration;

/// What can go wrong opening, serving or using a lazy region.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A userfaultfd, mmap or other kernel call failed.
    #[error("{what}: {source}")]
    Os {
        /// The call that failed.
        what: &'static str,
        /// The kernel's error.
        #[source]
        source: std::io::Error,
    },
    /// An invalid argument (unit size, length, range, ...).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The page server sent something that does not follow the protocol.
    #[error("page server protocol error: {0}")]
    Protocol(String),
    /// The page server could not be reached or did not answer before the deadline.
    #[error("page server unavailable for offset {offset:#x} after {waited:?}: {last}")]
    Unavailable {
        /// First byte of the unit that could not be fetched.
        offset: u64,
        /// How long the fetch was retried.
        waited: Duration,
        /// The last failure seen.
        last: String,
    },
    /// The server answered with an error for this range (e.g. unreadable process memory).
    #[error("page server refused offset {offset:#x}: {reason}")]
    Refused {
        /// First byte of the range.
        offset: u64,
        /// The server's reason.
        reason: String,
    },
    /// The unit was poisoned after a failed fetch; raw accesses to it raise SIGBUS.
    #[error("unit at offset {offset:#x} is poisoned (its fetch failed earlier)")]
    Poisoned {
        /// First byte of the poisoned unit.
        offset: u64,
    },
    /// The region was closed while the access was pending.
    #[error("lazy region closed")]
    Closed,
    /// An access outside the region.
    #[error("range {offset:#x}+{len:#x} outside the region of {size:#x} bytes")]
    OutOfRange {
        /// Start of the access.
        offset: u64,
        /// Its length.
        len: u64,
        /// The region's length.
        size: u64,
    },
    /// An I/O error reading a source or talking to a peer.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn os(what: &'static str, source: std::io::Error) -> Error {
        Error::Os { what, source }
    }
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
