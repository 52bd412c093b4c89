//! The command line's parsing, refusals and defaults.

use super::*;

#[test]
fn defaults_and_flags() {
    let c = Config::parse::<&str>(&[]).unwrap();
    assert_eq!(c.settings.tcpport, 11211);
    assert_eq!(c.settings.threads, 4);
    assert_eq!(c.settings.maxbytes, 64 << 20);
    let c = Config::parse(&["-p", "1234", "-U0", "-t2", "-m", "128", "-vv", "-c", "10"]).unwrap();
    assert_eq!(c.settings.tcpport, 1234);
    assert_eq!(c.settings.udpport, 0);
    assert_eq!(c.settings.threads, 2);
    assert_eq!(c.settings.maxbytes, 128 << 20);
    assert_eq!(c.verbose, 2);
    assert_eq!(c.settings.maxconns, 10);
    let c = Config::parse(&["-I", "2m", "-o", "modern,bogus=1", "-l", "127.0.0.1,::1"]).unwrap();
    assert_eq!(c.settings.item_size_max, 2 << 20);
    assert_eq!(c.listen, vec!["127.0.0.1", "::1"]);
    assert!(c.warnings.iter().any(|w| w.contains("bogus")));
    let c = Config::parse(&["-D", "/", "-k", "-b", "7", "-o", "track_sizes,io=epoll"]).unwrap();
    assert_eq!(c.settings.prefix_delimiter, b'/');
    assert!(c.settings.detail_enabled && c.settings.lock_memory && c.settings.track_sizes);
    assert_eq!((c.settings.backlog, c.io), (7, IoDriver::Epoll));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(Config::parse::<&str>(&[]).unwrap().io, IoDriver::Epoll);
    let c = Config::parse(&["-o", "io=uring"]).unwrap();
    assert_eq!(c.io, IoDriver::Uring);
    let c = Config::parse(&["-L"]).unwrap();
    assert!(
        c.warnings.iter().any(|w| w.contains("-L")),
        "{:?}",
        c.warnings
    );
    let c = Config::parse(&["--port=99", "--threads", "3"]).unwrap();
    assert_eq!((c.settings.tcpport, c.settings.threads), (99, 3));
}

/// Regression (memcached's `issue_67.t`): `-p -1` (an ephemeral port) was refused and `-U`
/// alone left TCP on 11211; memcached takes atoi's value and moves TCP to the UDP port.
#[test]
fn ports_follow_memcached() {
    let p = |a: &[&str]| {
        let c = Config::parse(a).unwrap();
        (c.settings.tcpport, c.settings.udpport)
    };
    assert_eq!(p(&["-p", "-1"]), (-1, 0));
    assert_eq!(p(&["-p", "0"]), (0, 0));
    assert_eq!(p(&["-U", "11222"]), (11222, 11222));
    assert_eq!(p(&["-U", "-1"]), (-1, -1));
    assert_eq!(p(&["-U", "0"]), (11211, 0));
    assert_eq!(p(&["-p", "-1", "-U", "11252"]), (-1, 11252));
    assert_eq!(p(&["-U", "5", "-p", "6"]), (6, 5));
    let e = |a: &[&str]| Config::parse(a).unwrap_err().0;
    assert_eq!(e(&["-p", "-2"]), "ERROR: Invalid port number -2.");
    assert_eq!(
        e(&["-p", "1", "-U", "70000"]),
        "ERROR: Invalid UDP port number 70000."
    );
}

/// Regression (memcached's `idle-timeout.t`, `conn-limits.t`, `stats.t`): `idle_timeout`
/// and `read_buf_mem_limit` were ignored, and the suboptions `stats settings` reports were
/// not kept.
#[test]
fn tunables_are_kept_and_checked_like_memcached() {
    let t = |a: &[&str]| Config::parse(a).unwrap().settings.tunables;
    assert_eq!(t(&[]), Tunables::default());
    let x = t(&[
        "-o",
        "idle_timeout=3,read_buf_mem_limit=1,no_lru_crawler,no_lru_maintainer",
    ]);
    assert_eq!((x.idle_timeout, x.read_buf_mem_limit), (3, 1 << 20));
    assert!(!x.lru_crawler && !x.lru_maintainer && !x.lru_segmented && x.slab_reassign);
    let x = t(&["-o", "no_modern"]);
    assert!(!x.slab_reassign && !x.maxconns_fast && !x.lru_crawler);
    assert_eq!(
        (x.slab_chunk_max, x.hash_algorithm.as_str()),
        (1 << 20, "jenkins")
    );
    let x = t(&[
        "-o",
        "slab_chunk_max=1024,no_modern,hashpower=20,slab_automove=2",
    ]);
    assert_eq!(
        (x.slab_chunk_max, x.hashpower_init, x.slab_automove),
        (1024, 20, 2)
    );
    let e = |a: &[&str]| Config::parse(a).unwrap_err().0;
    assert_eq!(
        e(&["-o", "idle_timeout"]),
        "Missing numeric argument for idle_timeout"
    );
    assert_eq!(
        e(&["-o", "read_buf_mem_limit=lots"]),
        "could not parse argument to read_buf_mem_limit"
    );
    assert_eq!(
        e(&["-o", "slab_automove=3"]),
        "slab_automove must be between 0 and 2"
    );
    assert_eq!(
        e(&["-o", "hashpower=4"]),
        "Initial hashtable multiplier of 4 is too low"
    );
    // Reported only: accepted with a warning that says so.
    let c = Config::parse(&["-o", "no_lru_crawler"]).unwrap();
    assert!(
        c.warnings.iter().any(|w| w.contains("no_lru_crawler")),
        "{:?}",
        c.warnings
    );
}

