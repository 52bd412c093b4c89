//! Runs text-protocol commands (storage, retrieval, arithmetic, admin).

use super::exec::{self, Exec, Via};
use super::*;

mod admin;

/// Runs one text command: retrieval, then the commands that change one key (through the
/// executors), then protocol errors, then the admin commands (most in [`admin`]).
pub(super) fn run_text(
    eng: &Cache,
    s: &mut Session,
    cmd: Command<'_>,
    now: u32,
    out: &mut Out,
    out_limit: usize,
) -> Next {
    let vv = (eng.settings.verbose >= 2).then_some(s.id);
    let cfd = s.cfd();
    let c = &*s.counters;
    let x = Exec {
        eng,
        c,
        now,
        cfd,
        via: Via::Text,
    };
    match cmd {
        Command::Get {
            kind,
            exptime,
            keys,
        } => return get(eng, s, now, kind, exptime, keys, out, out_limit),
        Command::Store {
            cmd,
            key,
            flags,
            exptime,
            data,
            cas,
            noreply,
        } => {
            let mode = store_mode(cmd, cas);
            let r = x.store(exec::StoreReq {
                mode,
                key,
                flags,
                exptime,
                data,
            });
            reply(vv, out, noreply, store_reply(r));
        }
        Command::TooLarge {
            key,
            cmd,
            swallow,
            noreply,
            meta,
        } => {
            too_large(&x, key, cmd, meta);
            reply(vv, out, noreply, Reply::Fail(Fail::TooLarge));
            s.swallow = swallow;
        }
        Command::Delete { key, noreply } => {
            let r = match x.delete(key, None, None) {
                DeleteOutcome::Deleted => Reply::Deleted,
                _ => Reply::NotFound,
            };
            reply(vv, out, noreply, r);
        }
        Command::Arith {
            incr,
            key,
            delta,
            noreply,
        } => arith_reply(vv, out, noreply, x.arith(key, incr, delta, None, None)),
        Command::Touch {
            key,
            exptime,
            noreply,
        } => {
            let hit = x.touch(key, exptime, |_| {});
            let r = if hit { Reply::Touched } else { Reply::NotFound };
            reply(vv, out, noreply, r);
        }
        Command::Meta(m) => {
            inc(&c.cmd_meta);
            run_meta(eng, s, m, now, out);
        }
        Command::Fail(f) => Reply::Fail(f).write(out),
        Command::FailQuiet(f) => reply(vv, out, true, Reply::Fail(f)),
        Command::Hangup => {
            s.close_reason = Some(CloseReason::Error);
            // memcached closes at once: replies it had not sent yet are dropped too.
            s.drop_batch(out);
            return Next::Close;
        }
        Command::FlushAll { delay, noreply } => {
            let r = if x.flush(delay) {
                Reply::Ok
            } else {
                Reply::Fail(Fail::FlushDisabled)
            };
            reply(vv, out, noreply, r);
        }
        Command::Version => admin::version(out),
        Command::Verbosity { level, noreply } => {
            admin::verbosity(eng, level);
            reply(vv, out, noreply, Reply::Ok)
        }
        Command::Quit => return Next::Close,
        Command::Shutdown(mode) => return admin::shutdown(eng, s, mode, out),
        Command::Migrate(cmd) => return admin::migrate(eng, s, cmd, out),
        Command::SlabsAutomove { set, noreply } => {
            admin::slabs_automove(eng, set);
            reply(vv, out, noreply, Reply::Ok);
        }
        Command::SlabsReassign(args) => eng.slabs_reassign(args, out),
        Command::LruCrawler(c) => eng.lru_crawler(c, now, out),
        Command::CacheMemlimit { mb, noreply } => {
            reply(vv, out, noreply, admin::cache_memlimit(eng, mb, now))
        }
        Command::Stats { arg, arg2, arg3 } => admin::stats(eng, [arg, arg2, arg3], now, out),
        Command::Watch { streams, noreply } => match admin::watch(eng, s, streams, out) {
            Ok(()) => return Next::Close,
            Err(f) => reply(vv, out, noreply, Reply::Fail(f)),
        },
    }
    Next::Go
}

/// The store mode of a text storage verb (`cas` carries the CAS it compares).
fn store_mode(cmd: StoreCmd, cas: u64) -> StoreMode {
    match cmd {
        StoreCmd::Set => StoreMode::Set,
        StoreCmd::Add => StoreMode::Add,
        StoreCmd::Replace => StoreMode::Replace,
        StoreCmd::Append => StoreMode::Append(None),
        StoreCmd::Prepend => StoreMode::Prepend(None),
        StoreCmd::Cas => StoreMode::Cas(cas),
    }
}

