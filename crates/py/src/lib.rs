//! The `remora` Python module's native part (`remora._native`), built with maturin.
//!
//! Thin bindings only: each area registers one submodule from its own file, and the pure-Python
//! package under `python/remora/` re-exports them (`remora.fabric`, `remora.daq`, ...).
use pyo3::prelude::*;

mod acq;
mod daq;
mod fabric;
mod kv;
mod kv_client;
mod lazy;
mod matching;
mod resize;

/// Adds one named submodule to the native module.
pub(crate) fn submodule<'py>(
    parent: &Bound<'py, PyModule>,
    name: &str,
    fill: impl FnOnce(&Bound<'py, PyModule>) -> PyResult<()>,
) -> PyResult<()> {
    let m = PyModule::new(parent.py(), name)?;
    fill(&m)?;
    parent.add_submodule(&m)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    submodule(m, "fabric", fabric::register)?;
    submodule(m, "lazy", lazy::register)?;
    submodule(m, "daq", |d| {
        daq::register(d)?;
        acq::register(d)
    })?;
    submodule(m, "match", matching::register)?;
    submodule(m, "resize", resize::register)?;
    submodule(m, "kv", kv::register)?;
    Ok(())
}