#[test]
fn refusals_use_memcached_wording() {
    let e = |a: &[&str]| Config::parse(a).unwrap_err().0;
    assert_eq!(e(&["-t", "0"]), "Number of threads must be greater than 0");
    assert_eq!(
        e(&["-c", "0"]),
        "Maximum connections must be greater than 0"
    );
    assert_eq!(
        e(&["-I", "100"]),
        "Item max size cannot be less than 1024 bytes."
    );
    assert_eq!(
        e(&["-m", "64", "-I", "64m"]),
        "Cannot set item size limit higher than 1/2 of memory max."
    );
    // slab_chunk_max against -I and the page, with memcached's messages; -I up to 1 GiB.
    assert_eq!(
        e(&["-I", "2000"]),
        "slab_chunk_max (bytes: 524288) cannot be larger than -I (item_size_max 2000)"
    );
    assert_eq!(
        e(&["-I", "3m", "-o", "slab_chunk_max=2048000"]),
        "-I (item_size_max: 3145728) must be evenly divisible by slab_chunk_max (bytes: 2048000)"
    );
    assert_eq!(
        e(&["-I", "3072k", "-o", "slab_chunk_max=3072"]),
        "slab_chunk_max (bytes: 3072) must divide evenly into 1048576 (slab_page_size)"
    );
    assert_eq!(
        e(&["-m", "4096", "-I", "2g"]),
        "Cannot set item size limit higher than 1 gigabyte."
    );
    let x = Config::parse(&["-m", "4096", "-I", "1024m", "-o", "no_modern"]).unwrap();
    assert_eq!(
        (x.settings.item_size_max, x.settings.tunables.slab_chunk_max),
        (1 << 30, 1 << 19)
    );
    assert_eq!(e(&["-p", "70000"]), "ERROR: Invalid port number 70000.");
    assert!(e(&["-B", "xx"]).starts_with("Invalid value for binding protocol: xx"));
    // Authentication that cannot be given is refused, never ignored.
    assert_eq!(e(&["-S"]), "This server is not built with SASL support.");
    assert_eq!(e(&["-Z"]), "This server is not built with TLS support.");
    assert_eq!(
        e(&["-R", "0"]),
        "Number of requests per event must be greater than 0"
    );
    assert_eq!(e(&["-D", ""]), "No delimiter specified");
    assert!(e(&["-o", "io=poll"]).starts_with("Invalid value for io"));
    assert!(e(&["-p"]).contains("requires an argument"));
    assert!(e(&["-Q"]).contains("Illegal argument"));
}

#[test]
fn segmented_lru_suboptions_are_memcacheds() {
    let e = |a: &[&str]| Config::parse(a).unwrap_err().0;
    let t = Config::parse(&["-o", "hot_lru_pct=10,warm_lru_pct=30,hot_max_factor=0.5"])
        .unwrap()
        .settings
        .tunables;
    assert_eq!(
        (t.hot_lru_pct, t.warm_lru_pct, t.hot_max_factor),
        (10, 30, 0.5)
    );
    assert!(t.lru_segmented && !t.temp_lru);
    let t = Config::parse(&["-o", "temporary_ttl=30"])
        .unwrap()
        .settings
        .tunables;
    assert_eq!((t.temp_lru, t.temporary_ttl), (true, 30));
    assert!(e(&["-o", "hot_lru_pct=80"]).contains("hot_lru_pct must be > 1 and < 80"));
    assert!(e(&["-o", "warm_max_factor=0"]).contains("warm_max_factor must be > 0"));
    assert!(e(&["-o", "hot_lru_pct=50,warm_lru_pct=40"]).contains("cannot be more than 80%"));
    assert!(e(&["-o", "no_lru_maintainer,temporary_ttl=5"])
        .contains("temporary_ttl requires lru_maintainer"));
    let t = Config::parse(&["-o", "no_lru_segmented"])
        .unwrap()
        .settings
        .tunables;
    assert!(!t.lru_segmented && t.lru_maintainer);
}

