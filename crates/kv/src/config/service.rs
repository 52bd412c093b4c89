//! remora's own long options for running the service: `--metrics HOST:PORT` (a Prometheus
//! `/metrics` listener) and `--log-format text|json`. memcached has neither name, nor a long
//! option they are a prefix of, so they never change what a memcached command line means.

use std::net::{SocketAddr, ToSocketAddrs};

use super::{err, ConfigError};

/// remora's service options (matched by their whole name only, unlike memcached's, which
/// getopt_long also takes by prefix).
pub(super) const SERVICE_OPTS: [&str; 3] = ["metrics", "log-format", "one-sided"];

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One line of text per event (the default).
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// What the service options ask for.
#[derive(Debug, Default)]
pub(super) struct ServiceOptions {
    /// `--metrics`.
    pub metrics: Option<SocketAddr>,
    /// `--log-format`.
    pub log: Option<LogFormat>,
    /// `--one-sided`.
    pub one_sided: Option<SocketAddr>,
}

/// What the service options ask for: `--metrics`, `--log-format` and `--one-sided`; the last
/// of each wins.
pub(super) fn service_options(opts: &[(&str, String)]) -> Result<ServiceOptions, ConfigError> {
    let (mut metrics, mut log, mut one_sided) = (None, None, None);
    for (name, v) in opts {
        match *name {
            "metrics" => {
                let addr = v.to_socket_addrs().ok().and_then(|mut a| a.next());
                let Some(addr) = addr else {
                    return err(format!(
                        "--metrics {v}: expected HOST:PORT to serve /metrics on \
                         (memcached_exporter's port is 9150: --metrics 127.0.0.1:9150)"
                    ));
                };
                metrics = Some(addr);
            }
            "one-sided" => {
                let addr = v.to_socket_addrs().ok().and_then(|mut a| a.next());
                let Some(addr) = addr else {
                    return err(format!(
                        "--one-sided {v}: expected HOST:PORT for the fabric listener that grants \
                         one-sided readers the arena (--one-sided 127.0.0.1:7471)"
                    ));
                };
                one_sided = Some(addr);
            }
            "log-format" => {
                log = Some(match v.as_str() {
                    "text" => LogFormat::Text,
                    "json" => LogFormat::Json,
                    _ => return err(format!("--log-format {v}: text or json")),
                })
            }
            _ => {}
        }
    }
    Ok(ServiceOptions {
        metrics,
        log,
        one_sided,
    })
}
