//! Azimuthal integration: pyFAI geometry → one CSR matrix (radial bin × pixel) that engines
//! multiply with an image.
//!
//! Conventions follow pyFAI so that results equal `integrate1d_ng` with methods
//! `("no", "csr", "cython")` and `("bbox", "csr", "cython")`:
//! - pixel `(i, j)` has its centre at `((i + ½)·pixel1, (j + ½)·pixel2)`, corners on the
//!   integer grid; positions are rotated with pyFAI's rot1–rot3 and computed in `f64`;
//! - radial values internally in nm⁻¹ (q), rad (2θ) or m (r), reported as nm⁻¹, degrees, mm;
//! - the radial range is [min, max·(1 + ε₃₂)] over unmasked pixels (bounding boxes for `bbox`),
//!   clipped at 0; a bin is `trunc((x − min) / δ)`;
//! - `bbox` splits a pixel over the bins its [c − δc, c + δc] spans, δc being the largest
//!   distance from the centre to a corner (corners rounded to `f32`, as pyFAI stores them);
//! - each pixel's normalisation is solid angle (cos³ of the incidence) × polarisation, both
//!   optional; a bin's intensity is Σ cᵢ·Iᵢ / Σ cᵢ·normᵢ over valid (finite) pixels, or the
//!   `empty` value when nothing contributes. Sums are in `f64`: each product cᵢ·Iᵢ of two
//!   `f32` is exact there; engines add them in a fixed order (the CPU engine in partial sums
//!   over fixed pixel ranges, then compensated across them) and the per-bin totals of the
//!   matrix are compensated (Kahan).
use rayon::prelude::*;
use remora_accel::BackendInfo;

use crate::poni::Poni;
use crate::{DaqError, Result};

mod pixel_major;
pub use pixel_major::PixelMajor;

/// Radial unit of a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Scattering vector modulus, nm⁻¹ (`q_nm^-1`).
    QNm,
    /// Scattering angle, degrees (`2th_deg`).
    TwoThetaDeg,
    /// Distance from the beam in the sample frame, mm (`r_mm`).
    RMm,
}

impl Unit {
    /// pyFAI's name.
    pub fn name(self) -> &'static str {
        match self {
            Unit::QNm => "q_nm^-1",
            Unit::TwoThetaDeg => "2th_deg",
            Unit::RMm => "r_mm",
        }
    }

    /// Parses pyFAI's names (and `q`, `2th`, `r`).
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "q_nm^-1" | "q" => Ok(Unit::QNm),
            "2th_deg" | "2th" => Ok(Unit::TwoThetaDeg),
            "r_mm" | "r" => Ok(Unit::RMm),
            _ => Err(DaqError::Config(format!(
                "unknown radial unit {s:?} (q_nm^-1, 2th_deg, r_mm)"
            ))),
        }
    }

    /// Factor from the internal value to the reported one.
    pub fn scale(self) -> f64 {
        match self {
            Unit::QNm => 1.0,
            Unit::TwoThetaDeg => 180.0 / std::f64::consts::PI,
            Unit::RMm => 1000.0,
        }
    }

    /// Internal value at lab position (x, y, z) (pyFAI's unit equations).
    #[inline]
    fn eval(self, x: f64, y: f64, z: f64, wavelength: f64) -> f64 {
        let r = (x * x + y * y).sqrt();
        match self {
            Unit::RMm => r,
            Unit::TwoThetaDeg => r.atan2(z),
            Unit::QNm => 4.0e-9 * std::f64::consts::PI * (r.atan2(z) / 2.0).sin() / wavelength,
        }
    }
}

/// Pixel splitting scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Each pixel goes whole into the bin of its centre.
    No,
    /// Each pixel is spread over the bins its bounding box covers.
    BBox,
}

impl Split {
    /// pyFAI's name.
    pub fn name(self) -> &'static str {
        match self {
            Split::No => "no",
            Split::BBox => "bbox",
        }
    }
    /// Parses `no` / `bbox`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "no" => Ok(Split::No),
            "bbox" => Ok(Split::BBox),
            _ => Err(DaqError::Config(format!(
                "unknown pixel splitting {s:?} (no, bbox)"
            ))),
        }
    }
}

