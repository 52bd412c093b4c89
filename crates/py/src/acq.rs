//! `remora.daq.run`: an acquisition from Python, receivers and emulator as threads of this
//! process (the same code `remora daq run` starts as processes).
use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use remora_daq::config::Config;
use remora_daq::manager::run_in_process;

/// Runs the acquisition described by TOML `text` (relative paths from `base`) and returns its
/// summary as JSON text.
#[pyfunction]
#[pyo3(signature = (text, base=None))]
fn run_acquisition(py: Python<'_>, text: &str, base: Option<PathBuf>) -> PyResult<String> {
    let mut cfg = Config::parse(text).map_err(|e| PyValueError::new_err(e.to_string()))?;
    if let Some(dir) = base {
        cfg.rebase(&dir);
    }
    let summary = py
        .detach(|| run_in_process(&cfg, None, &|_, _| {}))
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    serde_json::to_string(&summary).map_err(|e| PyValueError::new_err(e.to_string()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_acquisition, m)?)
}