#[test]
fn migrate_from_and_its_options_are_parsed_and_checked() {
    const S: &str = "0123456789abcdef0123456789abcdef";
    let c = Config::parse(&[
        "-p",
        "11212",
        "--migrate-from",
        "10.0.0.1:11211",
        "--migrate-secret",
        S,
    ])
    .unwrap();
    let m = c.migrate.unwrap();
    assert_eq!(m.source, "10.0.0.1:11211");
    assert_eq!(m.secret, S);
    assert_eq!((m.push_rate, m.unit), (None, 64 << 10));
    let file = std::env::temp_dir().join(format!("remora-secret-{}", std::process::id()));
    std::fs::write(&file, format!("{S}\n")).unwrap();
    let file_arg = format!("--migrate-secret-file={}", file.display());
    let c = Config::parse(&[
        "--migrate-from=h:1",
        &file_arg,
        "--migrate-push-rate",
        "2m",
        "--migrate-wait=5",
        "--migrate-unit",
        "4k",
    ])
    .unwrap();
    std::fs::remove_file(&file).unwrap();
    let m = c.migrate.unwrap();
    assert_eq!(m.secret, S, "the file's line, without its newline");
    assert_eq!(m.push_rate, Some(2 << 20));
    assert_eq!((m.wait.as_secs(), m.unit), (5, 4096));
    assert!(Config::parse(&["-p", "1"]).unwrap().migrate.is_none());
    let e = |a: &[&str]| Config::parse(a).unwrap_err().0;
    let from = |extra: &[&str]| {
        let mut a = vec!["--migrate-from", "h:1", "--migrate-secret", S];
        a.extend(extra);
        e(&a)
    };
    assert!(
        e(&["--migrate-from", "nohostport", "--migrate-secret", S]).contains("expected HOST:PORT")
    );
    assert!(e(&["--migrate-push-rate", "1m"]).contains("needs --migrate-from"));
    assert!(from(&["--migrate-unit", "3000"]).contains("power of two"));
    assert!(from(&["--migrate-push-rate", "0"]).contains("bytes per second"));
    assert!(from(&["--migrate-wait", "x"]).contains("seconds"));
    assert!(e(&["--migrate-from"]).contains("requires an argument"));
    // Issue 27, finding 8: a target needs the secret the source was armed with.
    assert!(e(&["--migrate-from", "h:1"]).contains("needs the secret"));
    assert!(e(&["--migrate-from", "h:1", "--migrate-secret", "short"]).contains("at least 32"));
    assert!(from(&["--migrate-secret", S]).contains("once"));
    assert!(e(&[
        "--migrate-from",
        "h:1",
        "--migrate-secret-file",
        "/nonexistent/s"
    ])
    .contains("--migrate-secret-file /nonexistent/s"));
}

/// Issue 31: every long option of memcached 1.6.18 (its `longopts` table, typed here apart from
/// the parser's own table) is accepted and means what its short flag means; only those whose
/// feature remora refuses on purpose (`--enable-ssl`, `--enable-sasl`) are refused, with
/// memcached's wording for a build without them.
#[test]
fn every_memcached_long_option_is_accepted() {
    let auth = std::env::temp_dir().join(format!("remora-kv-auth-{}", std::process::id()));
    std::fs::write(&auth, "user:pass\n").unwrap();
    let auth = auth.to_string_lossy().into_owned();
    let with_value = [
        ("unix-mask", "700"),
        ("port", "11311"),
        ("unix-socket", "/tmp/remora-kv-test.sock"),
        ("udp-port", "0"),
        ("memory-limit", "128"),
        ("conn-limit", "100"),
        ("listen", "127.0.0.1"),
        ("user", "nobody"),
        ("pidfile", "/tmp/remora-kv-test.pid"),
        ("slab-growth-factor", "1.5"),
        ("slab-min-size", "64"),
        ("threads", "2"),
        ("max-reqs-per-event", "10"),
        ("listen-backlog", "64"),
        ("protocol", "ascii"),
        ("max-item-size", "2m"),
        ("auth-file", auth.as_str()),
        ("memory-file", "/dev/shm/remora-kv-test"),
        ("extended", "track_sizes"),
        ("napi-ids", "1"),
    ];
    let flags = [
        "enable-shutdown",
        "disable-evictions",
        "lock-memory",
        "help",
        "license",
        "version",
        "enable-coredumps",
        "verbose",
        "daemon",
        "enable-largepages",
        "disable-cas",
        "disable-flush-all",
        "disable-dumping",
        "disable-watch",
    ];
    for (name, v) in with_value {
        let c = Config::parse(&[format!("--{name}={v}")]);
        assert!(c.is_ok(), "--{name}={v}: {:?}", c.err());
        let c = Config::parse(&[format!("--{name}"), v.to_string()]);
        assert!(c.is_ok(), "--{name} {v}: {:?}", c.err());
    }
    for name in flags {
        let c = Config::parse(&[format!("--{name}")]);
        assert!(c.is_ok(), "--{name}: {:?}", c.err());
    }
    for (name, why) in [
        ("enable-ssl", "This server is not built with TLS support."),
        ("enable-sasl", "This server is not built with SASL support."),
    ] {
        assert_eq!(Config::parse(&[format!("--{name}")]).unwrap_err().0, why);
    }
    let _ = std::fs::remove_file(&auth);
    // Long and short spellings give the same settings.
    let long = Config::parse(&[
        "--port=11311",
        "--conn-limit=100",
        "--threads=2",
        "--max-item-size=2m",
        "--disable-cas",
        "--disable-watch",
        "--disable-dumping",
        "--disable-flush-all",
        "--enable-shutdown",
        "--verbose",
        "--daemon",
        "--enable-coredumps",
        "--pidfile=/tmp/x.pid",
        "--extended=track_sizes",
    ])
    .unwrap();
    let short = Config::parse(&[
        "-p",
        "11311",
        "-c",
        "100",
        "-t",
        "2",
        "-I",
        "2m",
        "-C",
        "-W",
        "-X",
        "-F",
        "-A",
        "-v",
        "-d",
        "-r",
        "-P",
        "/tmp/x.pid",
        "-o",
        "track_sizes",
    ])
    .unwrap();
    assert_eq!(
        format!("{:?}", long.settings),
        format!("{:?}", short.settings)
    );
    assert!(long.daemonize && long.enable_coredumps && !long.settings.dump_enabled);
    assert_eq!(long.pid_file.as_deref(), Some("/tmp/x.pid"));
}

