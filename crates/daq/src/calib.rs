//! Calibration: gain maps (PSI format), pedestal maps, and the conversion tables engines use.
//!
//! Gain file (PSI): per module 6 maps of 512 × 1024 little-endian `f64` in the order G0, G1,
//! G2, HG0, HG1, HG2, in ADU/keV; the modules one after the other. G1 and G2 gains are negative
//! because the ADC value falls as charge rises in those stages, so `(ADC − pedestal) / gain` is
//! positive in every stage. Pedestal file (remora): per module 3 maps of 512 × 1024
//! little-endian `f32` (G0, G1, G2) in ADU.
use std::path::Path;

use rand::{RngExt, SeedableRng};

use crate::access::Files;
use crate::model::{Detector, MODULE_PIXELS};
use crate::{DaqError, Result};

mod check;

/// Maps per module in a PSI gain file.
pub const GAIN_MAPS_PER_MODULE: usize = 6;

/// Gain maps of a detector in the PSI layout: `modules × 6 × 512 × 1024` `f64`, ADU/keV.
#[derive(Debug, Clone, PartialEq)]
pub struct GainMaps {
    detector: Detector,
    data: Vec<f64>,
}

impl GainMaps {
    /// Wraps maps already in the PSI layout. Refuses a gain the engines cannot divide by (its
    /// `float32` value zero, subnormal, infinite or NaN), naming the first one.
    pub fn from_vec(detector: Detector, data: Vec<f64>) -> Result<Self> {
        Self::checked(detector, data, None)
    }

    /// Reads a PSI gain file; the size must match the detector exactly, and every gain must be
    /// usable as in [`GainMaps::from_vec`] (the error names the file).
    pub fn load(path: &Path, detector: Detector) -> Result<Self> {
        Self::open(&Files::Any, "detector.gain", path, detector)
    }

    /// [`GainMaps::load`] under a file rule; errors name `key`, and say nothing of the file's
    /// contents or size when the rule confines paths.
    pub fn open(files: &Files, key: &'static str, path: &Path, detector: Detector) -> Result<Self> {
        let (bytes, detail) = read_sized(files, key, path, SizedFile::Gain, detector)?;
        let data = bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        Self::checked(detector, data, Some(path)).map_err(|e| match e {
            DaqError::BadGain { .. } if !detail => DaqError::Config(format!(
                "{key}: {:?}: holds gains no conversion can use (zero, subnormal, infinite or NaN as float32)",
                path.display().to_string()
            )),
            e => e,
        })
    }

    fn checked(detector: Detector, data: Vec<f64>, origin: Option<&Path>) -> Result<Self> {
        DaqError::check_len(
            "gain maps",
            detector.pixels() * GAIN_MAPS_PER_MODULE,
            data.len(),
        )?;
        check::gains(&data, origin)?;
        Ok(Self { detector, data })
    }

    /// Writes the maps in the PSI layout.
    pub fn save(&self, path: &Path) -> Result<()> {
        write_le(path, &self.data, |v| v.to_le_bytes())
    }

    /// The whole array, PSI layout.
    pub fn as_slice(&self) -> &[f64] {
        &self.data
    }

    /// One map: `module`, `index` 0..6 (G0, G1, G2, HG0, HG1, HG2).
    pub fn map(&self, module: usize, index: usize) -> &[f64] {
        let at = (module * GAIN_MAPS_PER_MODULE + index) * MODULE_PIXELS;
        &self.data[at..at + MODULE_PIXELS]
    }

    /// The detector.
    pub fn detector(&self) -> Detector {
        self.detector
    }
}

/// Pedestal maps: `modules × 3 × 512 × 1024` `f32`, ADU, per gain stage.
#[derive(Debug, Clone, PartialEq)]
pub struct PedestalMaps {
    detector: Detector,
    data: Vec<f32>,
}

