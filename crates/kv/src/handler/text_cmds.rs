//! Runs text-protocol commands (storage, retrieval, arithmetic, admin).

use super::exec::{self, Exec, Via};
use super::*;
use crate::protocol::request::MigrateCmd;

/// Runs one text command.
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
            let mode = match cmd {
                StoreCmd::Set => StoreMode::Set,
                StoreCmd::Add => StoreMode::Add,
                StoreCmd::Replace => StoreMode::Replace,
                StoreCmd::Append => StoreMode::Append(None),
                StoreCmd::Prepend => StoreMode::Prepend(None),
                StoreCmd::Cas => StoreMode::Cas(cas),
            };
            let r = match x.store(exec::StoreReq {
                mode,
                key,
                flags,
                exptime,
                data,
            }) {
                StoreOutcome::Stored(_) => Reply::Stored,
                StoreOutcome::NotStored => Reply::NotStored,
                StoreOutcome::Exists => Reply::Exists,
                StoreOutcome::NotFound => Reply::NotFound,
                StoreOutcome::TooLarge => Reply::Fail(Fail::TooLarge),
                StoreOutcome::NoMemory => Reply::Fail(Fail::NoMemory),
            };
            reply(vv, out, noreply, r);
        }
        Command::TooLarge {
            key,
            cmd,
            swallow,
            noreply,
            meta,
        } => {
            inc(&c.store_too_large);
            if !meta {
                // memcached counts a text store before it finds the value too large.
                eng.prefixes.record(key, PrefixOp::Set);
            }
            if matches!(cmd, StoreCmd::Set | StoreCmd::Cas) {
                eng.store.delete(key, now, None);
            }
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
        } => match x.arith(key, incr, delta, None, None) {
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
        },
        Command::Touch {
            key,
            exptime,
            noreply,
        } => {
            let hit = x.touch(key, exptime, |_| {});
            let r = if hit { Reply::Touched } else { Reply::NotFound };
            reply(vv, out, noreply, r);
        }
        Command::FlushAll { delay, noreply } => {
            let r = if x.flush(delay) {
                Reply::Ok
            } else {
                Reply::Fail(Fail::FlushDisabled)
            };
            reply(vv, out, noreply, r);
        }
        Command::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(VERSION.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Command::Verbosity { level, noreply } => {
            if let Some(l) = level {
                // memcached caps the level at MAX_VERBOSITY_LEVEL (2).
                eng.verbosity.store(l.min(2), Relaxed);
            }
            reply(vv, out, noreply, Reply::Ok)
        }
        Command::Quit => return Next::Close,
        Command::Shutdown(mode) => {
            if !eng.settings.shutdown_enabled {
                Reply::Fail(Fail::ShutdownDisabled).write(out);
            } else if mode == ShutdownMode::Invalid {
                Reply::Fail(Fail::InvalidShutdownMode).write(out);
            } else {
                // Both modes stop the server; `graceful` also saves a `-e` memory file.
                if mode == ShutdownMode::Graceful {
                    eng.graceful.store(true, Relaxed);
                }
                s.close_reason = Some(CloseReason::Shutdown);
                eng.shutdown.store(true, Relaxed);
                return Next::Close;
            }
        }
        Command::Migrate(cmd) => return migrate(eng, s, cmd, out),
        Command::SlabsAutomove { set, noreply } => {
            match set {
                Automove::Mode(m) => eng.slab_automove.store(m as u64, Relaxed),
                Automove::Ratio(r) => eng.slab_automove_ratio.store(r.to_bits(), Relaxed),
            }
            reply(vv, out, noreply, Reply::Ok);
        }
        Command::SlabsReassign(args) => eng.slabs_reassign(args, out),
        Command::LruCrawler(c) => eng.lru_crawler(c, now, out),
        Command::CacheMemlimit { mb, noreply } => {
            match usize::try_from(mb)
                .ok()
                .and_then(|m| m.checked_mul(1 << 20))
            {
                Some(bytes) if bytes > 0 => {
                    eng.store.set_mem_limit(bytes, now);
                    reply(vv, out, noreply, Reply::Ok);
                }
                _ => reply(vv, out, noreply, Reply::Fail(Fail::BadFormat)),
            }
        }
        Command::Stats { arg, arg2, arg3 } => stats(eng, [arg, arg2, arg3], now, out),
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
        Command::Watch { streams, noreply } => {
            let r = if !eng.settings.watch_enabled {
                Fail::WatchDisabled
            } else if !out.is_empty() {
                Fail::WatchPipelined
            } else if let Some(streams) = streams {
                match watch(eng, s, streams) {
                    Ok(()) => return Next::Close,
                    Err(f) => f,
                }
            } else {
                Fail::Error
            };
            reply(vv, out, noreply, Reply::Fail(r));
        }
    }
    Next::Go
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

