//! The engine's error type.

use crate::geometry::GeometryError;

/// Why an image could not be resized. Bad input is always one of these, never a panic.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input is neither a JPEG nor a PNG.
    #[error("not a JPEG or PNG image")]
    UnknownFormat,
    /// The input ends before its headers do.
    #[error("truncated image: {0}")]
    Truncated(&'static str),
    /// The headers break the format's rules.
    #[error("malformed image: {0}")]
    Malformed(String),
    /// A valid image this engine does not handle (CMYK JPEG, 12-bit, …).
    #[error("unsupported image: {0}")]
    Unsupported(String),
    /// The input is over one of the [`Limits`](crate::Limits); checked before decoding.
    #[error("{what} {value} over the limit of {limit}")]
    TooLarge {
        /// What is over: `input bytes`, `input pixels`, `output pixels`, `JPEG scans` or
        /// `JPEG output side`.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// The job would hold more memory than [`Limits::max_job_memory`](crate::Limits::max_job_memory)
    /// allows, as estimated from the headers and the geometry before anything is allocated.
    #[error(
        "the job would need about {} of memory at its {stage} stage, over the job memory \
         limit of {}",
        show_bytes(*need),
        show_bytes(*limit)
    )]
    OverBudget {
        /// The most expensive stage: `decode`, `resample`, `orient`, `crop` or `encode`.
        stage: &'static str,
        /// Estimated bytes (the input included).
        need: u64,
        /// The limit.
        limit: u64,
    },
    /// The job ran past [`Job::timeout`](crate::Job::timeout).
    #[error("the job took longer than its limit of {limit:?} (stopped while in {stage})")]
    TimedOut {
        /// Where it was stopped.
        stage: &'static str,
        /// The limit.
        limit: std::time::Duration,
    },
    /// The job was cancelled (the service is shutting down).
    #[error("the job was cancelled")]
    Cancelled,
    /// The codec refused the data while decoding (corrupt or truncated entropy-coded data).
    #[error("decode failed: {0}")]
    Decode(String),
    /// The codec failed while encoding.
    #[error("encode failed: {0}")]
    Encode(String),
    /// The resampler failed.
    #[error("resample failed: {0}")]
    Resample(String),
    /// The GPU engine was chosen but cannot run: no device opened (the reason from
    /// `remora-accel`, e.g. no Vulkan adapter, or only a CPU-type one without `REMORA_GPU=any`),
    /// the build has no `gpu` feature, or the device failed.
    #[error("GPU engine: {0}")]
    Gpu(String),
    /// A bad option (filter name, sampling factor, quality).
    #[error("bad option: {0}")]
    BadOption(String),
    /// A bad geometry string.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Human-readable bytes: `512 MiB`, `3.1 GiB`, `900 KiB`.
fn show_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 || v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_people_write_them() {
        assert_eq!(show_bytes(512 << 20), "512 MiB");
        assert_eq!(show_bytes(3 << 30), "3 GiB");
        assert_eq!(show_bytes(1536), "1.5 KiB");
        assert_eq!(show_bytes(12), "12 B");
    }
}
