//! The command line split into flags as getopt_long splits memcached's: clustered short flags
//! (`-vvk`, `-t4`), long options (`--threads=4`, `--threads 4`, or any unambiguous prefix such as
//! `--thr=4`) mapped to the short flag they stand for, and remora's migration and service
//! options.

use super::migrate::MIGRATE_OPTS;
use super::service::SERVICE_OPTS;
use super::{err, ConfigError};

/// How a long option takes its value (getopt_long's `has_arg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    /// `no_argument`: `--name=value` is refused.
    No,
    /// `required_argument`: `--name=value` or `--name value`.
    Required,
    /// `optional_argument`: only `--name=value` carries one.
    Optional,
}

/// memcached 1.6.18's long options (its `longopts` table, in its order) and the short flag
/// each stands for.
const LONG: &[(&str, Arg, char)] = &[
    ("unix-mask", Arg::Required, 'a'),
    ("enable-shutdown", Arg::No, 'A'),
    ("enable-ssl", Arg::No, 'Z'),
    ("port", Arg::Required, 'p'),
    ("unix-socket", Arg::Required, 's'),
    ("udp-port", Arg::Required, 'U'),
    ("memory-limit", Arg::Required, 'm'),
    ("disable-evictions", Arg::No, 'M'),
    ("conn-limit", Arg::Required, 'c'),
    ("lock-memory", Arg::No, 'k'),
    ("help", Arg::No, 'h'),
    ("license", Arg::No, 'i'),
    ("version", Arg::No, 'V'),
    ("enable-coredumps", Arg::No, 'r'),
    ("verbose", Arg::Optional, 'v'),
    ("daemon", Arg::No, 'd'),
    ("listen", Arg::Required, 'l'),
    ("user", Arg::Required, 'u'),
    ("pidfile", Arg::Required, 'P'),
    ("slab-growth-factor", Arg::Required, 'f'),
    ("slab-min-size", Arg::Required, 'n'),
    ("threads", Arg::Required, 't'),
    ("enable-largepages", Arg::No, 'L'),
    ("max-reqs-per-event", Arg::Required, 'R'),
    ("disable-cas", Arg::No, 'C'),
    ("listen-backlog", Arg::Required, 'b'),
    ("protocol", Arg::Required, 'B'),
    ("max-item-size", Arg::Required, 'I'),
    ("enable-sasl", Arg::No, 'S'),
    ("disable-flush-all", Arg::No, 'F'),
    ("disable-dumping", Arg::No, 'X'),
    ("disable-watch", Arg::No, 'W'),
    ("auth-file", Arg::Required, 'Y'),
    ("memory-file", Arg::Required, 'e'),
    ("extended", Arg::Required, 'o'),
    ("napi-ids", Arg::Required, 'N'),
];

/// Whether short flag `c` takes a value (the letters followed by `:` in memcached's
/// `shortopts`).
fn takes_value(c: char) -> bool {
    "pUlsamctIbBRuoPfnDeYN".contains(c)
}

