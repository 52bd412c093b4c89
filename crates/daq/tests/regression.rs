//! One test per fixed bug, named after it (issue 10, finding 5 "daq has no resource limits" and
//! finding 6 "Calibration.load on a directory says gain file has 4096 bytes"). The stage
//! benchmark's own limits are tested beside it, in the CLI (`crates/cli/src/daq/jungfrau.rs`).
use std::path::{Path, PathBuf};

use remora_daq::calib::{Calibration, GainMaps, PedestalMaps, GAIN_MAPS_PER_MODULE};
use remora_daq::model::{Detector, MODULE_COLS, MODULE_PIXELS};
use remora_daq::DaqError;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("remora-daq-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_gains(path: &Path, gains: &[f64]) {
    let bytes: Vec<u8> = gains.iter().flat_map(|g| g.to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap();
}

fn load_err(path: &Path, det: Detector) -> String {
    let e = GainMaps::load(path, det).unwrap_err();
    assert!(matches!(e, DaqError::BadGain { .. }), "{e}");
    e.to_string()
}

#[test]
fn issue10_gain_file_of_all_nan_is_refused() {
    let dir = TempDir::new("all-nan");
    let det = Detector::new(1).unwrap();
    let g = dir.0.join("gain.bin");
    write_gains(&g, &vec![f64::NAN; det.pixels() * GAIN_MAPS_PER_MODULE]);
    let m = load_err(&g, det);
    assert!(
        m.starts_with(&format!(
            "{}: gain NaN at module 0, row 0, column 0, stage G0",
            g.display()
        )),
        "{m}"
    );
    assert!(m.contains("3145728 of 3145728 gains are bad"), "{m}");
}

#[test]
fn issue10_gain_file_of_all_zero_is_refused() {
    let dir = TempDir::new("all-zero");
    let det = Detector::new(1).unwrap();
    let g = dir.0.join("gain.bin");
    write_gains(&g, &vec![0.0; det.pixels() * GAIN_MAPS_PER_MODULE]);
    let m = load_err(&g, det);
    assert!(
        m.contains("gain 0 at module 0, row 0, column 0, stage G0"),
        "{m}"
    );
}

#[test]
fn issue10_one_bad_gain_is_named_by_module_row_column_and_stage() {
    let dir = TempDir::new("one-bad");
    let det = Detector::new(2).unwrap();
    let cal = Calibration::synthetic(det, 5);
    let mut gains = cal.gain.as_slice().to_vec();
    // Module 1, HG1 (map 4), row 100, column 200: infinite. A subnormal later counts too.
    let at = (GAIN_MAPS_PER_MODULE + 4) * MODULE_PIXELS + 100 * MODULE_COLS + 200;
    gains[at] = f64::INFINITY;
    gains[at + 1] = 1e-40;
    let g = dir.0.join("gain.bin");
    write_gains(&g, &gains);
    let m = load_err(&g, det);
    assert!(
        m.contains("gain inf at module 1, row 100, column 200, stage HG1"),
        "{m}"
    );
    assert!(m.contains("2 of 6291456 gains are bad"), "{m}");
    // The same maps handed over as an array are refused the same way.
    let e = GainMaps::from_vec(det, gains).unwrap_err().to_string();
    assert!(
        e.starts_with("gain maps: gain inf at module 1, row 100"),
        "{e}"
    );
    // Good maps still load.
    write_gains(&g, cal.gain.as_slice());
    assert_eq!(GainMaps::load(&g, det).unwrap(), cal.gain);
}

#[test]
fn issue10_calibration_load_on_a_directory_says_it_is_a_directory() {
    let dir = TempDir::new("dir");
    let det = Detector::new(1).unwrap();
    let m = GainMaps::load(&dir.0, det).unwrap_err().to_string();
    assert_eq!(
        m,
        format!(
            "{}: is a directory, expected a gain file of 25165824 bytes (1 modules)",
            dir.0.display()
        )
    );
    let m = PedestalMaps::load(&dir.0, det).unwrap_err().to_string();
    assert!(
        m.contains("is a directory, expected a pedestal file of 6291456 bytes"),
        "{m}"
    );
    // A wrong size names what was expected and what was found.
    let p = dir.0.join("ped.bin");
    Calibration::synthetic(Detector::new(2).unwrap(), 1)
        .pedestal
        .save(&p)
        .unwrap();
    let m = PedestalMaps::load(&p, det).unwrap_err().to_string();
    assert!(
        m.contains("pedestal file has 12582912 bytes, expected 6291456 for 1 modules (6291456 bytes each); the size fits 2 modules"),
        "{m}"
    );
}

/// Issue 11: the integration summed per-thread accumulators split by work stealing, so the
/// same image gave profiles differing in the last bits from one call to the next (and the
/// acquisition's results could not be compared with a direct run bit for bit).
#[test]
fn issue11_integration_is_bit_for_bit_repeatable_whatever_the_threads() {
    use remora_daq::azint::{AzConfig, AzMatrix};
    use remora_daq::engine::{CpuEngine, Engine};
    use remora_daq::synth::{Synth, SynthConfig};
    let s = Synth::new(SynthConfig::new(2).unwrap()).unwrap();
    let map = s.layout().assembly_map(None).unwrap();
    let m = AzMatrix::build(
        &s.config().poni,
        (map.rows, map.cols),
        Some(&map.mask),
        &AzConfig {
            bins: 500,
            ..AzConfig::default()
        },
    )
    .unwrap();
    let image: Vec<f32> = (0..map.pixels())
        .map(|i| ((i * 7919) % 1000) as f32 * 0.37 + 0.001)
        .collect();
    let bits = |e: &CpuEngine| -> Vec<u64> {
        e.integrate(&m, &image)
            .unwrap()
            .intensity
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    let one = bits(&CpuEngine::new(1).unwrap());
    for threads in [1, 2, 3, 4] {
        let e = CpuEngine::new(threads).unwrap();
        for _ in 0..5 {
            assert_eq!(bits(&e), one, "{threads} threads");
        }
    }
}
