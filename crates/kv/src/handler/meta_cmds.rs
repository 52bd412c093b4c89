//! Runs meta commands (`mg`, `ms`, `md`, `ma`, `mn`, `me`) and writes their flags.

use super::*;

/// Appends the return flags the client asked for, in its order.
#[allow(clippy::too_many_arguments)]
fn meta_ret_flags(
    out: &mut Out,
    f: &MetaFlags<'_>,
    key_sent: &[u8],
    cas: u64,
    flags: u32,
    ttl: i64,
    size: usize,
    la: u32,
    hit_before: bool,
) {
    for tok in &f.raw[..f.n] {
        match tok[0] {
            b'c' => {
                out.extend_from_slice(b" c");
                put_u64(out, cas);
            }
            b'f' => {
                out.extend_from_slice(b" f");
                put_u64(out, flags as u64);
            }
            b'h' => out.extend_from_slice(if hit_before { b" h1" } else { b" h0" }),
            b'k' => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(key_sent);
            }
            b'l' => {
                out.extend_from_slice(b" l");
                put_u64(out, la as u64);
            }
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            b's' => {
                out.extend_from_slice(b" s");
                put_u64(out, size as u64);
            }
            b't' => {
                out.extend_from_slice(b" t");
                put_i64(out, ttl);
            }
            b'b' if f.raw[..f.n].iter().any(|t| t[0] == b'k') => out.extend_from_slice(b" b"),
            _ => {}
        }
    }
}

/// The return flags memcached 1.6.18 echoes on a miss: only `O`, `k` (and `b` with `k`).
fn meta_miss_flags(out: &mut Out, f: &MetaFlags<'_>, key_sent: &[u8]) {
    for tok in &f.raw[..f.n] {
        match tok[0] {
            b'k' => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(key_sent);
            }
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            b'b' if f.raw[..f.n].iter().any(|t| t[0] == b'k') => out.extend_from_slice(b" b"),
            _ => {}
        }
    }
}

fn ttl_left(exptime: u32, now: u32) -> i64 {
    if exptime == 0 {
        -1
    } else {
        exptime as i64 - now as i64
    }
}

pub(super) fn run_meta(eng: &Cache, s: &mut Session, m: MetaCommand<'_>, now: u32, out: &mut Out) {
    let c = s.counters.clone();
    match m {
        MetaCommand::Noop => out.extend_from_slice(b"MN\r\n"),
        MetaCommand::Debug { key } => {
            let opts = ReadOpts {
                no_bump: true,
                ..ReadOpts::default()
            };
            let found = eng.store.get(key, now, opts, 0, |it| {
                out.extend_from_slice(b"ME ");
                out.extend_from_slice(key);
                out.extend_from_slice(b" exp=");
                put_i64(out, ttl_left(it.exptime, now));
                out.extend_from_slice(b" la=");
                put_u64(out, now.saturating_sub(it.last_access) as u64);
                out.extend_from_slice(b" cas=");
                put_u64(out, it.cas);
                out.extend_from_slice(if it.fetched {
                    b" fetch=yes"
                } else {
                    b" fetch=no"
                });
                out.extend_from_slice(b" cls=1 size=");
                put_u64(
                    out,
                    (it.key.len() + it.value.len() + crate::storage::ITEM_OVERHEAD) as u64,
                );
                out.extend_from_slice(b"\r\n");
            });
            if found.is_none() {
                out.extend_from_slice(b"EN\r\n");
            }
        }
        MetaCommand::Op {
            kind,
            key: key_sent,
            data,
            flags: f,
        } => {
            let mut decoded = std::mem::take(&mut s.scratch);
            let key: &[u8] = if f.base64 {
                if !meta::base64_decode(key_sent, &mut decoded) {
                    Reply::Fail(Fail::BadFormat).write(out);
                    s.scratch = decoded;
                    return;
                }
                &decoded
            } else {
                key_sent
            };
            if key.len() > crate::protocol::KEY_MAX {
                Reply::Fail(Fail::BadFormat).write(out);
            } else {
                let start = out.mark();
                // memcached's mg, ms, md and ma all look the item up first (`watch fetchers`).
                let cfd = s.cfd();
                log_lookup(eng, key, now, cfd);
                match kind {
                    MetaKind::Get => meta_get(eng, &c, key, key_sent, &f, now, out),
                    MetaKind::Set => meta_set(eng, &c, key, key_sent, data, &f, now, out, cfd),
                    MetaKind::Delete => meta_delete(eng, &c, key, key_sent, &f, now, out),
                    MetaKind::Arith => meta_arith(eng, &c, key, key_sent, &f, now, out),
                }
                if f.opaque_too_long {
                    out.truncate(start);
                    Reply::Fail(Fail::OpaqueTooLong).write(out);
                }
            }
            s.scratch = decoded;
        }
    }
}

