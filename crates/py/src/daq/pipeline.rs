//! `remora.daq.Synth` and `remora.daq.Pipeline`: the generator of detector frames and the
//! processing pipeline run frame by frame from Python.
use super::*;

/// Synthetic raw frames with ground truth.
#[pyclass(module = "remora.daq")]
pub(super) struct Synth {
    inner: RSynth,
}

#[pymethods]
impl Synth {
    #[new]
    #[pyo3(signature = (modules=1, seed=1, spots=40, spot_photons=3000.0, ring_photons=2.0, background=0.05, noise_adu=3.0, special_rate=1e-5, dark_every=2, dark_phase=1))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        modules: usize,
        seed: u64,
        spots: usize,
        spot_photons: f64,
        ring_photons: f64,
        background: f64,
        noise_adu: f64,
        special_rate: f64,
        dark_every: u64,
        dark_phase: u64,
    ) -> PyResult<Self> {
        let mut c = SynthConfig::new(modules).map_err(err)?;
        c.seed = seed;
        c.spots = spots;
        c.spot_photons = spot_photons;
        c.ring_photons = ring_photons;
        c.background = background;
        c.noise_adu = noise_adu;
        c.special_rate = special_rate;
        c.dark = DarkPattern::new(dark_every, dark_phase).map_err(err)?;
        Ok(Self {
            inner: RSynth::new(c).map_err(err)?,
        })
    }

    /// Frame `n`: (raw uint16 (modules·512, 1024), photons uint32 same shape, is_dark).
    #[allow(clippy::type_complexity)]
    fn frame<'py>(
        &self,
        py: Python<'py>,
        n: u64,
    ) -> PyResult<(
        Bound<'py, PyArrayDyn<u16>>,
        Bound<'py, PyArrayDyn<u32>>,
        bool,
    )> {
        let s = &self.inner;
        let f = py.detach(|| s.frame(n));
        let shape = s.layout().detector().raw_shape();
        Ok((
            array_nd(py, f.raw, &[shape.0, shape.1])?,
            array_nd(py, f.photons, &[shape.0, shape.1])?,
            f.dark,
        ))
    }

    /// The true calibration.
    fn calibration(&self) -> Calibration {
        Calibration {
            inner: self.inner.calibration().clone(),
        }
    }

    /// The layout.
    fn layout(&self) -> Layout {
        Layout {
            inner: self.inner.layout().clone(),
        }
    }

    /// The generator's geometry as PONI 2.1 text (for the assembled image).
    fn poni(&self) -> String {
        let l = self.inner.layout();
        self.inner.config().poni.to_text((l.rows, l.cols))
    }

    /// Photon energy (keV).
    #[getter]
    fn photon_energy_kev(&self) -> f32 {
        self.inner.config().photon_energy_kev
    }
}

/// The chained pipeline: dark → pedestal; else convert + veto, then CSR (+ integration).
#[pyclass(module = "remora.daq")]
pub(super) struct Pipeline {
    inner: RPipeline,
}

#[pymethods]
impl Pipeline {
    #[new]
    #[pyo3(signature = (calibration, layout, veto_pixel_kev=50.0, veto_min_pixels=10, sparse_kev=6.0, dark_every=0, dark_phase=0, window=128, poni=None, bins=1000, unit="q_nm^-1", split="bbox", mask=None, engine="auto", threads=0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        calibration: &Calibration,
        layout: &Layout,
        veto_pixel_kev: f32,
        veto_min_pixels: u64,
        sparse_kev: f32,
        dark_every: u64,
        dark_phase: u64,
        window: u16,
        poni: Option<&str>,
        bins: usize,
        unit: &str,
        split: &str,
        mask: Option<PyReadonlyArrayDyn<'_, u8>>,
        engine: &str,
        threads: usize,
    ) -> PyResult<Self> {
        let integrate = match poni {
            Some(p) => Some((
                parse_poni(p)?,
                AzConfig {
                    unit: Unit::parse(unit).map_err(err)?,
                    bins,
                    split: Split::parse(split).map_err(err)?,
                    ..Default::default()
                },
            )),
            None => None,
        };
        let cfg = PipelineConfig {
            veto_pixel_kev,
            veto_min_pixels,
            sparse_kev,
            dark: DarkPattern::new(dark_every, dark_phase).map_err(err)?,
            pedestal_window: window,
            integrate,
        };
        let m = mask.as_ref().map(|m| slice(m, "mask")).transpose()?;
        let e = self::engine(engine, threads)?;
        let (c, l) = (&calibration.inner, &layout.inner);
        let inner = py.detach(|| RPipeline::new(e, c, l, m, cfg)).map_err(err)?;
        Ok(Self { inner })
    }

    /// Processes frame `n`: a dict with `outcome` ("dark", "rejected", "kept"), `stats`, and for
    /// kept frames `row_ptr`, `col`, `values` (CSR, raw layout) and the profile (`radial`,
    /// `intensity`) when integration is on.
    fn process<'py>(
        &mut self,
        py: Python<'py>,
        n: u64,
        raw: PyReadonlyArrayDyn<'py, u16>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let r = slice(&raw, "raw frame")?;
        let p = &mut self.inner;
        let o = py.detach(|| p.process(n, r)).map_err(err)?;
        let d = PyDict::new(py);
        match o {
            Outcome::Dark => d.set_item("outcome", "dark")?,
            Outcome::Rejected(st) => {
                d.set_item("outcome", "rejected")?;
                d.set_item("stats", stats_dict(py, &st)?)?;
            }
            Outcome::Kept {
                stats,
                sparse,
                profile,
            } => {
                d.set_item("outcome", "kept")?;
                d.set_item("stats", stats_dict(py, &stats)?)?;
                d.set_item("row_ptr", PyArray1::from_vec(py, sparse.row_ptr))?;
                d.set_item("col", PyArray1::from_vec(py, sparse.col))?;
                d.set_item("values", PyArray1::from_vec(py, sparse.values))?;
                if let Some(p) = profile {
                    d.set_item("radial", PyArray1::from_vec(py, p.radial))?;
                    d.set_item("intensity", PyArray1::from_vec(py, p.intensity))?;
                }
            }
        }
        d.set_item("engine", self.inner.engine().info().name)?;
        Ok(d)
    }
}