impl PedestalMaps {
    /// Wraps maps in the file layout.
    pub fn from_vec(detector: Detector, data: Vec<f32>) -> Result<Self> {
        DaqError::check_len("pedestal maps", detector.pixels() * 3, data.len())?;
        Ok(Self { detector, data })
    }

    /// Reads a pedestal file; the size must match the detector exactly.
    pub fn load(path: &Path, detector: Detector) -> Result<Self> {
        Self::open(&Files::Any, "detector.pedestal", path, detector)
    }

    /// [`PedestalMaps::load`] under a file rule (as [`GainMaps::open`]).
    pub fn open(files: &Files, key: &'static str, path: &Path, detector: Detector) -> Result<Self> {
        let (bytes, _) = read_sized(files, key, path, SizedFile::Pedestal, detector)?;
        let data = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        Self::from_vec(detector, data)
    }

    /// Writes the maps.
    pub fn save(&self, path: &Path) -> Result<()> {
        write_le(path, &self.data, |v| v.to_le_bytes())
    }

    /// The whole array, file layout.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// The detector.
    pub fn detector(&self) -> Detector {
        self.detector
    }

    /// One map: `module`, `stage` 0..3.
    pub fn map(&self, module: usize, stage: usize) -> &[f32] {
        let at = (module * 3 + stage) * MODULE_PIXELS;
        &self.data[at..at + MODULE_PIXELS]
    }
}

/// The calibration files of a fixed size.
#[derive(Debug, Clone, Copy)]
enum SizedFile {
    Gain,
    Pedestal,
}

impl SizedFile {
    fn what(self) -> &'static str {
        match self {
            SizedFile::Gain => "gain",
            SizedFile::Pedestal => "pedestal",
        }
    }

    fn per_pixel(self) -> usize {
        match self {
            SizedFile::Gain => GAIN_MAPS_PER_MODULE * 8,
            SizedFile::Pedestal => 3 * 4,
        }
    }

    fn maps(self) -> &'static str {
        match self {
            SizedFile::Gain => "6 maps of 512 x 1024 f64 gains",
            SizedFile::Pedestal => "3 maps of 512 x 1024 f32 pedestals",
        }
    }
}

/// The file's bytes, and whether messages may describe them ([`crate::access::Input::detail`]).
fn read_sized(
    files: &Files,
    key: &'static str,
    path: &Path,
    kind: SizedFile,
    det: Detector,
) -> Result<(Vec<u8>, bool)> {
    let what = kind.what();
    let per_module = (MODULE_PIXELS * kind.per_pixel()) as u64;
    let expected = per_module * det.modules() as u64;
    // A directory's "size" is its entry table (4096 bytes), which says nothing useful.
    let input = files.open_with(key, path, |k| {
        if files.is_confined() {
            DaqError::Config(format!(
                "{key}: {:?} is {k}, not a {what} file",
                path.display().to_string()
            ))
        } else {
            DaqError::NotAFile {
                path: path.into(),
                kind: k,
                what,
                modules: det.modules(),
                expected,
            }
        }
    })?;
    if input.len() != expected {
        return Err(if input.detail() {
            DaqError::FileSize {
                path: path.into(),
                what,
                modules: det.modules(),
                per_module,
                expected,
                got: input.len(),
            }
        } else {
            // Only what the configuration implies: nothing of the file's own size.
            input.refused(format_args!(
                "the size does not match {} module(s) of {} ({expected} bytes)",
                det.modules(),
                kind.maps()
            ))
        });
    }
    let detail = input.detail();
    Ok((input.read_all()?, detail))
}

/// Writes `values` little-endian through a small buffer, so saving a 64-module gain file does
/// not need a second, byte-sized copy of the maps.
fn write_le<T: Copy, const N: usize>(
    path: &Path,
    values: &[T],
    le: impl Fn(T) -> [u8; N],
) -> Result<()> {
    use std::io::Write;
    let mut buf = Vec::with_capacity(64 << 10);
    std::fs::File::create(path)
        .and_then(|mut f| {
            for chunk in values.chunks((64 << 10) / N) {
                buf.clear();
                buf.extend(chunk.iter().flat_map(|&v| le(v)));
                f.write_all(&buf)?;
            }
            Ok(())
        })
        .map_err(|source| DaqError::Io {
            path: path.into(),
            source,
        })
}

