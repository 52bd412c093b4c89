//! The `-h` and `-i` texts. The `-h` text must not name the features memcached's test suite
//! looks for in it to decide what to test (SASL, TLS, extstore, the proxy): remora has none.

use super::suboptions::{NO_EFFECT, REPORTED};

/// The `-i` text: what runs, and under which license.
pub fn license() -> String {
    format!(
        "remora {} (kv serve: memcached {}'s protocols and command line)\n\n\
         Licensed under the Apache License, Version 2.0:\n\
         https://www.apache.org/licenses/LICENSE-2.0",
        env!("CARGO_PKG_VERSION"),
        super::MEMCACHED_VERSION
    )
}

/// The `-h` text.
pub fn usage() -> String {
    let mut u = "remora kv serve: memcached-compatible cache\n\
     -p, --port=<num>          TCP port to listen on (default: 11211)\n\
     -U, --udp-port=<num>      UDP port to listen on (default: 0, off)\n\
     -s, --unix-socket=<file>  UNIX socket to listen on (disables network support)\n\
     -a, --unix-mask=<mask>    access mask for UNIX socket, in octal (default: 700)\n\
     -l, --listen=<addr>       interface to listen on (default: INADDR_ANY)\n\
     -m, --memory-limit=<num>  item memory in megabytes (default: 64)\n\
     -c, --conn-limit=<num>    max simultaneous connections (default: 1024)\n\
     -t, --threads=<num>       number of threads to use (default: 4)\n\
     -I, --max-item-size=<num> adjusts max item size (default: 1m, min: 1k, max: 1024m)\n\
     -M, --disable-evictions   return error on memory exhausted instead of evicting\n\
     -C, --disable-cas         disable use of CAS\n\
     -b, --listen-backlog=<num> set the backlog queue limit (default: 1024)\n\
     -B, --protocol=<name>     protocol - one of ascii, binary, or auto (default: auto)\n\
     -R, --max-reqs-per-event  maximum number of requests per event (default: 20)\n\
     -F, --disable-flush-all   disable flush_all command\n\
     -A, --enable-shutdown     enable ascii \"shutdown\" command\n\
     -Y, --auth-file=<file>    (EXPERIMENTAL) enable ASCII protocol authentication. format:\n\
                               user:pass\\nuser2:pass2\\n\n\
     -e, --memory-file=<file>  keep items in this file (tmpfs or hugetlbfs); SIGUSR1 stops\n\
                               gracefully and the next start with the same settings\n\
                               serves every unexpired item again (warm restart)\n\
     -u, --user=<user>         assume identity of <username> (only when run as root)\n\
     -v, --verbose             verbose (print errors/warnings while in event loop)\n\
     -o, --extended            comma separated list of extended options (below)\n\
     -d, --daemon              run as a daemon: returns (exit 0) once the server listens and\n\
                               -P is written, or with the server's exit code when it does\n\
                               not start; stdin/out/err on /dev/null unless -v\n\
     -r, --enable-coredumps    maximize core file limit (with -d: keep the working directory)\n\
     -P, --pidfile=<file>      save PID in <file> (removed at exit when run with -d)\n\
     -k, --lock-memory         lock down all paged memory\n\
     -f, --slab-growth-factor=<num> chunk size growth factor (default: 1.25)\n\
     -n, --slab-min-size=<bytes> min space used for key+value+flags (default: 48)\n\
     -D <char>                 delimiter between key prefixes and IDs in stats detail\n\
                               (giving it turns stats detail on)\n\
     -W, --disable-watch       disable watch commands (live logging)\n\
     -X, --disable-dumping     disable stats cachedump and lru_crawler metadump\n\
     -L, --enable-largepages   accepted with a warning, no effect (use -e on hugetlbfs)\n\
     -N, --napi-ids=<num>      accepted with a warning, no effect (connections go to the\n\
                               worker threads round-robin)\n\
     -S, -Z                    refused: this build has no such authentication or encryption\n\
     --metrics=<host:port>     (remora) Prometheus metrics at http://host:port/metrics,\n\
                               under memcached_exporter's names\n\
     --log-format=text|json    (remora) log lines as text or as JSON objects\n\
     --one-sided=<host:port>   (remora) the arena remotely readable: a fabric listener\n\
                               there grants one-sided readers (remora_kv::onesided)\n\
     -h, --help                print this help and exit\n\
     -i, --license             print the license and exit\n\
     -V, --version             print memcached's version line and exit\n\
     long options may be shortened to any unambiguous prefix (--thr=4)\n"
        .to_string();
    u.push_str(
        r#"-vv                       very verbose: also print, as memcached does,
                          connections (<fd new auto-negotiating client connection,
                          fd: Client using the ascii protocol, <fd connection closed.),
                          each text command (<fd get foo) and the text replies
                          memcached prints (>fd STORED, >fd NOREPLY STORED,
                          >fd sending key foo, >fd END); not printed: replies to meta
                          commands other than mn, multi-line replies such as stats,
                          and binary-protocol requests
-o suboptions:
                          io=epoll|uring       worker I/O loop (default: epoll; uring
                                               falls back to epoll without a ring)
                          item_size_max=<num>  same as -I (up to 1 GiB)
                          slab_chunk_max=<num> largest chunk (default: half the 1 MiB
                                               page); larger items are chunked
                          track_sizes          keep the item size histogram (stats sizes)
                          idle_timeout=<secs>  close connections silent for longer
                                               (counted in stats idle_kicks)
                          read_buf_mem_limit=<mb> per-thread share bounds buffered requests
                                               and replies (SERVER_ERROR out of memory,
                                               stats response_obj_oom)
                          storage=arena|heap   where items live (default: arena, one
                                               mapping with memcached's slab classes)
                          memory_file=<path>   same as -e: the arena in a file that a
                                               graceful stop (SIGUSR1) leaves restorable
                          hashpower=<n>        log2 of the arena's hash buckets at start
                                               (default 16; doubles past 1.5 items each)
                          slab_reassign, no_slab_reassign  page moves (slabs reassign)
                          slab_automove[=0|1|2]  move pages by themselves (default 1)
                          slab_automove_window=<n>, slab_automove_ratio=<r>
                                               the automover's window and age ratio
                          accepted with a warning, no effect:
"#,
    );
    let mut line = String::new();
    let names: Vec<&str> = REPORTED.iter().chain(NO_EFFECT).copied().collect();
    for (i, n) in names.iter().enumerate() {
        line.push_str(n);
        line.push_str(if i + 1 < names.len() { ", " } else { "" });
        if line.len() > 55 || i + 1 == names.len() {
            u.push_str(&format!("{:26}{}\n", "", line.trim_end()));
            line.clear();
        }
    }
    u.push_str(&format!(
        "{:26}other suboptions: ignored with a warning\n",
        ""
    ));
    u
}
