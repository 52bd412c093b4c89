//! `remora.match`: exact descriptor matching and keypoint files ([`remora_match`]) for Python.
//!
//! Descriptors are borrowed without copies: 2-D C-contiguous numpy arrays of `uint8` (exact
//! integer path) or `float32` (float path), query and train of the same dtype and dimension.
//! Anything else is a `TypeError` (type, dtype: with the fix to apply) or a `ValueError`
//! (layout, shape, values, options), never a silent conversion. Outputs are Rust vectors handed to numpy
//! without a copy. The GIL is released while searching, filtering and reading or writing files.
use std::path::{Path, PathBuf};

use numpy::prelude::*;
use numpy::{
    PyArray1, PyArray2, PyReadonlyArray, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArray,
};
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use remora_match::formats::{self, result, Descriptors, Format, FormatError, Keypoints};
use remora_match::{Error, Kernel, Match, NeighbourFilter, Neighbours, Options};

fn err(e: Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// An `OSError` built from errno, so that Python picks the subclass (`FileNotFoundError`,
/// `PermissionError`, `IsADirectoryError`, ...) and sets `filename`.
fn io_err(path: &Path, e: &std::io::Error) -> PyErr {
    let p = path.display().to_string();
    match e.raw_os_error() {
        Some(code) => {
            let msg = e.to_string();
            let msg = msg
                .strip_suffix(&format!(" (os error {code})"))
                .unwrap_or(&msg)
                .to_string();
            PyOSError::new_err((code, msg, p))
        }
        None => PyOSError::new_err(format!("{p}: {e}")),
    }
}

/// Malformed files are `ValueError`s naming the file; I/O failures `OSError`s.
fn file_err(path: &Path, e: FormatError) -> PyErr {
    match &e {
        FormatError::Io { source, .. } => io_err(path, source),
        _ => PyValueError::new_err(format!("{}: {e}", path.display())),
    }
}

/// A descriptor array, borrowed.
enum Desc<'py> {
    U8(PyReadonlyArray2<'py, u8>),
    F32(PyReadonlyArray2<'py, f32>),
}

impl Desc<'_> {
    fn shape(&self) -> (usize, usize) {
        let s = match self {
            Desc::U8(a) => a.shape(),
            Desc::F32(a) => a.shape(),
        };
        (s[0], s[1])
    }

    fn dtype(&self) -> &'static str {
        match self {
            Desc::U8(_) => "uint8",
            Desc::F32(_) => "float32",
        }
    }
}

/// The values of a C-contiguous array, without a copy.
fn values<'a, T: numpy::Element, D: numpy::ndarray::Dimension>(
    a: &'a PyReadonlyArray<'_, T, D>,
    what: &str,
) -> PyResult<&'a [T]> {
    if a.len() == 0 {
        return Ok(&[]);
    }
    // numpy's as_slice also accepts Fortran order, whose memory is not in row order.
    if !a.is_c_contiguous() {
        return Err(not_contiguous(what));
    }
    a.as_slice().map_err(|_| not_contiguous(what))
}

/// A wrong layout is a `ValueError`, as numpy's own (and the other remora modules') are; a
/// wrong dtype a `TypeError`.
fn not_contiguous(what: &str) -> PyErr {
    PyValueError::new_err(format!(
        "{what} is not C-contiguous (a slice, a transposed view or Fortran order): \
         pass np.ascontiguousarray({what})"
    ))
}

