//! Command counters with memcached's names. Each worker owns one [`Counters`] and is its only
//! writer (so increments are plain relaxed load+store, not locked adds); `stats` sums them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// Per-worker command counters (names as in memcached's `stats`).
        #[derive(Default, Debug)]
        #[allow(missing_docs)]
        pub struct Counters { $(pub $name: AtomicU64,)* }

        impl Counters {
            /// Names and values, in memcached's order.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Relaxed)),)*]
            }
            /// Zeroes every counter (`stats reset`).
            pub fn reset(&self) {
                $(self.$name.store(0, Relaxed);)*
            }
        }
    };
}

counters!(
    cmd_get,
    cmd_set,
    cmd_flush,
    cmd_touch,
    cmd_meta,
    get_hits,
    get_misses,
    get_expired,
    get_flushed,
    delete_misses,
    delete_hits,
    incr_misses,
    incr_hits,
    decr_misses,
    decr_hits,
    cas_misses,
    cas_hits,
    cas_badval,
    touch_hits,
    touch_misses,
    store_too_large,
    store_no_memory,
    auth_cmds,
    auth_errors,
    bytes_read,
    bytes_written,
    conn_yields,
    idle_kicks,
    response_obj_oom,
    read_buf_oom,
);

/// Adds `n` to a counter owned by the calling thread.
#[inline]
pub fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Adds one.
#[inline]
pub fn inc(c: &AtomicU64) {
    add(c, 1)
}

/// Connection counters shared by all threads.
#[derive(Default, Debug)]
pub struct ConnCounters {
    /// Open connections.
    pub curr: AtomicU64,
    /// Connections ever accepted.
    pub total: AtomicU64,
    /// Connections refused for `-c`.
    pub rejected: AtomicU64,
}
