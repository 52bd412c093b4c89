//! `remora.kv.Client`: a client of `remora kv serve` whose GETs are one-sided READs of the
//! server's arena where the server grants it (`--one-sided`), and the text protocol otherwise.
//! Thin bindings over `remora_kv::onesided::Client`, the code `remora bench kv-onesided` runs.
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyConnectionError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use remora_fabric::Transport;
use remora_kv::arena::remote::RemoteItem;
use remora_kv::onesided;

fn io_err(e: std::io::Error) -> PyErr {
    match e.kind() {
        std::io::ErrorKind::InvalidInput => PyValueError::new_err(e.to_string()),
        std::io::ErrorKind::TimedOut => PyTimeoutError::new_err(e.to_string()),
        _ => PyConnectionError::new_err(e.to_string()),
    }
}

/// A key: bytes, or a str (UTF-8).
#[derive(FromPyObject)]
enum Key {
    Bytes(Vec<u8>),
    Str(String),
}

impl Key {
    fn bytes(&self) -> &[u8] {
        match self {
            Key::Bytes(b) => b,
            Key::Str(s) => s.as_bytes(),
        }
    }
}

fn resolve(addr: &str) -> PyResult<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(|e| PyValueError::new_err(format!("{addr}: {e}")))?
        .next()
        .ok_or_else(|| PyValueError::new_err(format!("{addr}: no address")))
}

/// A client of a `remora kv serve` cache at `addr` ("host:port", its text port).
///
/// With `one_sided=True` (the default) the client asks the server's `stats` for its grant
/// (`one_sided_grant`, present when the server runs with `--one-sided HOST:PORT`) and reads
/// GETs by one-sided READs of the arena over `transport`: "udp" (RoCEv2, any host) or "shm"
/// (same host, no server CPU at all). What READs cannot decide (an item being written past a
/// bound of retries, a value larger than the reader reads, a long chain), a server that
/// grants nothing, and `one_sided=False` go to the text protocol's `mg`. Writes (`set`,
/// `delete`) always go to the text port.
///
/// ```python
/// from remora import kv
/// c = kv.Client("127.0.0.1:11211", transport="shm")
/// c.set("greeting", b"hello", flags=3)
/// assert c.get("greeting") == b"hello"
/// print(c.get_item("greeting"))   # {'value': b'hello', 'flags': 3, 'cas': ..., 'exptime': 0}
/// print(c.get_many(["greeting", "absent"]))   # {'greeting': b'hello'}
/// print(c.stats())   # {'one_sided': True, 'reads': 3, 'fallbacks': 0, 'reconnects': 0}
/// ```
#[pyclass(module = "remora.kv", name = "Client")]
pub struct Client {
    inner: Mutex<onesided::Client>,
}

impl Client {
    fn lock(&self) -> MutexGuard<'_, onesided::Client> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn item_dict<'py>(py: Python<'py>, it: &RemoteItem) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("value", PyBytes::new(py, &it.value))?;
    d.set_item("flags", it.flags)?;
    d.set_item("cas", it.cas)?;
    d.set_item("exptime", it.exptime)?;
    Ok(d)
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (addr, one_sided = true, transport = "udp"))]
    fn new(py: Python<'_>, addr: &str, one_sided: bool, transport: &str) -> PyResult<Client> {
        let transport = match transport {
            "udp" => Transport::Udp,
            "shm" => Transport::Shm,
            other => {
                return Err(PyValueError::new_err(format!(
                    "transport {other:?}: \"udp\" or \"shm\""
                )))
            }
        };
        let text = resolve(addr)?;
        let c = py
            .detach(|| {
                if one_sided {
                    onesided::Client::open(text, transport)
                } else {
                    onesided::Client::text_only(text)
                }
            })
            .map_err(io_err)?;
        Ok(Client {
            inner: Mutex::new(c),
        })
    }

    /// The value of `key` (bytes or str), or None.
    fn get<'py>(&self, py: Python<'py>, key: Key) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let it = py.detach(|| self.lock().get(key.bytes())).map_err(io_err)?;
        Ok(it.map(|it| PyBytes::new(py, &it.value)))
    }

    /// `{"value", "flags", "cas", "exptime"}` of `key`, or None; `exptime` is on the server's
    /// relative clock (0: never), as `mg`'s `t` flag gives it.
    fn get_item<'py>(&self, py: Python<'py>, key: Key) -> PyResult<Option<Bound<'py, PyDict>>> {
        let it = py.detach(|| self.lock().get(key.bytes())).map_err(io_err)?;
        it.map(|it| item_dict(py, &it)).transpose()
    }

    /// The values of the `keys` that are present, as {key: value}: the keys' READs go out
    /// together, one round trip per step of the walk for the whole list.
    fn get_many<'py>(&self, py: Python<'py>, keys: Vec<Key>) -> PyResult<Bound<'py, PyDict>> {
        let refs: Vec<&[u8]> = keys.iter().map(Key::bytes).collect();
        let got = py.detach(|| self.lock().get_many(&refs)).map_err(io_err)?;
        let d = PyDict::new(py);
        for (k, it) in keys.iter().zip(got) {
            if let Some(it) = it {
                let v = PyBytes::new(py, &it.value);
                match k {
                    Key::Bytes(b) => d.set_item(PyBytes::new(py, b), v)?,
                    Key::Str(s) => d.set_item(s, v)?,
                }
            }
        }
        Ok(d)
    }

    /// Stores `value` under `key` (the text protocol's `set`); True when stored.
    #[pyo3(signature = (key, value, flags = 0, exptime = 0))]
    fn set(
        &self,
        py: Python<'_>,
        key: Key,
        value: Vec<u8>,
        flags: u32,
        exptime: i64,
    ) -> PyResult<bool> {
        py.detach(|| self.lock().set(key.bytes(), &value, flags, exptime))
            .map_err(io_err)
    }

    /// Deletes `key` (the text protocol's `delete`); True when it was there.
    fn delete(&self, py: Python<'_>, key: Key) -> PyResult<bool> {
        py.detach(|| self.lock().delete(key.bytes()))
            .map_err(io_err)
    }

    /// `{"one_sided": bool, "reads": GETs answered by READs, "fallbacks": by mg,
    /// "reconnects": to a restarted or moved server}`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.lock();
        let d = PyDict::new(py);
        d.set_item("one_sided", c.one_sided())?;
        d.set_item("reads", c.reads)?;
        d.set_item("fallbacks", c.fallbacks)?;
        d.set_item("reconnects", c.reconnects)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let c = self.lock();
        format!(
            "remora.kv.Client({}, one_sided={})",
            c.server(),
            if c.one_sided() { "True" } else { "False" }
        )
    }
}