/// Checks and borrows a descriptor array: 2-D, uint8 or float32, C-contiguous.
fn descriptors<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Desc<'py>> {
    let py = obj.py();
    let arr = obj.cast::<PyUntypedArray>().map_err(|_| {
        let ty = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!(
            "{what} must be a numpy array of uint8 or float32, not {ty}: \
             convert with np.ascontiguousarray({what}, dtype=np.uint8) (or np.float32)"
        ))
    })?;
    if arr.ndim() != 2 {
        return Err(PyValueError::new_err(format!(
            "{what} must be a 2-D array (points, dimension), not {}-D",
            arr.ndim()
        )));
    }
    let dt = arr.dtype();
    let borrow = |e: &dyn std::fmt::Display| {
        PyValueError::new_err(format!("{what} is being written elsewhere: {e}"))
    };
    let d = if dt.is_equiv_to(&numpy::dtype::<u8>(py)) {
        let a = obj
            .cast::<PyArray2<u8>>()
            .map_err(|e| PyTypeError::new_err(e.to_string()))?;
        Desc::U8(a.try_readonly().map_err(|e| borrow(&e))?)
    } else if dt.is_equiv_to(&numpy::dtype::<f32>(py)) {
        let a = obj
            .cast::<PyArray2<f32>>()
            .map_err(|e| PyTypeError::new_err(e.to_string()))?;
        Desc::F32(a.try_readonly().map_err(|e| borrow(&e))?)
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} has dtype {dt}; descriptors must be uint8 (exact integer path) or float32: \
             convert with np.ascontiguousarray({what}, dtype=np.uint8) (or np.float32)"
        )));
    };
    if !arr.is_c_contiguous() {
        return Err(not_contiguous(what));
    }
    Ok(d)
}

/// Query and train descriptors of the same dtype and dimension; returns the dimension.
fn pair<'py>(
    query: &Bound<'py, PyAny>,
    train: &Bound<'py, PyAny>,
) -> PyResult<(Desc<'py>, Desc<'py>, usize)> {
    let q = descriptors(query, "query")?;
    let t = descriptors(train, "train")?;
    if q.dtype() != t.dtype() {
        return Err(PyTypeError::new_err(format!(
            "query is {} and train {}: both must have the same dtype \
             (convert one with np.ascontiguousarray(x, dtype=...))",
            q.dtype(),
            t.dtype()
        )));
    }
    let (dq, dt) = (q.shape().1, t.shape().1);
    if dq != dt {
        return Err(PyValueError::new_err(format!(
            "query descriptors have dimension {dq}, train descriptors {dt}"
        )));
    }
    // The crate's own check, so that an empty array of dimension 0 or > MAX_DIM is refused too.
    if dq == 0 || dq > remora_match::MAX_DIM {
        return Err(err(Error::Dimension(dq)));
    }
    Ok((q, t, dq))
}

fn kernel(name: &str) -> PyResult<Kernel> {
    match name {
        "auto" => Ok(Kernel::Auto),
        "portable" => Ok(Kernel::Portable),
        "avx2" => Ok(Kernel::Avx2),
        "avx512" => Ok(Kernel::Avx512),
        "gpu" | "gpu-wgpu" => Ok(Kernel::Gpu),
        _ => Err(PyValueError::new_err(format!(
            "unknown kernel {name:?}: one of \"auto\", \"portable\", \"avx2\", \"avx512\", \"gpu\""
        ))),
    }
}

fn kernel_name(k: Kernel) -> &'static str {
    match k {
        Kernel::Auto => "auto",
        Kernel::Portable => "portable",
        Kernel::Avx2 => "avx2",
        Kernel::Avx512 => "avx512",
        Kernel::Gpu => "gpu-wgpu",
    }
}

/// An `(n, cols)` array from a vector of `n · cols` values, without a copy.
fn array2<'py, T: numpy::Element>(
    py: Python<'py>,
    v: Vec<T>,
    cols: usize,
) -> PyResult<Bound<'py, PyArray2<T>>> {
    let n = v.len() / cols;
    PyArray1::from_vec(py, v).reshape([n, cols])
}

fn pairs_array<'py>(py: Python<'py>, m: &[Match]) -> PyResult<Bound<'py, PyArray2<i64>>> {
    let v = m
        .iter()
        .flat_map(|m| [m.query as i64, m.train as i64])
        .collect();
    array2(py, v, 2)
}

