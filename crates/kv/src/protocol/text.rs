//! The ASCII protocol: one command line (CRLF or LF), plus a data block for storage commands.
//!
//! [`parse`] never panics and never reads past the buffer: it returns [`Parse::Incomplete`]
//! until a whole request is buffered, [`Parse::Close`] for input memcached drops the connection
//! on (more than 2048 bytes without a newline, except get/gets), and otherwise a [`Command`] with the number of bytes it consumed.

use super::meta;
use super::reply::Fail;
pub use super::request::{
    Automove, Command, Crawler, GetKind, MigrateCmd, Parse, ShutdownMode, StoreCmd, Tokens,
    MAX_TOKENS,
};
pub use super::watch;
use super::{key_ok, parse_i64, parse_u64, Limits};

/// An error that `noreply` as the line's last token silences (see [`Command::FailQuiet`]).
fn fail(f: Fail, noreply: bool) -> Command<'static> {
    if noreply {
        Command::FailQuiet(f)
    } else {
        Command::Fail(f)
    }
}

/// Splits on single spaces, skipping empty tokens, like memcached's `tokenize_command`.
pub fn tokenize(line: &[u8], max: usize) -> Tokens<'_> {
    let mut t: [&[u8]; MAX_TOKENS] = [&[]; MAX_TOKENS];
    let mut n = 0;
    let mut i = 0;
    let max = max.min(MAX_TOKENS);
    while i < line.len() {
        while i < line.len() && line[i] == b' ' {
            i += 1;
        }
        if i >= line.len() {
            break;
        }
        if n == max {
            return Tokens {
                t,
                n,
                rest: &line[i..],
            };
        }
        let s = i;
        while i < line.len() && line[i] != b' ' {
            i += 1;
        }
        t[n] = &line[s..i];
        n += 1;
    }
    Tokens { t, n, rest: &[] }
}

/// Finds the end of the first line: (line without CR/LF, bytes including the LF).
pub fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let nl = memchr::memchr(b'\n', buf)?;
    let mut l = &buf[..nl];
    if let [head @ .., b'\r'] = l {
        l = head;
    }
    Some((l, nl + 1))
}

/// Whether the buffered start of a line is a get-family command allowed to be long.
fn is_get_prefix(buf: &[u8]) -> bool {
    buf.starts_with(b"get ") || buf.starts_with(b"gets ")
}

