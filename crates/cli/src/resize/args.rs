//! ImageMagick's spelling: single-dash long options rewritten before clap parses, and the
//! options turned into a [`Job`].
//!
//! clap reads `-resize` as the short options `-r -e -s …`, so [`im_args`] rewrites the known
//! single-dash options of `remora resize` (and only of that subcommand, only before a `--`) to
//! their double-dash form. Values are never rewritten: the argument after an option that takes
//! one is passed as it is (`-o -strip.jpg` keeps its file name).
use std::ffi::{OsStr, OsString};

use anyhow::{anyhow, bail, Context};
use remora_resize::{Filter, Format, Geometry, Job, ResampleEngine, Sampling};

use super::JobOpts;

/// ImageMagick options `remora resize` knows, and whether each takes a value.
const IM_OPTIONS: &[(&str, bool)] = &[
    ("resize", true),
    ("thumbnail", true),
    ("quality", true),
    ("filter", true),
    ("sampling-factor", true),
    ("strip", false),
    ("auto-orient", false),
    ("interlace", true),
    ("format", true),
];

/// remora's own options of `remora resize` that take a value (their value is not rewritten).
const VALUE_OPTIONS: &[&str] = &[
    "-o",
    "--output",
    "-d",
    "--out-dir",
    "--threads",
    "--server",
    "--in-flight",
    "--engine",
    "--max-job-memory",
];

/// The command line with `remora resize`'s ImageMagick-style single-dash options (`-resize
/// 50%`) turned into clap's double-dash form (`--resize 50%`); other subcommands' arguments,
/// `remora resize serve`'s and everything after `--` are left alone.
pub fn im_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    // The subcommand: the first argument after the program that is not a (global, valueless)
    // option such as -v.
    let Some(sub) = args
        .iter()
        .skip(1)
        .position(|a| !a.to_string_lossy().starts_with('-'))
        .map(|i| i + 1)
    else {
        return args;
    };
    if args[sub] != "resize" || args.get(sub + 1).is_some_and(|a| a == "serve") {
        return args;
    }
    let mut takes_value = false;
    for a in args.iter_mut().skip(sub + 1) {
        if std::mem::take(&mut takes_value) {
            continue;
        }
        let s = a.to_string_lossy().into_owned();
        if s == "--" {
            break;
        }
        if let Some((name, value)) = s
            .strip_prefix('-')
            .filter(|n| !n.starts_with('-'))
            .and_then(|n| IM_OPTIONS.iter().find(|(o, _)| *o == n))
        {
            *a = OsString::from(format!("--{name}"));
            takes_value = *value;
        } else if let Some(name) = s.strip_prefix("--") {
            takes_value = IM_OPTIONS.iter().any(|(o, v)| *v && *o == name);
        }
        takes_value |= VALUE_OPTIONS.contains(&s.as_str());
    }
    args
}

impl JobOpts {
    /// The resize job these options describe.
    pub fn job(&self) -> anyhow::Result<Job> {
        let (text, thumbnail) = match (&self.resize, &self.thumbnail) {
            (Some(g), None) => (g, false),
            (None, Some(g)) => (g, true),
            _ => bail!("give one of -resize GEOMETRY or -thumbnail GEOMETRY"),
        };
        let geometry =
            Geometry::parse(text).map_err(|e| anyhow!("-{}: {e}", option_name(thumbnail)))?;
        let mut job = Job::new(geometry);
        job.thumbnail = thumbnail;
        job.quality = self.quality.as_deref().map(parse_quality).transpose()?;
        job.filter = self
            .filter
            .as_deref()
            .map(|f| f.parse::<Filter>())
            .transpose()
            .context("-filter")?;
        job.sampling = self
            .sampling_factor
            .as_deref()
            .map(|s| s.parse::<Sampling>())
            .transpose()
            .context("-sampling-factor")?;
        job.strip = self.strip;
        job.auto_orient = self.auto_orient;
        job.progressive = match self.interlace.as_deref().map(str::to_ascii_lowercase) {
            None => false,
            Some(v) if v == "none" => false,
            Some(v) if matches!(v.as_str(), "plane" | "line" | "jpeg" | "partition") => true,
            Some(v) => bail!("-interlace {v:?}: none, plane, line or jpeg expected"),
        };
        job.limits.max_job_memory = self.max_job_memory;
        job.engine = self
            .engine
            .as_deref()
            .map(|e| e.parse::<ResampleEngine>())
            .transpose()
            .context("--engine")?
            .unwrap_or_default();
        Ok(job)
    }

