//! `remora.fabric`: regions over numpy arrays, queue pairs and completions.
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
