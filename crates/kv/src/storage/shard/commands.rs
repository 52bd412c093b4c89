//! A heap shard's item commands (get, store, delete, invalidate, incr/decr): memcached's store
//! rules ([`decide`]) applied to one shard's entries.

use super::entry::{charge, joined, Entry};
use super::{Ctx, ItemRef, Shard, BUMP_INTERVAL, NIL};
use crate::storage::decide::{decide, Decision, Found, Value};
use crate::storage::{ArithOutcome, DeleteOutcome, Held, ReadOpts, StoreMode, StoreOutcome};

impl Shard {
    pub fn get<R>(
        &mut self,
        hash: u64,
        key: &[u8],
        ctx: &Ctx,
        opts: ReadOpts,
        exptime_abs: u32,
        f: impl FnOnce(ItemRef<'_>) -> R,
    ) -> Option<R> {
        let i = match self.lookup_why(hash, key, ctx) {
            Ok(i) => i,
            Err(dead) => {
                match dead {
                    Some(true) => self.get_flushed += 1,
                    Some(false) => self.get_expired += 1,
                    None => {}
                }
                return None;
            }
        };
        if !opts.no_bump && ctx.now.saturating_sub(self.entry(i).time) >= BUMP_INTERVAL {
            self.bump(i);
        }
        let e = self.entry_mut(i);
        if opts.touch.is_some() {
            e.exptime = exptime_abs;
        }
        let mut win = None;
        if opts.meta {
            let low_ttl = opts
                .recache
                .is_some_and(|r| e.exptime != 0 && (e.exptime as i64 - ctx.now as i64) < r);
            if (e.stale || low_ttl || opts.claim) && !e.win_sent {
                e.win_sent = true;
                win = Some(true);
            } else if e.win_sent {
                win = Some(false);
            }
        }
        let held = e.data.shared().map(|a| Held::Heap(a.clone()));
        let view = ItemRef {
            key: e.key(),
            value: e.value(),
            shared: held.as_ref(),
            flags: e.flags,
            cas: e.cas,
            exptime: e.exptime,
            last_access: e.time,
            fetched: e.fetched,
            stale: e.stale,
            win,
        };
        let r = f(view);
        if !opts.no_bump {
            e.fetched = true;
            e.time = ctx.now;
        }
        Some(r)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &mut self,
        hash: u64,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime_abs: u32,
        data: &[u8],
        ctx: &Ctx,
        new_cas: &dyn Fn() -> u64,
        item_max: usize,
        no_evict: bool,
    ) -> StoreOutcome {
        let old = self.lookup(hash, key, ctx);
        let found = old.map(|i| {
            let e = self.entry(i);
            Found {
                cas: e.cas,
                flags: e.flags,
                exptime: e.exptime,
                win_sent: e.win_sent,
            }
        });
        let (flags, exptime, made, stale_of) = match decide(mode, found, flags, exptime_abs) {
            Decision::Refuse { outcome, bump } => {
                if let (true, Some(i)) = (bump, old) {
                    self.bump(i);
                }
                return outcome;
            }
            Decision::Write {
                flags,
                exptime,
                value,
                stale,
            } => (flags, exptime, value, stale),
        };
        let value = match (made, old) {
            (Value::Append | Value::Prepend, Some(i)) => {
                let e = self.entry(i);
                if charge(key.len(), e.value().len() + data.len()) > item_max {
                    return StoreOutcome::TooLarge;
                }
                if made == Value::Append {
                    joined(&[key, e.value(), data], 0)
                } else {
                    joined(&[key, data, e.value()], 0)
                }
            }
            _ => joined(&[key, data], 0),
        };
        let need = charge(key.len(), value.bytes().len() - key.len());
        if let Some(i) = old {
            // Overwrite in place: no table or slab churn.
            self.bump(i);
            let old_charge = self.entry(i).charge();
            if need > old_charge && !self.make_room(need - old_charge, ctx, no_evict, i) {
                return StoreOutcome::NoMemory;
            }
            let cas = new_cas();
            self.size_count(i, false);
            let e = self.entry_mut(i);
            e.data = value;
            e.cas = cas;
            e.flags = flags;
            e.exptime = exptime;
            e.time = ctx.now;
            e.fetched = false;
            e.stale = stale_of.is_some();
            e.win_sent = stale_of.unwrap_or(false);
            self.used = self.used + need - old_charge;
            self.total_items += 1;
            self.size_count(i, true);
            return StoreOutcome::Stored(cas);
        }
        let fetched = false;
        if !self.make_room(need, ctx, no_evict, NIL) {
            return StoreOutcome::NoMemory;
        }
        let cas = new_cas();
        self.insert(Entry {
            data: value,
            key_len: key.len() as u8,
            hash,
            cas,
            flags,
            exptime,
            time: ctx.now,
            prev: NIL,
            next: NIL,
            fetched,
            stale: false,
            win_sent: false,
        });
        StoreOutcome::Stored(cas)
    }

    /// Marks an item stale (meta delete with `I`), optionally with a new expiry.
    pub fn invalidate(
        &mut self,
        hash: u64,
        key: &[u8],
        ctx: &Ctx,
        cas: Option<u64>,
        exptime_abs: Option<u32>,
        new_cas: &dyn Fn() -> u64,
    ) -> DeleteOutcome {
        let Some(i) = self.lookup(hash, key, ctx) else {
            return DeleteOutcome::NotFound;
        };
        let e = self.entry_mut(i);
        if cas.is_some_and(|c| c != 0 && c != e.cas) {
            return DeleteOutcome::Exists;
        }
        // Like memcached, invalidation counts as a modification: the CAS moves on.
        e.cas = new_cas();
        e.stale = true;
        e.win_sent = false;
        if let Some(x) = exptime_abs {
            e.exptime = x;
        }
        DeleteOutcome::Deleted
    }

    pub fn delete(&mut self, hash: u64, key: &[u8], ctx: &Ctx, cas: Option<u64>) -> DeleteOutcome {
        match self.lookup(hash, key, ctx) {
            None => DeleteOutcome::NotFound,
            Some(i) => {
                if let Some(c) = cas {
                    if c != 0 && self.entry(i).cas != c {
                        return DeleteOutcome::Exists;
                    }
                }
                self.remove(i);
                DeleteOutcome::Deleted
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn arith(
        &mut self,
        hash: u64,
        key: &[u8],
        incr: bool,
        delta: u64,
        ctx: &Ctx,
        cas: Option<u64>,
        new_cas: &dyn Fn() -> u64,
    ) -> ArithOutcome {
        let Some(i) = self.lookup(hash, key, ctx) else {
            return ArithOutcome::NotFound;
        };
        if let Some(c) = cas {
            if c != 0 && self.entry(i).cas != c {
                return ArithOutcome::Exists;
            }
        }
        let Some(cur) = parse_counter(self.entry(i).value()) else {
            return ArithOutcome::NonNumeric;
        };
        let v = if incr {
            cur.wrapping_add(delta)
        } else {
            cur.saturating_sub(delta)
        };
        let text = v.to_string();
        let old_len = self.entry(i).data.bytes().len();
        self.bump(i);
        self.size_count(i, false);
        let e = self.entry_mut(i);
        // Like memcached, a shorter number is written in place and padded with spaces.
        let pad = old_len.saturating_sub(e.key_len as usize + text.len());
        e.data = joined(&[e.key(), text.as_bytes()], pad);
        let new_cas = new_cas();
        e.cas = new_cas;
        e.time = ctx.now;
        let new_len = e.data.bytes().len();
        self.used = self.used + new_len - old_len;
        self.size_count(i, true);
        ArithOutcome::Value(v, new_cas)
    }
}

/// Parses a stored counter: leading decimal digits, then optional spaces (memcached pads
/// shrunken decr results). Anything else is non-numeric.
pub(crate) fn parse_counter(v: &[u8]) -> Option<u64> {
    let end = v.iter().position(|&b| b == b' ').unwrap_or(v.len());
    let (digits, rest) = v.split_at(end);
    if digits.is_empty() || rest.iter().any(|&b| b != b' ') {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}