/// The text reply to a store's outcome.
fn store_reply(r: StoreOutcome) -> Reply {
    match r {
        StoreOutcome::Stored(_) => Reply::Stored,
        StoreOutcome::NotStored => Reply::NotStored,
        StoreOutcome::Exists => Reply::Exists,
        StoreOutcome::NotFound => Reply::NotFound,
        StoreOutcome::TooLarge => Reply::Fail(Fail::TooLarge),
        StoreOutcome::NoMemory => Reply::Fail(Fail::NoMemory),
    }
}

/// A store whose value is over the item size (its data is swallowed): counted, and a set or
/// cas drops the key's old value, as memcached does.
fn too_large(x: &Exec<'_>, key: &[u8], cmd: StoreCmd, meta: bool) {
    inc(&x.c.store_too_large);
    if !meta {
        // memcached counts a text store before it finds the value too large.
        x.eng.prefixes.record(key, PrefixOp::Set);
    }
    if matches!(cmd, StoreCmd::Set | StoreCmd::Cas) {
        x.eng.store.delete(key, x.now, None);
    }
}

/// Writes incr/decr's reply: the new value, or an error line.
fn arith_reply(vv: Option<u64>, out: &mut Out, noreply: bool, r: exec::Arith) {
    match r {
        exec::Arith::Value { value, .. } => {
            if !noreply {
                put_u64(out, value);
                out.extend_from_slice(b"\r\n");
            } else if let Some(id) = vv {
                eprintln!(">{id} NOREPLY {value}");
            }
        }
        exec::Arith::NonNumeric => reply(vv, out, noreply, Reply::Fail(Fail::NonNumeric)),
        _ => reply(vv, out, noreply, Reply::NotFound),
    }
}

/// get, gets, gat, gats: each key in turn, stopping at the output limit (the line is run again
/// from the next key once the output drained).
#[allow(clippy::too_many_arguments)]
fn get(
    eng: &Cache,
    s: &mut Session,
    now: u32,
    kind: GetKind,
    exptime: i64,
    keys: &[u8],
    out: &mut Out,
    out_limit: usize,
) -> Next {
    let vv = (eng.settings.verbose >= 2).then_some(s.id);
    // The session's own handle on its counters: `s` is changed below as keys are answered.
    let counters = s.counters.clone();
    let x = Exec {
        eng,
        c: &counters,
        now,
        cfd: s.cfd(),
        via: Via::Text,
    };
    let with_cas = matches!(kind, GetKind::Gets | GetKind::Gats);
    let touch = matches!(kind, GetKind::Gat | GetKind::Gats);
    let opts = ReadOpts {
        touch: touch.then_some(exptime),
        ..ReadOpts::default()
    };
    let skip = s.get_done;
    // A key too long drops what this line already queued and the unsent replies before
    // it (memcached releases the connection's pending responses) and sends the error.
    let start = out.mark();
    for (i, k) in text::keys(keys).enumerate().skip(skip) {
        if i > skip && out.len() >= out_limit {
            // Output full: the rest is answered once it drained (the line stays
            // unconsumed), so a client that does not read holds at most the limit.
            s.get_done = i;
            return Next::Later;
        }
        // One response object per key after the first (the command took one).
        if i > 0 && !s.take_resp() {
            s.get_done = 0;
            s.drop_batch(out);
            s.resps.set(1);
            Reply::Fail(Fail::GetOutOfMemory).write(out);
            return Next::Go;
        }
        if !text::get_key_ok(k) {
            s.get_done = 0;
            out.truncate(start);
            s.drop_batch(out);
            s.resps.set(1);
            Reply::Fail(Fail::BadFormat).write(out);
            return Next::Go;
        }
        let hit = x.get(k, opts, |it| {
            put_value_header(
                out,
                it.key,
                it.flags,
                it.value.len(),
                with_cas.then_some(it.cas),
            );
            out.value(it.value, it.shared, it.key.len());
            out.extend_from_slice(b"\r\n");
        });
        if let (true, Some(id)) = (hit, vv) {
            eprintln!(">{id} sending key {}", String::from_utf8_lossy(k));
        }
    }
    s.get_done = 0;
    if let Some(id) = vv {
        eprintln!(">{id} END");
    }
    Reply::End.write(out);
    Next::Go
}
