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
    #[error(
        "{path}: {what} file has {got} bytes, expected {expected} for {modules} modules \
         ({per_module} bytes each){}",
        fits(*.got, *.per_module)
    )]
    FileSize {
        /// The file.
        path: PathBuf,
        /// Kind of file.
        what: &'static str,
        /// Modules it should hold.
        modules: usize,
        /// Bytes per module.
        per_module: u64,
        /// Bytes expected.
        expected: u64,
        /// Bytes found.
        got: u64,
    },
    /// A calibration path is a directory or another non-file (a FIFO, a device).
    #[error("{path}: is {kind}, expected a {what} file of {expected} bytes ({modules} modules)")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// "a directory" or "not a regular file".
        kind: &'static str,
        /// Kind of file expected.
        what: &'static str,
        /// Modules it should hold.
        modules: usize,
        /// Bytes expected.
        expected: u64,
    },
    /// A gain map holds a value no conversion can divide by: its `float32` value (what the
    /// engines use) is zero, subnormal, infinite or NaN.
    #[error(
        "{}: gain {value} at module {module}, row {row}, column {column}, stage {stage} is not \
         usable (a gain must be a normal float32: finite, non-zero, not subnormal); {bad} of \
         {total} gains are bad",
        origin_name(.origin)
    )]
    BadGain {
        /// The gain file, or `None` for maps given as an array.
        origin: Option<PathBuf>,
        /// Module of the first bad gain.
        module: usize,
        /// Row of the first bad gain in its module.
        row: usize,
        /// Column of the first bad gain in its module.
        column: usize,
        /// Map of the first bad gain: G0, G1, G2, HG0, HG1 or HG2.
        stage: &'static str,
        /// The bad value.
        value: f64,
        /// Bad gains in all maps.
        bad: usize,
        /// Gains in all maps.
        total: usize,
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
    /// The acquisition could not go on (a connection, a transfer, a node).
    #[error("{0}")]
    Acquisition(String),
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

/// A hint for a file whose size is a whole number of modules other than the one expected.
fn fits(got: u64, per_module: u64) -> String {
    if got > 0 && per_module > 0 && got % per_module == 0 {
        format!("; the size fits {} modules", got / per_module)
    } else {
        String::new()
    }
}

/// Where bad gains came from: the file, or the array handed over.
fn origin_name(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map_or_else(|| "gain maps".into(), |p| p.display().to_string())
}