/// Concrete u8 distance kernels this CPU runs, fastest first ("avx512", "avx2", "portable").
/// `kernel="auto"` uses the first.
#[pyfunction]
fn kernels() -> Vec<&'static str> {
    Kernel::available().into_iter().map(kernel_name).collect()
}

/// Matches query descriptors against train descriptors: each query's exact nearest train
/// point, kept when it passes Lowe's ratio test `d1 < ratio * d2` (plain distances, strict,
/// exact; `ratio=None` disables it; with it on, a one-point train set matches nothing), the
/// optional cross-check (mutual best) and `max_distance` (`d1 <= max_distance`).
///
/// `query` (n, dim) and `train` (m, dim): C-contiguous uint8 (exact integer arithmetic) or
/// float32 arrays of the same dtype, borrowed without copies. Ties go to the lower index.
/// Returns an (k, 2) int64 array of `[query_index, train_index]` rows sorted by query index
/// (OpenCV's queryIdx/trainIdx); with `return_distances=True`, `(pairs, distances)` with the
/// float32 plain (not squared) distances `d1`.
/// `threads`: None for all cores. `kernel`: "auto", "portable", "avx2" or "avx512" (u8 path;
/// all give identical results).
#[pyfunction(name = "match")]
#[pyo3(signature = (query, train, ratio=Some(0.6), cross_check=false, max_distance=None, threads=None, return_distances=false, kernel="auto"))]
#[allow(clippy::too_many_arguments)]
fn match_<'py>(
    py: Python<'py>,
    query: &Bound<'py, PyAny>,
    train: &Bound<'py, PyAny>,
    ratio: Option<f64>,
    cross_check: bool,
    max_distance: Option<f64>,
    threads: Option<usize>,
    return_distances: bool,
    kernel: &str,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(r) = ratio {
        if !(r > 0.0 && r <= 1.0) {
            return Err(PyValueError::new_err(format!(
                "ratio {r} is not in (0, 1] (None disables the ratio test)"
            )));
        }
    }
    let opts = Options {
        ratio: ratio.map(|r| r as f32),
        cross_check,
        max_distance: max_distance.map(|m| m as f32),
        threads,
        kernel: self::kernel(kernel)?,
    };
    let (q, t, dim) = pair(query, train)?;
    let m = match (&q, &t) {
        (Desc::U8(q), Desc::U8(t)) => {
            let (q, t) = (values(q, "query")?, values(t, "train")?);
            py.detach(|| remora_match::match_u8(q, t, dim, &opts))
        }
        (Desc::F32(q), Desc::F32(t)) => {
            let (q, t) = (values(q, "query")?, values(t, "train")?);
            py.detach(|| remora_match::match_f32(q, t, dim, &opts))
        }
        _ => unreachable!("pair() checked the dtypes"),
    }
    .map_err(err)?;
    let pairs = pairs_array(py, &m)?;
    if return_distances {
        let d = PyArray1::from_vec(py, m.iter().map(|m| m.distance).collect());
        Ok((pairs, d).into_pyobject(py)?.into_any())
    } else {
        Ok(pairs.into_any())
    }
}

/// Flattens neighbours into (indices, squared distances), `missing` where there is none.
fn flatten<D: Copy>(nb: &[Neighbours<D>], missing: D) -> (Vec<i64>, Vec<D>) {
    let mut idx = Vec::with_capacity(nb.len() * 2);
    let mut d2 = Vec::with_capacity(nb.len() * 2);
    for n in nb {
        for x in [n.best, n.second] {
            idx.push(x.map_or(-1, |x| x.index as i64));
            d2.push(x.map_or(missing, |x| x.dist2));
        }
    }
    (idx, d2)
}

