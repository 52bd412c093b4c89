//! The text protocol's admin commands: `version`, `verbosity`, `shutdown`, `migrate`,
//! `slabs automove`, `cache_memlimit`, `stats` and `watch` (`flush_all` runs through the
//! executors in `run_text`; `slabs reassign` and `lru_crawler` are the cache's own).

use super::super::*;
use crate::protocol::request::MigrateCmd;

/// `version`.
pub(super) fn version(out: &mut Out) {
    out.extend_from_slice(b"VERSION ");
    out.extend_from_slice(VERSION.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `verbosity LEVEL` (a level that did not parse changes nothing).
pub(super) fn verbosity(eng: &Cache, level: Option<u64>) {
    if let Some(l) = level {
        // memcached caps the level at MAX_VERBOSITY_LEVEL (2).
        eng.verbosity.store(l.min(2), Relaxed);
    }
}

/// `shutdown [graceful]`: refused without `-A`; otherwise the server stops and this
/// connection closes.
pub(super) fn shutdown(eng: &Cache, s: &mut Session, mode: ShutdownMode, out: &mut Out) -> Next {
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
    Next::Go
}

/// `slabs automove MODE` and `slabs automove ratio R`.
pub(super) fn slabs_automove(eng: &Cache, set: Automove) {
    match set {
        Automove::Mode(m) => eng.slab_automove.store(m as u64, Relaxed),
        Automove::Ratio(r) => eng.slab_automove_ratio.store(r.to_bits(), Relaxed),
    }
}

/// `cache_memlimit MB`: the store's new memory limit; the reply.
pub(super) fn cache_memlimit(eng: &Cache, mb: u64, now: u32) -> Reply {
    match usize::try_from(mb)
        .ok()
        .and_then(|m| m.checked_mul(1 << 20))
    {
        Some(bytes) if bytes > 0 => {
            eng.store.set_mem_limit(bytes, now);
            Reply::Ok
        }
        _ => Reply::Fail(Fail::BadFormat),
    }
}

/// remora's `migrate to|cancel|begin` (post-copy live migration, `crate::migrate`).
pub(super) fn migrate(eng: &Cache, s: &mut Session, cmd: MigrateCmd<'_>, out: &mut Out) -> Next {
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
pub(super) fn stats(eng: &Cache, [arg, arg2, arg3]: [Option<&[u8]>; 3], now: u32, out: &mut Out) {
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

/// `watch [STREAMS]`: refused without `-W`, after other requests in the same read, or for an
/// unknown stream; `Ok` once the connection's socket was handed to the log streams (the
/// caller closes the connection).
pub(super) fn watch(
    eng: &Cache,
    s: &mut Session,
    streams: Option<u16>,
    out: &Out,
) -> Result<(), Fail> {
    if !eng.settings.watch_enabled {
        Err(Fail::WatchDisabled)
    } else if !out.is_empty() {
        Err(Fail::WatchPipelined)
    } else if let Some(streams) = streams {
        hand_over(eng, s, streams)
    } else {
        Err(Fail::Error)
    }
}

/// Hands a duplicate of the connection's socket to the log streams; the caller then lets the
/// connection go without shutting the socket down (the duplicate keeps it open), so only the
/// log stream writes to it from here on, as memcached's logger thread does.
fn hand_over(eng: &Cache, s: &mut Session, streams: u16) -> Result<(), Fail> {
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
