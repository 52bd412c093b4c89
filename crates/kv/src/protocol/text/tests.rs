use super::*;
use crate::protocol::reply::Fail;
use crate::protocol::request::MetaCommand;
use proptest::prelude::*;

fn p(b: &[u8]) -> Parse<'_> {
    parse(b, &Limits::default())
}

#[test]
fn get_and_multiget() {
    let Parse::Done(Command::Get { kind, keys, .. }, n) = p(b"get a bb  c\r\nrest") else {
        panic!()
    };
    assert_eq!(kind, GetKind::Get);
    assert_eq!(n, 13);
    assert_eq!(
        text::keys(keys).collect::<Vec<_>>(),
        vec![&b"a"[..], b"bb", b"c"]
    );
    assert_eq!(p(b"get\r\n"), Parse::Done(Command::Fail(Fail::Error), 5));
    assert_eq!(p(b"get a"), Parse::Incomplete);
}

#[test]
fn storage_needs_whole_block() {
    let full = b"set k 1 2 3\r\nabc\r\n";
    for cut in 0..full.len() {
        assert_eq!(p(&full[..cut]), Parse::Incomplete, "cut {cut}");
    }
    let Parse::Done(
        Command::Store {
            key,
            flags,
            exptime,
            data,
            noreply,
            ..
        },
        n,
    ) = p(full)
    else {
        panic!()
    };
    assert_eq!(
        (key, flags, exptime, data, noreply, n),
        (&b"k"[..], 1, 2, &b"abc"[..], false, 18)
    );
    assert_eq!(
        p(b"set k 0 0 2\r\nabc\r\n"),
        Parse::Done(Command::Fail(Fail::BadDataChunk), 17)
    );
    assert_eq!(
        p(b"set k 0 0 -1\r\n"),
        Parse::Done(Command::Fail(Fail::BadFormat), 14)
    );
    assert_eq!(
        p(b"set k 0 0\r\n"),
        Parse::Done(Command::Fail(Fail::Error), 11)
    );
}

#[test]
fn too_large_is_swallowed() {
    let Parse::Done(Command::TooLarge { swallow, .. }, n) = p(b"set k 0 0 2000000\r\n") else {
        panic!()
    };
    assert_eq!((swallow, n), (2_000_002, 19));
}

#[test]
fn long_lines_close_except_get() {
    let mut long = vec![b'x'; 3000];
    assert_eq!(p(&long), Parse::Close);
    long.extend_from_slice(b"\r\n");
    assert_eq!(p(&long), Parse::Done(Command::Fail(Fail::Error), 3002));
    let mut g = b"get ".to_vec();
    g.extend(std::iter::repeat_n(b"k ".iter().copied(), 2000).flatten());
    assert_eq!(p(&g), Parse::Incomplete);
    g.extend_from_slice(b"\r\n");
    assert!(matches!(p(&g), Parse::Done(Command::Get { .. }, _)));
}

#[test]
fn delete_forms() {
    assert!(matches!(
        p(b"delete a 0\r\n"),
        Parse::Done(Command::Delete { noreply: false, .. }, _)
    ));
    assert!(matches!(
        p(b"delete a noreply\r\n"),
        Parse::Done(Command::Delete { noreply: true, .. }, _)
    ));
    assert_eq!(
        p(b"delete a 5\r\n"),
        Parse::Done(Command::Fail(Fail::DeleteUsage), 12)
    );
}