/// The exact two nearest train points of every query: `(indices, squared_distances)`, both
/// (n, 2), best first. Indices int64 (-1 where the train set has fewer points); squared
/// distances int64 for uint8 descriptors (exact; -1 where missing), float32 for float32
/// descriptors (inf where missing). Ties go to the lower index.
#[pyfunction]
#[pyo3(signature = (query, train, threads=None, kernel="auto"))]
fn knn2<'py>(
    py: Python<'py>,
    query: &Bound<'py, PyAny>,
    train: &Bound<'py, PyAny>,
    threads: Option<usize>,
    kernel: &str,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let opts = Options {
        threads,
        kernel: self::kernel(kernel)?,
        ..Options::default()
    };
    let (q, t, dim) = pair(query, train)?;
    match (&q, &t) {
        (Desc::U8(q), Desc::U8(t)) => {
            let (q, t) = (values(q, "query")?, values(t, "train")?);
            let nb = py
                .detach(|| remora_match::knn2_u8(q, t, dim, &opts))
                .map_err(err)?;
            let (idx, d2) = flatten(&nb, u32::MAX);
            let d2 = d2
                .into_iter()
                .map(|d| if d == u32::MAX { -1 } else { d as i64 })
                .collect();
            Ok((
                array2(py, idx, 2)?.into_any(),
                array2::<i64>(py, d2, 2)?.into_any(),
            ))
        }
        (Desc::F32(q), Desc::F32(t)) => {
            let (q, t) = (values(q, "query")?, values(t, "train")?);
            let nb = py
                .detach(|| remora_match::knn2_f32(q, t, dim, &opts))
                .map_err(err)?;
            let (idx, d2) = flatten(&nb, f32::INFINITY);
            Ok((
                array2(py, idx, 2)?.into_any(),
                array2(py, d2, 2)?.into_any(),
            ))
        }
        _ => unreachable!("pair() checked the dtypes"),
    }
}

/// Positions `[x, y]` from a C-contiguous (n, 2) float64 array.
fn points(a: &PyReadonlyArray2<'_, f64>, what: &str) -> PyResult<Vec<[f64; 2]>> {
    if a.shape()[1] != 2 {
        return Err(PyValueError::new_err(format!(
            "{what} must have shape (n, 2), not {:?}",
            a.shape()
        )));
    }
    Ok(values(a, what)?
        .chunks_exact(2)
        .map(|p| [p[0], p[1]])
        .collect())
}

/// Matches from `[query, train]` rows of a C-contiguous (n, 2) int64 array.
fn matches(a: &PyReadonlyArray2<'_, i64>) -> PyResult<Vec<Match>> {
    if a.shape()[1] != 2 {
        return Err(PyValueError::new_err(format!(
            "pairs must have shape (n, 2), not {:?}",
            a.shape()
        )));
    }
    values(a, "pairs")?
        .chunks_exact(2)
        .map(|p| match (u32::try_from(p[0]), u32::try_from(p[1])) {
            (Ok(query), Ok(train)) => Ok(Match {
                query,
                train,
                distance: 0.0,
                second: None,
            }),
            _ => Err(PyValueError::new_err(format!(
                "pairs holds [{}, {}]: indices must be in 0..2**32-1",
                p[0], p[1]
            ))),
        })
        .collect()
}

/// MicMac's 2-D neighbourhood consistency filter: keeps a `[query, train]` pair when at least
/// `min_common` of the `k` nearest other pairs around its train point are also among the `k`
/// nearest around its query point; `passes` times. `pairs` (n, 2) int64, `query_xy` and
/// `train_xy` (points, 2) float64, all C-contiguous. Returns the kept rows, in their order.
#[pyfunction]
#[pyo3(signature = (pairs, query_xy, train_xy, k=9, min_common=5, passes=2))]
fn neighbour_filter<'py>(
    py: Python<'py>,
    pairs: PyReadonlyArray2<'py, i64>,
    query_xy: PyReadonlyArray2<'py, f64>,
    train_xy: PyReadonlyArray2<'py, f64>,
    k: usize,
    min_common: usize,
    passes: usize,
) -> PyResult<Bound<'py, PyArray2<i64>>> {
    let m = matches(&pairs)?;
    let q = points(&query_xy, "query_xy")?;
    let t = points(&train_xy, "train_xy")?;
    let f = NeighbourFilter {
        k,
        min_common,
        passes,
    };
    let kept = py
        .detach(|| remora_match::neighbour_filter(&m, &q, &t, &f))
        .map_err(err)?;
    pairs_array(py, &kept)
}

