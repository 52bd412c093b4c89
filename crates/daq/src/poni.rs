//! pyFAI PONI geometry files (versions 1, 2 and 2.1).
//!
//! `Distance`, `Poni1`, `Poni2` (m), `Rot1`–`Rot3` (rad), `Wavelength` (m) and the pixel size,
//! either as `PixelSize1/2` (version 1) or inside `Detector_config` JSON (version 2). Only the
//! default detector orientation (3, or unspecified) is supported; others are an error rather
//! than a silently mirrored geometry.
use crate::{DaqError, Result};

/// A pyFAI geometry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Poni {
    /// Sample–detector distance along the detector normal (m).
    pub dist: f64,
    /// Point of normal incidence along the slow axis (rows), from the detector origin (m).
    pub poni1: f64,
    /// Point of normal incidence along the fast axis (columns) (m).
    pub poni2: f64,
    /// Rotations (rad), pyFAI convention.
    pub rot1: f64,
    /// Second rotation (rad).
    pub rot2: f64,
    /// Third rotation (rad).
    pub rot3: f64,
    /// Wavelength (m); needed for q.
    pub wavelength: Option<f64>,
    /// Pixel size along rows (m).
    pub pixel1: f64,
    /// Pixel size along columns (m).
    pub pixel2: f64,
}

/// The largest PONI file read (a real one is a few hundred bytes).
const MAX_LEN: u64 = 64 << 10;

/// JUNGFRAU pixel pitch.
pub const JUNGFRAU_PIXEL: f64 = 75e-6;

fn err(msg: impl Into<String>) -> DaqError {
    DaqError::Parse {
        what: "PONI file",
        msg: msg.into(),
    }
}

impl Poni {
    /// Parses PONI text.
    pub fn parse(text: &str) -> Result<Self> {
        let mut get = std::collections::HashMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once(':')
                .ok_or_else(|| err(format!("line without ':': {line:?}")))?;
            get.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
        let num = |k: &str| -> Result<Option<f64>> {
            match get.get(k) {
                None => Ok(None),
                Some(v) if v.eq_ignore_ascii_case("none") => Ok(None),
                Some(v) => v
                    .parse::<f64>()
                    .map(Some)
                    .map_err(|_| err(format!("{k}: not a number: {v:?}"))),
            }
        };
        let need = |k: &str| -> Result<f64> { num(k)?.ok_or_else(|| err(format!("missing {k}"))) };
        let (mut pixel1, mut pixel2) = (num("pixelsize1")?, num("pixelsize2")?);
        if let Some(cfg) = get.get("detector_config") {
            let v: serde_json::Value =
                serde_json::from_str(cfg).map_err(|e| err(format!("Detector_config: {e}")))?;
            let f = |k: &str| v.get(k).and_then(|x| x.as_f64());
            pixel1 = pixel1.or(f("pixel1"));
            pixel2 = pixel2.or(f("pixel2"));
            if let Some(o) = f("orientation") {
                if o != 3.0 && o != 0.0 {
                    return Err(err(format!(
                        "detector orientation {o} is not supported (only 3, pyFAI's default)"
                    )));
                }
            }
        }
        if pixel1.is_none()
            && get
                .get("detector")
                .is_some_and(|d| d.to_ascii_lowercase().contains("jungfrau"))
        {
            pixel1 = Some(JUNGFRAU_PIXEL);
            pixel2 = Some(JUNGFRAU_PIXEL);
        }
        let p = Poni {
            dist: need("distance")?,
            poni1: need("poni1")?,
            poni2: need("poni2")?,
            rot1: num("rot1")?.unwrap_or(0.0),
            rot2: num("rot2")?.unwrap_or(0.0),
            rot3: num("rot3")?.unwrap_or(0.0),
            wavelength: num("wavelength")?,
            pixel1: pixel1.ok_or_else(|| err("no pixel size (PixelSize1 or Detector_config)"))?,
            pixel2: pixel2.ok_or_else(|| err("no pixel size (PixelSize2 or Detector_config)"))?,
        };
        p.validate()?;
        Ok(p)
    }

