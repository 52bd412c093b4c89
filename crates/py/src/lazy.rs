//! `remora.lazy`: lazy regions (numpy views whose pages fault in from a page server) and the page
//! server. Thin bindings over `remora-lazy`.
use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::exceptions::{PyOSError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use remora_lazy as lz;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn err(e: lz::Error) -> PyErr {
    match e {
        lz::Error::Invalid(_) | lz::Error::OutOfRange { .. } => {
            PyValueError::new_err(e.to_string())
        }
        lz::Error::Unavailable { .. } => PyTimeoutError::new_err(e.to_string()),
        _ => PyOSError::new_err(e.to_string()),
    }
}

/// A page server running on background threads; `close()` (or the end of a `with` block, or
/// garbage collection) stops it.
#[pyclass(module = "remora.lazy")]
struct PageServer {
    handle: Mutex<Option<Handle>>,
    address: String,
}

/// A running TCP or fabric page server.
enum Handle {
    Tcp(lz::ServerHandle),
    Fabric(lz::FabricServerHandle),
}

fn transport(name: &str) -> PyResult<Option<remora_fabric::Transport>> {
    match name {
        "tcp" => Ok(None),
        "udp" => Ok(Some(remora_fabric::Transport::Udp)),
        "shm" => Ok(Some(remora_fabric::Transport::Shm)),
        _ => Err(PyValueError::new_err(format!(
            "transport `{name}`: expected tcp, udp or shm"
        ))),
    }
}

fn start(src: Arc<dyn lz::PageSource>, listen: &str, via: &str) -> PyResult<PageServer> {
    let addr = listen
        .parse()
        .map_err(|_| PyValueError::new_err(format!("listen address `{listen}`")))?;
    let h = match transport(via)? {
        None => Handle::Tcp(
            lz::PageServer::bind(addr, src)
                .and_then(|s| s.spawn())
                .map_err(err)?,
        ),
        Some(t) => Handle::Fabric(
            lz::FabricServer::bind(addr, &*src, t)
                .and_then(|s| s.spawn())
                .map_err(err)?,
        ),
    };
    let address = match &h {
        Handle::Tcp(h) => h.addr(),
        Handle::Fabric(h) => h.addr(),
    };
    Ok(PageServer {
        address: address.to_string(),
        handle: Mutex::new(Some(h)),
    })
}

#[pymethods]
impl PageServer {
    /// Serves a file (or memfd path such as /proc/self/fd/N) live on every transport: bytes
    /// written to it after the server started are served (its length is fixed at start).
    #[staticmethod]
    #[pyo3(signature = (path, listen = "127.0.0.1:0", transport = "tcp"))]
    fn file(path: std::path::PathBuf, listen: &str, transport: &str) -> PyResult<PageServer> {
        start(
            Arc::new(lz::FileSource::open(&path).map_err(err)?),
            listen,
            transport,
        )
    }
    /// Serves a copy of `data` (bytes or any buffer) held by the server.
    #[staticmethod]
    #[pyo3(signature = (data, listen = "127.0.0.1:0", transport = "tcp"))]
    fn memory(data: Vec<u8>, listen: &str, transport: &str) -> PyResult<PageServer> {
        start(Arc::new(lz::MemorySource::new(data)), listen, transport)
    }
    /// Serves a live process's memory: `ranges` of (start, end) addresses, or its writable
    /// private mappings; `stop` sends SIGSTOP while served. Read at each request over tcp,
    /// read by the client itself over shm; over udp, a copy taken at start.
    #[staticmethod]
    #[pyo3(signature = (pid, ranges = None, stop = false, listen = "127.0.0.1:0", transport = "tcp"))]
    fn process(
        pid: i32,
        ranges: Option<Vec<(u64, u64)>>,
        stop: bool,
        listen: &str,
        transport: &str,
    ) -> PyResult<PageServer> {
        let mut rs = Vec::new();
        for (a, b) in ranges.unwrap_or_default() {
            if b <= a {
                return Err(PyValueError::new_err(format!(
                    "range {a:#x}-{b:#x} is empty"
                )));
            }
            rs.push((a, b - a));
        }
        start(
            Arc::new(lz::ProcessSource::new(pid, &rs, stop).map_err(err)?),
            listen,
            transport,
        )
    }
    /// `host:port` clients connect to.
    #[getter]
    fn address(&self) -> String {
        self.address.clone()
    }
    /// Stops the server and closes its connections (clients see a dead server).
    fn close(&self, py: Python<'_>) {
        let h = self.handle.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(move || drop(h));
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Calls `close()`; exceptions propagate.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) {
        self.close(py)
    }
}

/// A lazily filled region. `array()` is a numpy uint8 view of it (no copy); touching a missing
/// page fetches it. In "sigbus" mode kernel accesses (e.g. `arr.tofile()`) fail with EFAULT, so
/// Python defaults to "thread".
#[pyclass(module = "remora.lazy")]
struct LazyRegion {
    inner: Arc<lz::LazyRegion>,
}

fn options(
    unit: usize,
    mode: &str,
    prefetch: &str,
    push: bool,
    deadline: f64,
) -> PyResult<lz::Options> {
    if !(deadline.is_finite() && deadline > 0.0) {
        return Err(PyValueError::new_err(
            "deadline must be a positive number of seconds",
        ));
    }
    Ok(lz::Options {
        unit,
        mode: mode.parse().map_err(PyValueError::new_err)?,
        prefetch: prefetch.parse().map_err(PyValueError::new_err)?,
        push,
        deadline: Duration::from_secs_f64(deadline),
        ..lz::Options::default()
    })
}

#[pymethods]
impl LazyRegion {
    /// Connects to a page server at `address` ("host:port") over `transport` (tcp, udp, shm)
    /// and maps its source lazily.
    #[staticmethod]
    #[pyo3(signature = (address, unit = 4096, mode = "thread", prefetch = "none", push = false, deadline = 5.0, transport = "tcp"))]
    #[allow(clippy::too_many_arguments)]
    fn connect(
        py: Python<'_>,
        address: &str,
        unit: usize,
        mode: &str,
        prefetch: &str,
        push: bool,
        deadline: f64,
        transport: &str,
    ) -> PyResult<LazyRegion> {
        let addr = address
            .parse()
            .map_err(|_| PyValueError::new_err(format!("address `{address}`")))?;
        let opts = options(unit, mode, prefetch, push, deadline)?;
        let via = self::transport(transport)?;
        let r = py.detach(move || {
            let f: Arc<dyn lz::PageFetcher> = match via {
                None => Arc::new(lz::TcpFetcher::connect(addr, Duration::from_secs(5))?),
                Some(t) => Arc::new(lz::FabricFetcher::connect(addr, t)?),
            };
            lz::LazyRegion::open(f, opts)
        });
        Ok(LazyRegion {
            inner: Arc::new(r.map_err(err)?),
        })
    }
    /// Bytes in the region.
    fn __len__(&self) -> usize {
        self.inner.len()
    }
    /// The fault unit.
    #[getter]
    fn unit(&self) -> usize {
        self.inner.unit()
    }
    /// A numpy uint8 array over the region's memory (no copy; it keeps the region alive).
    fn array<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let (ptr, len) = {
            let r = slf.borrow();
            (r.inner.as_ptr() as *const u8, r.inner.len())
        };
        // SAFETY: the mapping lives as long as the LazyRegion, which the array holds as its base
        // object; missing pages are filled on access by the region's handlers.
        let view = unsafe { ArrayView1::from_shape_ptr(len, ptr) };
        // SAFETY: `slf` owns the memory the view points into and outlives the array (base object).
        Ok(unsafe { PyArray1::borrow_from_array(&view, slf.into_any()) })
    }
    /// Reads `n` bytes at `offset`, raising TimeoutError if the server is unavailable (where a raw
    /// access would raise SIGBUS).
    fn read(&self, py: Python<'_>, offset: usize, n: usize) -> PyResult<Vec<u8>> {
        let r = self.inner.clone();
        py.detach(move || {
            let mut b = vec![0u8; n];
            r.read_at(offset, &mut b).map(|()| b)
        })
        .map_err(err)
    }
    /// (present units, poisoned units, total units).
    fn progress(&self) -> (usize, usize, usize) {
        let p = self.inner.progress();
        (p.present, p.poisoned, p.units)
    }
    /// Waits until every unit is present; True if it completed within `timeout` seconds.
    fn wait_complete(&self, py: Python<'_>, timeout: f64) -> bool {
        let r = self.inner.clone();
        let t = Duration::from_secs_f64(timeout.max(0.0));
        py.detach(move || r.wait_complete(t))
    }
    /// Counters as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("faults", s.faults)?;
        d.set_item("fetches", s.fetches)?;
        d.set_item("units_copied", s.units_copied)?;
        d.set_item("units_zero", s.units_zero)?;
        d.set_item("units_prefetched", s.units_prefetched)?;
        d.set_item("units_pushed", s.units_pushed)?;
        d.set_item("units_poisoned", s.units_poisoned)?;
        d.set_item("refetches", s.refetches)?;
        Ok(d)
    }
    /// The last fetch failure, if any.
    fn last_error(&self) -> Option<String> {
        self.inner.last_error()
    }
    /// Stops resolving faults; missing pages are poisoned (raw access raises SIGBUS).
    fn close(&self, py: Python<'_>) {
        let r = self.inner.clone();
        py.detach(move || r.close());
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Calls `close()`; exceptions propagate.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) {
        self.close(py)
    }
}

/// Registers `remora._native.lazy`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PageServer>()?;
    m.add_class::<LazyRegion>()?;
    Ok(())
}