fn format(name: &str) -> PyResult<Format> {
    match name {
        "micmac" | "micmac-v0" => Ok(Format::MicmacV0),
        "micmac-v1" => Ok(Format::MicmacV1),
        "key" => Ok(Format::LoweKey),
        "npy" => Ok(Format::Npy),
        _ => Err(PyValueError::new_err(format!(
            "unknown keypoint format {name:?}: one of \"micmac\", \"micmac-v1\", \"key\", \"npy\""
        ))),
    }
}

fn format_name(f: Format) -> &'static str {
    match f {
        Format::MicmacV0 => "micmac",
        Format::MicmacV1 => "micmac-v1",
        Format::LoweKey => "key",
        Format::Npy => "npy",
    }
}

fn read(path: &Path) -> PyResult<Vec<u8>> {
    std::fs::read(path).map_err(|e| io_err(path, &e))
}

fn write(path: &Path, bytes: &[u8]) -> PyResult<()> {
    std::fs::write(path, bytes).map_err(|e| io_err(path, &e))
}

/// Reads a keypoint file: a dict with `xy` (n, 2) float64 (x = column, y = row), `scale` and
/// `angle` (n,) float64 (0 where the format has none), `descriptors` (n, dim) uint8 or float32
/// and `format`. `format`: "micmac" (Pastis v0), "micmac-v1" (Digeo), "key" (Lowe), "npy", or
/// None to recognise it from the content and extension. A malformed file is a `ValueError`
/// naming it; a missing one a `FileNotFoundError`.
#[pyfunction]
#[pyo3(signature = (path, format=None))]
fn read_keypoints<'py>(
    py: Python<'py>,
    path: PathBuf,
    format: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let want = format.map(self::format).transpose()?;
    let (kp, f) = py.detach(|| -> PyResult<(Keypoints, Format)> {
        let bytes = read(&path)?;
        let f = match want {
            Some(f) => f,
            None => formats::detect(&path, &bytes)
                .ok_or_else(|| file_err(&path, FormatError::Unknown))?,
        };
        Ok((
            formats::parse(&bytes, f).map_err(|e| file_err(&path, e))?,
            f,
        ))
    })?;
    let n = kp.len();
    let d = PyDict::new(py);
    d.set_item("xy", array2(py, kp.xy.into_flattened(), 2)?)?;
    d.set_item("scale", PyArray1::from_vec(py, kp.scale))?;
    d.set_item("angle", PyArray1::from_vec(py, kp.angle))?;
    let desc = match kp.descriptors {
        Descriptors::U8(v) => PyArray1::from_vec(py, v).reshape([n, kp.dim])?.into_any(),
        Descriptors::F32(v) => PyArray1::from_vec(py, v).reshape([n, kp.dim])?.into_any(),
    };
    d.set_item("descriptors", desc)?;
    d.set_item("format", format_name(f))?;
    Ok(d)
}

fn column(a: Option<PyReadonlyArray1<'_, f64>>, n: usize, what: &str) -> PyResult<Vec<f64>> {
    let Some(a) = a else {
        return Ok(vec![0.0; n]);
    };
    let v = values(&a, what)?;
    if v.len() != n {
        return Err(PyValueError::new_err(format!(
            "{what} has {} values for {n} points",
            v.len()
        )));
    }
    Ok(v.to_vec())
}

