//! A sized CPU thread pool.
//!
//! Every engine that runs on the CPU owns one pool so that a benchmark or a receiver can pin the
//! number of threads it uses, independent of rayon's global pool.
use std::sync::Arc;

/// Errors from building a pool.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// rayon could not start the worker threads.
    #[error("cannot start a pool of {threads} threads: {source}")]
    Build {
        /// Requested thread count.
        threads: usize,
        /// Why rayon refused.
        #[source]
        source: rayon::ThreadPoolBuildError,
    },
}

/// What ran a piece of work: the backend's name, its thread count and the SIMD level in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    /// Backend name (e.g. `cpu-simd`, `cpu-scalar`).
    pub name: &'static str,
    /// Worker threads.
    pub threads: usize,
    /// SIMD level the kernels were dispatched to (`avx2`, `baseline`).
    pub simd: &'static str,
}

/// A rayon thread pool of a fixed size, cheap to clone.
#[derive(Clone)]
pub struct CpuPool {
    pool: Arc<rayon::ThreadPool>,
    threads: usize,
}

impl std::fmt::Debug for CpuPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuPool")
            .field("threads", &self.threads)
            .finish()
    }
}

impl CpuPool {
    /// A pool of `threads` workers; 0 means one per available core.
    pub fn new(threads: usize) -> Result<Self, PoolError> {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("remora-cpu-{i}"))
            .build()
            .map_err(|source| PoolError::Build { threads, source })?;
        tracing::debug!(threads, "cpu pool started");
        Ok(Self {
            pool: Arc::new(pool),
            threads,
        })
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` inside the pool, so rayon parallel iterators in `f` use its workers.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    /// A chunk length (in elements) for splitting `len` items over the pool: several chunks per
    /// thread for load balance, a multiple of `align` (SIMD width or row length), at least `align`.
    pub fn chunk_len(&self, len: usize, align: usize) -> usize {
        let align = align.max(1);
        let pieces = self.threads * 8;
        let per = len.div_ceil(pieces.max(1));
        per.div_ceil(align).max(1) * align
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn pool_uses_its_own_thread_count() {
        let pool = CpuPool::new(2).unwrap();
        assert_eq!(pool.threads(), 2);
        assert_eq!(pool.install(rayon::current_num_threads), 2);
        let sum: u64 = pool.install(|| (0..1000u64).into_par_iter().sum());
        assert_eq!(sum, 999 * 1000 / 2);
    }

    #[test]
    fn chunk_len_is_aligned_and_covers() {
        let pool = CpuPool::new(3).unwrap();
        for len in [0usize, 1, 7, 1024, 1_000_003] {
            let c = pool.chunk_len(len, 16);
            assert_eq!(c % 16, 0);
            assert!(c >= 16);
            assert!(len.div_ceil(c) <= 3 * 8 + 1);
        }
    }
}