/// What to integrate and how.
#[derive(Debug, Clone, PartialEq)]
pub struct AzConfig {
    /// Radial unit.
    pub unit: Unit,
    /// Number of bins.
    pub bins: usize,
    /// Pixel splitting.
    pub split: Split,
    /// Divide by the solid angle (pyFAI's `correctSolidAngle`).
    pub solid_angle: bool,
    /// Polarisation factor (−1..1), or none.
    pub polarization: Option<f64>,
    /// Radial range in the reported unit; default min..max of the data.
    pub radial_range: Option<(f64, f64)>,
    /// Intensity of bins nothing contributes to.
    pub empty: f32,
}

impl Default for AzConfig {
    fn default() -> Self {
        Self {
            unit: Unit::QNm,
            bins: 1000,
            split: Split::BBox,
            solid_angle: true,
            polarization: None,
            radial_range: None,
            empty: 0.0,
        }
    }
}

/// The per-pixel geometry of an image: radial centres and half-widths, and the normalisation.
#[derive(Debug, Clone)]
pub struct PixelGeometry {
    /// Radial value of each pixel centre (internal unit).
    pub center: Vec<f64>,
    /// Largest centre–corner distance (internal unit); empty for `Split::No`.
    pub delta: Vec<f64>,
    /// Solid angle × polarisation per pixel (`f32`, 1 without corrections).
    pub norm: Vec<f32>,
}

struct Frame {
    sin: [f64; 3],
    cos: [f64; 3],
}

impl Frame {
    fn new(p: &Poni) -> Self {
        Self {
            sin: [p.rot1.sin(), p.rot2.sin(), p.rot3.sin()],
            cos: [p.rot1.cos(), p.rot2.cos(), p.rot3.cos()],
        }
    }

    /// Lab coordinates (x, y, z) of detector point (p1, p2) relative to the PONI.
    #[inline]
    fn lab(&self, p1: f64, p2: f64, p3: f64) -> (f64, f64, f64) {
        let [s1, s2, s3] = self.sin;
        let [c1, c2, c3] = self.cos;
        let t1 = p1 * c2 * c3 + p2 * (c3 * s1 * s2 - c1 * s3) - p3 * (c1 * c3 * s2 + s1 * s3);
        let t2 = p1 * c2 * s3 + p2 * (c1 * c3 + s1 * s2 * s3) - p3 * (-c3 * s1 + c1 * s2 * s3);
        let t3 = p1 * s2 - p2 * c2 * s1 + p3 * c1 * c2;
        (t2, t1, t3)
    }
}

impl PixelGeometry {
    /// Computes the geometry of a `rows × cols` image.
    pub fn new(poni: &Poni, shape: (usize, usize), cfg: &AzConfig) -> Result<Self> {
        poni.validate()?;
        let (rows, cols) = shape;
        let wl = match (cfg.unit, poni.wavelength) {
            (Unit::QNm, None) => {
                return Err(DaqError::Config(
                    "q needs a wavelength in the PONI file".into(),
                ))
            }
            (_, w) => w.unwrap_or(1.0),
        };
        if let Some(f) = cfg.polarization {
            if !(-1.0..=1.0).contains(&f) {
                return Err(DaqError::Config(format!(
                    "polarisation factor {f} is outside -1..1"
                )));
            }
        }
        let fr = Frame::new(poni);
        let unit = cfg.unit;
        let mut center = vec![0.0f64; rows * cols];
        let mut norm = vec![1.0f32; rows * cols];
        center
            .par_chunks_mut(cols.max(1))
            .zip(norm.par_chunks_mut(cols.max(1)))
            .enumerate()
            .for_each(|(i, (crow, nrow))| {
                let p1 = poni.pixel1 * (i as f64 + 0.5) - poni.poni1;
                for (j, (c, n)) in crow.iter_mut().zip(nrow.iter_mut()).enumerate() {
                    let p2 = poni.pixel2 * (j as f64 + 0.5) - poni.poni2;
                    let (x, y, z) = fr.lab(p1, p2, poni.dist);
                    *c = unit.eval(x, y, z, wl);
                    let mut v = 1.0f32;
                    if cfg.solid_angle {
                        let cosa = poni.dist / (poni.dist * poni.dist + (p1 * p1 + p2 * p2)).sqrt();
                        v = cosa.powf(3.0) as f32;
                    }
                    if let Some(f) = cfg.polarization {
                        let tth = (x * x + y * y).sqrt().atan2(z);
                        let chi = y.atan2(x);
                        let c2 = tth.cos() * tth.cos();
                        let pol = 0.5 * (1.0 + c2 - f * (2.0 * chi).cos() * (1.0 - c2));
                        v *= pol as f32;
                    }
                    *n = v;
                }
            });
        let delta = match cfg.split {
            Split::No => Vec::new(),
            Split::BBox => {
                // Radial value at every grid corner, rounded to f32 like pyFAI's corner array.
                let mut corner = vec![0.0f32; (rows + 1) * (cols + 1)];
                corner
                    .par_chunks_mut(cols + 1)
                    .enumerate()
                    .for_each(|(i, row)| {
                        let p1 = poni.pixel1 * i as f64 - poni.poni1;
                        for (j, c) in row.iter_mut().enumerate() {
                            let p2 = poni.pixel2 * j as f64 - poni.poni2;
                            let (x, y, z) = fr.lab(p1, p2, poni.dist);
                            *c = unit.eval(x, y, z, wl) as f32;
                        }
                    });
                let mut delta = vec![0.0f64; rows * cols];
                delta
                    .par_chunks_mut(cols.max(1))
                    .enumerate()
                    .for_each(|(i, drow)| {
                        for (j, d) in drow.iter_mut().enumerate() {
                            let c = center[i * cols + j];
                            let k = [
                                corner[i * (cols + 1) + j],
                                corner[(i + 1) * (cols + 1) + j],
                                corner[(i + 1) * (cols + 1) + j + 1],
                                corner[i * (cols + 1) + j + 1],
                            ];
                            *d = k
                                .iter()
                                .map(|&v| (f64::from(v) - c).abs())
                                .fold(0.0, f64::max);
                        }
                    });
                delta
            }
        };
        Ok(Self {
            center,
            delta,
            norm,
        })
    }
}

