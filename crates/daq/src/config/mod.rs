//! The acquisition configuration: one TOML file describes the detector, the data the emulator
//! streams, the transport, the receivers, the pipeline and the output file.
//!
//! Unknown keys and wrong types are refused by the parser with the key, line and column;
//! [`Config::validate`] checks values and names the key in every message
//! (`acquisition.frames: must be at least 1`).
//!
//! `sections` holds the tables of the file (`[detector]` … `[output]`) with their defaults,
//! `validate` the checks of their values.
//!
//! ```
//! let cfg = remora_daq::config::Config::parse(r#"
//!     [detector]
//!     modules = 2
//!     [acquisition]
//!     frames = 10
//! "#).unwrap();
//! assert_eq!(cfg.acquisition.bunch, 4);
//! ```
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::access::{Access, Estimate};
use crate::ring::Roi;
use crate::{DaqError, Result};

mod sections;
mod validate;

pub use sections::*;

fn err(key: &str, msg: impl std::fmt::Display) -> DaqError {
    DaqError::Config(format!("{key}: {msg}"))
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The detector.
    pub detector: DetectorCfg,
    /// What the emulator streams.
    #[serde(default)]
    pub source: SourceCfg,
    /// Frames, rate, stacks, dark frames.
    pub acquisition: AcquisitionCfg,
    /// How frames travel.
    #[serde(default)]
    pub transport: TransportCfg,
    /// Emulator settings.
    #[serde(default)]
    pub emulator: EmulatorCfg,
    /// Receivers (one by default).
    #[serde(default = "one_receiver")]
    pub receivers: Vec<ReceiverCfg>,
    /// What every receiver does with frames it cannot process at once.
    #[serde(default)]
    pub receiver: ReceiverSettings,
    /// Processing.
    #[serde(default)]
    pub pipeline: PipelineCfg,
    /// Output file.
    #[serde(default)]
    pub output: OutputCfg,
    /// What a run of this configuration may touch on this host (not part of the file: set by
    /// whoever loads it; the default allows any path and sets no memory budget).
    #[serde(skip)]
    pub access: Access,
}

fn one_receiver() -> Vec<ReceiverCfg> {
    vec![ReceiverCfg::default()]
}

/// The dotted key assigned on line `line` (1-based), with its table: `transport.kind`.
fn key_at(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let l = lines.get(line.checked_sub(1)?)?;
    let key = l.split_once('=')?.0.trim();
    if key.is_empty() || key.starts_with('[') {
        return None;
    }
    let table = lines[..line - 1]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_string(),
    })
}

impl Config {
    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Config> {
        Self::parse_text(text).map_err(DaqError::Config)
    }

