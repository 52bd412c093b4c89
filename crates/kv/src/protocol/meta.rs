//! Meta commands (`mg ms md ma mn me`): a key followed by single-letter flags, some with a
//! token (`T30`, `Oabc`). Return flags are echoed in the order the client gave them.

use super::reply::Fail;
use super::request::{Command, Parse, StoreCmd, Tokens, MAX_TOKENS};
pub use super::request::{MetaCommand, MetaFlags, MetaKind};
use super::{parse_i64, parse_u32, parse_u64, Limits, KEY_MAX};
use crate::out::Put;

/// Flags the command acts on or echoes back.
fn allowed(kind: MetaKind) -> &'static [u8] {
    match kind {
        // The flags each command acts on or echoes. memcached 1.6.18 knows no `E` (explicit
        // CAS), `S` or `x`: the pre-parse refuses them.
        MetaKind::Get => b"bcfhklOqstuvNRT",
        MetaKind::Set => b"bcCFIkOqTM",
        MetaKind::Delete => b"bCIkOqT",
        MetaKind::Arith => b"bCcNJDTMOqtvk",
    }
}

/// Parses a meta command whose line (`used` bytes including the newline, tokenized in `tk`)
/// starts `buf`.
pub(super) fn parse<'a>(buf: &'a [u8], used: usize, tk: &Tokens<'a>, lim: &Limits) -> Parse<'a> {
    let done = |c| Parse::Done(c, used);
    let t = &tk.t;
    let n = tk.n;
    let kind = match t[0] {
        b"mn" => return done(Command::Meta(MetaCommand::Noop)),
        b"me" => {
            if n < 2 {
                return done(Command::Fail(Fail::Error));
            }
            if t[1].len() > KEY_MAX {
                return done(Command::Fail(Fail::BadFormat));
            }
            return done(Command::Meta(MetaCommand::Debug { key: t[1] }));
        }
        b"mg" => MetaKind::Get,
        b"ms" => MetaKind::Set,
        b"md" => MetaKind::Delete,
        _ => MetaKind::Arith,
    };
    if n < 2 {
        return done(Command::Fail(Fail::Error));
    }
    let key = t[1];
    if key.len() > KEY_MAX {
        return done(Command::Fail(Fail::BadFormat));
    }
    let mut first_flag = 2;
    let mut datalen = 0usize;
    if kind == MetaKind::Set {
        let Some(dl) = t.get(2).filter(|_| n > 2).and_then(|d| parse_u64(d)) else {
            return done(Command::Fail(Fail::BadFormat));
        };
        // memcached reads the length as an int32 and refuses what does not fit; so do we, before
        // any sum with it can overflow (found by the soak: `ms k 18446744073709551615`).
        if dl > (i32::MAX - 2) as u64 {
            return done(Command::Fail(Fail::BadDataChunk));
        }
        datalen = dl as usize;
        first_flag = 3;
    }
    let tokens = &t[first_flag..n];
    let mut bad = preparse(kind, key, tokens);
    let mut f = no_flags();
    if bad.is_none() {
        bad = take_flags(kind, tokens, &mut f);
    }
    let line = Parsed {
        kind,
        key,
        flags: f,
        bad,
    };
    if kind == MetaKind::Set {
        return line.with_data(buf, used, datalen, lim);
    }
    done(line.command(&[]))
}

/// A meta command's flags before any is read.
fn no_flags<'a>() -> MetaFlags<'a> {
    MetaFlags {
        raw: [&[]; MAX_TOKENS],
        n: 0,
        quiet: false,
        base64: false,
        value: false,
        no_bump: false,
        invalidate: false,
        ttl: None,
        vivify: None,
        recache: None,
        compare_cas: None,
        client_flags: None,
        mode: None,
        delta: None,
        initial: None,
        opaque_too_long: false,
    }
}

/// memcached 1.6.18's "pre-parse" of the flag `tokens`, the same for all four commands: an
/// unknown or repeated letter stops the check at once; a bad number is remembered (the last
/// message wins) and the check goes on. The failure to answer, if any.
fn preparse(kind: MetaKind, key: &[u8], tokens: &[&[u8]]) -> Option<Fail> {
    let mut seen = [false; 128];
    let mut stop = None;
    let mut last_err = None;
    let mut has_error = false;
    for &tok in tokens {
        let c = tok[0];
        if c >= 127 || seen[c as usize] {
            stop = Some(Fail::DuplicateFlag);
            break;
        }
        seen[c as usize] = true;
        let arg = &tok[1..];
        let mut num_err = |e: Option<Fail>| {
            has_error = true;
            if e.is_some() {
                last_err = e;
            }
        };
        match c {
            b'b' => {
                let mut scratch = Vec::new();
                if !base64_decode(key, &mut scratch) || scratch.is_empty() {
                    num_err(Some(Fail::KeyDecode));
                }
            }
            b'N' | b'T' | b'R' | b'C' => {
                let ok = if c == b'C' {
                    parse_u64(arg).is_some()
                } else {
                    parse_i64(arg).is_some()
                };
                if !ok {
                    num_err(Some(Fail::BadToken));
                }
            }
            // memcached leaves its default message for a bad `F`.
            b'F' if parse_u32(arg).is_none() => num_err(None),
            b'M' if tok.len() != 2 => num_err(Some(Fail::MTokenLength)),
            b'J' if parse_u64(arg).is_none() => num_err(Some(Fail::InvalidInitial)),
            b'D' if parse_u64(arg).is_none() => num_err(Some(Fail::InvalidMetaDelta)),
            b'l' | b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'v' | b'h' | b'u'
            | b'q' | b'F' | b'M' | b'J' | b'D' | b'I' => {}
            _ => {
                stop = Some(Fail::InvalidFlag);
                break;
            }
        }
    }
    let mut bad = stop.or(has_error.then(|| last_err.unwrap_or(Fail::BadFormat)));
    if bad.is_some() && matches!(kind, MetaKind::Delete | MetaKind::Arith) {
        // md and ma answer every pre-parse failure with one message.
        bad = Some(Fail::InvalidOrDuplicateFlag);
    }
    bad
}

