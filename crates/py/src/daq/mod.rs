//! `remora.daq`: the JUNGFRAU processing core for Python.
//!
//! numpy in and out: inputs are borrowed without copies when C-contiguous and of the exact dtype
//! (`uint16` raw frames, `float32` images, `uint8` masks); anything else is a `TypeError` or
//! `ValueError`, never a silent conversion. Outputs are Rust vectors handed to numpy without a
//! copy. The GIL is released while engines run.
use std::path::PathBuf;
use std::sync::Arc;

use numpy::prelude::*;
use numpy::{PyArray1, PyArrayDyn, PyReadonlyArrayDyn, PyReadwriteArrayDyn};
use pyo3::exceptions::{PyIsADirectoryError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use remora_daq::azint::{AzConfig, AzMatrix, Split, Unit};
use remora_daq::calib::{Calibration as RCal, ConvTables, GainMaps, PedestalMaps};
use remora_daq::engine::{ConvOut, ConvStats, Engine, EngineKind, Registry};
use remora_daq::geometry::{AssemblyMap, Layout as RLayout};
use remora_daq::model::Detector;
use remora_daq::pedestal::{DarkPattern, PedestalTracker};
use remora_daq::pipeline::{Outcome, Pipeline as RPipeline, PipelineConfig};
use remora_daq::poni::Poni;
use remora_daq::sparse::SparseFrame;
use remora_daq::synth::{Synth as RSynth, SynthConfig};
use remora_daq::DaqError;

mod pipeline;

fn err(e: DaqError) -> PyErr {
    match e {
        DaqError::Io { .. } => PyOSError::new_err(e.to_string()),
        DaqError::NotAFile {
            kind: "a directory",
            ..
        } => PyIsADirectoryError::new_err(e.to_string()),
        DaqError::NotAFile { .. } => PyOSError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

fn slice<'a, T: numpy::Element>(a: &'a PyReadonlyArrayDyn<'_, T>, what: &str) -> PyResult<&'a [T]> {
    // numpy's as_slice also accepts Fortran order, whose memory is not in pixel order.
    if !a.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{what} must be a C-contiguous array"
        )));
    }
    a.as_slice()
        .map_err(|_| PyValueError::new_err(format!("{what} must be a C-contiguous array")))
}

fn engine(name: &str, threads: usize) -> PyResult<Arc<dyn Engine>> {
    let pref = if name == "auto" {
        None
    } else {
        Some(EngineKind::parse(name).map_err(err)?)
    };
    if let Some(k) = pref {
        return Registry::create(k, threads).map_err(err);
    }
    Ok(Registry::select(pref, threads).map_err(err)?.engine)
}

fn array_nd<'py, T: numpy::Element>(
    py: Python<'py>,
    v: Vec<T>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    PyArray1::from_vec(py, v).reshape(shape.to_vec())
}

fn stats_dict<'py>(py: Python<'py>, s: &ConvStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("above", s.above)?;
    d.set_item("saturated", s.saturated)?;
    d.set_item("errors", s.errors)?;
    d.set_item("invalid_gain", s.invalid_gain)?;
    Ok(d)
}

/// Names of the engines in fallback order and whether each is available.
#[pyfunction]
fn engines() -> Vec<(String, bool)> {
    EngineKind::ALL
        .iter()
        .map(|k| (k.name().to_string(), Registry::create(*k, 1).is_ok()))
        .collect()
}

/// Gain and pedestal maps (PSI gain layout, per-stage pedestals).
#[pyclass(module = "remora.daq", from_py_object)]
#[derive(Clone)]
pub(super) struct Calibration {
    pub(super) inner: RCal,
}