/// Gain maps and pedestals of one detector, with the gain mode in use.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// Gain maps (PSI layout).
    pub gain: GainMaps,
    /// Pedestal maps.
    pub pedestal: PedestalMaps,
    /// Use HG0/HG1/HG2 instead of G0/G1/G2 (the module ran in high-gain mode).
    pub high_gain: bool,
}

impl Calibration {
    /// Pairs gain and pedestal maps of the same detector.
    pub fn new(gain: GainMaps, pedestal: PedestalMaps) -> Result<Self> {
        if gain.detector != pedestal.detector {
            return Err(DaqError::Config(format!(
                "gain maps are for {} modules, pedestals for {}",
                gain.detector.modules(),
                pedestal.detector.modules()
            )));
        }
        Ok(Self {
            gain,
            pedestal,
            high_gain: false,
        })
    }

    /// The detector.
    pub fn detector(&self) -> Detector {
        self.gain.detector
    }

    /// Realistic random calibration for tests and benchmarks: G0 ≈ 40 ADU/keV, G1 ≈ −1.5,
    /// G2 ≈ −0.12 (±5 % per pixel); pedestals G0 ≈ 3000, G1 ≈ 14000, G2 ≈ 15000 ADU.
    pub fn synthetic(detector: Detector, seed: u64) -> Self {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let n = detector.pixels();
        let mut gain = vec![0.0f64; n * GAIN_MAPS_PER_MODULE];
        let mut ped = vec![0.0f32; n * 3];
        let g_mean = [40.0, -1.5, -0.12, 120.0, -4.5, -0.36];
        let p_mean = [3000.0f32, 14000.0, 15000.0];
        for m in 0..detector.modules() {
            for (k, gm) in g_mean.iter().enumerate() {
                let at = (m * GAIN_MAPS_PER_MODULE + k) * MODULE_PIXELS;
                for v in &mut gain[at..at + MODULE_PIXELS] {
                    *v = gm * (0.95 + 0.1 * rng.random::<f64>());
                }
            }
            for (s, pm) in p_mean.iter().enumerate() {
                let at = (m * 3 + s) * MODULE_PIXELS;
                for v in &mut ped[at..at + MODULE_PIXELS] {
                    *v = pm + 400.0 * (rng.random::<f32>() - 0.5);
                }
            }
        }
        Self {
            gain: GainMaps {
                detector,
                data: gain,
            },
            pedestal: PedestalMaps {
                detector,
                data: ped,
            },
            high_gain: false,
        }
    }
}

/// Plain data for the conversion kernel: per gain stage a pedestal and a gain over all raw
/// pixels (detector order), `f32`. Masked pixels have NaN pedestals, so they convert to NaN
/// without a test in the hot loop. The G0 pedestal is the one pedestal tracking updates.
#[derive(Debug, Clone)]
pub struct ConvTables {
    /// Pedestal per stage (ADU).
    pub pedestal: [Vec<f32>; 3],
    /// Gain per stage (ADU/keV, `f32` of the calibration's `f64`).
    pub gain: [Vec<f32>; 3],
    /// Raw pixel mask (non-zero = masked).
    pub mask: Vec<u8>,
    /// Bumped by every change of the tables through an engine (pedestal tracking). Engines
    /// that keep a copy on a device compare it to know when to upload again: code that
    /// changes the vectors directly must bump it too.
    pub revision: u64,
}

