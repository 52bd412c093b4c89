//! ASCII authentication (`-Y FILE`), as memcached 1.6 does it: until a connection has
//! authenticated, the only request it may send is a `set` whose data is `user password`, checked
//! against the file's `user:password` lines; the reply is `STORED` or `CLIENT_ERROR
//! authentication failure`, and anything else gets `CLIENT_ERROR unauthenticated`. The key,
//! flags and expiry of that `set` are ignored, as in memcached.
pub use crate::config::AuthFile;
use crate::out::Out;

/// Longest token data remora reads before answering (memcached's lines are at most 256 bytes;
/// a larger announced size is refused without waiting for it).
const MAX_TOKEN: usize = 4096;

/// What one step of the exchange did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// More input is needed.
    Incomplete,
    /// `consumed` bytes were answered; `authenticated` when the token was accepted,
    /// `Some(false)` when it was refused, `None` for a request that was not a token.
    Answered {
        /// Input used.
        consumed: usize,
        /// Whether a token was checked, and its verdict.
        verdict: Option<bool>,
        /// Bytes of an oversized token still to discard.
        swallow: usize,
    },
}

fn tokens(b: &[u8]) -> Vec<&[u8]> {
    b.split(|&c| c == b' ').filter(|t| !t.is_empty()).collect()
}

/// Reads one request of an unauthenticated connection from `buf` and queues its reply.
pub fn step(file: &AuthFile, buf: &[u8], out: &mut Out) -> Step {
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        return Step::Incomplete;
    };
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let t = tokens(line);
    let size = t
        .get(4)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<usize>().ok());
    let (Some(size), true) = (size, t.len() >= 5 && t[0] == b"set") else {
        out.extend_from_slice(b"CLIENT_ERROR unauthenticated\r\n");
        return Step::Answered {
            consumed: nl + 1,
            verdict: None,
            swallow: 0,
        };
    };
    if size > MAX_TOKEN {
        out.extend_from_slice(b"CLIENT_ERROR authentication failure\r\n");
        return Step::Answered {
            consumed: nl + 1,
            verdict: Some(false),
            swallow: size.saturating_add(2),
        };
    }
    let data = &buf[nl + 1..];
    if data.len() < size + 2 {
        return Step::Incomplete;
    }
    let consumed = nl + 1 + size + 2;
    let answered = |verdict| Step::Answered {
        consumed,
        verdict,
        swallow: 0,
    };
    if &data[size..size + 2] != b"\r\n" {
        out.extend_from_slice(b"CLIENT_ERROR bad command line termination\r\n");
        return answered(None);
    }
    let t = tokens(&data[..size]);
    if t.len() < 2 {
        out.extend_from_slice(b"CLIENT_ERROR bad authentication token format\r\n");
        return answered(None);
    }
    if file.check(t[0], t[1]) {
        out.extend_from_slice(b"STORED\r\n");
        answered(Some(true))
    } else {
        out.extend_from_slice(b"CLIENT_ERROR authentication failure\r\n");
        answered(Some(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> AuthFile {
        AuthFile::from_entries(vec![
            (b"foo".to_vec(), b"bar".to_vec()),
            (b"baaaz".to_vec(), b"quux".to_vec()),
        ])
    }

    fn run(input: &[u8]) -> (Step, Vec<u8>) {
        let mut out = Out::default();
        let s = step(&file(), input, &mut out);
        (s, out.to_vec())
    }

    #[test]
    fn only_a_set_with_a_known_user_and_password_authenticates() {
        let (s, o) = run(b"set foo 0 0 7\r\nfoo bar\r\n");
        assert_eq!(o, b"STORED\r\n");
        assert!(matches!(
            s,
            Step::Answered {
                consumed: 24,
                verdict: Some(true),
                ..
            }
        ));
        let (s, o) = run(b"set x 1 2 7\r\nfoo bab\r\n");
        assert_eq!(o, b"CLIENT_ERROR authentication failure\r\n");
        assert!(matches!(
            s,
            Step::Answered {
                verdict: Some(false),
                ..
            }
        ));
        assert_eq!(run(b"get foo\r\n").1, b"CLIENT_ERROR unauthenticated\r\n");
        assert_eq!(
            run(b"set foo 0 0\r\n").1,
            b"CLIENT_ERROR unauthenticated\r\n"
        );
        assert_eq!(
            run(b"set foo 0 0 x\r\n").1,
            b"CLIENT_ERROR unauthenticated\r\n"
        );
        assert_eq!(
            run(b"set foo 0 0 3\r\nfoo\r\n").1,
            b"CLIENT_ERROR bad authentication token format\r\n"
        );
        assert_eq!(
            run(b"set foo 0 0 7\r\nfoo barXY").1,
            b"CLIENT_ERROR bad command line termination\r\n"
        );
        assert_eq!(run(b"set foo 0 0 7\r\nfoo b").0, Step::Incomplete);
        assert_eq!(run(b"set foo 0 0 7").0, Step::Incomplete);
        // A huge announced token is refused at once and its bytes discarded, not awaited.
        let (s, o) = run(b"set foo 0 0 99999999\r\n");
        assert_eq!(o, b"CLIENT_ERROR authentication failure\r\n");
        assert!(matches!(
            s,
            Step::Answered {
                swallow: 100_000_001,
                ..
            }
        ));
    }

    #[test]
    fn the_file_is_read_with_memcacheds_rules() {
        let dir = std::env::temp_dir().join(format!("remora-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("authfile");
        std::fs::write(&p, "foo:bar\r\nbaaaz:qu:ux\n\n").unwrap();
        let f = AuthFile::load(&p).unwrap();
        assert!(f.check(b"foo", b"bar") && f.check(b"baaaz", b"qu:ux") && !f.check(b"foo", b"ba"));
        std::fs::write(&p, "foo:bar\nnocolon\n").unwrap();
        assert!(AuthFile::load(&p).unwrap_err().contains("malformed entry"));
        assert!(AuthFile::load(&dir.join("missing"))
            .unwrap_err()
            .contains("Could not open authfile"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
