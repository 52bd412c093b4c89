//! The arena store's item commands (get, store, delete, invalidate, incr/decr) and the
//! bookkeeping they share under the lock: a lookup that reclaims dead items, allocation that
//! evicts by memcached's rules, linking, and the `stats sizes` histogram. The store rules
//! themselves are [`decide`]'s; this applies them to the arena.

use crate::arena::{bits, ArenaError, Item, Victim};
use crate::out::SHARE_MIN;

use super::arena_store::{ArenaStore, Ctx, Inner};
use super::decide::{decide, Decision, Found, Value};
use super::shard::parse_counter;
use super::*;

impl Ctx {
    /// Invalidated by a `flush_all` (memcached checks this before expiry).
    fn flushed(&self, it: &Item<'_>) -> bool {
        self.flushed_at(it.cas, it.time)
    }

    pub(super) fn live(&self, it: &Item<'_>) -> bool {
        self.live_at(it.exptime, it.cas, it.time)
    }
}

/// memcached's item size for the histogram (`stats sizes`), bucketed by 32 bytes.
fn size_bucket(key: usize, value: usize, flags: u32) -> usize {
    const MC_ITEM_HEADER: usize = 48;
    let n = MC_ITEM_HEADER + key + 1 + value + 2 + if flags != 0 { 4 } else { 0 } + 8;
    n.div_ceil(32)
}

impl Inner {
    /// Recounts the size histogram after items went in bulk (a crawl is rare).
    pub(super) fn rebuild_sizes(&mut self, use_cas: bool) {
        let Some(h) = self.sizes.as_mut() else {
            return;
        };
        h.clear();
        if !use_cas {
            return;
        }
        let mut all = Vec::new();
        self.arena
            .crawl(|_, it| all.push(size_bucket(it.key.len(), it.value_len, it.flags)));
        let h = self.sizes.as_mut().expect("checked");
        for b in all {
            *h.entry(b).or_default() += 1;
        }
    }

    /// Unlinks a dead or deleted item, keeping the histogram right.
    fn remove(&mut self, off: u64, use_cas: bool) {
        if self.sizes.is_some() {
            let it = self.arena.item(off);
            let (k, v, f) = (it.key.len(), it.value_len, it.flags);
            if let Some(h) = self.sizes.as_mut() {
                if use_cas {
                    let n = h.entry(size_bucket(k, v, f)).or_default();
                    *n = n.saturating_sub(1);
                }
            }
        }
        self.arena.unlink(off);
    }

    /// The live item of `key`; a dead one is reclaimed and `Err(Some(flushed))` says why.
    fn lookup(&mut self, key: &[u8], ctx: &Ctx, use_cas: bool) -> Result<u64, Option<bool>> {
        let off = self.arena.find(key).ok_or(None)?;
        let it = self.arena.item(off);
        if ctx.live(&it) {
            return Ok(off);
        }
        let flushed = ctx.flushed(&it);
        self.arena.count_dead(off);
        self.remove(off, use_cas);
        Err(Some(flushed))
    }

    /// A chunk for `key` with `len` value bytes, evicting by memcached's rules.
    fn alloc(
        &mut self,
        key: &[u8],
        len: usize,
        ctx: &Ctx,
        cfg: &StoreConfig,
    ) -> Result<u64, ArenaError> {
        let Inner {
            arena,
            evict_hook,
            sizes,
            ..
        } = self;
        let mut victim = |it: Item<'_>| {
            let live = ctx.live(&it);
            if live && cfg.no_evict {
                return Victim::Keep;
            }
            if let (Some(h), true) = (sizes.as_mut(), cfg.use_cas) {
                let n = h
                    .entry(size_bucket(it.key.len(), it.value_len, it.flags))
                    .or_default();
                *n = n.saturating_sub(1);
            }
            if !live {
                return Victim::Reclaim;
            }
            if let Some(h) = evict_hook {
                h(&crate::logger::Evicted {
                    key: it.key,
                    fetched: it.fetched(),
                    ttl: if it.exptime == 0 {
                        -1
                    } else {
                        it.exptime as i64 - ctx.now as i64
                    },
                    last_access: ctx.now.saturating_sub(it.time),
                    size: it.value_len,
                });
            }
            Victim::Evict
        };
        arena.alloc(key, len, &mut victim)
    }

    #[allow(clippy::too_many_arguments)]
    /// Links `off` as the item of its key (replacing the old one, whose histogram entry goes).
    fn link(
        &mut self,
        off: u64,
        cas: u64,
        flags: u32,
        exptime: u32,
        now: u32,
        b: u8,
        cas_on: bool,
    ) {
        let key_old = {
            let key = self.arena.item(off).key;
            self.arena.find(key)
        };
        if let Some(old) = key_old {
            self.remove(old, cas_on);
        }
        self.arena.link(off, cas, flags, exptime, now, b);
        self.total_items += 1;
        let it = self.arena.item(off);
        let (k, v, f) = (it.key.len(), it.value_len, it.flags);
        if let (Some(h), true) = (self.sizes.as_mut(), cas_on) {
            *h.entry(size_bucket(k, v, f)).or_default() += 1;
        }
    }
}

