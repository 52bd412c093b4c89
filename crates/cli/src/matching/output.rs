//! Writing matches: MicMac `.result` v0 (text) or v1 (binary), `.npy` index pairs, or a text
//! table.
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};
use remora_match::formats::npy::NpyArray;
use remora_match::formats::result;
use remora_match::Match;

use super::input::Loaded;
use super::OutFormat;

/// What is written.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OutKind {
    /// `query train distance` per line.
    Text,
    /// MicMac `.result` v0: `x1 y1 x2 y2` per line, image 1 (the train file) first.
    ResultV0,
    /// MicMac `.result` v1: binary, f64.
    ResultV1,
    /// `n × 2` int64 `[query, train]`.
    Npy,
}

impl OutKind {
    /// From `--output-format`, else the output's extension (`--binary` turns `.result` into
    /// v1).
    pub fn choose(out: Option<&Path>, explicit: Option<OutFormat>, binary: bool) -> OutKind {
        let by_ext = || {
            let ext = out
                .and_then(|p| p.extension())
                .and_then(|e| e.to_str())
                .unwrap_or("")
                .to_ascii_lowercase();
            match ext.as_str() {
                "result" => OutFormat::Result,
                "npy" => OutFormat::Npy,
                _ => OutFormat::Text,
            }
        };
        match explicit.unwrap_or_else(by_ext) {
            OutFormat::Text => OutKind::Text,
            OutFormat::Result if binary => OutKind::ResultV1,
            OutFormat::Result => OutKind::ResultV0,
            OutFormat::ResultV1 => OutKind::ResultV1,
            OutFormat::Npy => OutKind::Npy,
        }
    }

    /// MicMac's files hold positions: refuses inputs that have none, before any work.
    pub fn check_inputs(self, train: &Loaded, query: &Loaded) -> anyhow::Result<()> {
        if matches!(self, OutKind::ResultV0 | OutKind::ResultV1) {
            if let Some(f) = [train, query].into_iter().find(|f| !f.has_positions()) {
                bail!(
                    "MicMac .result output holds keypoint positions, and {} is a .npy descriptor \
                     array without them (write .npy or a text table instead)",
                    f.name()
                );
            }
        }
        Ok(())
    }
}

/// The bytes of a match file (not the text table).
pub fn encode(
    kind: OutKind,
    matches: &[Match],
    train: &Loaded,
    query: &Loaded,
) -> anyhow::Result<Vec<u8>> {
    Ok(match kind {
        OutKind::ResultV0 | OutKind::ResultV1 => {
            let pairs = result::pairs(matches, &train.kp.xy, &query.kp.xy)?;
            if kind == OutKind::ResultV0 {
                result::encode_v0(&pairs).into_bytes()
            } else {
                result::encode_v1(&pairs, false)?
            }
        }
        OutKind::Npy => NpyArray::from_matches(matches).encode(),
        OutKind::Text => {
            let mut s = String::with_capacity(matches.len() * 24);
            for m in matches {
                s += &format!("{} {} {}\n", m.query, m.train, m.distance);
            }
            s.into_bytes()
        }
    })
}

/// Writes matches to `out`, or the text table to stdout when `out` is `None` or `-`.
pub fn write(
    kind: OutKind,
    out: Option<&Path>,
    matches: &[Match],
    train: &Loaded,
    query: &Loaded,
) -> anyhow::Result<()> {
    let bytes = encode(kind, matches, train, query)?;
    match out.filter(|p| p.as_os_str() != "-") {
        Some(p) => std::fs::write(p, bytes).with_context(|| format!("writing {}", p.display())),
        None => {
            let mut o = std::io::stdout().lock();
            match o.write_all(&bytes).and_then(|()| o.flush()) {
                // A closed pipe (`| head`) ends the output, not the program with an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => r.context("writing to stdout"),
            }
        }
    }
}
