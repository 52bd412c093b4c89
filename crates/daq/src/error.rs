//! Errors of the processing core.
use std::path::PathBuf;

/// Result with [`DaqError`].
pub type Result<T, E = DaqError> = std::result::Result<T, E>;

/// Everything that can go wrong with bad input or configuration. Never a panic.
#[derive(Debug, thiserror::Error)]
pub enum DaqError {
    /// An array has the wrong number of elements.
    #[error("{what}: expected {expected} elements, got {got}")]
    Shape {
        /// Which array.
        what: &'static str,
        /// Elements expected.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A calibration file is shorter or longer than its format says.
    #[error("{path}: {what} file has {got} bytes, expected {expected} ({modules} modules)")]
    FileSize {
        /// The file.
        path: PathBuf,
        /// Kind of file.
        what: &'static str,
        /// Modules it should hold.
        modules: usize,
        /// Bytes expected.
        expected: u64,
        /// Bytes found.
        got: u64,
    },
    /// A text file (PONI, geometry) could not be parsed.
    #[error("{what}: {msg}")]
    Parse {
        /// What was being parsed.
        what: &'static str,
        /// Why it failed.
        msg: String,
    },
    /// A configuration value is out of range or inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The CPU thread pool could not start.
    #[error(transparent)]
    Pool(#[from] remora_accel::PoolError),
}

impl DaqError {
    pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
        if expected == got {
            Ok(())
        } else {
            Err(DaqError::Shape {
                what,
                expected,
                got,
            })
        }
    }
}