/// Issue 31: `-V` prints exactly memcached's line, `-i` a license; each ends the parse where it
/// stands, as memcached exits there (a bad flag after it is not looked at).
#[test]
fn version_and_license_print_and_stop() {
    assert!(super::VERSION.starts_with(super::MEMCACHED_VERSION));
    for a in ["-V", "--version", "--vers"] {
        let c = Config::parse(&[a, "-t", "0"]).unwrap();
        assert_eq!(c.info.as_deref(), Some("memcached 1.6.18"), "{a}");
    }
    let c = Config::parse(&["-i"]).unwrap();
    assert!(c.info.unwrap().contains("Apache License"));
    assert_eq!(
        Config::parse(&["-t", "0", "-V"]).unwrap_err().0,
        "Number of threads must be greater than 0"
    );
}

/// Issue 31: `-N` takes a count (it was read as a flag without one), checked as memcached
/// checks it, and warns that it has no effect.
#[test]
fn napi_ids_are_checked_like_memcached() {
    let c = Config::parse(&["-N", "2", "-t", "2"]).unwrap();
    assert!(
        c.warnings.iter().any(|w| w.contains("-N")),
        "{:?}",
        c.warnings
    );
    assert_eq!(
        Config::parse(&["-N", "0"]).unwrap_err().0,
        "Maximum number of NAPI IDs must be greater than 0"
    );
    assert_eq!(
        Config::parse(&["-N", "4", "-t", "2"]).unwrap_err().0,
        "Number of napi_ids(4) cannot be greater than number of threads(2)"
    );
}

#[test]
fn metrics_and_log_format_are_remoras_options_beside_memcacheds() {
    let c = Config::parse(&[
        "-p",
        "11212",
        "--metrics",
        "127.0.0.1:9150",
        "-vv",
        "--log-format=json",
    ])
    .unwrap();
    assert_eq!(c.metrics, Some("127.0.0.1:9150".parse().unwrap()));
    assert_eq!(c.log_format, Some(LogFormat::Json));
    assert_eq!((c.settings.tcpport, c.verbose), (11212, 2));
    let c = Config::parse(&["--metrics=localhost:0"]).unwrap();
    assert!(c.metrics.unwrap().ip().is_loopback());
    let c = Config::parse(&["-p", "1"]).unwrap();
    assert_eq!((c.metrics, c.log_format), (None, None));
    let e = |a: &[&str]| Config::parse(a).unwrap_err().0;
    assert!(e(&["--metrics", "9150"]).contains("HOST:PORT"));
    assert_eq!(e(&["--metrics"]), "option '--metrics' requires an argument");
    assert_eq!(
        e(&["--log-format", "xml"]),
        "--log-format xml: text or json"
    );
    // Whole names only: memcached's prefix rule does not reach them, and memcached's own
    // prefixes mean what they meant.
    assert_eq!(e(&["--metr=1"]), "memcached: unrecognized option '--metr'");
    assert!(e(&["--me", "1"]).contains("ambiguous"));
}
