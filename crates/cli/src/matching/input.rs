//! Loading keypoint files: the format from `--format`, the content, or the extension; every
//! error names the file.
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use remora_match::formats::{self, micmac, Descriptors, Format, Keypoints};

/// A loaded keypoint file.
pub struct Loaded {
    /// Where it came from.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// Its points.
    pub kp: Keypoints,
}

impl Loaded {
    /// The path as shown in messages.
    pub fn name(&self) -> String {
        self.path.display().to_string()
    }

    /// Whether the file holds keypoint positions (`.npy` descriptor arrays do not).
    pub fn has_positions(&self) -> bool {
        self.format != Format::Npy
    }

    /// "u8" or "f32".
    pub fn value_type(&self) -> &'static str {
        match self.kp.descriptors {
            Descriptors::U8(_) => "u8",
            Descriptors::F32(_) => "f32",
        }
    }
}

/// A format's name as `--format` spells it.
pub fn format_name(f: Format) -> &'static str {
    match f {
        Format::MicmacV0 => "micmac",
        Format::MicmacV1 => "micmac-v1",
        Format::LoweKey => "key",
        Format::Npy => "npy",
    }
}

/// Reads and parses a keypoint file; `format` `None` recognises it.
pub fn load(path: &Path, format: Option<Format>) -> anyhow::Result<Loaded> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let format = match format {
        Some(f) => f,
        None => detect(path, &bytes)?,
    };
    let kp = formats::parse(&bytes, format)
        .map_err(|e| anyhow!("{} ({}): {e}", path.display(), format_name(format)))?;
    kp.check().map_err(|e| anyhow!("{}: {e}", path.display()))?;
    Ok(Loaded {
        path: path.to_path_buf(),
        format,
        kp,
    })
}

/// The format of a file from its content, then its extension: a damaged `.dat` or `.npy`
/// (truncated, wrong magic) is not recognised by content, and parsing it by its extension
/// gives the precise error instead of "unrecognised".
fn detect(path: &Path, bytes: &[u8]) -> anyhow::Result<Format> {
    if let Some(f) = formats::detect(path, bytes) {
        return Ok(f);
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "dat" if bytes.first() == Some(&micmac::VERSIONED_MARK) => Ok(Format::MicmacV1),
        "dat" => Ok(Format::MicmacV0),
        "npy" => Ok(Format::Npy),
        _ => Err(anyhow!(
            "{}: not a keypoint file remora recognises (MicMac .dat v0/v1, Lowe .key, .npy); \
             name its format with --format",
            path.display()
        )),
    }
}

/// The extensions of keypoint files that `--all` picks up.
pub fn is_keypoint_file(path: &Path) -> bool {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    matches!(ext.as_str(), "dat" | "key" | "npy")
}

/// The image a keypoint file belongs to, as MicMac names it: the file name without MicMac's
/// `LBPp` prefix and `.dat` suffix (`Pastis/LBPpIMG_1.JPG.dat` → `IMG_1.JPG`) when it has them,
/// else the file stem (`IMG_1.key` → `IMG_1`).
pub fn image_name(path: &Path) -> String {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(core) = file
        .strip_prefix("LBPp")
        .and_then(|f| f.strip_suffix(".dat"))
    {
        if !core.is_empty() {
            return core.to_string();
        }
    }
    path.file_stem()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or(file)
}

#[cfg(test)]
mod tests {
    use super::image_name;
    use std::path::Path;

    #[test]
    fn image_names_follow_micmac() {
        assert_eq!(
            image_name(Path::new("Pastis/LBPpIMG_1.JPG.dat")),
            "IMG_1.JPG"
        );
        assert_eq!(image_name(Path::new("a/IMG_1.key")), "IMG_1");
        assert_eq!(image_name(Path::new("x.npy")), "x");
        assert_eq!(image_name(Path::new("LBPp.dat")), "LBPp");
    }
}
