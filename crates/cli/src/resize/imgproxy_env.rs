//! imgproxy's environment variables, read by `remora resize serve` where it has the matching
//! setting (imgproxy's `docs/configuration/options.mdx` and `config.go`), so that an imgproxy
//! deployment's environment configures it. A command-line flag wins over its variable.
//!
//! Units are imgproxy's: seconds for timeouts, megapixels for `IMGPROXY_MAX_SRC_RESOLUTION`,
//! bytes for `IMGPROXY_MAX_SRC_FILE_SIZE`, Go's `[host]:port` for binds. An empty variable is
//! unset (as imgproxy reads it). Unlike imgproxy, which ignores a number it cannot parse, a bad
//! value stops the service with an error naming the variable. Where imgproxy's `0` means "no
//! limit" (`IMGPROXY_MAX_CLIENTS`, `IMGPROXY_MAX_SRC_FILE_SIZE`, `IMGPROXY_REQUESTS_QUEUE_SIZE`)
//! remora keeps its own bound and warns: it does not serve unbounded.
use std::ffi::OsString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};

/// What the environment sets; `None` where it says nothing.
#[derive(Debug, Default, PartialEq)]
pub struct FromEnv {
    /// `IMGPROXY_BIND`.
    pub listen: Option<SocketAddr>,
    /// `IMGPROXY_LOCAL_FILESYSTEM_ROOT`.
    pub root: Option<PathBuf>,
    /// `IMGPROXY_WORKERS`, else its older name `IMGPROXY_CONCURRENCY`.
    pub workers: Option<u32>,
    /// `IMGPROXY_REQUESTS_QUEUE_SIZE` (more than 0).
    pub queue: Option<u32>,
    /// `IMGPROXY_MAX_SRC_FILE_SIZE` (more than 0), bytes.
    pub max_bytes: Option<u64>,
    /// `IMGPROXY_MAX_SRC_RESOLUTION`, megapixels turned into pixels.
    pub max_pixels: Option<u64>,
    /// `IMGPROXY_TIMEOUT`, else its older name `IMGPROXY_WRITE_TIMEOUT`.
    pub job_timeout: Option<Duration>,
    /// `IMGPROXY_READ_REQUEST_TIMEOUT`, else its older name `IMGPROXY_READ_TIMEOUT`: the whole
    /// request's reading, so both the head's and the body's timeout.
    pub read_timeout: Option<Duration>,
    /// `IMGPROXY_MAX_CLIENTS` (more than 0).
    pub max_connections: Option<u32>,
    /// `IMGPROXY_KEY` and `IMGPROXY_SALT`, hex (decoded and checked where the flags are).
    pub key_salt: Option<(String, String)>,
    /// `IMGPROXY_QUALITY`.
    pub quality: Option<u8>,
    /// `IMGPROXY_PROMETHEUS_BIND`.
    pub metrics: Option<SocketAddr>,
    /// What was set but not taken, one line each.
    pub warnings: Vec<String>,
}

/// The variables through `get` (`std::env::var_os` in the service, a map in tests).
struct Vars<F>(F);

