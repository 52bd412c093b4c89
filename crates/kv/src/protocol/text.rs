//! The ASCII protocol: one command line (CRLF or LF), plus a data block for storage commands.
//!
//! [`parse`] never panics and never reads past the buffer: it returns [`Parse::Incomplete`]
//! until a whole request is buffered, [`Parse::Close`] for input memcached drops the connection
//! on (more than 2048 bytes without a newline, except get/gets), and otherwise a [`Command`] with the number of bytes it consumed.

use super::meta::{self, MetaCommand};
use super::reply::Fail;
use super::{key_ok, parse_i64, parse_u64, Limits};

/// memcached's token limit per line (the rest of a `get` line is kept whole).
pub const MAX_TOKENS: usize = 24;

/// get-family variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetKind {
    /// `get`
    Get,
    /// `gets` (with CAS)
    Gets,
    /// `gat` (touch and get)
    Gat,
    /// `gats`
    Gats,
}

/// Storage verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCmd {
    /// `set`
    Set,
    /// `add`
    Add,
    /// `replace`
    Replace,
    /// `append`
    Append,
    /// `prepend`
    Prepend,
    /// `cas`
    Cas,
}

/// One parsed text-protocol request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// get/gets/gat/gats: `keys` is the rest of the line, space separated.
    Get {
        /// Which verb.
        kind: GetKind,
        /// New exptime for gat/gats.
        exptime: i64,
        /// Space-separated keys.
        keys: &'a [u8],
    },
    /// set/add/replace/append/prepend/cas with its data block.
    Store {
        /// Which verb.
        cmd: StoreCmd,
        /// Key.
        key: &'a [u8],
        /// Client flags.
        flags: u32,
        /// Protocol exptime.
        exptime: i64,
        /// Value without CRLF.
        data: &'a [u8],
        /// CAS operand (cas only).
        cas: u64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// A storage command whose value exceeds the item limit: reply, then swallow `swallow`
    /// bytes of data that follow.
    TooLarge {
        /// Key (its old value is dropped for set/cas).
        key: &'a [u8],
        /// Which verb.
        cmd: StoreCmd,
        /// Bytes of data to discard.
        swallow: usize,
        /// Suppress the reply.
        noreply: bool,
        /// From meta `ms` (which `stats detail` does not count).
        meta: bool,
    },
    /// delete
    Delete {
        /// Key.
        key: &'a [u8],
        /// Suppress the reply.
        noreply: bool,
    },
    /// incr/decr
    Arith {
        /// incr (true) or decr.
        incr: bool,
        /// Key.
        key: &'a [u8],
        /// Amount.
        delta: u64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// touch
    Touch {
        /// Key.
        key: &'a [u8],
        /// New exptime.
        exptime: i64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// flush_all [delay]
    FlushAll {
        /// Delay (protocol exptime rules), 0 = now.
        delay: i64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// version
    Version,
    /// verbosity N
    Verbosity {
        /// Suppress the reply.
        noreply: bool,
    },
    /// quit
    Quit,
    /// shutdown (refused unless `-A`).
    Shutdown,
    /// cache_memlimit N
    CacheMemlimit {
        /// Megabytes.
        mb: u64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// stats [group]
    Stats {
        /// First argument, if any.
        arg: Option<&'a [u8]>,
        /// Second argument, if any.
        arg2: Option<&'a [u8]>,
    },
    /// A meta command.
    Meta(MetaCommand<'a>),
    /// A malformed request: reply with this error and go on.
    Fail(Fail),
}

/// Parser result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse<'a> {
    /// Need more bytes.
    Incomplete,
    /// A request and how many bytes it used.
    Done(Command<'a>, usize),
    /// Drop the connection (over-long line).
    Close,
}

/// Space-separated tokens of one line, at most [`MAX_TOKENS`].
pub struct Tokens<'a> {
    /// The tokens.
    pub t: [&'a [u8]; MAX_TOKENS],
    /// How many were found.
    pub n: usize,
    /// Text after the last token taken (non-empty when there were more).
    pub rest: &'a [u8],
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
                return done(Command::Fail(Fail::BadFormat));
            }
            let (Some(flags), Some(exptime), Some(vlen)) =
                (parse_u64(t[2]), parse_i64(t[3]), parse_i64(t[4]))
            else {
                return done(Command::Fail(Fail::BadFormat));
            };
            let cas = if cmd == StoreCmd::Cas {
                match parse_u64(t[5]) {
                    Some(c) => c,
                    None => return done(Command::Fail(Fail::BadFormat)),
                }
            } else {
                0
            };
            if vlen < 0 || vlen > (i32::MAX as i64 - 2) {
                return done(Command::Fail(Fail::BadFormat));
            }
            let vlen = vlen as usize;
            if vlen + key.len() + super::super::storage::ITEM_OVERHEAD > lim.item_max {
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
            if t[1].len() > super::KEY_MAX {
                return done(Command::Fail(Fail::BadFormat));
            }
            let mut noreply = false;
            if n > 2 {
                let hold_zero = t[2] == b"0";
                noreply = noreply_last;
                let valid = (n == 3 && (hold_zero || noreply)) || (n == 4 && hold_zero && noreply);
                if !valid {
                    return done(Command::Fail(Fail::DeleteUsage));
                }
            }
            done(Command::Delete { key: t[1], noreply })
        }
        b"incr" | b"decr" => {
            if n != 3 && n != 4 {
                return done(Command::Fail(Fail::Error));
            }
            if t[1].len() > super::KEY_MAX {
                return done(Command::Fail(Fail::BadFormat));
            }
            let Some(delta) = parse_u64(t[2]) else {
                return done(Command::Fail(Fail::InvalidDelta));
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
                return done(Command::Fail(Fail::BadFormat));
            }
            let Some(exptime) = parse_i64(t[2]) else {
                return done(Command::Fail(Fail::InvalidExptime));
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
                    None => return done(Command::Fail(Fail::InvalidExptime)),
                }
            };
            done(Command::FlushAll { delay, noreply })
        }
        // memcached ignores extra tokens after these two.
        b"version" => done(Command::Version),
        b"quit" => done(Command::Quit),
        b"shutdown" if n <= 2 => done(Command::Shutdown),
        b"verbosity" if (2..=3).contains(&n) => {
            let noreply = noreply_last;
            if parse_u64(t[1]).is_none() && !(noreply && n == 2) {
                return done(Command::Fail(Fail::BadFormat));
            }
            done(Command::Verbosity { noreply })
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
        }),
        b"mg" | b"ms" | b"md" | b"ma" | b"mn" | b"me" => meta::parse(buf, used, &tk, lim),
        _ => done(Command::Fail(Fail::Error)),
    }
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
