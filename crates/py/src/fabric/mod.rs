//! `remora.fabric`: register numpy arrays as regions, connect queue pairs, post WRITE /
//! WRITE-with-immediate / READ / SEND, and poll completions. Thin bindings over `remora-fabric`.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use numpy::prelude::*;
use numpy::PyUntypedArray;
use pyo3::exceptions::{PyConnectionError, PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use remora_fabric as fab;
use remora_mem as mem;

mod memory;

use memory::{decode_region, PyPd, PyRegion};

fn fab_err(e: fab::Error) -> PyErr {
    match e {
        fab::Error::Setup(_) | fab::Error::Disconnected | fab::Error::Timeout => {
            PyConnectionError::new_err(e.to_string())
        }
        fab::Error::Local(_) | fab::Error::TooLong(_) | fab::Error::Unsupported { .. } => {
            PyValueError::new_err(e.to_string())
        }
        fab::Error::QpError | fab::Error::QueueFull(_) => PyRuntimeError::new_err(e.to_string()),
        _ => PyOSError::new_err(e.to_string()),
    }
}

fn mem_err(e: mem::Error) -> PyErr {
    PyOSError::new_err(e.to_string())
}

fn parse_access(s: &str) -> PyResult<mem::Access> {
    let mut a = mem::Access::NONE;
    for c in s.chars() {
        a |= match c {
            'l' => mem::Access::LOCAL_WRITE,
            'w' => mem::Access::REMOTE_WRITE,
            'r' => mem::Access::REMOTE_READ,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "access {s:?}: use letters l (local write), w (remote write), r (remote read)"
                )))
            }
        };
    }
    Ok(a)
}

/// A work completion.
#[pyclass(module = "remora.fabric", name = "Completion", get_all, frozen)]
struct PyCompletion {
    wr_id: u64,
    status: &'static str,
    opcode: &'static str,
    byte_len: u32,
    imm: Option<u32>,
}

#[pymethods]
impl PyCompletion {
    /// True when the request succeeded.
    #[getter]
    fn ok(&self) -> bool {
        self.status == "success"
    }
    fn __repr__(&self) -> String {
        format!(
            "Completion(wr_id={}, status={:?}, opcode={:?}, byte_len={}, imm={:?})",
            self.wr_id, self.status, self.opcode, self.byte_len, self.imm
        )
    }
}

fn completion(c: fab::Completion) -> PyCompletion {
    use fab::{Status as S, WcOpcode as O};
    PyCompletion {
        wr_id: c.wr_id,
        status: match c.status {
            S::Success => "success",
            S::RemoteAccessError => "remote_access_error",
            S::RemoteInvalidRequest => "remote_invalid_request",
            S::RemoteOperationalError => "remote_operational_error",
            S::RetryExceeded => "retry_exceeded",
            S::RnrRetryExceeded => "rnr_retry_exceeded",
            S::Flushed => "flushed",
            S::LocalLengthError => "local_length_error",
            S::LocalPageInError => "local_page_in_error",
        },
        opcode: match c.opcode {
            O::Write => "write",
            O::Read => "read",
            O::Send => "send",
            O::Recv => "recv",
            O::RecvRdmaWithImm => "recv_rdma_with_imm",
        },
        byte_len: c.byte_len,
        imm: c.imm,
    }
}

/// A connected queue pair. `close()` (or the end of a `with` block, or garbage collection)
/// disconnects it; its methods raise `ValueError` after that.
#[pyclass(module = "remora.fabric", name = "QueuePair")]
struct PyQp {
    qp: Mutex<Option<Arc<fab::Qp>>>,
}

impl PyQp {
    fn new(qp: fab::Qp) -> PyQp {
        PyQp {
            qp: Mutex::new(Some(Arc::new(qp))),
        }
    }

    /// The queue pair, or `ValueError` once closed.
    fn qp(&self) -> PyResult<Arc<fab::Qp>> {
        self.qp
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| PyValueError::new_err("the queue pair is closed"))
    }
}

#[pymethods]
impl PyQp {
    /// One-sided WRITE of `length` bytes at `offset` of `region` to `remote_addr` in the
    /// peer's region `rkey`; with `imm`, the peer gets a completion carrying it.
    #[pyo3(signature = (wr_id, region, offset, length, remote_addr, rkey, imm = None))]
    #[allow(clippy::too_many_arguments)]
    fn post_write(
        &self,
        wr_id: u64,
        region: &PyRegion,
        offset: usize,
        length: usize,
        remote_addr: u64,
        rkey: u32,
        imm: Option<u32>,
    ) -> PyResult<()> {
        self.qp()?
            .post_write(
                wr_id,
                &region.region,
                offset,
                length,
                remote_addr,
                rkey,
                imm,
            )
            .map_err(fab_err)
    }