/// Parses one request from the front of `buf`.
pub fn parse<'a>(buf: &'a [u8], lim: &Limits) -> Parse<'a> {
    let Some((l, used)) = line(buf) else {
        let cap = if is_get_prefix(buf) {
            lim.max_get_line
        } else {
            lim.max_line
        };
        return if buf.len() > cap {
            Parse::Close
        } else {
            Parse::Incomplete
        };
    };
    // Like memcached, a line whose newline has arrived is processed whatever its length (up to
    // the get-line cap); only a line still unterminated past `max_line` closes.
    if used > lim.max_get_line {
        return Parse::Close;
    }
    let tk = tokenize(l, MAX_TOKENS);
    let done = |c| Parse::Done(c, used);
    if tk.n == 0 {
        return done(Command::Fail(Fail::Error));
    }
    let t = &tk.t;
    let n = tk.n;
    let noreply_last = t[n - 1] == b"noreply";
    match t[0] {
        b"get" | b"gets" => {
            if n < 2 {
                return done(Command::Fail(Fail::Error));
            }
            let kind = if t[0] == b"get" {
                GetKind::Get
            } else {
                GetKind::Gets
            };
            let keys = &l[(t[1].as_ptr() as usize - l.as_ptr() as usize)..];
            done(Command::Get {
                kind,
                exptime: 0,
                keys,
            })
        }
        b"gat" | b"gats" => {
            if n < 3 {
                return done(Command::Fail(Fail::Error));
            }
            let kind = if t[0] == b"gat" {
                GetKind::Gat
            } else {
                GetKind::Gats
            };
            let Some(exptime) = parse_i64(t[1]) else {
                return done(Command::Fail(Fail::InvalidExptime));
            };
            let keys = &l[(t[2].as_ptr() as usize - l.as_ptr() as usize)..];
            done(Command::Get {
                kind,
                exptime,
                keys,
            })
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let cmd = match t[0] {
                b"set" => StoreCmd::Set,
                b"add" => StoreCmd::Add,
                b"replace" => StoreCmd::Replace,
                b"append" => StoreCmd::Append,
                b"prepend" => StoreCmd::Prepend,
                _ => StoreCmd::Cas,
            };
            let base = if cmd == StoreCmd::Cas { 6 } else { 5 };
            if n != base && n != base + 1 {
                return done(Command::Fail(Fail::Error));
            }
            let noreply = n == base + 1 && noreply_last;
            let key = t[1];
            if key.len() > super::KEY_MAX {
                return done(fail(Fail::BadFormat, noreply_last));
            }
            let (Some(flags), Some(exptime), Some(vlen)) =
                (parse_u64(t[2]), parse_i64(t[3]), parse_i64(t[4]))
            else {
                return done(fail(Fail::BadFormat, noreply_last));
            };
            let cas = if cmd == StoreCmd::Cas {
                match parse_u64(t[5]) {
                    Some(c) => c,
                    None => return done(fail(Fail::BadFormat, noreply_last)),
                }
            } else {
                0
            };
            if vlen < 0 || vlen > (i32::MAX as i64 - 2) {
                return done(fail(Fail::BadFormat, noreply_last));
            }
            let vlen = vlen as usize;
            if vlen + key.len() + lim.item_overhead > lim.item_max {
                return done(Command::TooLarge {
                    key,
                    cmd,
                    swallow: vlen + 2,
                    noreply,
                    meta: false,
                });
            }
            let total = used + vlen + 2;
            if buf.len() < total {
                return Parse::Incomplete;
            }
            if &buf[used + vlen..total] != b"\r\n" {
                return Parse::Done(Command::Fail(Fail::BadDataChunk), total);
            }
            Parse::Done(
                Command::Store {
                    cmd,
                    key,
                    // memcached parses flags as a long and keeps the low 32 bits.
                    flags: flags as u32,
                    exptime,
                    data: &buf[used..used + vlen],
                    cas,
                    noreply,
                },
                total,
            )
        }
        b"delete" => {
            if !(2..=4).contains(&n) {
                return done(Command::Fail(Fail::Error));
            }
            // memcached checks the arguments before the key's length, and only looks for
            // `noreply` when there are any.
            let mut noreply = false;
            if n > 2 {
                let hold_zero = t[2] == b"0";
                noreply = noreply_last;
                let valid = (n == 3 && (hold_zero || noreply)) || (n == 4 && hold_zero && noreply);
                if !valid {
                    return done(fail(Fail::DeleteUsage, noreply));
                }
            }
            if t[1].len() > super::KEY_MAX {
                return done(fail(Fail::BadFormat, noreply));
            }
            done(Command::Delete { key: t[1], noreply })
        }
        b"incr" | b"decr" => {
            if n != 3 && n != 4 {
                return done(Command::Fail(Fail::Error));
            }
            if t[1].len() > super::KEY_MAX {
                return done(fail(Fail::BadFormat, noreply_last));
            }
            let Some(delta) = parse_u64(t[2]) else {
                return done(fail(Fail::InvalidDelta, noreply_last));
            };
            done(Command::Arith {
                incr: t[0] == b"incr",
                key: t[1],
                delta,
                noreply: n == 4 && noreply_last,
            })
        }
        b"touch" => {
            if n != 3 && n != 4 {
                return done(Command::Fail(Fail::Error));
            }
            if t[1].len() > super::KEY_MAX {
                return done(fail(Fail::BadFormat, noreply_last));
            }
            let Some(exptime) = parse_i64(t[2]) else {
                return done(fail(Fail::InvalidExptime, noreply_last));
            };
            done(Command::Touch {
                key: t[1],
                exptime,
                noreply: n == 4 && noreply_last,
            })
        }
        b"flush_all" => {
            if n > 3 {
                return done(Command::Fail(Fail::Error));
            }
            let noreply = noreply_last;
            let args = n - 1 - noreply as usize;
            let delay = if args == 0 {
                0
            } else {
                match parse_i64(t[1]) {
                    Some(d) => d,
                    None => return done(fail(Fail::InvalidExptime, noreply)),
                }
            };
            done(Command::FlushAll { delay, noreply })
        }
        // memcached ignores extra tokens after these two.
        b"version" => done(Command::Version),
        b"quit" => done(Command::Quit),
        b"shutdown" => done(Command::Shutdown(match &t[1..n] {
            [] => ShutdownMode::Now,
            [m] if *m == b"graceful" => ShutdownMode::Graceful,
            _ => ShutdownMode::Invalid,
        })),
        b"migrate" => done(Command::Migrate(match &t[1..n] {
            [b"to", to] => MigrateCmd::To { to, secret: None },
            [b"to", to, secret] => MigrateCmd::To {
                to,
                secret: Some(secret),
            },
            [b"cancel"] => MigrateCmd::Cancel,
            [b"begin"] => MigrateCmd::Begin(b""),
            [b"begin", secret] => MigrateCmd::Begin(secret),
            _ => MigrateCmd::Invalid,
        })),
        b"verbosity" if (2..=3).contains(&n) => {
            let noreply = noreply_last;
            // memcached parses a 32-bit level; `verbosity noreply` is a silent parse error.
            let level = parse_u64(t[1]).filter(|&l| l <= u32::MAX as u64);
            if level.is_none() && !(noreply && n == 2) {
                return done(fail(Fail::BadFormat, noreply));
            }
            done(Command::Verbosity { level, noreply })
        }
        b"slabs" if n == 4 && t[1] == b"reassign" => {
            let num = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<i32>().ok();
            done(Command::SlabsReassign(num(t[2]).zip(num(t[3]))))
        }
        // memcached: `slabs automove` needs at least one more token; anything else under
        // `slabs` but `reassign` is an unknown command.
        b"slabs" if n >= 3 && t[1] == b"automove" => {
            let noreply = noreply_last;
            if t[2] == b"ratio" {
                match (n >= 4).then(|| parse_f64(t[3])).flatten() {
                    Some(r) => done(Command::SlabsAutomove {
                        set: Automove::Ratio(r),
                        noreply,
                    }),
                    None => done(fail(Fail::Error, noreply)),
                }
            } else {
                match parse_u64(t[2]).filter(|&l| l <= u32::MAX as u64) {
                    None => done(fail(Fail::BadFormat, noreply)),
                    Some(m @ 0..=2) => done(Command::SlabsAutomove {
                        set: Automove::Mode(m as u8),
                        noreply,
                    }),
                    Some(_) => done(fail(Fail::Error, noreply)),
                }
            }
        }
        b"watch" => done(Command::Watch {
            streams: watch_streams(&t[1..n]),
            noreply: noreply_last,
        }),
        b"lru_crawler" => {
            let num = || std::str::from_utf8(t[2]).ok()?.parse::<u32>().ok();
            done(Command::LruCrawler(match (n, t.get(1).copied()) {
                (3, Some(b"crawl")) => Crawler::Crawl(t[2]),
                (3, Some(b"metadump")) => Crawler::Metadump(t[2]),
                (3, Some(b"tocrawl")) => Crawler::Tocrawl(num()),
                (3, Some(b"sleep")) => Crawler::Sleep(num()),
                (2, Some(b"enable")) => Crawler::Enable,
                (2, Some(b"disable")) => Crawler::Disable,
                _ => Crawler::Unknown,
            }))
        }
        b"cache_memlimit" if n == 2 || n == 3 => match parse_u64(t[1]) {
            Some(mb) => done(Command::CacheMemlimit {
                mb,
                noreply: n == 3 && noreply_last,
            }),
            None => done(Command::Fail(Fail::BadFormat)),
        },
        b"stats" => done(Command::Stats {
            arg: (n > 1).then(|| t[1]),
            arg2: (n > 2).then(|| t[2]),
            arg3: (n > 3).then(|| t[3]),
        }),
        b"mg" | b"ms" | b"md" | b"ma" | b"mn" | b"me" => meta::parse(buf, used, &tk, lim),
        other => done(unknown(other, l)),
    }
}

