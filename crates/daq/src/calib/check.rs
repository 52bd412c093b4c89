//! Refusing gain maps that no conversion can divide by.
//!
//! A gain is bad when its `float32` value, the one the engines divide by, is not a normal
//! number: zero, subnormal, infinite or NaN. Such a gain turns every ADC value into NaN or ±inf
//! (or, for a subnormal, overflows to inf), so a map holding one is refused instead of
//! producing garbage frames. Every map of the file is checked, the high-gain ones included,
//! because `high_gain` can be switched on after loading.
use std::path::Path;

use super::GAIN_MAPS_PER_MODULE;
use crate::model::{MODULE_COLS, MODULE_PIXELS};
use crate::DaqError;

/// Map names in PSI order.
const STAGES: [&str; GAIN_MAPS_PER_MODULE] = ["G0", "G1", "G2", "HG0", "HG1", "HG2"];

/// Whether the engines can divide by `g`.
pub(crate) fn usable(g: f64) -> bool {
    (g as f32).is_normal()
}

/// Checks maps in the PSI layout; the error names `origin` (the file) and the first bad gain.
pub(crate) fn gains(data: &[f64], origin: Option<&Path>) -> crate::Result<()> {
    let Some(first) = data.iter().position(|&g| !usable(g)) else {
        return Ok(());
    };
    let bad = data[first..].iter().filter(|&&g| !usable(g)).count();
    let map = first / MODULE_PIXELS;
    let pixel = first % MODULE_PIXELS;
    Err(DaqError::BadGain {
        origin: origin.map(Path::to_path_buf),
        module: map / GAIN_MAPS_PER_MODULE,
        row: pixel / MODULE_COLS,
        column: pixel % MODULE_COLS,
        stage: STAGES[map % GAIN_MAPS_PER_MODULE],
        value: data[first],
        bad,
        total: data.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_means_not_a_normal_float32() {
        for g in [40.0, -1.5, -0.12, 1e-30, -1e30] {
            assert!(usable(g), "{g}");
        }
        for g in [
            0.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e-40,
            1e-300,
            1e39,
        ] {
            assert!(!usable(g), "{g}");
        }
    }

    #[test]
    fn the_first_bad_gain_is_named_by_position() {
        let mut data = vec![40.0; 2 * GAIN_MAPS_PER_MODULE * MODULE_PIXELS];
        assert!(gains(&data, None).is_ok());
        // Module 1, map G2, row 3, column 5; and a later one that only counts.
        let at = (GAIN_MAPS_PER_MODULE + 2) * MODULE_PIXELS + 3 * MODULE_COLS + 5;
        data[at] = 0.0;
        data[at + 10] = f64::NAN;
        match gains(&data, Some(Path::new("/x/gain.bin"))).unwrap_err() {
            e @ DaqError::BadGain {
                module: 1,
                row: 3,
                column: 5,
                stage: "G2",
                bad: 2,
                ..
            } => {
                let m = e.to_string();
                assert!(
                    m.starts_with("/x/gain.bin: gain 0 at module 1, row 3, column 5, stage G2"),
                    "{m}"
                );
            }
            e => panic!("{e}"),
        }
    }
}
