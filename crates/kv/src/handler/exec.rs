//! The executors: what each command family (get, store, delete, arithmetic, touch, flush) does
//! to the cache, its counters and the `watch` log, written once for every protocol. The text,
//! meta and binary modules parse their requests into these calls and only encode the outcome
//! in their own replies.
//!
//! memcached 1.6.18 counts and logs a few things differently per protocol (meta commands feed
//! neither the `stats detail` prefixes nor the post-read `watch fetchers` line, having logged
//! their lookup before dispatch; `mg T` counts as a touch only when it hits; `md` counts a CAS
//! mismatch as a miss; binary `touch` logs no lookup; text counts `flush_all` before it
//! checks `-F`, binary after). [`Via`] names the protocol so that those differences sit here
//! with the rest, each said where it applies; `tests/kv_exec_diff.rs` (remora-cli) holds every
//! family to memcached's replies and counters through each protocol.

use super::{log_lookup, log_store, Cache};
use crate::prefix::PrefixOp;
use crate::stats::{inc, Counters};
use crate::storage::{ArithOutcome, DeleteOutcome, ItemRef, ReadOpts, StoreMode, StoreOutcome};

/// The protocol a request came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    Text,
    Meta,
    Binary,
}

/// One request's context: the cache, the connection's counters, the clock and the
/// connection's id for the `watch` log.
pub(super) struct Exec<'a> {
    pub eng: &'a Cache,
    pub c: &'a Counters,
    pub now: u32,
    pub cfd: i64,
    pub via: Via,
}

/// A storage request (set, add, replace, append, prepend, cas; meta `ms` with its mode).
pub(super) struct StoreReq<'k> {
    pub mode: StoreMode,
    pub key: &'k [u8],
    pub flags: u32,
    /// In protocol units (relative seconds or an absolute time).
    pub exptime: i64,
    pub data: &'k [u8],
}

/// What arithmetic did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arith {
    /// The new value and CAS; `created` when the counter was made from the initial value.
    Value {
        value: u64,
        cas: u64,
        created: bool,
    },
    NotFound,
    /// The CAS given did not match.
    Exists,
    NonNumeric,
    /// The counter was missing and could not be created (another client made it first, or
    /// memory ran out).
    NotCreated,
}

