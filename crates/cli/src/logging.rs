//! Where log lines go and how they look: stderr, as text (coloured only on a terminal) or as one
//! JSON object per line (`--log-format json`) for log collectors.
use clap::ValueEnum;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// One line of text per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's
    /// fields at the top level.
    Json,
}

impl From<remora_kv::config::LogFormat> for LogFormat {
    fn from(f: remora_kv::config::LogFormat) -> LogFormat {
        match f {
            remora_kv::config::LogFormat::Text => LogFormat::Text,
            remora_kv::config::LogFormat::Json => LogFormat::Json,
        }
    }
}

/// How to set logging up, decided from the command line.
#[derive(Debug, Clone, Copy)]
pub struct Logging {
    /// `-v` count.
    pub verbose: u8,
    /// `--log-format`.
    pub format: LogFormat,
}

impl Logging {
    /// Installs the global subscriber (once per process; later calls do nothing). `RUST_LOG`
    /// overrides the level `-v` sets.
    pub fn init(self) {
        use std::io::IsTerminal;
        use tracing_subscriber::EnvFilter;
        let default = match self.verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        };
        // wgpu warns at every device opening that host-visible storage buffers are slow on a
        // discrete GPU: remora asks for them on purpose (results written where the host reads
        // them, only the bytes a frame produced), so that notice stays out of the default log.
        let default = format!("{default},wgpu_core::instance=error");
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
        let fmt = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        let _ = match self.format {
            LogFormat::Text => fmt
                .with_ansi(use_colour(
                    std::io::stderr().is_terminal(),
                    std::env::var_os("NO_COLOR"),
                ))
                .try_init(),
            LogFormat::Json => fmt.json().flatten_event(true).with_ansi(false).try_init(),
        };
    }
}

/// Whether log lines may carry ANSI colours (<https://no-color.org/>: `NO_COLOR` set and not
/// empty turns them off).
fn use_colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::use_colour;
    use std::ffi::OsString;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some(OsString::new())));
        assert!(!use_colour(true, Some(OsString::from("1"))));
        assert!(!use_colour(false, None));
    }
}