/// Reads the flag `tokens` (already through [`preparse`]) that `kind` acts on or echoes into
/// `f`; the first failure found (a bad mode, an `O` too long for ms and md), if any.
fn take_flags<'a>(kind: MetaKind, tokens: &[&'a [u8]], f: &mut MetaFlags<'a>) -> Option<Fail> {
    let acts = allowed(kind);
    let mut bad = None;
    for &tok in tokens {
        let c = tok[0];
        // Flags the pre-parse accepts but this command does not use are ignored.
        if !acts.contains(&c) {
            continue;
        }
        f.raw[f.n] = tok;
        f.n += 1;
        let arg = &tok[1..];
        match c {
            b'q' => f.quiet = true,
            b'b' => f.base64 = true,
            b'v' => f.value = true,
            b'u' => f.no_bump = true,
            b'I' => f.invalidate = true,
            b'T' => f.ttl = parse_i64(arg),
            b'N' => f.vivify = parse_i64(arg),
            b'R' => f.recache = parse_i64(arg),
            b'C' => f.compare_cas = parse_u64(arg),
            b'F' => f.client_flags = parse_u32(arg),
            b'D' => f.delta = parse_u64(arg),
            b'J' => f.initial = parse_u64(arg),
            b'M' => {
                let m = arg[0];
                let valid: &[u8] = if kind == MetaKind::Set {
                    b"EeAaPpRrSs"
                } else {
                    b"IiDd+-"
                };
                if !valid.contains(&m) {
                    bad.get_or_insert(if kind == MetaKind::Set {
                        Fail::InvalidMsMode
                    } else {
                        Fail::InvalidMaMode
                    });
                }
                f.mode = Some(m.to_ascii_uppercase());
            }
            // memcached counts the `O` itself in its 32-byte limit.
            b'O' if tok.len() > 32 => {
                if matches!(kind, MetaKind::Get | MetaKind::Arith) {
                    f.opaque_too_long = true;
                } else {
                    bad.get_or_insert(Fail::OpaqueTooLong);
                }
            }
            _ => {}
        }
    }
    bad
}

/// A parsed meta command line: its key, its flags and the failure to answer, if any.
struct Parsed<'a> {
    kind: MetaKind,
    key: &'a [u8],
    flags: MetaFlags<'a>,
    bad: Option<Fail>,
}

impl<'a> Parsed<'a> {
    /// `ms`: the line (`used` bytes of `buf`) and its data block of `datalen` bytes, which
    /// must be buffered whole; a value too large is refused and its data swallowed.
    fn with_data(self, buf: &'a [u8], used: usize, datalen: usize, lim: &Limits) -> Parse<'a> {
        if datalen + self.key.len() + lim.item_overhead > lim.item_max {
            return Parse::Done(
                Command::TooLarge {
                    key: self.key,
                    cmd: StoreCmd::Set,
                    swallow: datalen + 2,
                    noreply: false,
                    meta: true,
                },
                used,
            );
        }
        let total = used + datalen + 2;
        if buf.len() < total {
            return Parse::Incomplete;
        }
        if &buf[used + datalen..total] != b"\r\n" {
            return Parse::Done(Command::Fail(Fail::BadDataChunk), total);
        }
        Parse::Done(self.command(&buf[used..used + datalen]), total)
    }

    /// The request, or its failure.
    fn command(self, data: &'a [u8]) -> Command<'a> {
        if let Some(e) = self.bad {
            return Command::Fail(e);
        }
        Command::Meta(MetaCommand::Op {
            kind: self.kind,
            key: self.key,
            data,
            flags: Box::new(self.flags),
        })
    }
}

/// Decodes a base64 key (standard alphabet, padding optional) into `out`.
pub fn base64_decode(s: &[u8], out: &mut Vec<u8>) -> bool {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    out.clear();
    let s = s
        .strip_suffix(b"==")
        .or_else(|| s.strip_suffix(b"="))
        .unwrap_or(s);
    let mut acc = 0u32;
    let mut bits = 0;
    for &c in s {
        let Some(v) = val(c) else { return false };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    !out.is_empty()
}

/// Encodes bytes as base64 with padding.
pub fn base64_encode(s: &[u8], out: &mut impl Put) {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for ch in s.chunks(3) {
        let b = [ch[0], *ch.get(1).unwrap_or(&0), *ch.get(2).unwrap_or(&0)];
        let v = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        out.push(A[(v >> 18) as usize & 63]);
        out.push(A[(v >> 12) as usize & 63]);
        out.push(if ch.len() > 1 {
            A[(v >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if ch.len() > 2 {
            A[v as usize & 63]
        } else {
            b'='
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_roundtrip() {
        for s in [&b"a"[..], b"ab", b"abc", b"hello world"] {
            let mut e = Vec::new();
            base64_encode(s, &mut e);
            let mut d = Vec::new();
            assert!(base64_decode(&e, &mut d));
            assert_eq!(d, s);
        }
        let mut d = Vec::new();
        assert!(!base64_decode(b"!!", &mut d));
    }
}