impl Exec<'_> {
    /// Whether this protocol feeds `stats detail` and logs lookups after the read
    /// (`watch fetchers`); meta logs its lookup before dispatch instead.
    fn traced(&self) -> bool {
        self.via != Via::Meta
    }

    /// Logs the lookup memcached makes before it changes an item (text and binary; meta
    /// logged it before dispatch).
    fn lookup(&self, key: &[u8]) {
        if self.traced() {
            log_lookup(self.eng, key, self.now, self.cfd);
        }
    }

    /// A read: get/gets/gat/gats, `mg`, binary GET*/GAT*. `opts.touch` set makes it a gat
    /// (counted as a touch too). `emit` writes the hit's reply; returns whether it was a hit.
    pub fn get(&self, key: &[u8], opts: ReadOpts, emit: impl FnOnce(ItemRef<'_>)) -> bool {
        let (eng, c) = (self.eng, self.c);
        let exp = opts.touch.map_or(0, |t| eng.exptime(t, self.now));
        let found = eng.store.get(key, self.now, opts, exp, |it| {
            let n = it.value.len();
            emit(it);
            n
        });
        let hit = found.is_some();
        if self.traced() {
            eng.logger.item_get(key, found, self.cfd);
            eng.prefixes.record(key, PrefixOp::Get(hit));
        }
        // memcached counts a get-and-touch as a touch, not a get: gat/gats and binary GAT
        // always, `mg T` only when it hits (a miss is a get miss).
        if opts.touch.is_some() && (self.via != Via::Meta || hit) {
            inc(&c.cmd_touch);
            inc(if hit { &c.touch_hits } else { &c.touch_misses });
        } else {
            inc(&c.cmd_get);
            inc(if hit { &c.get_hits } else { &c.get_misses });
        }
        hit
    }

    /// `mg N` after a miss: an empty placeholder (exptime `ttl`, protocol units) that this
    /// client wins (`W`) and must fill; `emit` writes it. False when another client made the
    /// key first or memory ran out. Not counted: the miss was.
    pub fn vivify(&self, key: &[u8], ttl: i64, emit: impl FnOnce(ItemRef<'_>)) -> bool {
        let (eng, now) = (self.eng, self.now);
        let exp = eng.exptime(ttl, now);
        let StoreOutcome::Stored(_) = eng.store.store(StoreMode::Add, key, 0, exp, b"", now) else {
            return false;
        };
        let opts = ReadOpts {
            no_bump: true,
            meta: true,
            claim: true,
            ..ReadOpts::default()
        };
        eng.store.get(key, now, opts, 0, emit).is_some()
    }

    /// `touch`, binary TOUCH: a new exptime without the value. `emit` sees the item on a hit.
    pub fn touch(&self, key: &[u8], exptime: i64, emit: impl FnOnce(ItemRef<'_>)) -> bool {
        let (eng, c) = (self.eng, self.c);
        inc(&c.cmd_touch);
        // memcached's binary touch reads the item without the `watch fetchers` lookup.
        if self.via == Via::Text {
            log_lookup(eng, key, self.now, self.cfd);
        }
        let opts = ReadOpts {
            touch: Some(exptime),
            ..ReadOpts::default()
        };
        let exp = eng.exptime(exptime, self.now);
        let hit = eng.store.get(key, self.now, opts, exp, emit).is_some();
        // Text `touch` is not a `stats detail` get; binary TOUCH is.
        if self.via == Via::Binary {
            eng.prefixes.record(key, PrefixOp::Get(hit));
        }
        inc(if hit { &c.touch_hits } else { &c.touch_misses });
        hit
    }

    /// A store, with its counters and the `watch mutations` line.
    pub fn store(&self, r: StoreReq<'_>) -> StoreOutcome {
        let (eng, c) = (self.eng, self.c);
        inc(&c.cmd_set);
        if self.traced() {
            eng.prefixes.record(r.key, PrefixOp::Set);
        }
        self.lookup(r.key);
        let exp = eng.exptime(r.exptime, self.now);
        let outcome = eng
            .store
            .store(r.mode, r.key, r.flags, exp, r.data, self.now);
        log_store(
            eng,
            r.key,
            &outcome,
            r.mode,
            exp,
            self.now,
            r.data.len(),
            self.cfd,
        );
        // The cas counters count compare-and-swap stores only: an append or prepend whose
        // CAS does not match is refused uncounted, as in memcached.
        let cas = matches!(r.mode, StoreMode::Cas(_) | StoreMode::CasStale(_));
        match outcome {
            StoreOutcome::Stored(_) if cas => inc(&c.cas_hits),
            StoreOutcome::Exists if cas => inc(&c.cas_badval),
            StoreOutcome::NotFound if cas => inc(&c.cas_misses),
            StoreOutcome::TooLarge => inc(&c.store_too_large),
            StoreOutcome::NoMemory => inc(&c.store_no_memory),
            _ => {}
        }
        outcome
    }

    /// A delete (`cas` for binary and `md C`), or with `invalidate` (`md I`: mark stale, with a
    /// new exptime in protocol units if given) instead of removing.
    pub fn delete(
        &self,
        key: &[u8],
        cas: Option<u64>,
        invalidate: Option<Option<i64>>,
    ) -> DeleteOutcome {
        let (eng, c) = (self.eng, self.c);
        if self.traced() {
            eng.prefixes.record(key, PrefixOp::Delete);
        }
        self.lookup(key);
        let r = match invalidate {
            Some(ttl) => {
                let exp = ttl.map(|t| eng.exptime(t, self.now));
                eng.store.invalidate(key, self.now, cas, exp)
            }
            None => eng.store.delete(key, self.now, cas),
        };
        // memcached's `md` counts a CAS mismatch as a miss and marking stale as neither;
        // text and binary count neither for a mismatch.
        match r {
            DeleteOutcome::Deleted if invalidate.is_none() => inc(&c.delete_hits),
            DeleteOutcome::Deleted => {}
            DeleteOutcome::NotFound => inc(&c.delete_misses),
            DeleteOutcome::Exists if self.via == Via::Meta => inc(&c.delete_misses),
            DeleteOutcome::Exists => {}
        }
        r
    }

    /// incr/decr (`ma`, binary INCREMENT/DECREMENT). `vivify`: on a miss, create the counter
    /// with this initial value and exptime (protocol units), as binary and `ma N` do.
    pub fn arith(
        &self,
        key: &[u8],
        incr: bool,
        delta: u64,
        cas: Option<u64>,
        vivify: Option<(u64, i64)>,
    ) -> Arith {
        let (eng, c) = (self.eng, self.c);
        self.lookup(key);
        match eng.store.arith(key, incr, delta, self.now, cas) {
            ArithOutcome::Value(value, cas) => {
                inc(if incr { &c.incr_hits } else { &c.decr_hits });
                Arith::Value {
                    value,
                    cas,
                    created: false,
                }
            }
            ArithOutcome::NotFound => {
                // A miss that creates the counter is not counted as one.
                let Some((initial, exptime)) = vivify else {
                    inc(if incr { &c.incr_misses } else { &c.decr_misses });
                    return Arith::NotFound;
                };
                let exp = eng.exptime(exptime, self.now);
                let v = initial.to_string();
                match eng
                    .store
                    .store(StoreMode::Add, key, 0, exp, v.as_bytes(), self.now)
                {
                    StoreOutcome::Stored(cas) => Arith::Value {
                        value: initial,
                        cas,
                        created: true,
                    },
                    _ => Arith::NotCreated,
                }
            }
            ArithOutcome::Exists => {
                // Text sends no CAS, so only meta and binary get here; memcached counts it
                // as neither a hit nor a miss.
                Arith::Exists
            }
            ArithOutcome::NonNumeric => Arith::NonNumeric,
        }
    }

    /// `flush_all [delay]`, binary FLUSH: false when `-F` disabled it. memcached counts the
    /// text command before it checks `-F`, the binary one only when it runs.
    pub fn flush(&self, delay: i64) -> bool {
        let (eng, c) = (self.eng, self.c);
        let enabled = eng.settings.flush_enabled;
        if enabled || self.via == Via::Text {
            inc(&c.cmd_flush);
        }
        if !enabled {
            return false;
        }
        if delay > 0 {
            eng.store
                .flush(Some(eng.exptime(delay, self.now).saturating_sub(1)));
        } else {
            eng.store.flush_now(self.now);
        }
        true
    }
}