    /// One-sided READ of `length` bytes at `remote_addr` (region `rkey`) into `region` at
    /// `offset` (RC only).
    fn post_read(
        &self,
        wr_id: u64,
        region: &PyRegion,
        offset: usize,
        length: usize,
        remote_addr: u64,
        rkey: u32,
    ) -> PyResult<()> {
        self.qp()?
            .post_read(wr_id, &region.region, offset, length, remote_addr, rkey)
            .map_err(fab_err)
    }

    /// SEND into the peer's next posted receive buffer.
    #[pyo3(signature = (wr_id, region, offset, length, imm = None))]
    fn post_send(
        &self,
        wr_id: u64,
        region: &PyRegion,
        offset: usize,
        length: usize,
        imm: Option<u32>,
    ) -> PyResult<()> {
        self.qp()?
            .post_send(wr_id, &region.region, offset, length, imm)
            .map_err(fab_err)
    }

    /// Posts a receive buffer for the peer's SENDs.
    fn post_recv(
        &self,
        wr_id: u64,
        region: &PyRegion,
        offset: usize,
        length: usize,
    ) -> PyResult<()> {
        self.qp()?
            .post_recv(wr_id, &region.region, offset, length)
            .map_err(fab_err)
    }

    /// Completions available now (at most `max`), without waiting.
    #[pyo3(signature = (max = 64))]
    fn poll(&self, max: usize) -> PyResult<Vec<PyCompletion>> {
        let mut out = Vec::new();
        self.qp()?.poll(&mut out, max);
        Ok(out.into_iter().map(completion).collect())
    }

    /// The next completion, waiting up to `timeout` seconds (GIL released); None on timeout.
    /// With `progress="poll"` the waiting thread receives and answers for the queue pair.
    #[pyo3(signature = (timeout = 1.0))]
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<PyCompletion>> {
        let t = seconds(timeout)?;
        let qp = self.qp()?;
        let c = py.detach(move || qp.wait(t)).map_err(fab_err)?;
        Ok(c.map(completion))
    }

    /// The next completion by busy polling up to `timeout` seconds (GIL released; burns a
    /// core, lowest latency); None on timeout.
    #[pyo3(signature = (timeout = 1.0))]
    fn spin(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<PyCompletion>> {
        let t = seconds(timeout)?;
        let qp = self.qp()?;
        Ok(py.detach(move || qp.spin(t)).map(completion))
    }

    /// With `progress="poll"`: receives and answers for this queue pair once, waiting up to
    /// `timeout` seconds for something to arrive (GIL released); completions stay queued.
    /// Does nothing with `progress="thread"`.
    #[pyo3(signature = (timeout = 0.0))]
    fn progress(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let t = seconds(timeout)?;
        let qp = self.qp()?;
        py.detach(move || qp.progress(t)).map_err(fab_err)
    }

    /// Where this queue pair's datagrams go ("host:port", udp only; port 4791 unless the
    /// peer found it taken).
    #[getter]
    fn udp_peer(&self) -> PyResult<Option<String>> {
        Ok(self.qp()?.udp_peer().map(|a| a.to_string()))
    }

    /// Transport name.
    #[getter]
    fn transport(&self) -> PyResult<String> {
        Ok(self.qp()?.transport().to_string())
    }
    /// Queue pair type ("rc" or "uc").
    #[getter]
    fn qp_type(&self) -> PyResult<String> {
        Ok(self.qp()?.qp_type().to_string())
    }
    /// Negotiated path MTU.
    #[getter]
    fn mtu(&self) -> PyResult<usize> {
        Ok(self.qp()?.mtu())
    }
    /// Counters as a dict.
    fn stats(&self) -> PyResult<std::collections::HashMap<&'static str, u64>> {
        let s = self.qp()?.stats();
        let e = s.engine;
        Ok([
            ("tx_packets", e.tx_packets),
            ("rx_packets", e.rx_packets),
            ("retransmits", e.retransmits),
            ("timeouts", e.timeouts),
            ("naks_sent", e.naks_sent),
            ("naks_received", e.naks_received),
            ("access_errors", e.access_errors),
            ("acks_sent", e.acks_sent),
            ("invalid_requests", e.invalid_requests),
            ("bad_pkey", e.bad_pkey),
            ("icrc_errors", s.icrc_errors),
            ("faults", e.faults),
            ("page_ins", e.page_ins),
            ("pages_in", e.pages_in),
            ("fault_naks", e.fault_naks),
            ("errs_sent", e.errs_sent),
            ("errs_received", e.errs_received),
            ("fault_timeouts", e.fault_timeouts),
            ("held_drops", e.held_drops),
            ("wave_holds", e.wave_holds),
            ("paced_resumes", e.paced_resumes),
            ("source_faults", e.source_faults),
            ("one_sided", e.one_sided),
            ("ring_completions", e.ring_completions),
        ]
        .into_iter()
        .collect())
    }
    /// The kernel-checked `(pid, uid, gid)` of the peer process on an shm queue pair, taken
    /// when it connected; `None` on udp and tcp.
    fn peer_credentials(&self) -> PyResult<Option<(i32, u32, u32)>> {
        Ok(self.qp()?.peer_credentials().map(|c| (c.pid, c.uid, c.gid)))
    }

