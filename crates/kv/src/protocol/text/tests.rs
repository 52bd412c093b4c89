use super::*;
use crate::protocol::reply::Fail;
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