/// malicious-commands.t: memcached hangs up on HTTP request lines instead of answering
/// `ERROR`, but only where its dispatch reaches the final `else` (proto_text.c).
#[test]
fn http_request_lines_hang_up() {
    for l in [
        &b"GET / HTTP/1.0\r\n"[..],
        b"PUT /asdf/asd/fasdfasdf/sadf HTTP/1.1\r\n",
        b"DELETE HTTP/1.1\r\n",
        b"OPTIONS * HTTP/2\n",
    ] {
        assert_eq!(p(l), Parse::Done(Command::Hangup, l.len()), "{l:?}");
    }
    // A known first letter, a one-byte command, or no `HTTP/` last: ERROR as before.
    for l in [
        &b"get / HTTP/1.0\r\n"[..],
        b"gx / HTTP/1.0\r\n",
        b"the HTTP/1.1\r\n",
        b"G HTTP/1.1\r\n",
        b"GET / HTTP\r\n",
        b"GET HTTP/1.1 x\r\n",
        b"mz HTTP/1.1\r\n",
    ] {
        assert!(!matches!(p(l), Parse::Done(Command::Hangup, _)), "{l:?}");
    }
    // memcached looks at the 23rd token of a longer line.
    let mut long = b"XY".to_vec();
    for i in 1..30 {
        long.extend_from_slice(if i == 22 { b" HTTP/1.1" } else { b" a" });
    }
    long.extend_from_slice(b"\r\n");
    assert!(matches!(p(&long), Parse::Done(Command::Hangup, _)));
}

/// shutdown.t: `shutdown`, `shutdown graceful`, anything else an invalid mode.
#[test]
fn shutdown_modes() {
    use super::ShutdownMode::*;
    for (l, m) in [
        (&b"shutdown\r\n"[..], Now),
        (b"shutdown graceful\r\n", Graceful),
        (b"shutdown foo\r\n", Invalid),
        (b"shutdown graceful now\r\n", Invalid),
    ] {
        assert_eq!(p(l), Parse::Done(Command::Shutdown(m), l.len()));
    }
}

/// issue_3.t: memcached sets its noreply flag before checking the arguments, so errors of
/// lines ending in `noreply` are not sent either.
#[test]
fn noreply_silences_argument_errors() {
    let quiet = |l: &[u8], f: Fail| assert_eq!(p(l), Parse::Done(Command::FailQuiet(f), l.len()));
    quiet(b"delete k 10 noreply\r\n", Fail::DeleteUsage);
    quiet(b"set k x 0 1 noreply\r\n", Fail::BadFormat);
    quiet(b"set k 0 0 noreply\r\n", Fail::BadFormat);
    quiet(b"incr k x noreply\r\n", Fail::InvalidDelta);
    quiet(b"incr k noreply\r\n", Fail::InvalidDelta);
    quiet(b"touch k x noreply\r\n", Fail::InvalidExptime);
    quiet(b"flush_all x noreply\r\n", Fail::InvalidExptime);
    quiet(b"verbosity x noreply\r\n", Fail::BadFormat);
    let mut long = b"delete ".to_vec();
    long.extend_from_slice(&[b'k'; 251]);
    long.extend_from_slice(b" noreply\r\n");
    quiet(&long, Fail::BadFormat);
    // Without noreply they are sent; `delete k 10` is a usage error before any key check.
    assert_eq!(
        p(b"delete k 10\r\n"),
        Parse::Done(Command::Fail(Fail::DeleteUsage), 13)
    );
}

/// strtol-testing.t: `slabs automove` takes 0, 1, 2 or `ratio R`.
#[test]
fn slabs_automove() {
    assert_eq!(
        p(b"slabs automove invalid\r\n"),
        Parse::Done(Command::Fail(Fail::BadFormat), 24)
    );
    assert_eq!(
        p(b"slabs automove 3\r\n"),
        Parse::Done(Command::Fail(Fail::Error), 18)
    );
    assert_eq!(
        p(b"slabs automove 2 noreply\r\n"),
        Parse::Done(
            Command::SlabsAutomove {
                set: Automove::Mode(2),
                noreply: true
            },
            26
        )
    );
    assert_eq!(
        p(b"slabs automove ratio 0.5\r\n"),
        Parse::Done(
            Command::SlabsAutomove {
                set: Automove::Ratio(0.5),
                noreply: false
            },
            26
        )
    );
    assert_eq!(
        p(b"slabs automove ratio\r\n"),
        Parse::Done(Command::Fail(Fail::Error), 22)
    );
    assert_eq!(
        p(b"slabs automove\r\n"),
        Parse::Done(Command::Fail(Fail::Error), 16)
    );
}

