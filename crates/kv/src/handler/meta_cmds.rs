//! Runs meta commands (`mg`, `ms`, `md`, `ma`, `mn`, `me`) and writes their flags.

use super::exec::{self, Exec, Via};
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
                let x = Exec {
                    eng,
                    c: &c,
                    now,
                    cfd,
                    via: Via::Meta,
                };
                match kind {
                    MetaKind::Get => meta_get(&x, key, key_sent, &f, out),
                    MetaKind::Set => meta_set(&x, key, key_sent, data, &f, out),
                    MetaKind::Delete => meta_delete(&x, key, key_sent, &f, out),
                    MetaKind::Arith => meta_arith(&x, key, key_sent, &f, out),
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

fn meta_get(x: &Exec<'_>, key: &[u8], key_sent: &[u8], f: &MetaFlags<'_>, out: &mut Out) {
    let now = x.now;
    let opts = ReadOpts {
        touch: f.ttl,
        no_bump: f.no_bump,
        meta: true,
        recache: f.recache,
        claim: false,
    };
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
    if x.get(key, opts, |it| emit(out, it)) {
        return;
    }
    if let Some(ttl) = f.vivify {
        if x.vivify(key, ttl, |it| emit(out, it)) {
            return;
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
    x: &Exec<'_>,
    key: &[u8],
    key_sent: &[u8],
    data: &[u8],
    f: &MetaFlags<'_>,
    out: &mut Out,
) {
    let mut mode = match f.mode.unwrap_or(b'S') {
        b'E' => StoreMode::Add,
        b'A' => StoreMode::Append(f.compare_cas),
        b'P' => StoreMode::Prepend(f.compare_cas),
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
    let flags = f.client_flags.unwrap_or(0);
    let outcome = x.store(exec::StoreReq {
        mode,
        key,
        flags,
        exptime: f.ttl.unwrap_or(0),
        data,
    });
    let (code, cas) = match outcome {
        StoreOutcome::Stored(cas) => (b"HD", cas),
        StoreOutcome::NotStored => (b"NS", 0),
        StoreOutcome::Exists => (b"EX", 0),
        StoreOutcome::NotFound => (b"NF", 0),
        StoreOutcome::TooLarge => {
            Reply::Fail(Fail::TooLarge).write(out);
            return;
        }
        StoreOutcome::NoMemory => {
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

fn meta_delete(x: &Exec<'_>, key: &[u8], key_sent: &[u8], f: &MetaFlags<'_>, out: &mut Out) {
    let invalidate = f.invalidate.then_some(f.ttl);
    let code: &[u8] = match x.delete(key, f.compare_cas, invalidate) {
        DeleteOutcome::Deleted if f.quiet => return,
        DeleteOutcome::Deleted => b"HD",
        DeleteOutcome::NotFound => b"NF",
        DeleteOutcome::Exists => b"EX",
    };
    out.extend_from_slice(code);
    meta_ret_flags(out, f, key_sent, 0, 0, -1, 0, 0, false);
    out.extend_from_slice(b"\r\n");
}

fn meta_arith(x: &Exec<'_>, key: &[u8], key_sent: &[u8], f: &MetaFlags<'_>, out: &mut Out) {
    let (eng, now) = (x.eng, x.now);
    let incr = !matches!(f.mode, Some(b'D') | Some(b'-'));
    let delta = f.delta.unwrap_or(1);
    let vivify = f.vivify.map(|ttl| (f.initial.unwrap_or(0), ttl));
    match x.arith(key, incr, delta, f.compare_cas, vivify) {
        exec::Arith::Value {
            value: v,
            cas,
            created,
        } => {
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
        exec::Arith::NotFound => {
            out.extend_from_slice(b"NF");
            meta_miss_flags(out, f, key_sent);
            out.extend_from_slice(b"\r\n");
        }
        exec::Arith::NotCreated => out.extend_from_slice(b"NS\r\n"),
        exec::Arith::Exists => {
            out.extend_from_slice(b"EX");
            meta_ret_flags(out, f, key_sent, 0, 0, -1, 0, 0, false);
            out.extend_from_slice(b"\r\n");
        }
        exec::Arith::NonNumeric => Reply::Fail(Fail::NonNumeric).write(out),
    }
}
