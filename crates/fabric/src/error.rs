//! Errors of the fabric API (wire-level problems are counted, not returned: see `Stats`).
use std::io;

/// Errors returned by posting, connecting and transports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The queue pair is in the error state (a previous request failed); destroy it.
    #[error("queue pair is in the error state")]
    QpError,
    /// Too many outstanding work requests.
    #[error("send queue full ({0} outstanding work requests)")]
    QueueFull(usize),
    /// The operation does not exist on this queue pair type (e.g. READ on UC).
    #[error("{op} is not supported on {qp} queue pairs")]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The QP type.
        qp: &'static str,
    },
    /// A local buffer argument is out of the region's bounds or lacks a right.
    #[error("local buffer: {0}")]
    Local(String),
    /// A message longer than the 2^31-byte RDMA limit.
    #[error("message of {0} bytes exceeds the 2 GiB RDMA message limit")]
    TooLong(usize),
    /// Setting up the connection failed.
    #[error("connection setup: {0}")]
    Setup(String),
    /// The peer closed the connection or stopped answering.
    #[error("peer disconnected")]
    Disconnected,
    /// Timed out waiting.
    #[error("timed out")]
    Timeout,
    /// Memory registration error.
    #[error(transparent)]
    Mem(#[from] remora_mem::Error),
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}
