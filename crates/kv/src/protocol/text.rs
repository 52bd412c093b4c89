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

mod admin;

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
    match tk.t[0] {
        b"get" | b"gets" | b"gat" | b"gats" => done(retrieval(&tk, l)),
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            storage(buf, used, &tk, lim)
        }
        b"delete" => done(delete(&tk)),
        b"incr" | b"decr" => done(arith(&tk)),
        b"touch" => done(touch(&tk)),
        b"mg" | b"ms" | b"md" | b"ma" | b"mn" | b"me" => meta::parse(buf, used, &tk, lim),
        other => done(admin::parse(&tk).unwrap_or_else(|| unknown(other, l))),
    }
}

/// Whether the line's last token is `noreply`.
fn noreply_last(tk: &Tokens<'_>) -> bool {
    tk.t[tk.n - 1] == b"noreply"
}

/// get, gets, gat, gats (`l` is the whole line: the keys are its rest, kept whole).
fn retrieval<'a>(tk: &Tokens<'a>, l: &'a [u8]) -> Command<'a> {
    let (t, n) = (&tk.t, tk.n);
    match t[0] {
        b"get" | b"gets" => {
            if n < 2 {
                return Command::Fail(Fail::Error);
            }
            let kind = if t[0] == b"get" {
                GetKind::Get
            } else {
                GetKind::Gets
            };
            let keys = &l[(t[1].as_ptr() as usize - l.as_ptr() as usize)..];
            Command::Get {
                kind,
                exptime: 0,
                keys,
            }
        }
        _ => {
            if n < 3 {
                return Command::Fail(Fail::Error);
            }
            let kind = if t[0] == b"gat" {
                GetKind::Gat
            } else {
                GetKind::Gats
            };
            let Some(exptime) = parse_i64(t[1]) else {
                return Command::Fail(Fail::InvalidExptime);
            };
            let keys = &l[(t[2].as_ptr() as usize - l.as_ptr() as usize)..];
            Command::Get {
                kind,
                exptime,
                keys,
            }
        }
    }
}

/// set, add, replace, append, prepend, cas: the line (`used` bytes of `buf`, tokenized in
/// `tk`) and its data block, which must be buffered whole.
fn storage<'a>(buf: &'a [u8], used: usize, tk: &Tokens<'a>, lim: &Limits) -> Parse<'a> {
    let done = |c| Parse::Done(c, used);
    let (t, n) = (&tk.t, tk.n);
    let noreply_last = noreply_last(tk);
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

/// `delete KEY [0] [noreply]`.
fn delete<'a>(tk: &Tokens<'a>) -> Command<'a> {
    let (t, n) = (&tk.t, tk.n);
    if !(2..=4).contains(&n) {
        return Command::Fail(Fail::Error);
    }
    // memcached checks the arguments before the key's length, and only looks for
    // `noreply` when there are any.
    let mut noreply = false;
    if n > 2 {
        let hold_zero = t[2] == b"0";
        noreply = noreply_last(tk);
        let valid = (n == 3 && (hold_zero || noreply)) || (n == 4 && hold_zero && noreply);
        if !valid {
            return fail(Fail::DeleteUsage, noreply);
        }
    }
    if t[1].len() > super::KEY_MAX {
        return fail(Fail::BadFormat, noreply);
    }
    Command::Delete { key: t[1], noreply }
}

/// `incr|decr KEY DELTA [noreply]`.
fn arith<'a>(tk: &Tokens<'a>) -> Command<'a> {
    let (t, n) = (&tk.t, tk.n);
    let noreply_last = noreply_last(tk);
    if n != 3 && n != 4 {
        return Command::Fail(Fail::Error);
    }
    if t[1].len() > super::KEY_MAX {
        return fail(Fail::BadFormat, noreply_last);
    }
    let Some(delta) = parse_u64(t[2]) else {
        return fail(Fail::InvalidDelta, noreply_last);
    };
    Command::Arith {
        incr: t[0] == b"incr",
        key: t[1],
        delta,
        noreply: n == 4 && noreply_last,
    }
}

/// `touch KEY EXPTIME [noreply]`.
fn touch<'a>(tk: &Tokens<'a>) -> Command<'a> {
    let (t, n) = (&tk.t, tk.n);
    let noreply_last = noreply_last(tk);
    if n != 3 && n != 4 {
        return Command::Fail(Fail::Error);
    }
    if t[1].len() > super::KEY_MAX {
        return fail(Fail::BadFormat, noreply_last);
    }
    let Some(exptime) = parse_i64(t[2]) else {
        return fail(Fail::InvalidExptime, noreply_last);
    };
    Command::Touch {
        key: t[1],
        exptime,
        noreply: n == 4 && noreply_last,
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