impl ConvTables {
    /// Builds the tables from a calibration and an optional raw-layout mask.
    pub fn new(cal: &Calibration, mask: Option<&[u8]>) -> Result<Self> {
        let det = cal.detector();
        let n = det.pixels();
        let mask = match mask {
            Some(m) => {
                DaqError::check_len("pixel mask", n, m.len())?;
                m.to_vec()
            }
            None => vec![0u8; n],
        };
        let off = if cal.high_gain { 3 } else { 0 };
        let mut pedestal: [Vec<f32>; 3] = Default::default();
        let mut gain: [Vec<f32>; 3] = Default::default();
        for s in 0..3 {
            pedestal[s] = Vec::with_capacity(n);
            gain[s] = Vec::with_capacity(n);
            for m in 0..det.modules() {
                pedestal[s].extend_from_slice(cal.pedestal.map(m, s));
                gain[s].extend(cal.gain.map(m, s + off).iter().map(|&g| g as f32));
            }
            for (p, &k) in pedestal[s].iter_mut().zip(&mask) {
                if k != 0 {
                    *p = f32::NAN;
                }
            }
        }
        Ok(Self {
            pedestal,
            gain,
            mask,
            revision: 0,
        })
    }

    /// Raw pixels covered.
    pub fn pixels(&self) -> usize {
        self.mask.len()
    }

    /// The current pedestals in the file layout (tracked G0 included; masked pixels NaN).
    pub fn pedestal_maps(&self, detector: Detector) -> Result<PedestalMaps> {
        DaqError::check_len("conversion tables", detector.pixels(), self.pixels())?;
        let mut data = Vec::with_capacity(3 * self.pixels());
        for m in 0..detector.modules() {
            for s in 0..3 {
                data.extend_from_slice(
                    &self.pedestal[s][m * MODULE_PIXELS..(m + 1) * MODULE_PIXELS],
                );
            }
        }
        PedestalMaps::from_vec(detector, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_roundtrip_and_truncation_is_an_error() {
        let det = Detector::new(1).unwrap();
        let cal = Calibration::synthetic(det, 1);
        let dir = std::env::temp_dir().join(format!("remora-daq-calib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let g = dir.join("gain.bin");
        let p = dir.join("ped.bin");
        cal.gain.save(&g).unwrap();
        cal.pedestal.save(&p).unwrap();
        assert_eq!(GainMaps::load(&g, det).unwrap(), cal.gain);
        assert_eq!(PedestalMaps::load(&p, det).unwrap(), cal.pedestal);
        let bytes = std::fs::read(&g).unwrap();
        std::fs::write(&g, &bytes[..bytes.len() - 8]).unwrap();
        let err = GainMaps::load(&g, det).unwrap_err();
        assert!(matches!(err, DaqError::FileSize { .. }), "{err}");
        assert!(err.to_string().contains("gain file"));
        assert!(GainMaps::load(&dir.join("missing"), det).is_err());
        assert!(PedestalMaps::load(&g, Detector::new(2).unwrap()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn high_gain_mode_uses_hg_maps() {
        let det = Detector::new(1).unwrap();
        let mut cal = Calibration::synthetic(det, 4);
        cal.high_gain = true;
        let t = ConvTables::new(&cal, None).unwrap();
        for s in 0..3 {
            assert_eq!(t.gain[s][11], cal.gain.map(0, s + 3)[11] as f32);
        }
    }

    #[test]
    fn tables_mask_with_nan() {
        let det = Detector::new(1).unwrap();
        let cal = Calibration::synthetic(det, 2);
        let mut mask = vec![0u8; det.pixels()];
        mask[7] = 1;
        let t = ConvTables::new(&cal, Some(&mask)).unwrap();
        assert!(t.pedestal[0][7].is_nan() && t.pedestal[2][7].is_nan());
        assert_eq!(t.pedestal[1][8], cal.pedestal.map(0, 1)[8]);
        assert!(t.gain[1][8] < 0.0);
        assert!(ConvTables::new(&cal, Some(&mask[1..])).is_err());
        let back = t.pedestal_maps(det).unwrap();
        assert_eq!(back.map(0, 1)[9], cal.pedestal.map(0, 1)[9]);
    }
}