    /// Reads and parses a PONI file.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        Self::open(&crate::access::Files::Any, "detector.poni", path)
    }

    /// [`Poni::load`] under a file rule. When the rule confines paths, a file that does not
    /// parse is refused without a word of its contents ("not a valid PONI file"), since the
    /// parser's own messages quote the offending line.
    pub fn open(
        files: &crate::access::Files,
        key: &'static str,
        path: &std::path::Path,
    ) -> Result<Self> {
        let input = files.open(key, path)?;
        let detail = input.detail();
        let quiet = input.refused(
            "not a valid PONI file (pyFAI's Distance, Poni1, Poni2, Rot1-3, Wavelength and pixel sizes)",
        );
        let text = input.read_text(MAX_LEN, "PONI file")?;
        Self::parse(&text).map_err(|e| if detail { e } else { quiet })
    }

    /// Checks that every value is finite and sizes are positive.
    pub fn validate(&self) -> Result<()> {
        let vals = [
            self.dist,
            self.poni1,
            self.poni2,
            self.rot1,
            self.rot2,
            self.rot3,
            self.pixel1,
            self.pixel2,
        ];
        if vals.iter().any(|v| !v.is_finite()) {
            return Err(err("non-finite value"));
        }
        if self.dist <= 0.0 || self.pixel1 <= 0.0 || self.pixel2 <= 0.0 {
            return Err(err("distance and pixel sizes must be positive"));
        }
        if let Some(w) = self.wavelength {
            if !(w.is_finite() && w > 0.0) {
                return Err(err("wavelength must be positive"));
            }
        }
        Ok(())
    }

    /// PONI 2.1 text (pyFAI reads it back).
    pub fn to_text(&self, shape: (usize, usize)) -> String {
        let mut s = String::from("# remora\nponi_version: 2.1\nDetector: Detector\n");
        s += &format!(
            "Detector_config: {{\"pixel1\": {:e}, \"pixel2\": {:e}, \"max_shape\": [{}, {}], \"orientation\": 3}}\n",
            self.pixel1, self.pixel2, shape.0, shape.1
        );
        s += &format!(
            "Distance: {:e}\nPoni1: {:e}\nPoni2: {:e}\nRot1: {:e}\nRot2: {:e}\nRot3: {:e}\n",
            self.dist, self.poni1, self.poni2, self.rot1, self.rot2, self.rot3
        );
        if let Some(w) = self.wavelength {
            s += &format!("Wavelength: {w:e}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const V21: &str = "# Nota: C-Order\nponi_version: 2.1\nDetector: Detector\nDetector_config: {\"pixel1\": 7.5e-05, \"pixel2\": 7.5e-05, \"max_shape\": [514, 1030], \"orientation\": 3}\nDistance: 0.12\nPoni1: 0.02\nPoni2: 0.04\nRot1: 0.01\nRot2: -0.02\nRot3: 0.0\nWavelength: 1e-10\n";

    #[test]
    fn parses_v21_and_v1() {
        let p = Poni::parse(V21).unwrap();
        assert_eq!(p.dist, 0.12);
        assert_eq!(p.rot2, -0.02);
        assert_eq!(p.pixel1, 7.5e-5);
        assert_eq!(p.wavelength, Some(1e-10));
        let v1 = "PixelSize1: 1e-4\nPixelSize2: 2e-4\nDistance: 0.1\nPoni1: 0\nPoni2: 0\nRot1: 0\nRot2: 0\nRot3: 0\n";
        let p = Poni::parse(v1).unwrap();
        assert_eq!((p.pixel1, p.pixel2, p.wavelength), (1e-4, 2e-4, None));
        assert_eq!(Poni::parse(&p.to_text((10, 10))).unwrap(), p);
    }

    #[test]
    fn bad_files_are_errors() {
        assert!(Poni::parse("Distance 0.1").is_err());
        assert!(Poni::parse(&V21.replace("Distance: 0.12", "Distance: x")).is_err());
        assert!(Poni::parse(&V21.replace("Distance: 0.12\n", "")).is_err());
        assert!(Poni::parse(&V21.replace("\"orientation\": 3", "\"orientation\": 1")).is_err());
        assert!(Poni::parse(&V21.replace("Distance: 0.12", "Distance: -1")).is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in ".{0,200}") {
            let _ = Poni::parse(&s);
        }
    }
}