/// remora's `migrate to|cancel|begin` (post-copy live migration, `crate::migrate`).
fn migrate(eng: &Cache, s: &mut Session, cmd: MigrateCmd<'_>, out: &mut Out) -> Next {
    use crate::protocol::request::MigrateCmd;
    let m = &eng.migration;
    let r = match cmd {
        MigrateCmd::Begin(secret) => match m.begin(s.fd, secret) {
            // The connection is the migration's control channel now.
            Ok(()) => {
                s.close_reason = None;
                return Next::Close;
            }
            Err(why) => Err(why),
        },
        _ if !eng.settings.shutdown_enabled => Err("ERROR: migrate not enabled (start with -A)"),
        MigrateCmd::To { to, secret } => {
            let secret = secret.map(std::str::from_utf8);
            match (std::str::from_utf8(to), secret) {
                (_, Some(Err(_))) => Err("CLIENT_ERROR bad command line format"),
                (Ok(t), secret) if t.contains(':') && t.len() <= 255 => {
                    m.arm(t, secret.and_then(Result::ok)).map(Some)
                }
                _ => Err("CLIENT_ERROR bad command line format"),
            }
        }
        MigrateCmd::Cancel => m.cancel().map(|()| None),
        MigrateCmd::Invalid => Err("CLIENT_ERROR bad command line format"),
    };
    match r {
        Ok(None) => Reply::Ok.write(out),
        // Armed: the secret the target must show.
        Ok(Some(secret)) => {
            out.extend_from_slice(b"SECRET ");
            out.extend_from_slice(secret.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Err(line) => {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    Next::Go
}

/// `stats [group]`, `stats reset`, `stats detail on|off|dump`, `stats cachedump CLASS LIMIT`.
fn stats(eng: &Cache, [arg, arg2, arg3]: [Option<&[u8]>; 3], now: u32, out: &mut Out) {
    match arg {
        Some(b"cachedump") => eng.cachedump(arg2, arg3, now, out),
        Some(b"reset") => {
            eng.reset_stats();
            Reply::Reset.write(out);
        }
        Some(b"detail") => match arg2 {
            Some(b"on") | Some(b"off") => {
                eng.prefixes.set_enabled(arg2 == Some(b"on"));
                Reply::Ok.write(out)
            }
            Some(b"dump") => eng.prefixes.dump(out),
            _ => Reply::Fail(Fail::StatsDetailUsage).write(out),
        },
        _ => match eng.stats(arg) {
            Some(lines) => {
                for (k, v) in lines {
                    out.extend_from_slice(b"STAT ");
                    out.extend_from_slice(k.as_bytes());
                    out.push(b' ');
                    out.extend_from_slice(v.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
                Reply::End.write(out);
            }
            None => Reply::Fail(Fail::Error).write(out),
        },
    }
}

/// Hands a duplicate of the connection's socket to the log streams; the caller then lets the
/// connection go without shutting the socket down (the duplicate keeps it open), so only the
/// log stream writes to it from here on, as memcached's logger thread does.
fn watch(eng: &Cache, s: &mut Session, streams: u16) -> Result<(), Fail> {
    let fd = s.fd.ok_or(Fail::WatcherFailed)?;
    // SAFETY: `fd` is the socket of the connection whose session runs this command; the worker
    // closes it only when the connection ends, after this command has returned.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let owned = rustix::io::fcntl_dupfd_cloexec(fd, 0).map_err(|_| Fail::WatcherFailed)?;
    eng.logger
        .add_watcher(owned, streams)
        .map_err(|_| Fail::WatcherTooMany)?;
    // Handed over, not closed: memcached logs no conn_close for it.
    s.close_reason = None;
    Ok(())
}