/// An unknown command: `ERROR`, except that memcached hangs up on what looks like an HTTP
/// request. Its check (proto_text.c) only runs for commands that do not start like a known
/// one (`g s a c i d t`, or a two-letter `m…`), are at least two bytes long, and whose last
/// token (of at most 23: memcached's `MAX_TOKENS` less its terminator) starts with `HTTP/`.
fn unknown(cmd: &[u8], line: &[u8]) -> Command<'static> {
    let dispatched = match cmd.first() {
        Some(b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't') => true,
        Some(b'm') => cmd.len() == 2,
        _ => false,
    };
    if cmd.len() < 2 || dispatched {
        return Command::Fail(Fail::Error);
    }
    let tk = tokenize(line, MAX_TOKENS - 1);
    if tk.t[tk.n - 1].starts_with(b"HTTP/") {
        Command::Hangup
    } else {
        Command::Fail(Fail::Error)
    }
}

/// The streams of `watch ARGS` (`fetchers` when none are named); `None` for an unknown name
/// (`noreply` included: memcached answers it `ERROR`, which the noreply flag then silences).
fn watch_streams(args: &[&[u8]]) -> Option<u16> {
    if args.is_empty() {
        return Some(watch::FETCHERS);
    }
    let mut f = 0;
    for a in args {
        f |= match *a {
            b"rawcmds" => watch::RAWCMDS,
            b"evictions" => watch::EVICTIONS,
            b"fetchers" => watch::FETCHERS,
            b"mutations" => watch::MUTATIONS,
            b"sysevents" => watch::SYSEVENTS,
            b"connevents" => watch::CONNEVENTS,
            b"proxyreqs" => watch::PROXYREQS,
            b"proxyevents" => watch::PROXYEVENTS,
            b"proxyuser" => watch::PROXYUSER,
            _ => return None,
        };
    }
    Some(f)
}

/// memcached's `safe_strtod`: a finite decimal number taking the whole token.
fn parse_f64(t: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(t).ok()?;
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Iterates the keys of a get line.
pub fn keys(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|k| !k.is_empty())
}

/// Whether a get key is acceptable (length only, like memcached's get path).
pub fn get_key_ok(k: &[u8]) -> bool {
    k.len() <= super::KEY_MAX && !k.is_empty()
}

/// Full key validity for storage.
pub fn store_key_ok(k: &[u8]) -> bool {
    key_ok(k)
}

#[cfg(test)]
mod tests;
