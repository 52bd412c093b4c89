//! A memcached-compatible cache: `remora kv serve` replaces `memcached` with the same flags,
//! bytes on the wire and counters.
//!
//! Split like pelikan: [`protocol`] (pure, sans-IO parsers for the text, meta and binary
//! protocols, typed requests and replies; protocol errors are replies), [`storage`] (a sharded
//! hash table with per-shard LRU, a byte budget, CAS and expiry; time is passed in),
//! [`handler`] (runs requests against storage and counts them; replies queue in an
//! [`out::Out`] that holds large values by reference) and [`server`] (TCP, unix and
//! UDP sockets on io_uring or mio/epoll worker threads). [`config`] parses memcached's command line;
//! [`daemon`] does what memcached does to its process before serving (`-d`, `-r`, `-P`).
//!
//! [`arena`] is the relocatable slab-class item memory with warm restart that will replace
//! `storage`'s heap allocations (issue 17); the server does not use it yet.
//!
//! Not here: slab classes and slab statistics in the server (memory is accounted per item),
//! SASL, TLS, extstore and the LRU crawler. Meta `E` (explicit CAS) is refused, as memcached
//! 1.6.18 refuses it. [`logger`] holds the `watch` log streams.
#![warn(missing_docs)]

pub mod arena;
pub mod config;
pub mod conns;
pub mod daemon;
pub mod handler;
pub mod logger;
pub mod migrate;
pub mod out;
pub mod prefix;
pub mod protocol;
pub mod server;
pub mod stats;
pub mod storage;

pub use config::{Config, ConfigError, IoDriver};
pub use server::{Server, ServerError};