/// The precomputed integration matrix: plain data every engine consumes.
#[derive(Debug, Clone)]
pub struct AzMatrix {
    /// Image shape (rows, cols).
    pub shape: (usize, usize),
    /// Number of bins (matrix rows).
    pub bins: usize,
    /// Radial unit.
    pub unit: Unit,
    /// Splitting used to build it.
    pub split: Split,
    /// Bin centres in the reported unit.
    pub radial: Vec<f64>,
    /// Row pointers (bins + 1).
    pub indptr: Vec<u32>,
    /// Pixel index of each entry.
    pub indices: Vec<u32>,
    /// Fraction of the pixel in the bin.
    pub coef: Vec<f32>,
    /// Fraction × the pixel's normalisation (solid angle × polarisation).
    pub ncoef: Vec<f32>,
    /// Per bin, Σ ncoef over all its entries (compensated): engines subtract what invalid
    /// pixels would have contributed instead of summing it per frame.
    pub norm_total: Vec<f64>,
    /// Per bin, Σ coef over all its entries.
    pub count_total: Vec<f64>,
    /// The same matrix pixel by pixel (its transpose), for engines that stream the image.
    pub by_pixel: PixelMajor,
    /// Value of empty bins.
    pub empty: f32,
}

impl AzMatrix {
    /// Builds the matrix for a `rows × cols` image; `mask` non-zero = pixel left out.
    pub fn build(
        poni: &Poni,
        shape: (usize, usize),
        mask: Option<&[u8]>,
        cfg: &AzConfig,
    ) -> Result<Self> {
        // 2^26 pixels (4× a JUNGFRAU 16M) bounds the memory a hostile shape can ask for.
        let n = shape
            .0
            .checked_mul(shape.1)
            .filter(|&n| n > 0 && n <= 1 << 26);
        let n = n.ok_or_else(|| DaqError::Config(format!("bad image shape {shape:?}")))?;
        if cfg.bins == 0 || cfg.bins > 1 << 24 {
            return Err(DaqError::Config(format!(
                "bins must be 1..2^24, not {}",
                cfg.bins
            )));
        }
        if let Some(m) = mask {
            DaqError::check_len("integration mask", n, m.len())?;
        }
        let geo = PixelGeometry::new(poni, shape, cfg)?;
        Self::from_geometry(&geo, shape, mask, cfg)
    }