    /// Disconnects the queue pair (the peer sees it gone). Idempotent; a call waiting on it in
    /// another thread finishes first.
    fn close(&self, py: Python<'_>) {
        let q = self.qp.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(move || drop(q));
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Closes the queue pair; exceptions propagate.
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

/// Page-fault settings as Python passes them: `faults` "part" or "inline", `page_in` "pio",
/// "pi4" or "pia", `page_in_block` bytes, `fault_timeout` seconds or None (wait for the ERR).
struct PartArgs<'a> {
    faults: &'a str,
    page_in: &'a str,
    page_in_block: usize,
    fault_timeout: Option<f64>,
}

impl PartArgs<'_> {
    fn config(&self) -> PyResult<fab::PartConfig> {
        let fault_timeout = match self.fault_timeout {
            None => None,
            Some(t) if t.is_finite() && t > 0.0 && t < 3600.0 => {
                Some(std::time::Duration::from_secs_f64(t))
            }
            Some(t) => {
                return Err(PyValueError::new_err(format!(
                    "fault_timeout {t} (seconds, > 0, or None to wait for the ERR)"
                )))
            }
        };
        if self.page_in_block == 0 {
            return Err(PyValueError::new_err(
                "page_in_block must be at least 1 byte",
            ));
        }
        Ok(fab::PartConfig {
            mode: self.faults.parse().map_err(PyValueError::new_err)?,
            policy: self.page_in.parse().map_err(PyValueError::new_err)?,
            block: self.page_in_block,
            fault_timeout,
            ..fab::PartConfig::default()
        })
    }
}

fn options(
    transport: &str,
    qp: &str,
    mtu: usize,
    part: &PartArgs,
    progress: &str,
) -> PyResult<fab::QpOptions> {
    Ok(fab::QpOptions {
        transport: transport.parse().map_err(PyValueError::new_err)?,
        qp_type: qp.parse().map_err(PyValueError::new_err)?,
        mtu,
        part: part.config()?,
        progress: progress.parse().map_err(PyValueError::new_err)?,
        ..fab::QpOptions::default()
    })
}

fn seconds(timeout: f64) -> PyResult<Duration> {
    if !(timeout.is_finite() && (0.0..1e9).contains(&timeout)) {
        return Err(PyValueError::new_err(
            "timeout must be a non-negative number of seconds",
        ));
    }
    Ok(Duration::from_secs_f64(timeout))
}

fn addr(s: &str) -> PyResult<std::net::SocketAddr> {
    s.parse()
        .map_err(|_| PyValueError::new_err(format!("address {s:?} (expected host:port)")))
}

/// Accepts queue pairs (the server side of `connect`). `close()` (or the end of a `with`
/// block, or garbage collection) stops listening; the queue pairs it accepted stay connected.
#[pyclass(module = "remora.fabric", name = "Listener")]
struct PyListener {
    l: Mutex<Option<Arc<fab::Listener>>>,
}

impl PyListener {
    /// The listener, or `ValueError` once closed.
    fn l(&self) -> PyResult<Arc<fab::Listener>> {
        self.l
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| PyValueError::new_err("the listener is closed"))
    }
}