#[pymethods]
impl Calibration {
    /// From arrays: gain float64 of modules×6×512×1024, pedestal float32 of modules×3×512×1024.
    /// A gain whose float32 value is zero, subnormal, infinite or NaN is a `ValueError` naming
    /// the first one (module, row, column, stage).
    #[new]
    #[pyo3(signature = (gain, pedestal, high_gain=false))]
    fn new(
        gain: PyReadonlyArrayDyn<'_, f64>,
        pedestal: PyReadonlyArrayDyn<'_, f32>,
        high_gain: bool,
    ) -> PyResult<Self> {
        let g = slice(&gain, "gain")?;
        let p = slice(&pedestal, "pedestal")?;
        let modules = g.len() / (6 * remora_daq::model::MODULE_PIXELS);
        let det = Detector::new(modules.max(1)).map_err(err)?;
        let mut inner = RCal::new(
            GainMaps::from_vec(det, g.to_vec()).map_err(err)?,
            PedestalMaps::from_vec(det, p.to_vec()).map_err(err)?,
        )
        .map_err(err)?;
        inner.high_gain = high_gain;
        Ok(Self { inner })
    }

    /// Realistic random maps.
    #[staticmethod]
    #[pyo3(signature = (modules, seed=1))]
    fn synthetic(modules: usize, seed: u64) -> PyResult<Self> {
        Ok(Self {
            inner: RCal::synthetic(Detector::new(modules).map_err(err)?, seed),
        })
    }

    /// Loads a PSI gain file and a pedestal file. A file of the wrong size is a `ValueError`
    /// with the expected and actual sizes, a directory an `IsADirectoryError`, a gain that is
    /// not a normal float32 (zero, subnormal, infinite, NaN) a `ValueError` naming the file and
    /// the first such gain.
    #[staticmethod]
    fn load(gain_path: PathBuf, pedestal_path: PathBuf, modules: usize) -> PyResult<Self> {
        let det = Detector::new(modules).map_err(err)?;
        let inner = RCal::new(
            GainMaps::load(&gain_path, det).map_err(err)?,
            PedestalMaps::load(&pedestal_path, det).map_err(err)?,
        )
        .map_err(err)?;
        Ok(Self { inner })
    }

    /// Writes both files.
    fn save(&self, gain_path: PathBuf, pedestal_path: PathBuf) -> PyResult<()> {
        self.inner.gain.save(&gain_path).map_err(err)?;
        self.inner.pedestal.save(&pedestal_path).map_err(err)
    }

    #[getter]
    fn modules(&self) -> usize {
        self.inner.detector().modules()
    }

    /// Gain maps, modules×6×512×1024 float64 (a copy).
    #[getter]
    fn gain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        array_nd(
            py,
            self.inner.gain.as_slice().to_vec(),
            &[self.modules(), 6, 512, 1024],
        )
    }

    /// Pedestal maps, modules×3×512×1024 float32 (a copy).
    #[getter]
    fn pedestal<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        array_nd(
            py,
            self.inner.pedestal.as_slice().to_vec(),
            &[self.modules(), 3, 512, 1024],
        )
    }
}

/// Conversion, veto counting and pedestal tracking with one engine.
#[pyclass(module = "remora.daq")]
struct Converter {
    engine: Arc<dyn Engine>,
    tables: ConvTables,
    tracker: PedestalTracker,
    modules: usize,
}

#[pymethods]
impl Converter {
    #[new]
    #[pyo3(signature = (calibration, mask=None, engine="auto", threads=0, window=128, seeded=true))]
    fn new(
        calibration: &Calibration,
        mask: Option<PyReadonlyArrayDyn<'_, u8>>,
        engine: &str,
        threads: usize,
        window: u16,
        seeded: bool,
    ) -> PyResult<Self> {
        let m = mask.as_ref().map(|m| slice(m, "mask")).transpose()?;
        let tables = ConvTables::new(&calibration.inner, m).map_err(err)?;
        let n = tables.pixels();
        let tracker = if seeded {
            PedestalTracker::seeded(n, window)
        } else {
            PedestalTracker::fresh(n, window)
        }
        .map_err(err)?;
        Ok(Self {
            engine: self::engine(engine, threads)?,
            tables,
            tracker,
            modules: calibration.inner.detector().modules(),
        })
    }