    /// Builds the matrix from per-pixel geometry.
    pub fn from_geometry(
        geo: &PixelGeometry,
        shape: (usize, usize),
        mask: Option<&[u8]>,
        cfg: &AzConfig,
    ) -> Result<Self> {
        let n = geo.center.len();
        let masked = |i: usize| mask.is_some_and(|m| m[i] != 0);
        let split = !geo.delta.is_empty();
        let d = |i: usize| if split { geo.delta[i] } else { 0.0 };
        // Radial range over unmasked pixels.
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for i in (0..n).filter(|&i| !masked(i)) {
            lo = lo.min(geo.center[i] - d(i));
            hi = hi.max(geo.center[i] + d(i));
        }
        if lo > hi {
            return Err(DaqError::Config("every pixel is masked".into()));
        }
        lo = lo.max(0.0);
        hi = hi.max(0.0);
        if let Some((a, b)) = cfg.radial_range {
            let s = cfg.unit.scale();
            if !(a.is_finite() && b.is_finite()) || a == b {
                return Err(DaqError::Config(format!("bad radial range {a}..{b}")));
            }
            lo = a.min(b) / s;
            hi = a.max(b) / s;
        }
        let eps32 = 1.0 + f64::from(f32::EPSILON);
        let hi = if hi > 0.0 { hi * eps32 } else { hi / eps32 };
        let bins = cfg.bins;
        let delta = (hi - lo) / bins as f64;
        // Entries (bin, pixel, coef), pixel order; then a counting sort by bin keeps that order.
        let mut entries: Vec<(u32, u32, f32)> = Vec::with_capacity(if split { 2 * n } else { n });
        for i in (0..n).filter(|&i| !masked(i)) {
            let c = geo.center[i];
            let fmin = (c - d(i) - lo) / delta;
            let fmax = (c + d(i) - lo) / delta;
            let (b0, b1) = (fmin as isize, fmax as isize);
            if b1 < 0 || b0 >= bins as isize {
                continue;
            }
            let b1 = b1.min(bins as isize - 1) as usize;
            let b0 = b0.max(0) as usize;
            if b0 == b1 {
                entries.push((b0 as u32, i as u32, 1.0));
            } else {
                let inv = 1.0 / (fmax - fmin);
                entries.push((b0 as u32, i as u32, (inv * ((b0 + 1) as f64 - fmin)) as f32));
                entries.push((b1 as u32, i as u32, (inv * (fmax - b1 as f64)) as f32));
                for b in b0 + 1..b1 {
                    entries.push((b as u32, i as u32, inv as f32));
                }
            }
        }
        let by_pixel = PixelMajor::new(&entries, n, &geo.norm);
        let mut indptr = vec![0u32; bins + 1];
        for e in &entries {
            indptr[e.0 as usize + 1] += 1;
        }
        for b in 0..bins {
            indptr[b + 1] += indptr[b];
        }
        let nnz = entries.len();
        let mut fill = indptr.clone();
        let (mut indices, mut coef, mut ncoef) =
            (vec![0u32; nnz], vec![0f32; nnz], vec![0f32; nnz]);
        for (b, i, c) in entries {
            let k = fill[b as usize] as usize;
            fill[b as usize] += 1;
            indices[k] = i;
            coef[k] = c;
            ncoef[k] = c * geo.norm[i as usize];
        }
        let totals = |v: &[f32]| -> Vec<f64> {
            (0..bins)
                .map(|b| {
                    let (mut sum, mut comp) = (0.0f64, 0.0f64);
                    for &x in &v[indptr[b] as usize..indptr[b + 1] as usize] {
                        let y = f64::from(x) - comp;
                        let t = sum + y;
                        comp = (t - sum) - y;
                        sum = t;
                    }
                    sum
                })
                .collect()
        };
        let norm_total = totals(&ncoef);
        let count_total = totals(&coef);
        let s = cfg.unit.scale();
        let radial = (0..bins)
            .map(|b| (lo + (b as f64 + 0.5) * delta) * s)
            .collect();
        Ok(Self {
            shape,
            bins,
            unit: cfg.unit,
            split: cfg.split,
            radial,
            indptr,
            indices,
            coef,
            ncoef,
            norm_total,
            count_total,
            by_pixel,
            empty: cfg.empty,
        })
    }

    /// Non-zero entries.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// Checks that an image fits this matrix.
    pub fn check_image(&self, image: &[f32]) -> Result<()> {
        DaqError::check_len("image", self.shape.0 * self.shape.1, image.len())?;
        DaqError::check_len("matrix row pointers", self.bins + 1, self.indptr.len())?;
        DaqError::check_len(
            "matrix totals",
            self.bins,
            self.norm_total.len().min(self.count_total.len()),
        )?;
        let nnz = self.indptr.last().copied().unwrap_or(0) as usize;
        if nnz
            > self
                .indices
                .len()
                .min(self.coef.len())
                .min(self.ncoef.len())
            || self.indptr.windows(2).any(|w| w[0] > w[1])
        {
            return Err(DaqError::Config("malformed integration matrix".into()));
        }
        Ok(())
    }
}