#[pymethods]
impl PyListener {
    /// `faults`, `page_in`, `page_in_block` and `fault_timeout` set how this side handles page
    /// faults in its on-demand regions (PART, udp RC): see `connect`. `progress` "thread" (a
    /// background receive thread) or "poll" (the udp queue pairs it accepts are driven by the
    /// threads that wait on them or call `progress`). The udp receive socket (port 4791 when
    /// free) is bound at once; `udp_address` says where.
    #[new]
    #[pyo3(signature = (address, pd, mtu = 4096, faults = "part", page_in = "pia", page_in_block = 16384, fault_timeout = None, progress = "thread", lazy_ack = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        address: &str,
        pd: &PyPd,
        mtu: usize,
        faults: &str,
        page_in: &str,
        page_in_block: usize,
        fault_timeout: Option<f64>,
        progress: &str,
        lazy_ack: bool,
    ) -> PyResult<PyListener> {
        let part = PartArgs {
            faults,
            page_in,
            page_in_block,
            fault_timeout,
        };
        let opts = fab::QpOptions {
            lazy_ack,
            ..options("udp", "rc", mtu, &part, progress)?
        };
        let l = fab::Listener::bind(addr(address)?, pd.pd.clone(), opts).map_err(fab_err)?;
        Ok(PyListener {
            l: Mutex::new(Some(Arc::new(l))),
        })
    }

    /// The setup address ("host:port").
    #[getter]
    fn address(&self) -> PyResult<String> {
        Ok(self.l()?.local_addr().to_string())
    }

    /// The udp (RoCEv2) receive address on the setup address' IP, once bound: port 4791
    /// unless another process held it.
    #[getter]
    fn udp_address(&self) -> PyResult<Option<String>> {
        let l = self.l()?;
        Ok(l.udp_device(l.local_addr().ip()).map(|a| a.to_string()))
    }

    /// Waits for one peer; returns (QueuePair, the peer's private data). The GIL is released.
    #[pyo3(signature = (private = b"".as_slice()))]
    fn accept<'py>(
        &self,
        py: Python<'py>,
        private: &[u8],
    ) -> PyResult<(PyQp, Bound<'py, PyBytes>)> {
        let l = self.l()?;
        let p = private.to_vec();
        let (qp, peer) = py.detach(move || l.accept(&p)).map_err(fab_err)?;
        Ok((PyQp::new(qp), PyBytes::new(py, &peer)))
    }

    /// Stops listening (new peers are refused; accepted queue pairs stay connected).
    /// Idempotent; an `accept` waiting in another thread is not interrupted.
    fn close(&self, py: Python<'_>) {
        let l = self.l.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(move || drop(l));
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Closes the listener; exceptions propagate.
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

/// Connects to a Listener; returns (QueuePair, the peer's private data).
///
/// Page faults (PART, udp RC): a WRITE into pages of an on-demand region that are not resident
/// is not placed; the responder brings the pages in off its receive path (`page_in`: "pio" the
/// packet's pages, "pi4" its `page_in_block`-byte block, "pia" the rest of the message) and asks
/// for a resend. `fault_timeout` (seconds) makes this requester resend on its own after a fault
/// NAK instead of waiting for that request; `faults="inline"` takes faults on the receive
/// thread instead.
///
/// `progress`: "thread" (a background receive thread) or "poll" (udp: no thread on the data
/// path; `wait`, `spin`, `poll` and `progress` on the queue pair do the receive work).
/// `lazy_ack=True` (tcp with "poll"): a busy-polling call holds a lone ACK back for one call so
/// that the next post carries it (see `QpOptions::lazy_ack`).
#[pyfunction]
#[pyo3(signature = (address, pd, transport = "udp", qp = "rc", mtu = 4096, private = b"".as_slice(), faults = "part", page_in = "pia", page_in_block = 16384, fault_timeout = None, progress = "thread", lazy_ack = false))]
#[allow(clippy::too_many_arguments)]
fn connect<'py>(
    py: Python<'py>,
    address: &str,
    pd: &PyPd,
    transport: &str,
    qp: &str,
    mtu: usize,
    private: &[u8],
    faults: &str,
    page_in: &str,
    page_in_block: usize,
    fault_timeout: Option<f64>,
    progress: &str,
    lazy_ack: bool,
) -> PyResult<(PyQp, Bound<'py, PyBytes>)> {
    let part = PartArgs {
        faults,
        page_in,
        page_in_block,
        fault_timeout,
    };
    let opts = fab::QpOptions {
        lazy_ack,
        ..options(transport, qp, mtu, &part, progress)?
    };
    let a = addr(address)?;
    let pd = pd.pd.clone();
    let p = private.to_vec();
    let (q, peer) = py
        .detach(move || fab::connect(a, pd, opts, &p))
        .map_err(fab_err)?;
    Ok((PyQp::new(q), PyBytes::new(py, &peer)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPd>()?;
    m.add_class::<PyRegion>()?;
    m.add_class::<PyQp>()?;
    m.add_class::<PyListener>()?;
    m.add_class::<PyCompletion>()?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(decode_region, m)?)?;
    Ok(())
}