    /// The engine's name.
    #[getter]
    fn engine(&self) -> &'static str {
        self.engine.info().name
    }

    /// Converts a raw frame (uint16, modules×512×1024 pixels) to keV float32 of the same shape.
    /// Returns (energy, stats); stats["above"] counts pixels above `threshold` keV.
    #[pyo3(signature = (raw, threshold=f32::INFINITY))]
    fn convert<'py>(
        &self,
        py: Python<'py>,
        raw: PyReadonlyArrayDyn<'py, u16>,
        threshold: f32,
    ) -> PyResult<(Bound<'py, PyArrayDyn<f32>>, Bound<'py, PyDict>)> {
        let shape = raw.shape().to_vec();
        let r = slice(&raw, "raw frame")?;
        let mut out = vec![0f32; r.len()];
        let (e, t) = (&self.engine, &self.tables);
        let st = py
            .detach(|| e.convert(r, t, ConvOut::Energy(&mut out), threshold))
            .map_err(err)?;
        Ok((array_nd(py, out, &shape)?, stats_dict(py, &st)?))
    }

    /// Like `convert` into a caller-owned float32 array (no allocation).
    #[pyo3(signature = (raw, out, threshold=f32::INFINITY))]
    fn convert_into<'py>(
        &self,
        py: Python<'py>,
        raw: PyReadonlyArrayDyn<'py, u16>,
        mut out: PyReadwriteArrayDyn<'py, f32>,
        threshold: f32,
    ) -> PyResult<Bound<'py, PyDict>> {
        let r = slice(&raw, "raw frame")?;
        if !out.is_c_contiguous() {
            return Err(PyValueError::new_err("out must be a C-contiguous array"));
        }
        let o = out
            .as_slice_mut()
            .map_err(|_| PyValueError::new_err("out must be a C-contiguous array"))?;
        let (e, t) = (&self.engine, &self.tables);
        let st = py
            .detach(|| e.convert(r, t, ConvOut::Energy(o), threshold))
            .map_err(err)?;
        stats_dict(py, &st)
    }

    /// Photon counts (int32): round-half-even(E / energy_kev); flagged pixels INT32_MIN,
    /// saturated INT32_MAX.
    fn photons<'py>(
        &self,
        py: Python<'py>,
        raw: PyReadonlyArrayDyn<'py, u16>,
        energy_kev: f32,
    ) -> PyResult<Bound<'py, PyArrayDyn<i32>>> {
        let shape = raw.shape().to_vec();
        let r = slice(&raw, "raw frame")?;
        let mut out = vec![0i32; r.len()];
        let (e, t) = (&self.engine, &self.tables);
        py.detach(|| {
            e.convert(
                r,
                t,
                ConvOut::Photons {
                    out: &mut out,
                    energy_kev,
                },
                f32::INFINITY,
            )
        })
        .map_err(err)?;
        array_nd(py, out, &shape)
    }

    /// Feeds one dark frame to the G0 pedestal moving average.
    fn track_pedestal(&mut self, py: Python<'_>, raw: PyReadonlyArrayDyn<'_, u16>) -> PyResult<()> {
        let r = slice(&raw, "dark frame")?;
        let (e, t, tr) = (&self.engine, &mut self.tables, &mut self.tracker);
        py.detach(|| tr.update(e.as_ref(), r, t)).map_err(err)
    }

    /// Current pedestals, modules×3×512×1024 float32 (NaN where masked).
    #[getter]
    fn pedestal<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let det = Detector::new(self.modules).map_err(err)?;
        let p = self.tables.pedestal_maps(det).map_err(err)?;
        array_nd(py, p.as_slice().to_vec(), &[self.modules, 3, 512, 1024])
    }
}

/// Pixels of `data` above `threshold` (the veto's spot count).
#[pyfunction]
#[pyo3(signature = (data, threshold, engine="auto", threads=0))]
fn count_above(
    py: Python<'_>,
    data: PyReadonlyArrayDyn<'_, f32>,
    threshold: f32,
    engine: &str,
    threads: usize,
) -> PyResult<u64> {
    let d = slice(&data, "data")?;
    let e = self::engine(engine, threads)?;
    Ok(py.detach(|| e.count_above(d, threshold)))
}