/// A 1D profile and the engine that computed it.
#[derive(Debug, Clone)]
pub struct Profile {
    /// Bin centres (reported unit).
    pub radial: Vec<f64>,
    /// Σ c·I / Σ c·norm, or the empty value.
    pub intensity: Vec<f64>,
    /// Σ c·I per bin.
    pub signal: Vec<f64>,
    /// Σ c·norm per bin.
    pub normalization: Vec<f64>,
    /// Σ c per bin (pixels contributing).
    pub count: Vec<f64>,
    /// Unit of `radial`.
    pub unit: Unit,
    /// Which engine ran.
    pub engine: BackendInfo,
}

impl Profile {
    pub(crate) fn from_sums(m: &AzMatrix, sums: Vec<(f64, f64, f64)>, engine: BackendInfo) -> Self {
        let intensity = sums
            .iter()
            .map(|&(s, n, _)| if n > 0.0 { s / n } else { f64::from(m.empty) })
            .collect();
        Self {
            radial: m.radial.clone(),
            intensity,
            signal: sums.iter().map(|s| s.0).collect(),
            normalization: sums.iter().map(|s| s.1).collect(),
            count: sums.iter().map(|s| s.2).collect(),
            unit: m.unit,
            engine,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poni() -> Poni {
        Poni {
            dist: 0.1,
            poni1: 0.01,
            poni2: 0.02,
            rot1: 0.0,
            rot2: 0.0,
            rot3: 0.0,
            wavelength: Some(1e-10),
            pixel1: 1e-4,
            pixel2: 1e-4,
        }
    }

    #[test]
    fn untilted_r_is_distance_from_poni() {
        let cfg = AzConfig {
            unit: Unit::RMm,
            split: Split::No,
            ..Default::default()
        };
        let g = PixelGeometry::new(&poni(), (200, 300), &cfg).unwrap();
        // Pixel (99, 199) has its centre at (9.95 mm, 19.95 mm): 0.05 mm from the PONI each way.
        let r = g.center[99 * 300 + 199];
        assert!((r - (2.0f64 * 0.05e-3 * 0.05e-3).sqrt()).abs() < 1e-12);
        assert!((g.norm[99 * 300 + 199] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn every_unmasked_pixel_is_distributed_once() {
        for split in [Split::No, Split::BBox] {
            let cfg = AzConfig {
                unit: Unit::TwoThetaDeg,
                split,
                bins: 50,
                ..Default::default()
            };
            let mut mask = vec![0u8; 100 * 120];
            mask[5] = 1;
            let m = AzMatrix::build(&poni(), (100, 120), Some(&mask), &cfg).unwrap();
            let mut per_pixel = vec![0.0f64; 100 * 120];
            for k in 0..m.nnz() {
                per_pixel[m.indices[k] as usize] += f64::from(m.coef[k]);
            }
            assert_eq!(per_pixel[5], 0.0);
            for (i, s) in per_pixel.iter().enumerate().filter(|&(i, _)| i != 5) {
                assert!((s - 1.0).abs() < 1e-5, "pixel {i}: {s}");
            }
        }
    }

    #[test]
    fn bad_configs_are_errors() {
        let cfg = AzConfig::default();
        assert!(AzMatrix::build(&poni(), (0, 10), None, &cfg).is_err());
        assert!(AzMatrix::build(&poni(), (10, 10), Some(&[0; 3]), &cfg).is_err());
        assert!(AzMatrix::build(&poni(), (10, 10), Some(&[1; 100]), &cfg).is_err());
        let mut p = poni();
        p.wavelength = None;
        assert!(AzMatrix::build(&p, (10, 10), None, &cfg).is_err());
        assert!(AzMatrix::build(&poni(), (1 << 14, 1 << 14), None, &cfg).is_err());
        let c = AzConfig {
            bins: 0,
            ..Default::default()
        };
        assert!(AzMatrix::build(&poni(), (10, 10), None, &c).is_err());
        let c = AzConfig {
            polarization: Some(2.0),
            ..Default::default()
        };
        assert!(AzMatrix::build(&poni(), (10, 10), None, &c).is_err());
    }
}
