//! `remora.fabric.ProtectionDomain` and `Region`: numpy arrays registered for remote access,
//! and the region descriptions peers exchange.
use super::*;

/// A protection domain: the key table regions are registered in.
#[pyclass(module = "remora.fabric", name = "ProtectionDomain")]
pub(super) struct PyPd {
    pub(super) pd: Arc<mem::Pd>,
}

/// A registered region over a numpy array (the array stays alive as long as the region).
#[pyclass(module = "remora.fabric", name = "Region")]
pub(super) struct PyRegion {
    pub(super) region: Arc<mem::Region>,
}

#[pymethods]
impl PyPd {
    #[new]
    fn new() -> PyPd {
        PyPd {
            pd: Arc::new(mem::Pd::new()),
        }
    }

    /// Registers a C-contiguous, writable numpy array (any dtype) as a region.
    /// `access`: letters l (local write), w (remote write), r (remote read); default "lwr".
    /// `pinned`: lock the pages in memory (mlock).
    #[pyo3(signature = (array, access = "lwr", pinned = false))]
    fn register(&self, array: &Bound<'_, PyAny>, access: &str, pinned: bool) -> PyResult<PyRegion> {
        let arr = array.cast::<PyUntypedArray>().map_err(|_| {
            PyTypeError::new_err(format!(
                "register() takes a numpy array, not {}",
                array
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        if !arr.is_c_contiguous() {
            return Err(PyValueError::new_err("the array must be C-contiguous"));
        }
        // The array interface gives the buffer address and whether it is read-only, without
        // depending on numpy's C struct layout.
        let (ptr, readonly): (usize, bool) = array
            .getattr("__array_interface__")?
            .get_item("data")?
            .extract()?;
        if readonly {
            return Err(PyValueError::new_err("the array must be writable"));
        }
        let data = ptr as *mut u8;
        let len = arr.len() * arr.dtype().itemsize();
        if len == 0 {
            return Err(PyValueError::new_err("cannot register an empty array"));
        }
        let owner: Py<PyAny> = array.clone().unbind();
        // SAFETY: data..data+len is the array's buffer; `owner` keeps the array (and so the
        // buffer) alive for the Buffer's life. A C-contiguous array's buffer does not move.
        let buf =
            unsafe { mem::Buffer::external_owned(data, len, Box::new(owner)) }.map_err(mem_err)?;
        self.register_buffer(buf, access, pinned)
    }

    /// Allocates `length` bytes of shared memory (a sealed memfd) and registers it: the memory
    /// an shm peer can be granted for one-sided WRITE and READ (numpy arrays registered with
    /// `register` travel through the socket). `Region.array()` gives a numpy view of it.
    #[pyo3(signature = (length, access = "lwr", pinned = false))]
    fn allocate(&self, length: usize, access: &str, pinned: bool) -> PyResult<PyRegion> {
        if length == 0 {
            return Err(PyValueError::new_err("cannot allocate an empty region"));
        }
        let buf = mem::Buffer::memfd("remora-py", length).map_err(mem_err)?;
        self.register_buffer(buf, access, pinned)
    }

    /// Regions registered.
    fn __len__(&self) -> usize {
        self.pd.len()
    }
}

impl PyPd {
    fn register_buffer(&self, buf: mem::Buffer, access: &str, pinned: bool) -> PyResult<PyRegion> {
        let mode = if pinned {
            mem::Mode::Pinned
        } else {
            mem::Mode::OnDemand
        };
        let region = self
            .pd
            .register(buf, parse_access(access)?, mode)
            .map_err(mem_err)?;
        Ok(PyRegion { region })
    }
}

#[pymethods]
impl PyRegion {
    /// Virtual address peers use.
    #[getter]
    fn addr(&self) -> u64 {
        self.region.addr()
    }
    /// Length in bytes.
    #[getter]
    fn length(&self) -> usize {
        self.region.len()
    }
    /// Remote key.
    #[getter]
    fn rkey(&self) -> u32 {
        self.region.rkey()
    }
    /// Local key.
    #[getter]
    fn lkey(&self) -> u32 {
        self.region.lkey()
    }
    /// True if every page of `[offset, offset+length)` is resident per the region's map.
    #[pyo3(signature = (offset = 0, length = None))]
    fn is_resident(&self, offset: usize, length: Option<usize>) -> bool {
        let len = length.unwrap_or(self.region.len().saturating_sub(offset));
        self.region.is_resident(offset, len)
    }
    /// Gives the pages of `[offset, offset+length)` back to the kernel (their contents are
    /// lost) and marks them missing, so that the next remote WRITE into them faults (PART).
    #[pyo3(signature = (offset = 0, length = None))]
    fn evict(&self, offset: usize, length: Option<usize>) -> PyResult<()> {
        let len = length.unwrap_or(self.region.len().saturating_sub(offset));
        self.region.evict(offset, len).map_err(mem_err)
    }
    /// A numpy uint8 array over the region's memory (no copy; it keeps the region alive).
    fn array<'py>(slf: Bound<'py, Self>) -> Bound<'py, numpy::PyArray1<u8>> {
        let (ptr, len) = {
            let r = slf.borrow();
            (r.region.as_ptr() as *const u8, r.region.len())
        };
        // SAFETY: the region's memory lives as long as the Region object, which the array holds
        // as its base; remote writes into it race with Python as they do with a NIC's DMA.
        let view = unsafe { numpy::ndarray::ArrayView1::from_shape_ptr(len, ptr) };
        // SAFETY: `slf` owns the memory the view points into and outlives the array.
        unsafe { numpy::PyArray1::borrow_from_array(&view, slf.into_any()) }
    }

    /// The 20-byte description (addr, length, rkey) to send a peer as private data.
    fn info<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &fab::RegionInfo::of(&self.region).encode())
    }
    fn __repr__(&self) -> String {
        format!(
            "Region(addr={:#x}, length={}, rkey={:#x})",
            self.region.addr(),
            self.region.len(),
            self.region.rkey()
        )
    }
}

/// Decodes a region description: returns (addr, length, rkey).
#[pyfunction]
pub(super) fn decode_region(data: &[u8]) -> PyResult<(u64, u64, u32)> {
    let r = fab::RegionInfo::decode(data).map_err(fab_err)?;
    Ok((r.addr, r.len, r.rkey))
}