fn meta_get(
    eng: &Cache,
    c: &Counters,
    key: &[u8],
    key_sent: &[u8],
    f: &MetaFlags<'_>,
    now: u32,
    out: &mut Out,
) {
    let opts = ReadOpts {
        touch: f.ttl,
        no_bump: f.no_bump,
        meta: true,
        recache: f.recache,
        claim: false,
    };
    let exp = f.ttl.map_or(0, |t| eng.exptime(t, now));
    let emit = |out: &mut Out, it: crate::storage::ItemRef<'_>| {
        if f.value {
            out.extend_from_slice(b"VA ");
            put_u64(out, it.value.len() as u64);
        } else {
            out.extend_from_slice(b"HD");
        }
        meta_ret_flags(
            out,
            f,
            key_sent,
            it.cas,
            it.flags,
            ttl_left(it.exptime, now),
            it.value.len(),
            now.saturating_sub(it.last_access),
            it.fetched,
        );
        // memcached's order: a winner on a stale item gets "X W", a loser "Z X".
        match (it.win, it.stale) {
            (Some(true), true) => out.extend_from_slice(b" X W"),
            (Some(true), false) => out.extend_from_slice(b" W"),
            (Some(false), true) => out.extend_from_slice(b" Z X"),
            (Some(false), false) => out.extend_from_slice(b" Z"),
            (None, true) => out.extend_from_slice(b" X"),
            (None, false) => {}
        }
        out.extend_from_slice(b"\r\n");
        if f.value {
            out.value(it.value, it.shared, it.key.len());
            out.extend_from_slice(b"\r\n");
        }
    };
    inc(&c.cmd_get);
    if f.ttl.is_some() {
        inc(&c.cmd_touch);
    }
    let hit = eng
        .store
        .get(key, now, opts, exp, |it| emit(out, it))
        .is_some();
    if hit {
        inc(&c.get_hits);
        if f.ttl.is_some() {
            inc(&c.touch_hits);
        }
        return;
    }
    inc(&c.get_misses);
    if f.ttl.is_some() {
        inc(&c.touch_misses);
    }
    if let Some(ttl) = f.vivify {
        // Auto-vivify: create an empty placeholder and tell this client it won (W).
        let e = eng.exptime(ttl, now);
        if let StoreOutcome::Stored(_) = eng.store.store(StoreMode::Add, key, 0, e, b"", now) {
            let opts = ReadOpts {
                no_bump: true,
                meta: true,
                claim: true,
                ..ReadOpts::default()
            };
            if eng
                .store
                .get(key, now, opts, 0, |it| emit(out, it))
                .is_some()
            {
                return;
            }
        }
    }
    if !f.quiet {
        out.extend_from_slice(b"EN");
        meta_miss_flags(out, f, key_sent);
        out.extend_from_slice(b"\r\n");
    }
}

#[allow(clippy::too_many_arguments)]
fn meta_set(
    eng: &Cache,
    c: &Counters,
    key: &[u8],
    key_sent: &[u8],
    data: &[u8],
    f: &MetaFlags<'_>,
    now: u32,
    out: &mut Out,
    cfd: i64,
) {
    inc(&c.cmd_set);
    let mut mode = match f.mode.unwrap_or(b'S') {
        b'E' => StoreMode::Add,
        b'A' => StoreMode::Append,
        b'P' => StoreMode::Prepend,
        b'R' => StoreMode::Replace,
        _ => StoreMode::Set,
    };
    if let Some(cas) = f.compare_cas {
        if mode == StoreMode::Set {
            mode = if f.invalidate {
                StoreMode::CasStale(cas)
            } else {
                StoreMode::Cas(cas)
            };
        }
    }
    let exp = eng.exptime(f.ttl.unwrap_or(0), now);
    let flags = f.client_flags.unwrap_or(0);
    let outcome = eng.store.store(mode, key, flags, exp, data, now);
    log_store(eng, key, &outcome, mode, exp, now, data.len(), cfd);
    let (code, cas) = match outcome {
        StoreOutcome::Stored(cas) => (b"HD", cas),
        StoreOutcome::NotStored => (b"NS", 0),
        StoreOutcome::Exists => {
            inc(&c.cas_badval);
            (b"EX", 0)
        }
        StoreOutcome::NotFound => {
            inc(&c.cas_misses);
            (b"NF", 0)
        }
        StoreOutcome::TooLarge => {
            inc(&c.store_too_large);
            Reply::Fail(Fail::TooLarge).write(out);
            return;
        }
        StoreOutcome::NoMemory => {
            inc(&c.store_no_memory);
            Reply::Fail(Fail::NoMemory).write(out);
            return;
        }
    };
    if f.quiet && code == b"HD" {
        return;
    }
    out.extend_from_slice(code);
    meta_ret_flags(out, f, key_sent, cas, flags, -1, data.len(), 0, false);
    out.extend_from_slice(b"\r\n");
}

