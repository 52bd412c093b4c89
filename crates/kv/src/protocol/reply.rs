//! Typed replies and their exact memcached byte strings.

use crate::out::Put;

/// An error reply (the protocol's errors are responses, not Rust errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// `ERROR`: unknown command or wrong token count.
    Error,
    /// `CLIENT_ERROR bad command line format`.
    BadFormat,
    /// `CLIENT_ERROR bad data chunk`.
    BadDataChunk,
    /// `SERVER_ERROR object too large for cache`.
    TooLarge,
    /// `SERVER_ERROR out of memory storing object`.
    NoMemory,
    /// `CLIENT_ERROR invalid exptime argument`.
    InvalidExptime,
    /// `CLIENT_ERROR invalid numeric delta argument`.
    InvalidDelta,
    /// `CLIENT_ERROR cannot increment or decrement non-numeric value`.
    NonNumeric,
    /// delete with a bad extra argument.
    DeleteUsage,
    /// `stats detail` without on/off/dump.
    StatsDetailUsage,
    /// `shutdown` without `-A`.
    ShutdownDisabled,
    /// `shutdown` with an argument other than `graceful`.
    InvalidShutdownMode,
    /// meta: unknown flag.
    InvalidFlag,
    /// meta: bad flag token.
    InvalidOrDuplicateFlag,
    /// meta (mg/ms): a flag letter given twice.
    DuplicateFlag,
    /// meta: a non-numeric `N`, `T`, `R` or `C` token.
    BadToken,
    /// meta: a `b` key that is not base64.
    KeyDecode,
    /// meta: an `M` token that is not one letter.
    MTokenLength,
    /// meta: a non-numeric `J` token.
    InvalidInitial,
    /// meta: a non-numeric `D` token.
    InvalidMetaDelta,
    /// meta: an `O` token longer than 32 bytes.
    OpaqueTooLong,
    /// meta: bad `M` mode for ms.
    InvalidMsMode,
    /// meta: bad `M` mode for ma.
    InvalidMaMode,
    /// `flush_all` with `-F`.
    FlushDisabled,
    /// `watch` with `-W`.
    WatchDisabled,
    /// `watch` after other pipelined commands whose replies are not sent yet.
    WatchPipelined,
    /// `watch` with 20 watchers already.
    WatcherTooMany,
    /// `watch` on a connection that cannot become a log stream (UDP).
    WatcherFailed,
    /// A multiget past the response objects a connection may hold (`-o read_buf_mem_limit`).
    GetOutOfMemory,
    /// `stats cachedump` without its two arguments.
    BadCommandLine,
    /// `stats cachedump` of a class number beyond memcached's 63.
    IllegalSlabId,
}