/// CSR of a 2-D float32 frame's pixels above `threshold`: (row_ptr uint32, col uint16,
/// values float32).
#[pyfunction]
#[pyo3(signature = (frame, threshold, engine="auto", threads=0))]
#[allow(clippy::type_complexity)]
fn compress<'py>(
    py: Python<'py>,
    frame: PyReadonlyArrayDyn<'py, f32>,
    threshold: f32,
    engine: &str,
    threads: usize,
) -> PyResult<(
    Bound<'py, PyArray1<u32>>,
    Bound<'py, PyArray1<u16>>,
    Bound<'py, PyArray1<f32>>,
)> {
    let shape = frame.shape().to_vec();
    if shape.len() != 2 {
        return Err(PyValueError::new_err(format!(
            "frame must be 2-D, not {}-D",
            shape.len()
        )));
    }
    let f = slice(&frame, "frame")?;
    let e = self::engine(engine, threads)?;
    let s = py
        .detach(|| e.compress(f, shape[0], shape[1], threshold))
        .map_err(err)?;
    Ok((
        PyArray1::from_vec(py, s.row_ptr),
        PyArray1::from_vec(py, s.col),
        PyArray1::from_vec(py, s.values),
    ))
}

/// Inverse of `compress`: a (rows, cols) float32 frame with `fill` where nothing was kept.
#[pyfunction]
#[pyo3(signature = (row_ptr, col, values, shape, fill=0.0))]
fn decompress<'py>(
    py: Python<'py>,
    row_ptr: PyReadonlyArrayDyn<'py, u32>,
    col: PyReadonlyArrayDyn<'py, u16>,
    values: PyReadonlyArrayDyn<'py, f32>,
    shape: (usize, usize),
    fill: f32,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let s = SparseFrame::from_arrays(
        shape.0,
        shape.1,
        f32::NAN,
        slice(&row_ptr, "row_ptr")?.to_vec(),
        slice(&col, "col")?.to_vec(),
        slice(&values, "values")?.to_vec(),
    )
    .map_err(err)?;
    array_nd(py, s.decompress(fill), &[shape.0, shape.1])
}

/// Module placement and the assembly of raw frames into the detector image.
#[pyclass(module = "remora.daq", from_py_object)]
#[derive(Clone)]
pub(super) struct Layout {
    pub(super) inner: RLayout,
}

#[pymethods]
impl Layout {
    /// Two module columns with the standard gaps (4M: 2167×2070).
    #[staticmethod]
    fn standard(modules: usize) -> PyResult<Self> {
        Ok(Self {
            inner: RLayout::standard(modules).map_err(err)?,
        })
    }

    /// From the JSON geometry description.
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<Self> {
        Ok(Self {
            inner: RLayout::from_json(text).map_err(err)?,
        })
    }

    fn to_json(&self) -> String {
        self.inner.to_json()
    }

    /// Image shape (rows, cols).
    #[getter]
    fn shape(&self) -> (usize, usize) {
        (self.inner.rows, self.inner.cols)
    }

    /// Image mask (uint8, 1 = gap or masked raw pixel) for a raw mask.
    #[pyo3(signature = (raw_mask=None))]
    fn image_mask<'py>(
        &self,
        py: Python<'py>,
        raw_mask: Option<PyReadonlyArrayDyn<'py, u8>>,
    ) -> PyResult<Bound<'py, PyArrayDyn<u8>>> {
        let m = raw_mask
            .as_ref()
            .map(|m| slice(m, "raw mask"))
            .transpose()?;
        let map = self.inner.assembly_map(m).map_err(err)?;
        array_nd(py, map.mask, &[map.rows, map.cols])
    }

    /// Assembles a converted frame (float32, raw layout) into the image (gaps NaN).
    #[pyo3(signature = (frame, engine="auto", threads=0))]
    fn assemble<'py>(
        &self,
        py: Python<'py>,
        frame: PyReadonlyArrayDyn<'py, f32>,
        engine: &str,
        threads: usize,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let f = slice(&frame, "frame")?;
        let map: AssemblyMap = self.inner.assembly_map(None).map_err(err)?;
        let e = self::engine(engine, threads)?;
        let mut out = vec![0f32; map.pixels()];
        py.detach(|| e.assemble(f, &map, &mut out)).map_err(err)?;
        array_nd(py, out, &[map.rows, map.cols])
    }
}

