//! Runtime SIMD detection.
//!
//! Kernels are written as plain loops that LLVM vectorises; callers compile one copy with
//! `#[target_feature(enable = "avx2")]` and pick it at run time with [`level`].

/// The SIMD level kernels can be dispatched to on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// x86-64 AVX2 (256-bit integer and float vectors).
    Avx2,
    /// Whatever the compile target guarantees (SSE2 on x86-64).
    Baseline,
}

impl Level {
    /// Short name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Level::Avx2 => "avx2",
            Level::Baseline => "baseline",
        }
    }
}

/// The best level this CPU supports; `REMORA_SIMD=baseline` forces the baseline (for tests and
/// comparisons).
pub fn level() -> Level {
    if std::env::var("REMORA_SIMD").is_ok_and(|v| v == "baseline") {
        return Level::Baseline;
    }
    detect()
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Level {
    if std::arch::is_x86_feature_detected!("avx2") {
        Level::Avx2
    } else {
        Level::Baseline
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Level {
    Level::Baseline
}

#[cfg(test)]
mod tests {
    #[test]
    fn level_has_a_name() {
        let l = super::level();
        assert!(["avx2", "baseline"].contains(&l.name()));
    }
}