fn outcome(e: ArenaError) -> StoreOutcome {
    match e {
        ArenaError::TooLarge(_) | ArenaError::BadKey(_) => StoreOutcome::TooLarge,
        _ => StoreOutcome::NoMemory,
    }
}

impl ArenaStore {
    fn cas(&self, g: &mut Inner) -> u64 {
        if self.config.use_cas {
            g.arena.next_cas()
        } else {
            0
        }
    }

    /// [`EntryStore::read`]: a hit hands out meta's recache token and pins a large value.
    pub(super) fn read_item(
        &self,
        key: &[u8],
        now: u32,
        opts: ReadOpts,
        exptime_abs: u32,
        f: &mut dyn FnMut(ItemRef<'_>),
    ) -> bool {
        let ctx = self.ctx(now);
        let mut g = self.lock();
        let off = match g.lookup(key, &ctx, self.config.use_cas) {
            Ok(off) => off,
            Err(dead) => {
                match dead {
                    Some(true) => g.get_flushed += 1,
                    Some(false) => g.get_expired += 1,
                    None => {}
                }
                return false;
            }
        };
        let a = &mut g.arena;
        let it = a.item(off);
        let (time, mut b, exp) = (it.time, it.bits, it.exptime);
        // A chunked value is copied out (its pin owns the copy) and sent from there.
        let big = it.value_len >= SHARE_MIN || it.chunked;
        let exptime = if opts.touch.is_some() {
            a.set_exptime(off, exptime_abs);
            exptime_abs
        } else {
            exp
        };
        let mut win = None;
        if opts.meta {
            let low_ttl = opts
                .recache
                .is_some_and(|r| exptime != 0 && (exptime as i64 - now as i64) < r);
            let sent = b & bits::WIN_SENT != 0;
            if (b & bits::STALE != 0 || low_ttl || opts.claim) && !sent {
                b |= bits::WIN_SENT;
                a.set_bits(off, b);
                win = Some(true);
            } else if sent {
                win = Some(false);
            }
        }
        let held = big.then(|| Held::Arena(a.pin(off)));
        let it = a.item(off);
        let value = match (&held, it.chunked) {
            (Some(h), true) => &h.bytes()[it.key.len()..],
            _ => it.value,
        };
        f(ItemRef {
            key: it.key,
            value,
            shared: held.as_ref(),
            flags: it.flags,
            cas: it.cas,
            exptime,
            last_access: time,
            fetched: it.fetched(),
            stale: it.stale(),
            win,
        });
        // Bits only (and a relink at most once a minute when flat): the maintainer moves
        // items between the LRUs.
        if !opts.no_bump {
            a.hit(off, now);
        }
        true
    }

    /// [`EntryStore::store`]: applies [`decide`]'s decision to the arena.
    pub(super) fn store_item(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime_abs: u32,
        data: &[u8],
        now: u32,
    ) -> StoreOutcome {
        let cas_on = self.config.use_cas;
        if !self.fits(key.len(), data.len()) {
            // memcached drops the old value so a failed overwrite cannot leave stale data.
            if matches!(
                mode,
                StoreMode::Set | StoreMode::Cas(_) | StoreMode::CasStale(_)
            ) {
                self.delete(key, now, None);
            }
            return StoreOutcome::TooLarge;
        }
        let ctx = self.ctx(now);
        let mut g = self.lock();
        if g.closed {
            return StoreOutcome::NoMemory;
        }
        let old = g.lookup(key, &ctx, cas_on).ok();
        let found = old.map(|off| {
            let it = g.arena.item(off);
            Found {
                cas: it.cas,
                flags: it.flags,
                exptime: it.exptime,
                win_sent: it.win_sent(),
            }
        });
        let (flags, exptime, made, stale_of) = match decide(mode, found, flags, exptime_abs) {
            Decision::Refuse { outcome, bump } => {
                if let (true, Some(off)) = (bump, old) {
                    g.arena.bump(off, now);
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
        // Append and prepend build the value from the old one: copied out first, as the new
        // chunk may be the old one's evicted neighbour.
        let mut joined = None;
        if let (Value::Append | Value::Prepend, Some(off)) = (made, old) {
            let it = g.arena.item(off);
            if !self.fits(key.len(), it.value_len + data.len()) {
                return StoreOutcome::TooLarge;
            }
            let old_value = g.arena.value_bytes(off);
            let mut v = Vec::with_capacity(old_value.len() + data.len());
            if made == Value::Append {
                v.extend_from_slice(&old_value);
                v.extend_from_slice(data);
            } else {
                v.extend_from_slice(data);
                v.extend_from_slice(&old_value);
            }
            joined = Some(v);
        }
        let value = joined.as_deref().unwrap_or(data);
        if let Some(off) = old {
            if !g.arena.lru_config().segmented {
                g.arena.bump(off, now);
            }
        }
        let off = match g.alloc(key, value.len(), &ctx, &self.config) {
            Ok(off) => off,
            Err(e) => return outcome(e),
        };
        g.arena.write_value(off, value);
        let cas = self.cas(&mut g);
        let b = match stale_of {
            Some(true) => bits::STALE | bits::WIN_SENT,
            Some(false) => bits::STALE,
            None => 0,
        };
        g.link(off, cas, flags, exptime, now, b, cas_on);
        StoreOutcome::Stored(cas)
    }

    /// [`EntryStore::invalidate`].
    pub(super) fn invalidate_item(
        &self,
        key: &[u8],
        now: u32,
        cas: Option<u64>,
        exptime_abs: Option<u32>,
    ) -> DeleteOutcome {
        let ctx = self.ctx(now);
        let mut g = self.lock();
        let Ok(off) = g.lookup(key, &ctx, self.config.use_cas) else {
            return DeleteOutcome::NotFound;
        };
        let it = g.arena.item(off);
        if cas.is_some_and(|c| c != 0 && c != it.cas) {
            return DeleteOutcome::Exists;
        }
        let b = (it.bits | bits::STALE) & !bits::WIN_SENT;
        // Like memcached, invalidation counts as a modification: the CAS moves on.
        let new = self.cas(&mut g);
        g.arena.set_cas(off, new);
        g.arena.set_bits(off, b);
        if let Some(x) = exptime_abs {
            g.arena.set_exptime(off, x);
        }
        DeleteOutcome::Deleted
    }

    /// [`EntryStore::delete`].
    pub(super) fn delete_item(&self, key: &[u8], now: u32, cas: Option<u64>) -> DeleteOutcome {
        let ctx = self.ctx(now);
        let mut g = self.lock();
        let Ok(off) = g.lookup(key, &ctx, self.config.use_cas) else {
            return DeleteOutcome::NotFound;
        };
        if cas.is_some_and(|c| c != 0 && g.arena.item(off).cas != c) {
            return DeleteOutcome::Exists;
        }
        g.remove(off, self.config.use_cas);
        DeleteOutcome::Deleted
    }

    /// [`EntryStore::arith`].
    pub(super) fn arith_item(
        &self,
        key: &[u8],
        incr: bool,
        delta: u64,
        now: u32,
        cas: Option<u64>,
    ) -> ArithOutcome {
        let ctx = self.ctx(now);
        let cas_on = self.config.use_cas;
        let mut g = self.lock();
        let Ok(off) = g.lookup(key, &ctx, cas_on) else {
            return ArithOutcome::NotFound;
        };
        let it = g.arena.item(off);
        if cas.is_some_and(|c| c != 0 && it.cas != c) {
            return ArithOutcome::Exists;
        }
        // A chunked value is far longer than any number.
        let Some(cur) = (!it.chunked).then(|| parse_counter(it.value)).flatten() else {
            return ArithOutcome::NonNumeric;
        };
        let v = if incr {
            cur.wrapping_add(delta)
        } else {
            cur.saturating_sub(delta)
        };
        let text = v.to_string();
        let (old_len, flags, exptime, b) = (it.value_len, it.flags, it.exptime, it.bits);
        // Like memcached, a number no longer than the old one is written in place, padded
        // with spaces; a longer one takes a new item.
        let off = if text.len() <= old_len && !g.arena.is_pinned(off) {
            off
        } else {
            let new = match g.alloc(key, text.len(), &ctx, &self.config) {
                Ok(n) => n,
                Err(_) => return ArithOutcome::NotFound,
            };
            g.link(new, 0, flags, exptime, now, b, cas_on);
            new
        };
        let dst = g.arena.value_mut_linked(off);
        dst[..text.len()].copy_from_slice(text.as_bytes());
        dst[text.len()..].fill(b' ');
        g.arena.bump(off, now);
        let new_cas = self.cas(&mut g);
        g.arena.set_cas(off, new_cas);
        g.arena.set_time(off, now);
        ArithOutcome::Value(v, new_cas)
    }
}
