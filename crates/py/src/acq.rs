//! `remora.daq.run`: an acquisition from Python, receivers and emulator as threads of this
//! process (the same code `remora daq run` starts as processes).
use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use remora_daq::config::Config;
use remora_daq::manager::run_in_process;
use remora_daq::receiver::Progress;

/// One receiver's progress as the dict a callable receives.
fn step<'py>(py: Python<'py>, receiver: usize, p: &Progress) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("receiver", receiver)?;
    d.set_item("frames_expected", p.frames_expected)?;
    d.set_item("frames_done", p.frames_done)?;
    d.set_item("overruns", p.overruns)?;
    d.set_item("kept", p.kept)?;
    d.set_item("buffered", p.buffered)?;
    Ok(d)
}

/// Runs the acquisition described by TOML `text` (relative paths from `base`) and returns its
/// summary as JSON text. `progress`, when given, is called with a dict per receiver report
/// (about 5 a second each, and a last one as each receiver ends); the first exception it raises
/// stops the calls and is raised once the acquisition has ended, which it does not interrupt.
#[pyfunction]
#[pyo3(signature = (text, base=None, progress=None))]
fn run_acquisition(
    py: Python<'_>,
    text: &str,
    base: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    let mut cfg = Config::parse(text).map_err(|e| PyValueError::new_err(e.to_string()))?;
    if let Some(dir) = base {
        cfg.rebase(&dir);
    }
    if let Some(f) = &progress {
        if !f.bind(py).is_callable() {
            return Err(PyTypeError::new_err(format!(
                "progress must be a callable, not {}",
                f.bind(py).get_type().name()?
            )));
        }
    }
    // Receivers report from their own threads; the first failure silences the callable.
    let failed: Mutex<Option<PyErr>> = Mutex::new(None);
    let report = |receiver: usize, p: &Progress| {
        let Some(f) = &progress else { return };
        if failed.lock().map(|g| g.is_some()).unwrap_or(true) {
            return;
        }
        Python::attach(|py| {
            if let Err(e) = step(py, receiver, p).and_then(|d| f.call1(py, (d,))) {
                if let Ok(mut g) = failed.lock() {
                    g.get_or_insert(e);
                }
            }
        });
    };
    let summary = py
        .detach(|| run_in_process(&cfg, None, &report))
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    if let Some(e) = failed.into_inner().ok().flatten() {
        return Err(e);
    }
    serde_json::to_string(&summary).map_err(|e| PyValueError::new_err(e.to_string()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_acquisition, m)?)
}