/// watcher.t: `watch` alone is `fetchers`; names combine; an unknown one is kept for the
/// handler to refuse (after its `-W` check).
#[test]
fn watch_streams() {
    use super::watch::*;
    let w = |l: &[u8]| match p(l) {
        Parse::Done(Command::Watch { streams, .. }, _) => streams,
        other => panic!("{other:?}"),
    };
    assert_eq!(w(b"watch\r\n"), Some(FETCHERS));
    assert_eq!(
        w(b"watch mutations evictions\n"),
        Some(MUTATIONS | EVICTIONS)
    );
    assert_eq!(w(b"watch connevents\r\n"), Some(CONNEVENTS));
    assert_eq!(w(b"watch fetchers bogus\r\n"), None);
}

#[test]
fn meta_commands() {
    let Parse::Done(Command::Meta(MetaCommand::Op { flags, .. }), _) =
        p(b"mg k v c t T30 Oab q\r\n")
    else {
        panic!()
    };
    assert!(flags.value && flags.quiet);
    assert_eq!(flags.ttl, Some(30));
    assert_eq!(
        p(b"mg k zz\r\n"),
        Parse::Done(Command::Fail(Fail::InvalidFlag), 9)
    );
    assert_eq!(p(b"ms k 2\r\nhi"), Parse::Incomplete);
    assert!(matches!(
        p(b"ms k 2 T0\r\nhi\r\n"),
        Parse::Done(Command::Meta(_), 15)
    ));
    assert_eq!(
        p(b"mn\r\n"),
        Parse::Done(Command::Meta(MetaCommand::Noop), 4)
    );
}

proptest! {
    /// Fuzz-style invariants: never panics, consumes at most the input, and whatever it
    /// accepts was fully buffered.
    #[test]
    fn parse_never_overreads(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
        match p(&buf) {
            Parse::Done(c, n) => {
                prop_assert!(n > 0 && n <= buf.len());
                prop_assert_eq!(p(&buf[..n]), Parse::Done(c, n));
            }
            Parse::Incomplete | Parse::Close => {}
        }
    }

    /// Text-shaped garbage exercises deeper paths.
    #[test]
    fn parse_textish(words in proptest::collection::vec(
        prop_oneof![Just("set"), Just("get"), Just("ms"), Just("mg"), Just("ma"), Just("cas"),
                    Just("incr"), Just("k"), Just("0"), Just("5"), Just("-1"), Just("noreply"),
                    Just("T1"), Just("v"), Just("\r\n"), Just("99999999999999999999")], 0..20)) {
        let s = words.join(" ");
        match p(s.as_bytes()) {
            Parse::Done(c, n) => {
                prop_assert!(n > 0 && n <= s.len());
                prop_assert_eq!(p(&s.as_bytes()[..n]), Parse::Done(c, n));
            }
            Parse::Incomplete | Parse::Close => {}
        }
    }

    /// Any storage command round-trips through the parser.
    #[test]
    fn store_roundtrip(key in "[a-z]{1,250}", flags: u32, exptime in -5i64..100000, data in proptest::collection::vec(any::<u8>(), 0..500)) {
        let mut b = format!("set {key} {flags} {exptime} {}\r\n", data.len()).into_bytes();
        b.extend_from_slice(&data);
        b.extend_from_slice(b"\r\n");
        let Parse::Done(Command::Store { key: k, flags: f, exptime: e, data: d, .. }, n) = p(&b) else {
            return Err(TestCaseError::fail("not parsed"));
        };
        prop_assert_eq!(k, key.as_bytes());
        prop_assert_eq!((f, e, n), (flags, exptime, b.len()));
        prop_assert_eq!(d, &data[..]);
    }
}

mod text {
    pub use crate::protocol::text::keys;
}