/// Writes a keypoint file in `format` ("micmac", "micmac-v1", "key" or "npy"): positions `xy`
/// (n, 2) float64, `descriptors` (n, dim) uint8 or float32 ("micmac" and "key" take uint8
/// only), `scale` and `angle` (n,) float64 or None for zeros. "npy" keeps the descriptors only.
#[pyfunction]
#[pyo3(signature = (path, xy, descriptors, scale=None, angle=None, format="micmac"))]
fn write_keypoints<'py>(
    py: Python<'py>,
    path: PathBuf,
    xy: PyReadonlyArray2<'py, f64>,
    descriptors: &Bound<'py, PyAny>,
    scale: Option<PyReadonlyArray1<'py, f64>>,
    angle: Option<PyReadonlyArray1<'py, f64>>,
    format: &str,
) -> PyResult<()> {
    let f = self::format(format)?;
    let xy = points(&xy, "xy")?;
    let d = self::descriptors(descriptors, "descriptors")?;
    let (n, dim) = d.shape();
    if xy.len() != n {
        return Err(PyValueError::new_err(format!(
            "{} positions for {n} descriptors",
            xy.len()
        )));
    }
    let descriptors = match &d {
        Desc::U8(a) => Descriptors::U8(values(a, "descriptors")?.to_vec()),
        Desc::F32(a) => Descriptors::F32(values(a, "descriptors")?.to_vec()),
    };
    let kp = Keypoints {
        xy,
        scale: column(scale, n, "scale")?,
        angle: column(angle, n, "angle")?,
        dim,
        descriptors,
    };
    py.detach(|| {
        let bytes = formats::encode(&kp, f).map_err(|e| file_err(&path, e))?;
        write(&path, &bytes)
    })
}

/// Reads a MicMac `.result` match file (text v0 or binary v1, recognised from the content):
/// an (n, 4) float64 array of `x1 y1 x2 y2` rows, image 1 first.
#[pyfunction]
fn read_result<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let rows = py.detach(|| -> PyResult<Vec<[f64; 4]>> {
        let bytes = read(&path)?;
        result::parse(&bytes).map_err(|e| file_err(&path, e))
    })?;
    array2(py, rows.into_flattened(), 4)
}

/// Writes a MicMac `.result` match file, image 1 first as MicMac does: `xy1` are the train
/// (image 1) positions, `xy2` the query (image 2) positions, `pairs` (n, 2) int64
/// `[query_index, train_index]` rows as `match` returns them; each row becomes
/// `x1 y1 x2 y2` = `xy1[train] xy2[query]`. Text v0 (`%g`, 6 digits), or binary v1
/// (little-endian f64) with `binary=True`.
#[pyfunction]
#[pyo3(signature = (path, xy1, xy2, pairs, binary=false))]
fn write_result<'py>(
    py: Python<'py>,
    path: PathBuf,
    xy1: PyReadonlyArray2<'py, f64>,
    xy2: PyReadonlyArray2<'py, f64>,
    pairs: PyReadonlyArray2<'py, i64>,
    binary: bool,
) -> PyResult<()> {
    let m = matches(&pairs)?;
    let train = points(&xy1, "xy1")?;
    let query = points(&xy2, "xy2")?;
    let rows = result::pairs(&m, &train, &query).map_err(err)?;
    py.detach(|| {
        let bytes = if binary {
            result::encode_v1(&rows, false).map_err(|e| file_err(&path, e))?
        } else {
            result::encode_v0(&rows).into_bytes()
        };
        write(&path, &bytes)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(kernels, m)?)?;
    m.add_function(wrap_pyfunction!(match_, m)?)?;
    m.add_function(wrap_pyfunction!(knn2, m)?)?;
    m.add_function(wrap_pyfunction!(neighbour_filter, m)?)?;
    m.add_function(wrap_pyfunction!(read_keypoints, m)?)?;
    m.add_function(wrap_pyfunction!(write_keypoints, m)?)?;
    m.add_function(wrap_pyfunction!(read_result, m)?)?;
    m.add_function(wrap_pyfunction!(write_result, m)?)?;
    m.add("MAX_DIM", remora_match::MAX_DIM)?;
    Ok(())
}