/// A command line split into memcached's flags and remora's own options.
#[derive(Debug, Default)]
pub(super) struct Split {
    /// Short flags in command-line order, long options mapped to theirs, with their values.
    pub flags: Vec<(char, Option<String>)>,
    /// `--migrate-…` options (remora's), with their values.
    pub migrate: Vec<(&'static str, String)>,
    /// `--metrics` and `--log-format` (remora's), with their values.
    pub service: Vec<(&'static str, String)>,
}

/// The long option `name` names: an exact name, else the only one it is a prefix of (as
/// getopt_long takes `--thr` for `--threads`); refusals in glibc's words.
fn long_option(name: &str) -> Result<(&'static str, Arg, char), ConfigError> {
    if let Some(&o) = LONG.iter().find(|(n, ..)| *n == name) {
        return Ok(o);
    }
    let matches: Vec<_> = LONG.iter().filter(|(n, ..)| n.starts_with(name)).collect();
    match matches.as_slice() {
        [&o] => Ok(o),
        [] => err(format!("memcached: unrecognized option '--{name}'")),
        many => {
            let names: Vec<String> = many.iter().map(|(n, ..)| format!("'--{n}'")).collect();
            err(format!(
                "memcached: option '--{name}' is ambiguous; possibilities: {}",
                names.join(" ")
            ))
        }
    }
}

/// Splits memcached-style arguments (without the program name).
pub(super) fn split<S: AsRef<str>>(args: &[S]) -> Result<Split, ConfigError> {
    let mut out = Split::default();
    let mut i = 0;
    // The next argument as a value, if there is one.
    let next = |i: &mut usize| {
        let v = args.get(*i).map(|a| a.as_ref().to_string());
        *i += usize::from(v.is_some());
        v
    };
    while i < args.len() {
        let a = args[i].as_ref();
        i += 1;
        if a == "--" {
            // getopt's end of options; memcached ignores what follows.
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, val) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let remora = MIGRATE_OPTS.iter().chain(&SERVICE_OPTS);
            if let Some(&opt) = remora.into_iter().find(|o| **o == name) {
                let Some(v) = val.or_else(|| next(&mut i)) else {
                    return err(format!("option '--{name}' requires an argument"));
                };
                if SERVICE_OPTS.contains(&opt) {
                    out.service.push((opt, v));
                } else {
                    out.migrate.push((opt, v));
                }
                continue;
            }
            let (full, arg, c) = long_option(name)?;
            let val = match (arg, val) {
                (Arg::No, Some(_)) => {
                    return err(format!(
                        "memcached: option '--{full}' doesn't allow an argument"
                    ))
                }
                (Arg::Required, None) => match next(&mut i) {
                    Some(v) => Some(v),
                    None => {
                        return err(format!("memcached: option '--{full}' requires an argument"))
                    }
                },
                (_, val) => val,
            };
            out.flags.push((c, val));
            continue;
        }
        let Some(cluster) = a.strip_prefix('-').filter(|c| !c.is_empty()) else {
            return err(format!("Illegal argument \"{a}\""));
        };
        let chars: Vec<char> = cluster.chars().collect();
        for (j, &c) in chars.iter().enumerate() {
            if !takes_value(c) {
                out.flags.push((c, None));
                continue;
            }
            // The rest of the cluster is the value (`-t4`), else the next argument.
            let rest: String = chars[j + 1..].iter().collect();
            let v = if !rest.is_empty() {
                rest
            } else if let Some(v) = next(&mut i) {
                v
            } else {
                return err(format!("memcached: option requires an argument -- '{c}'"));
            };
            out.flags.push((c, Some(v)));
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_long_option_maps_to_its_short_flag() {
        for &(name, arg, c) in LONG {
            let args: Vec<String> = match arg {
                Arg::Required => vec![format!("--{name}"), "1".into()],
                _ => vec![format!("--{name}")],
            };
            let s = split(&args).unwrap();
            assert_eq!(s.flags[0].0, c, "--{name}");
            assert_eq!(takes_value(c), arg == Arg::Required, "-{c} vs --{name}");
        }
    }

    #[test]
    fn prefixes_values_and_refusals_follow_getopt_long() {
        let s = split(&[
            "--thr=2",
            "--verb",
            "--verbose=3",
            "-vvt4",
            "--listen",
            "::1",
        ])
        .unwrap();
        let want = [
            ('t', Some("2")),
            ('v', None),
            ('v', Some("3")),
            ('v', None),
            ('v', None),
            ('t', Some("4")),
            ('l', Some("::1")),
        ];
        let got: Vec<_> = s.flags.iter().map(|(c, v)| (*c, v.as_deref())).collect();
        assert_eq!(got, want);
        let e = |a: &[&str]| split(a).unwrap_err().0;
        assert_eq!(
            e(&["--memory", "64"]),
            "memcached: option '--memory' is ambiguous; possibilities: '--memory-limit' \
             '--memory-file'"
        );
        assert_eq!(e(&["--bogus"]), "memcached: unrecognized option '--bogus'");
        assert_eq!(
            e(&["--daemon=1"]),
            "memcached: option '--daemon' doesn't allow an argument"
        );
        assert_eq!(
            e(&["--port"]),
            "memcached: option '--port' requires an argument"
        );
        assert_eq!(e(&["-p"]), "memcached: option requires an argument -- 'p'");
        assert_eq!(
            split(&["-N", "2"]).unwrap().flags,
            [('N', Some("2".into()))]
        );
    }
}
