//! `remora.kv`: the operator's side of `remora kv serve`'s post-copy live migration (thin
//! bindings over `remora_kv::migrate::client`, the code `remora kv migrate` runs), and the
//! one-sided GET client (`kv_client.rs`).
use pyo3::exceptions::{
    PyConnectionError, PyRuntimeError, PyTimeoutError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use remora_kv::migrate::client::{self, ClientError, Printer, Progress};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::Duration;

fn err(e: ClientError) -> PyErr {
    let msg = e.to_string();
    match e {
        ClientError::Timeout(_) => PyTimeoutError::new_err(msg),
        ClientError::Refused(_) | ClientError::Failed(_) | ClientError::Stopped(_) => {
            PyRuntimeError::new_err(msg)
        }
        ClientError::Io(_) => PyConnectionError::new_err(msg),
    }
}

/// `progress=`: a flag (print the CLI's lines to stderr, or nothing) or a callable.
#[derive(FromPyObject)]
enum ProgressArg {
    Flag(bool),
    Call(Py<PyAny>),
}

/// Where each progress step goes.
enum Report {
    Quiet,
    Print(Printer),
    Call(Py<PyAny>),
}

/// One step as the dict a `progress` callable receives.
fn step<'py>(py: Python<'py>, p: &Progress) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("state", &p.state)?;
    d.set_item("present", p.present)?;
    d.set_item("units", p.units)?;
    d.set_item("bytes", p.bytes)?;
    d.set_item("downtime_ms", p.downtime_ms)?;
    d.set_item("elapsed", p.elapsed)?;
    Ok(d)
}

/// Arms the running server at `source` ("host:port", started with `-A`) to hand its cache to
/// the server started with `remora kv serve ... --migrate-from SOURCE --migrate-secret-file
/// FILE`, sending its clients to `target`, and follows the migration until the target holds
/// every page. `secret` is that file's content (32 to 128 printable characters, e.g.
/// `secrets.token_hex(16)`): only a target showing it gets the cache. `wait` bounds the
/// seconds until a target asks (the source is disarmed then).
///
/// `progress`: True prints the lines `remora kv migrate` prints (stderr), False nothing, a
/// callable is called with a dict per step (state, present, units, bytes, downtime_ms or None,
/// elapsed). An exception it raises stops the calls and is raised once the migration has ended:
/// the migration itself is not interrupted.
///
/// Returns {"downtime_ms": switch-over as the source measured it or None, "total_s": request to
/// full copy, "bytes": arena size}. Raises TimeoutError (no target asked in time),
/// RuntimeError (refused, e.g. a source without `-A`, or abandoned by one side) or
/// ConnectionError (a server unreachable or gone).
#[pyfunction]
#[pyo3(
    signature = (source, target, secret, wait = 60.0, progress = ProgressArg::Flag(true)),
    text_signature = "(source, target, secret, wait=60.0, progress=True)"
)]
fn migrate<'py>(
    py: Python<'py>,
    source: &str,
    target: &str,
    secret: &str,
    wait: f64,
    progress: ProgressArg,
) -> PyResult<Bound<'py, PyDict>> {
    if !(wait.is_finite() && wait >= 0.0) {
        return Err(PyValueError::new_err(
            "wait must be a non-negative number of seconds",
        ));
    }
    remora_kv::migrate::secret::check(secret).map_err(PyValueError::new_err)?;
    let mut report = match progress {
        ProgressArg::Flag(false) => Report::Quiet,
        ProgressArg::Flag(true) => Report::Print(Printer::new()),
        ProgressArg::Call(f) if f.bind(py).is_callable() => Report::Call(f),
        ProgressArg::Call(f) => {
            return Err(PyTypeError::new_err(format!(
                "progress must be a bool or a callable, not {}",
                f.bind(py).get_type().name()?
            )))
        }
    };
    let wait = Duration::from_secs_f64(wait);
    // The first exception the callable raised; no more calls after it.
    let mut failed: Option<PyErr> = None;
    let r = py.detach(|| {
        let mut on_step = |p: &Progress| {
            let called = Python::attach(|py| {
                // Ctrl-C stops following, as an exception from the callable does.
                py.check_signals()?;
                match &mut report {
                    Report::Quiet => {}
                    Report::Print(printer) => {
                        if let Some(l) = printer.line(p) {
                            eprintln!("{l}");
                        }
                    }
                    Report::Call(f) => {
                        f.call1(py, (step(py, p)?,))?;
                    }
                }
                Ok::<(), PyErr>(())
            });
            match called {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    failed.get_or_insert(e);
                    ControlFlow::Break(())
                }
            }
        };
        client::migrate(source, target, Some(secret), wait, &mut on_step)
    });
    if let Some(e) = failed {
        return Err(e);
    }
    let s = r.map_err(err)?;
    let d = PyDict::new(py);
    d.set_item("downtime_ms", s.downtime_ms)?;
    d.set_item("total_s", s.total_s)?;
    d.set_item("bytes", s.bytes)?;
    Ok(d)
}

/// `stats migration` of the server at `address` ("host:port") as a dict of strings
/// (migrate_state, migrate_units_present, ...). Raises ConnectionError if it cannot be asked.
#[pyfunction]
fn migration_stats(py: Python<'_>, address: &str) -> PyResult<HashMap<String, String>> {
    py.detach(|| client::stats(address)).map_err(err)
}

/// Registers `remora._native.kv`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(migrate, m)?)?;
    m.add_function(wrap_pyfunction!(migration_stats, m)?)?;
    m.add_class::<crate::kv_client::Client>()?;
    Ok(())
}