impl<F: Fn(&str) -> Option<OsString>> Vars<F> {
    /// A variable's text; empty is unset.
    fn text(&self, name: &str) -> Result<Option<String>> {
        match (self.0)(name) {
            None => Ok(None),
            Some(v) if v.is_empty() => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|_| anyhow!("{name}: not valid UTF-8")),
        }
    }

    /// The first of `names` that is set, with its name.
    fn first(&self, names: &[&'static str]) -> Result<Option<(&'static str, String)>> {
        for &n in names {
            if let Some(v) = self.text(n)? {
                return Ok(Some((n, v)));
            }
        }
        Ok(None)
    }

    /// A whole number at least `min`, as Go's `strconv.Atoi` reads it (an optional sign, then
    /// digits).
    fn int(&self, names: &[&'static str], min: i64, what: &str) -> Result<Option<(&str, i64)>> {
        let Some((name, v)) = self.first(names)? else {
            return Ok(None);
        };
        match v.trim().parse::<i64>() {
            Ok(n) if n >= min => Ok(Some((name, n))),
            _ => bail!("{name}={v:?}: {what} expected"),
        }
    }

    /// Whole seconds, more than 0.
    fn seconds(&self, names: &[&'static str]) -> Result<Option<Duration>> {
        let n = self.int(names, 1, "whole seconds, more than 0")?;
        Ok(n.map(|(_, s)| Duration::from_secs(s as u64)))
    }

    /// A Go-style bind address.
    fn bind(&self, name: &'static str) -> Result<Option<SocketAddr>> {
        self.text(name)?.map(|v| bind(name, &v)).transpose()
    }
}

/// `[host]:port` as Go's `net.Listen` takes it: no host is every interface (`:8080`).
fn bind(name: &str, v: &str) -> Result<SocketAddr> {
    let bad = || {
        anyhow!("{name}={v:?}: an address such as :8080, 127.0.0.1:8080 or [::1]:8080 expected (remora listens on TCP only)")
    };
    let v = v.trim();
    if let Some(port) = v.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| bad())?;
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Ok(a) = v.parse() {
        return Ok(a);
    }
    v.to_socket_addrs()
        .map_err(|e| anyhow!("{name}={v:?}: {e}"))?
        .next()
        .ok_or_else(bad)
}

/// A positive value of an imgproxy count whose `0` means "no limit": `None` with a warning
/// for 0.
fn bounded(n: Option<(&str, i64)>, keeps: &str, warnings: &mut Vec<String>) -> Option<u64> {
    match n {
        Some((name, 0)) => {
            warnings.push(format!(
                "{name}=0 (no limit in imgproxy) ignored: remora keeps {keeps}"
            ));
            None
        }
        Some((_, n)) => Some(n as u64),
        None => None,
    }
}

/// Reads imgproxy's variables through `get`.
pub fn read(get: impl Fn(&str) -> Option<OsString>) -> Result<FromEnv> {
    let vars = Vars(get);
    let mut env = FromEnv {
        listen: vars.bind("IMGPROXY_BIND")?,
        root: vars
            .text("IMGPROXY_LOCAL_FILESYSTEM_ROOT")?
            .map(PathBuf::from),
        job_timeout: vars.seconds(&["IMGPROXY_TIMEOUT", "IMGPROXY_WRITE_TIMEOUT"])?,
        read_timeout: vars.seconds(&["IMGPROXY_READ_REQUEST_TIMEOUT", "IMGPROXY_READ_TIMEOUT"])?,
        metrics: vars.bind("IMGPROXY_PROMETHEUS_BIND")?,
        ..FromEnv::default()
    };
    let count = "a whole number, more than 0";
    let limit = "a whole number, 0 or more";
    let u32_max = i64::from(u32::MAX);
    let workers = vars.int(&["IMGPROXY_WORKERS", "IMGPROXY_CONCURRENCY"], 1, count)?;
    env.workers = workers.map(|(_, n)| n.min(u32_max) as u32);
    let queue = vars.int(&["IMGPROXY_REQUESTS_QUEUE_SIZE"], 0, limit)?;
    let keeps_queue = "a bounded queue (--queue, 4 per worker by default)";
    env.queue =
        bounded(queue, keeps_queue, &mut env.warnings).map(|n| n.min(u32::MAX as u64) as u32);
    let clients = vars.int(&["IMGPROXY_MAX_CLIENTS"], 0, limit)?;
    let keeps_clients = "its connection cap (--max-connections, 1024 by default)";
    env.max_connections =
        bounded(clients, keeps_clients, &mut env.warnings).map(|n| n.min(u32::MAX as u64) as u32);
    let size = vars.int(&["IMGPROXY_MAX_SRC_FILE_SIZE"], 0, "bytes, 0 or more")?;
    let keeps_size = "its input size limit (--max-bytes, 64 MiB by default)";
    env.max_bytes = bounded(size, keeps_size, &mut env.warnings);
    if let Some((name, v)) = vars.first(&["IMGPROXY_MAX_SRC_RESOLUTION"])? {
        // imgproxy: megapixels, a float, times a million, truncated.
        let pixels = v
            .trim()
            .parse::<f64>()
            .ok()
            .map(|mp| (mp * 1e6).floor())
            .filter(|p| p.is_finite() && *p >= 1.0 && *p <= u64::MAX as f64)
            .ok_or_else(|| {
                anyhow!("{name}={v:?}: megapixels, more than 0, expected (50 or 16.8)")
            })?;
        env.max_pixels = Some(pixels as u64);
    }
    if let Some((name, q)) = vars.int(&["IMGPROXY_QUALITY"], 1, "a quality from 1 to 100")? {
        if q > 100 {
            bail!("{name}={q}: a quality from 1 to 100 expected");
        }
        env.quality = Some(q as u8);
    }
    env.key_salt = key_salt(&vars)?;
    Ok(env)
}

/// `IMGPROXY_KEY` and `IMGPROXY_SALT`: both or neither, one pair (imgproxy's comma-separated
/// list of pairs for key rotation is not supported).
fn key_salt<F: Fn(&str) -> Option<OsString>>(vars: &Vars<F>) -> Result<Option<(String, String)>> {
    let (key, salt) = (vars.text("IMGPROXY_KEY")?, vars.text("IMGPROXY_SALT")?);
    for (name, v) in [("IMGPROXY_KEY", &key), ("IMGPROXY_SALT", &salt)] {
        if v.as_deref().is_some_and(|v| v.contains(',')) {
            bail!("{name}: several comma-separated keys or salts are not supported; give one");
        }
    }
    match (key, salt) {
        (Some(k), Some(s)) => Ok(Some((k, s))),
        (None, None) => Ok(None),
        (Some(_), None) => {
            bail!("IMGPROXY_KEY is set but IMGPROXY_SALT is not: URLs are signed with both")
        }
        (None, Some(_)) => {
            bail!("IMGPROXY_SALT is set but IMGPROXY_KEY is not: URLs are signed with both")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> Result<FromEnv> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        read(|n| map.get(n).cloned())
    }

    fn err(vars: &[(&str, &str)]) -> String {
        format!("{:#}", env(vars).unwrap_err())
    }

    #[test]
    fn nothing_set_reads_nothing() {
        assert_eq!(env(&[]).unwrap(), FromEnv::default());
        assert_eq!(
            env(&[("IMGPROXY_WORKERS", "")]).unwrap(),
            FromEnv::default()
        );
    }

    #[test]
    fn values_are_read_in_imgproxys_units() {
        let e = env(&[
            ("IMGPROXY_BIND", ":9090"),
            ("IMGPROXY_PROMETHEUS_BIND", "127.0.0.1:9091"),
            ("IMGPROXY_WORKERS", "3"),
            ("IMGPROXY_CONCURRENCY", "7"),
            ("IMGPROXY_REQUESTS_QUEUE_SIZE", "9"),
            ("IMGPROXY_MAX_SRC_RESOLUTION", "16.8"),
            ("IMGPROXY_MAX_SRC_FILE_SIZE", "1000"),
            ("IMGPROXY_TIMEOUT", "5"),
            ("IMGPROXY_READ_TIMEOUT", "4"),
            ("IMGPROXY_MAX_CLIENTS", "10"),
            ("IMGPROXY_KEY", "aa"),
            ("IMGPROXY_SALT", "bb"),
            ("IMGPROXY_QUALITY", "70"),
            ("IMGPROXY_LOCAL_FILESYSTEM_ROOT", "/srv/images"),
        ])
        .unwrap();
        assert_eq!(env_listen(&e), "0.0.0.0:9090");
        assert_eq!(e.metrics, Some("127.0.0.1:9091".parse().unwrap()));
        // IMGPROXY_WORKERS wins over its older name.
        assert_eq!((e.workers, e.queue), (Some(3), Some(9)));
        assert_eq!(e.max_pixels, Some(16_800_000));
        assert_eq!(e.max_bytes, Some(1000));
        assert_eq!(e.job_timeout, Some(Duration::from_secs(5)));
        assert_eq!(e.read_timeout, Some(Duration::from_secs(4)));
        assert_eq!(e.max_connections, Some(10));
        assert_eq!(e.key_salt, Some(("aa".into(), "bb".into())));
        assert_eq!(e.quality, Some(70));
        assert_eq!(e.root, Some(PathBuf::from("/srv/images")));
        assert!(e.warnings.is_empty());
        let e = env(&[("IMGPROXY_CONCURRENCY", "2"), ("IMGPROXY_BIND", "[::1]:80")]).unwrap();
        assert_eq!(
            (e.workers, env_listen(&e)),
            (Some(2), "[::1]:80".to_string())
        );
    }

    fn env_listen(e: &FromEnv) -> String {
        e.listen.unwrap().to_string()
    }

    #[test]
    fn zero_for_no_limit_keeps_remoras_bound_with_a_warning() {
        let e = env(&[
            ("IMGPROXY_MAX_CLIENTS", "0"),
            ("IMGPROXY_MAX_SRC_FILE_SIZE", "0"),
            ("IMGPROXY_REQUESTS_QUEUE_SIZE", "0"),
        ])
        .unwrap();
        assert_eq!(
            (e.max_connections, e.max_bytes, e.queue),
            (None, None, None)
        );
        assert_eq!(e.warnings.len(), 3, "{:?}", e.warnings);
        assert!(e.warnings[0].starts_with("IMGPROXY_REQUESTS_QUEUE_SIZE=0"));
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (name, v) in [
            ("IMGPROXY_WORKERS", "many"),
            ("IMGPROXY_WORKERS", "0"),
            ("IMGPROXY_CONCURRENCY", "-1"),
            ("IMGPROXY_TIMEOUT", "10s"),
            ("IMGPROXY_READ_REQUEST_TIMEOUT", "0"),
            ("IMGPROXY_MAX_SRC_RESOLUTION", "0"),
            ("IMGPROXY_MAX_SRC_RESOLUTION", "big"),
            ("IMGPROXY_MAX_SRC_FILE_SIZE", "-5"),
            ("IMGPROXY_MAX_CLIENTS", "1.5"),
            ("IMGPROXY_QUALITY", "101"),
            ("IMGPROXY_BIND", "/tmp/imgproxy.sock"),
            ("IMGPROXY_BIND", ":http"),
            ("IMGPROXY_PROMETHEUS_BIND", "nowhere"),
        ] {
            let e = err(&[(name, v)]);
            assert!(e.contains(name), "{name}={v}: {e}");
        }
        assert!(err(&[("IMGPROXY_KEY", "aa")]).contains("IMGPROXY_SALT is not"));
        assert!(err(&[("IMGPROXY_SALT", "aa")]).contains("IMGPROXY_KEY is not"));
        let e = err(&[("IMGPROXY_KEY", "aa,bb"), ("IMGPROXY_SALT", "cc,dd")]);
        assert!(e.contains("IMGPROXY_KEY: several"), "{e}");
    }
}