    /// Parses and validates the same schema as JSON; errors name the key
    /// (`acquisition.frames: invalid type: string "x", expected u64`).
    pub fn parse_json(text: &str) -> Result<Config> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let cfg: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let msg = inner.to_string();
            // serde_json appends "at line L column C"; keep it, the key goes first.
            if path == "." || path.is_empty() {
                DaqError::Config(msg)
            } else {
                DaqError::Config(format!("{path}: {msg}"))
            }
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parse and validation errors as one line: `line 3, column 9: unknown field ...`.
    fn parse_text(text: &str) -> std::result::Result<Config, String> {
        let cfg: Config = toml::from_str(text).map_err(|e| {
            let msg = e.message().trim().replace('\n', " ");
            match e.span() {
                Some(span) => {
                    let before = &text[..span.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    match key_at(text, line) {
                        Some(key) => format!("{key} (line {line}, column {col}): {msg}"),
                        None => format!("line {line}, column {col}: {msg}"),
                    }
                }
                None => msg,
            }
        })?;
        cfg.validate().map_err(|e| match e {
            DaqError::Config(m) => m,
            other => other.to_string(),
        })?;
        Ok(cfg)
    }

    /// Reads, parses and validates a file; relative paths inside are taken from its folder.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|source| DaqError::Io {
            path: path.to_owned(),
            source,
        })?;
        let mut cfg = Config::parse_text(&text)
            .map_err(|e| DaqError::Config(format!("{}: {e}", path.display())))?;
        if let Some(dir) = path.parent() {
            cfg.rebase(dir);
        }
        Ok(cfg)
    }

    /// Makes relative file paths relative to `dir`.
    pub fn rebase(&mut self, dir: &Path) {
        let fix = |p: &mut Option<PathBuf>| {
            if let Some(q) = p {
                if q.is_relative() {
                    *q = dir.join(&*q);
                }
            }
        };
        fix(&mut self.detector.geometry);
        fix(&mut self.detector.poni);
        fix(&mut self.detector.gain);
        fix(&mut self.detector.pedestal);
        fix(&mut self.source.path);
        fix(&mut self.output.file);
    }

    /// The input files the configuration names, with their keys.
    pub fn inputs(&self) -> [(&'static str, Option<&Path>); 5] {
        let d = &self.detector;
        [
            ("detector.gain", d.gain.as_deref()),
            ("detector.pedestal", d.pedestal.as_deref()),
            ("detector.geometry", d.geometry.as_deref()),
            ("detector.poni", d.poni.as_deref()),
            (
                "source.path",
                match self.source.kind {
                    SourceKind::Synthetic => None,
                    _ => self.source.path.as_deref(),
                },
            ),
        ]
    }

    /// Checks the configuration against its [`Access`] ([`Config::validate`] does too): every
    /// file path against the file rule, and the memory its values imply against the budget.
    /// The message names the key.
    pub fn check_access(&self) -> Result<()> {
        let files = &self.access.files;
        for (key, path) in self.inputs() {
            if let Some(p) = path {
                files.check_input(key, p)?;
            }
        }
        for i in 0..self.receivers.len() {
            if let Some(p) = self.output_of(i) {
                files.check_output("output.file", &p)?;
            }
        }
        if let Some(p) = self.master_output() {
            files.check_output("output.file", &p)?;
        }
        if let Some(budget) = self.access.memory {
            Estimate::of(self).check(budget)?;
        }
        Ok(())
    }

    /// The region of interest receiver `i` gets from every module.
    pub fn roi_of(&self, i: usize) -> Roi {
        match self.emulator.fanout {
            Fanout::Roi => self.receivers[i].roi.unwrap_or(Roi::FULL),
            Fanout::Time => self.emulator.roi.unwrap_or(Roi::FULL),
        }
    }

    /// Detector frames receiver `i` gets.
    pub fn frames_of(&self, i: usize) -> u64 {
        match self.emulator.fanout {
            Fanout::Roi => self.acquisition.frames,
            Fanout::Time => {
                let n = self.receivers.len() as u64;
                self.acquisition.frames / n + u64::from((i as u64) < self.acquisition.frames % n)
            }
        }
    }

    /// The detector frame number of receiver `i`'s frame `local`.
    pub fn global_frame(&self, i: usize, local: u64) -> u64 {
        match self.emulator.fanout {
            Fanout::Roi => local,
            Fanout::Time => local * self.receivers.len() as u64 + i as u64,
        }
    }

    /// The output file of receiver `i`.
    pub fn output_of(&self, i: usize) -> Option<PathBuf> {
        let f = self.output.file.as_ref()?;
        if self.receivers.len() == 1 {
            return Some(f.clone());
        }
        let stem = f
            .file_stem()
            .map_or("out".into(), |s| s.to_string_lossy().into_owned());
        Some(f.with_file_name(format!("{stem}_r{i}.h5")))
    }

    /// The run's master file, which joins the receivers' files: `output.file` itself when
    /// there are several receivers (with one, that receiver's file is the run's file).
    pub fn master_output(&self) -> Option<PathBuf> {
        (self.receivers.len() > 1)
            .then(|| self.output.file.clone())
            .flatten()
    }
}

#[cfg(test)]
mod tests;
