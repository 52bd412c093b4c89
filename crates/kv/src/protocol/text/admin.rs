//! The text protocol's admin commands: `flush_all`, `version`, `quit`, `shutdown`, `migrate`,
//! `verbosity`, `slabs`, `watch`, `lru_crawler`, `cache_memlimit` and `stats`.

use super::{fail, noreply_last, watch};
use crate::protocol::reply::Fail;
use crate::protocol::request::{Automove, Command, Crawler, MigrateCmd, ShutdownMode, Tokens};
use crate::protocol::{parse_i64, parse_u64};

/// Parses an admin command from its tokens; `None` when the line is none of them (an unknown
/// command to the caller).
pub(super) fn parse<'a>(tk: &Tokens<'a>) -> Option<Command<'a>> {
    let (t, n) = (&tk.t, tk.n);
    let noreply_last = noreply_last(tk);
    Some(match t[0] {
        b"flush_all" => {
            if n > 3 {
                return Some(Command::Fail(Fail::Error));
            }
            let noreply = noreply_last;
            let args = n - 1 - noreply as usize;
            let delay = if args == 0 {
                0
            } else {
                match parse_i64(t[1]) {
                    Some(d) => d,
                    None => return Some(fail(Fail::InvalidExptime, noreply)),
                }
            };
            Command::FlushAll { delay, noreply }
        }
        // memcached ignores extra tokens after these two.
        b"version" => Command::Version,
        b"quit" => Command::Quit,
        b"shutdown" => Command::Shutdown(match &t[1..n] {
            [] => ShutdownMode::Now,
            [m] if *m == b"graceful" => ShutdownMode::Graceful,
            _ => ShutdownMode::Invalid,
        }),
        b"migrate" => Command::Migrate(match &t[1..n] {
            [b"to", to] => MigrateCmd::To { to, secret: None },
            [b"to", to, secret] => MigrateCmd::To {
                to,
                secret: Some(secret),
            },
            [b"cancel"] => MigrateCmd::Cancel,
            [b"begin"] => MigrateCmd::Begin(b""),
            [b"begin", secret] => MigrateCmd::Begin(secret),
            _ => MigrateCmd::Invalid,
        }),
        b"verbosity" if (2..=3).contains(&n) => {
            let noreply = noreply_last;
            // memcached parses a 32-bit level; `verbosity noreply` is a silent parse error.
            let level = parse_u64(t[1]).filter(|&l| l <= u32::MAX as u64);
            if level.is_none() && !(noreply && n == 2) {
                return Some(fail(Fail::BadFormat, noreply));
            }
            Command::Verbosity { level, noreply }
        }
        b"slabs" if n == 4 && t[1] == b"reassign" => {
            let num = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<i32>().ok();
            Command::SlabsReassign(num(t[2]).zip(num(t[3])))
        }
        // memcached: `slabs automove` needs at least one more token; anything else under
        // `slabs` but `reassign` is an unknown command.
        b"slabs" if n >= 3 && t[1] == b"automove" => {
            let noreply = noreply_last;
            if t[2] == b"ratio" {
                match (n >= 4).then(|| parse_f64(t[3])).flatten() {
                    Some(r) => Command::SlabsAutomove {
                        set: Automove::Ratio(r),
                        noreply,
                    },
                    None => fail(Fail::Error, noreply),
                }
            } else {
                match parse_u64(t[2]).filter(|&l| l <= u32::MAX as u64) {
                    None => fail(Fail::BadFormat, noreply),
                    Some(m @ 0..=2) => Command::SlabsAutomove {
                        set: Automove::Mode(m as u8),
                        noreply,
                    },
                    Some(_) => fail(Fail::Error, noreply),
                }
            }
        }
        b"watch" => Command::Watch {
            streams: watch_streams(&t[1..n]),
            noreply: noreply_last,
        },
        b"lru_crawler" => {
            let num = || std::str::from_utf8(t[2]).ok()?.parse::<u32>().ok();
            Command::LruCrawler(match (n, t.get(1).copied()) {
                (3, Some(b"crawl")) => Crawler::Crawl(t[2]),
                (3, Some(b"metadump")) => Crawler::Metadump(t[2]),
                (3, Some(b"tocrawl")) => Crawler::Tocrawl(num()),
                (3, Some(b"sleep")) => Crawler::Sleep(num()),
                (2, Some(b"enable")) => Crawler::Enable,
                (2, Some(b"disable")) => Crawler::Disable,
                _ => Crawler::Unknown,
            })
        }
        b"cache_memlimit" if n == 2 || n == 3 => match parse_u64(t[1]) {
            Some(mb) => Command::CacheMemlimit {
                mb,
                noreply: n == 3 && noreply_last,
            },
            None => Command::Fail(Fail::BadFormat),
        },
        b"stats" => Command::Stats {
            arg: (n > 1).then(|| t[1]),
            arg2: (n > 2).then(|| t[2]),
            arg3: (n > 3).then(|| t[3]),
        },
        _ => return None,
    })
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
