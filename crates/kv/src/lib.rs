//! A memcached-compatible cache: `remora kv serve` replaces `memcached` 1.6.18 with the same
//! flags, bytes on the wire and counters, and adds post-copy live migration.
//!
//! Split like pelikan:
//! - [`protocol`]: pure, sans-IO parsers for the text, meta and binary protocols into typed
//!   requests, and the reply encoders; protocol errors are replies. The parsers are given
//!   their [`protocol::Limits`] and know nothing of the store.
//! - [`handler`]: runs requests. One executor per command family (get, store, delete,
//!   arithmetic, touch, flush) does what the command does to the cache and its counters
//!   whatever the protocol (`handler/exec.rs`); each protocol module only maps its request
//!   to those calls and encodes the outcome. Replies queue in an [`out::Out`] that holds large
//!   values by reference.
//! - [`storage`]: the item stores behind one trait, with memcached's store rules written once
//!   (`storage/decide.rs`): the [`arena`] (memcached's slab classes in one relocatable
//!   mapping, segmented LRU with its maintainer and crawler, slab page moves, warm restart;
//!   the default) and the heap shards (`-o storage=heap`, the reference). Time is passed in.
//! - [`server`]: TCP, unix and UDP sockets on io_uring or mio/epoll worker threads.
//! - [`config`]: memcached's command line and the [`config::Settings`] it makes (below the
//!   handler, which reads them); [`daemon`] does what memcached does to its process before
//!   serving (`-d`, `-r`, `-P`); [`logger`] holds the `watch` log streams; [`migrate`] moves
//!   a running cache to another server (post-copy, pages faulted in through remora-lazy).
//!
//! Not here: SASL, TLS and extstore. Meta `E` (explicit CAS) is refused, as memcached 1.6.18
//! refuses it.
#![warn(missing_docs)]

pub mod arena;
pub mod config;
pub mod daemon;
pub mod handler;
pub mod logger;
pub mod migrate;
pub mod onesided;
pub mod out;
pub mod prefix;
pub mod protocol;
pub mod server;
pub mod stats;
pub mod storage;
mod sys;

pub use config::{Config, ConfigError, IoDriver};
pub use server::{Server, ServerError};