impl Fail {
    /// The reply line without CRLF.
    pub fn text(self) -> &'static str {
        match self {
            Fail::Error => "ERROR",
            Fail::BadFormat => "CLIENT_ERROR bad command line format",
            Fail::BadDataChunk => "CLIENT_ERROR bad data chunk",
            Fail::TooLarge => "SERVER_ERROR object too large for cache",
            Fail::NoMemory => "SERVER_ERROR out of memory storing object",
            Fail::InvalidExptime => "CLIENT_ERROR invalid exptime argument",
            Fail::InvalidDelta => "CLIENT_ERROR invalid numeric delta argument",
            Fail::NonNumeric => "CLIENT_ERROR cannot increment or decrement non-numeric value",
            Fail::DeleteUsage => {
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
            }
            Fail::StatsDetailUsage => "CLIENT_ERROR usage: stats detail on|off|dump",
            Fail::ShutdownDisabled => "ERROR: shutdown not enabled",
            Fail::InvalidShutdownMode => "CLIENT_ERROR invalid shutdown mode",
            Fail::InvalidFlag => "CLIENT_ERROR invalid flag",
            Fail::InvalidOrDuplicateFlag => "CLIENT_ERROR invalid or duplicate flag",
            Fail::DuplicateFlag => "CLIENT_ERROR duplicate flag",
            Fail::BadToken => "CLIENT_ERROR bad token in command line format",
            Fail::KeyDecode => "CLIENT_ERROR error decoding key",
            Fail::MTokenLength => "CLIENT_ERROR incorrect length for M token",
            Fail::InvalidInitial => "CLIENT_ERROR invalid numeric initial value",
            Fail::InvalidMetaDelta => "CLIENT_ERROR invalid numeric delta value",
            Fail::OpaqueTooLong => "CLIENT_ERROR opaque token too long",
            Fail::InvalidMsMode => "CLIENT_ERROR invalid mode for ms M token",
            Fail::InvalidMaMode => "CLIENT_ERROR invalid mode for ma M token",
            Fail::FlushDisabled => "CLIENT_ERROR flush_all not allowed",
            Fail::WatchDisabled => "CLIENT_ERROR watch commands not allowed",
            Fail::WatchPipelined => "ERROR cannot pipeline other commands before watch",
            Fail::WatcherTooMany => "WATCHER_TOO_MANY log watcher limit reached",
            Fail::WatcherFailed => "WATCHER_FAILED failed to add log watcher",
            Fail::GetOutOfMemory => "SERVER_ERROR out of memory writing get response",
            Fail::BadCommandLine => "CLIENT_ERROR bad command line",
            Fail::IllegalSlabId => "CLIENT_ERROR Illegal slab id",
        }
    }
}

/// A simple one-line reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// `STORED`
    Stored,
    /// `NOT_STORED`
    NotStored,
    /// `EXISTS`
    Exists,
    /// `NOT_FOUND`
    NotFound,
    /// `DELETED`
    Deleted,
    /// `TOUCHED`
    Touched,
    /// `OK`
    Ok,
    /// `END`
    End,
    /// `RESET`
    Reset,
    /// An error.
    Fail(Fail),
}

impl Reply {
    /// The reply line without CRLF.
    pub fn text(self) -> &'static str {
        match self {
            Reply::Stored => "STORED",
            Reply::NotStored => "NOT_STORED",
            Reply::Exists => "EXISTS",
            Reply::NotFound => "NOT_FOUND",
            Reply::Deleted => "DELETED",
            Reply::Touched => "TOUCHED",
            Reply::Ok => "OK",
            Reply::End => "END",
            Reply::Reset => "RESET",
            Reply::Fail(f) => f.text(),
        }
    }

    /// Appends the line and CRLF.
    pub fn write(self, out: &mut impl Put) {
        out.extend_from_slice(self.text().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends a decimal number.
pub fn put_u64(out: &mut impl Put, v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends a signed decimal number.
pub fn put_i64(out: &mut impl Put, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    put_u64(out, v.unsigned_abs());
}

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
pub fn put_value(out: &mut impl Put, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.reserve(key.len() + data.len() + 48);
    put_value_header(out, key, flags, data.len(), cas);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n`: the value and its CRLF follow.
pub fn put_value_header(out: &mut impl Put, key: &[u8], flags: u32, len: usize, cas: Option<u64>) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    put_u64(out, flags as u64);
    out.push(b' ');
    put_u64(out, len as u64);
    if let Some(c) = cas {
        out.push(b' ');
        put_u64(out, c);
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_values() {
        let mut o = Vec::new();
        put_u64(&mut o, 0);
        o.push(b' ');
        put_u64(&mut o, u64::MAX);
        o.push(b' ');
        put_i64(&mut o, -5);
        assert_eq!(o, b"0 18446744073709551615 -5");
        let mut o = Vec::new();
        put_value(&mut o, b"k", 3, b"ab", Some(9));
        assert_eq!(o, b"VALUE k 3 2 9\r\nab\r\n");
        let mut o = Vec::new();
        Reply::Fail(Fail::BadDataChunk).write(&mut o);
        assert_eq!(o, b"CLIENT_ERROR bad data chunk\r\n");
    }
}