fn meta_delete(
    eng: &Cache,
    c: &Counters,
    key: &[u8],
    key_sent: &[u8],
    f: &MetaFlags<'_>,
    now: u32,
    out: &mut Out,
) {
    let r = if f.invalidate {
        let exp = f.ttl.map(|t| eng.exptime(t, now));
        eng.store.invalidate(key, now, f.compare_cas, exp)
    } else {
        eng.store.delete(key, now, f.compare_cas)
    };
    let code: &[u8] = match r {
        DeleteOutcome::Deleted => {
            inc(&c.delete_hits);
            if f.quiet {
                return;
            }
            b"HD"
        }
        DeleteOutcome::NotFound => {
            inc(&c.delete_misses);
            b"NF"
        }
        DeleteOutcome::Exists => b"EX",
    };
    out.extend_from_slice(code);
    meta_ret_flags(out, f, key_sent, 0, 0, -1, 0, 0, false);
    out.extend_from_slice(b"\r\n");
}

fn meta_arith(
    eng: &Cache,
    c: &Counters,
    key: &[u8],
    key_sent: &[u8],
    f: &MetaFlags<'_>,
    now: u32,
    out: &mut Out,
) {
    let incr = !matches!(f.mode, Some(b'D') | Some(b'-'));
    let delta = f.delta.unwrap_or(1);
    let mut r = eng.store.arith(key, incr, delta, now, f.compare_cas);
    let mut created = false;
    if r == ArithOutcome::NotFound {
        inc(if incr { &c.incr_misses } else { &c.decr_misses });
        if let Some(ttl) = f.vivify {
            let init = f.initial.unwrap_or(0);
            let e = eng.exptime(ttl, now);
            let v = init.to_string();
            r = match eng
                .store
                .store(StoreMode::Add, key, 0, e, v.as_bytes(), now)
            {
                StoreOutcome::Stored(cas) => {
                    created = true;
                    ArithOutcome::Value(init, cas)
                }
                _ => {
                    out.extend_from_slice(b"NS\r\n");
                    return;
                }
            };
        }
    } else if matches!(r, ArithOutcome::Value(..)) {
        inc(if incr { &c.incr_hits } else { &c.decr_hits });
    }
    match r {
        ArithOutcome::Value(v, cas) => {
            if let Some(t) = f.ttl {
                eng.store.touch(key, eng.exptime(t, now), now);
            }
            // memcached's `q` hides a successful ma reply even when it carries the value,
            // but not the reply for a counter it has just created.
            if f.quiet && !created {
                return;
            }

            let ttl = if f.raw[..f.n].iter().any(|t| t[0] == b't') {
                let o = ReadOpts {
                    no_bump: true,
                    ..ReadOpts::default()
                };
                eng.store
                    .get(key, now, o, 0, |it| ttl_left(it.exptime, now))
                    .unwrap_or(-1)
            } else {
                -1
            };
            if f.value {
                let mut num = Vec::new();
                put_u64(&mut num, v);
                out.extend_from_slice(b"VA ");
                put_u64(out, num.len() as u64);
                meta_ret_flags(out, f, key_sent, cas, 0, ttl, num.len(), 0, false);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&num);
                out.extend_from_slice(b"\r\n");
            } else {
                out.extend_from_slice(b"HD");
                meta_ret_flags(out, f, key_sent, cas, 0, ttl, 0, 0, false);
                out.extend_from_slice(b"\r\n");
            }
        }
        ArithOutcome::NotFound => {
            out.extend_from_slice(b"NF");
            meta_miss_flags(out, f, key_sent);
            out.extend_from_slice(b"\r\n");
        }
        ArithOutcome::Exists => {
            out.extend_from_slice(b"EX");
            meta_ret_flags(out, f, key_sent, 0, 0, -1, 0, 0, false);
            out.extend_from_slice(b"\r\n");
        }
        ArithOutcome::NonNumeric => Reply::Fail(Fail::NonNumeric).write(out),
    }
}