fn parse_poni(poni: &str) -> PyResult<Poni> {
    if poni.contains('\n') || poni.contains(':') && !std::path::Path::new(poni).exists() {
        Poni::parse(poni).map_err(err)
    } else {
        Poni::load(std::path::Path::new(poni)).map_err(err)
    }
}

/// Azimuthal integrator: a precomputed CSR matrix for one geometry, mask and correction set.
#[pyclass(module = "remora.daq")]
struct Integrator {
    engine: Arc<dyn Engine>,
    matrix: AzMatrix,
}

#[pymethods]
impl Integrator {
    /// `poni`: a PONI file path or its text. `shape`: image (rows, cols).
    #[new]
    #[pyo3(signature = (poni, shape, bins=1000, unit="q_nm^-1", split="bbox", solid_angle=true, polarization=None, mask=None, radial_range=None, empty=0.0, engine="auto", threads=0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        poni: &str,
        shape: (usize, usize),
        bins: usize,
        unit: &str,
        split: &str,
        solid_angle: bool,
        polarization: Option<f64>,
        mask: Option<PyReadonlyArrayDyn<'_, u8>>,
        radial_range: Option<(f64, f64)>,
        empty: f32,
        engine: &str,
        threads: usize,
    ) -> PyResult<Self> {
        let p = parse_poni(poni)?;
        let cfg = AzConfig {
            unit: Unit::parse(unit).map_err(err)?,
            bins,
            split: Split::parse(split).map_err(err)?,
            solid_angle,
            polarization,
            radial_range,
            empty,
        };
        let m = mask.as_ref().map(|m| slice(m, "mask")).transpose()?;
        let matrix = py
            .detach(|| AzMatrix::build(&p, shape, m, &cfg))
            .map_err(err)?;
        Ok(Self {
            engine: self::engine(engine, threads)?,
            matrix,
        })
    }

    /// Entries of the CSR matrix.
    #[getter]
    fn nnz(&self) -> usize {
        self.matrix.nnz()
    }

    /// The CSR matrix as (indptr uint32, indices uint32, coef float32).
    #[allow(clippy::type_complexity)]
    fn csr<'py>(
        &self,
        py: Python<'py>,
    ) -> (
        Bound<'py, PyArray1<u32>>,
        Bound<'py, PyArray1<u32>>,
        Bound<'py, PyArray1<f32>>,
    ) {
        (
            PyArray1::from_vec(py, self.matrix.indptr.clone()),
            PyArray1::from_vec(py, self.matrix.indices.clone()),
            PyArray1::from_vec(py, self.matrix.coef.clone()),
        )
    }

    /// Integrates a float32 image of the configured shape. Returns a dict with radial,
    /// intensity, signal, normalization, count (float64 arrays), unit and engine.
    fn integrate<'py>(
        &self,
        py: Python<'py>,
        image: PyReadonlyArrayDyn<'py, f32>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let img = slice(&image, "image")?;
        let (e, m) = (&self.engine, &self.matrix);
        let p = py.detach(|| e.integrate(m, img)).map_err(err)?;
        let d = PyDict::new(py);
        d.set_item("radial", PyArray1::from_vec(py, p.radial))?;
        d.set_item("intensity", PyArray1::from_vec(py, p.intensity))?;
        d.set_item("signal", PyArray1::from_vec(py, p.signal))?;
        d.set_item("normalization", PyArray1::from_vec(py, p.normalization))?;
        d.set_item("count", PyArray1::from_vec(py, p.count))?;
        d.set_item("unit", p.unit.name())?;
        d.set_item("engine", p.engine.name)?;
        d.set_item("threads", p.engine.threads)?;
        Ok(d)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(engines, m)?)?;
    m.add_function(wrap_pyfunction!(count_above, m)?)?;
    m.add_function(wrap_pyfunction!(compress, m)?)?;
    m.add_function(wrap_pyfunction!(decompress, m)?)?;
    m.add_class::<Calibration>()?;
    m.add_class::<Converter>()?;
    m.add_class::<Layout>()?;
    m.add_class::<Integrator>()?;
    m.add_class::<pipeline::Synth>()?;
    m.add_class::<pipeline::Pipeline>()?;
    Ok(())
}