    /// `-format`, when given.
    pub fn format(&self) -> anyhow::Result<Option<Format>> {
        self.format
            .as_deref()
            .map(|f| {
                format_named(f).ok_or_else(|| anyhow!("-format {f:?}: jpg, jpeg or png expected"))
            })
            .transpose()
    }

    /// The geometry string as given (for the service's client).
    pub fn geometry_text(&self) -> &str {
        self.resize
            .as_deref()
            .or(self.thumbnail.as_deref())
            .unwrap_or("")
    }

    /// The options the service's client cannot pass on (each is refused with `--server`).
    pub fn local_only(&self) -> Vec<&'static str> {
        [
            (self.thumbnail.is_some(), "-thumbnail"),
            (self.sampling_factor.is_some(), "-sampling-factor"),
            (self.interlace.is_some(), "-interlace"),
            // The service resamples with its own engine.
            (self.engine.is_some(), "--engine"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

fn option_name(thumbnail: bool) -> &'static str {
    if thumbnail {
        "thumbnail"
    } else {
        "resize"
    }
}

fn parse_quality(q: &str) -> anyhow::Result<u8> {
    match q.trim().parse::<u8>() {
        Ok(v @ 1..=100) => Ok(v),
        _ => bail!("-quality {q:?}: a whole number from 1 to 100 expected"),
    }
}

/// A byte count: `4096`, `64K`, `512M`, `2G` (binary multiples; `KiB`, `MiB`, `GiB` and `B`
/// spellings too).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &lower[digits.len()..];
    let mult: u64 = match unit {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "{s:?}: a size such as 4096, 64K, 512M or 2G expected"
            ))
        }
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?}: a size such as 4096, 64K, 512M or 2G expected"))
}

/// A duration: `10s`, `500ms`, `2m`, `1.5s`, or plain seconds (`10`).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let bad = || format!("{s:?}: a duration such as 10s, 500ms or 2m expected");
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t.as_str(), 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let secs = v * scale;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// As [`parse_duration`], more than zero.
pub fn parse_positive_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?}: more than zero expected"));
    }
    Ok(d)
}

/// A format by name or file extension: jpg, jpeg, png (any case).
pub fn format_named(name: &str) -> Option<Format> {
    match name.to_ascii_lowercase().as_str() {
        "jpg" | "jpeg" => Some(Format::Jpeg),
        "png" => Some(Format::Png),
        _ => None,
    }
}

/// The format a path's extension names.
pub fn format_of(path: &std::path::Path) -> Option<Format> {
    path.extension()
        .and_then(OsStr::to_str)
        .and_then(format_named)
}

#[cfg(test)]
mod tests {
    use super::{im_args, parse_bytes, parse_duration};
    use std::time::Duration;

    #[test]
    fn sizes_and_durations_read_as_written() {
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("2g"), Ok(2 << 30));
        for bad in ["", "M", "-1M", "1.5G", "12X", "99999999999999G"] {
            assert!(parse_bytes(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["", "s", "-1s", "1h", "nan"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
    use std::ffi::OsString;

    fn rewrite(line: &str) -> String {
        let v: Vec<OsString> = line.split(' ').map(OsString::from).collect();
        im_args(v)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn single_dash_options_of_resize_become_double_dash() {
        assert_eq!(
            rewrite("remora -v resize a.jpg -resize 50% -strip -quality 80 -o b.jpg"),
            "remora -v resize a.jpg --resize 50% --strip --quality 80 -o b.jpg"
        );
        assert_eq!(
            rewrite("remora resize a.jpg --resize 10x10 -sampling-factor 2x2 -auto-orient -d o"),
            "remora resize a.jpg --resize 10x10 --sampling-factor 2x2 --auto-orient -d o"
        );
    }

    #[test]
    fn values_other_subcommands_and_after_double_dash_are_left_alone() {
        assert_eq!(
            rewrite("remora resize a.jpg -resize 5 -o -strip"),
            "remora resize a.jpg --resize 5 -o -strip"
        );
        assert_eq!(
            rewrite("remora resize -- -resize -resize 5"),
            "remora resize -- -resize -resize 5"
        );
        assert_eq!(rewrite("remora match -strip"), "remora match -strip");
        assert_eq!(
            rewrite("remora resize serve -quality 1"),
            "remora resize serve -quality 1"
        );
        assert_eq!(
            rewrite("remora resize a -format -strip"),
            "remora resize a --format -strip"
        );
    }
}
