//! Synthetic JUNGFRAU data with ground truth, for tests, benchmarks and the demo.
//!
//! Photons come from powder rings (LaB6 d-spacings, as pyFAI's calibrant) and from Bragg spots
//! on a flat background, with Poisson statistics. Each pixel's charge is digitised through the
//! detector's gain switching (G0 below ~20 photons at 12.4 keV, then G1, then G2, saturating as
//! `0xc000`), with Gaussian pedestal noise in G0. Dark frames (a [`DarkPattern`]) carry no
//! photons. A small fraction of error words and invalid gain bits are sprinkled in. Every frame
//! comes with its photon counts; the calibration used is the truth pedestal and gain.
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal, Poisson};
use rayon::prelude::*;

use crate::azint::{AzConfig, PixelGeometry, Split, Unit};
use crate::calib::Calibration;
use crate::geometry::{AssemblyMap, Layout};
use crate::model::{encode, GainStage, MODULE_COLS, MODULE_PIXELS, MODULE_ROWS};
use crate::pedestal::DarkPattern;
use crate::poni::{Poni, JUNGFRAU_PIXEL};
use crate::Result;

/// LaB6 lattice constant (nm).
const LAB6_A_NM: f64 = 0.415_691_62;

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthConfig {
    /// Modules.
    pub modules: usize,
    /// Random seed (frames are reproducible from it).
    pub seed: u64,
    /// Photon energy (keV).
    pub photon_energy_kev: f32,
    /// Mean background photons per pixel.
    pub background: f64,
    /// Photons per pixel at the strongest ring's peak (0: no rings).
    pub ring_photons: f64,
    /// Bragg spots per (non-dark) frame.
    pub spots: usize,
    /// Photons at a spot's centre pixel.
    pub spot_photons: f64,
    /// G0 pedestal noise (ADU, standard deviation).
    pub noise_adu: f64,
    /// Fraction of pixels turned into error words or invalid gain bits.
    pub special_rate: f64,
    /// Which frames are dark.
    pub dark: DarkPattern,
    /// Geometry used to place the rings.
    pub poni: Poni,
}

impl SynthConfig {
    /// Sensible defaults for `modules` modules: 12.4 keV, beam near the image centre at 12 cm,
    /// weak rings, 40 spots of 3000 photons, 3 ADU noise, every other frame dark.
    pub fn new(modules: usize) -> Result<Self> {
        let layout = Layout::standard(modules)?;
        let poni = Poni {
            dist: 0.12,
            poni1: layout.rows as f64 * JUNGFRAU_PIXEL * 0.47,
            poni2: layout.cols as f64 * JUNGFRAU_PIXEL * 0.53,
            rot1: 0.0,
            rot2: 0.0,
            rot3: 0.0,
            wavelength: Some(12.398_419_84e-10 / 12.4),
            pixel1: JUNGFRAU_PIXEL,
            pixel2: JUNGFRAU_PIXEL,
        };
        Ok(Self {
            modules,
            seed: 1,
            photon_energy_kev: 12.4,
            background: 0.05,
            ring_photons: 2.0,
            spots: 40,
            spot_photons: 3000.0,
            noise_adu: 3.0,
            special_rate: 1e-5,
            dark: DarkPattern::new(2, 1)?,
            poni,
        })
    }
}

/// One generated frame and its truth.
#[derive(Debug, Clone)]
pub struct SynthFrame {
    /// Raw words, detector order.
    pub raw: Vec<u16>,
    /// Whether it is a dark frame.
    pub dark: bool,
    /// Photons that hit each raw pixel.
    pub photons: Vec<u32>,
    /// Bragg spots placed (raw pixel index of each centre).
    pub spots: Vec<usize>,
}

/// The generator.
#[derive(Debug, Clone)]
pub struct Synth {
    cfg: SynthConfig,
    cal: Calibration,
    layout: Layout,
    /// Expected ring + background photons per raw pixel.
    mean: Vec<f32>,
}

impl Synth {
    /// Prepares the calibration truth and the expected photon map.
    pub fn new(cfg: SynthConfig) -> Result<Self> {
        let layout = Layout::standard(cfg.modules)?;
        let det = layout.detector();
        let cal = Self::calibration_for(&cfg, det);
        let map = layout.assembly_map(None)?;
        let az = AzConfig {
            unit: Unit::QNm,
            split: Split::No,
            solid_angle: false,
            ..Default::default()
        };
        let geo = PixelGeometry::new(&cfg.poni, (layout.rows, layout.cols), &az)?;
        let rings: Vec<f64> = [1u32, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 16, 17, 18]
            .iter()
            .map(|&n| 2.0 * std::f64::consts::PI * f64::from(n).sqrt() / LAB6_A_NM)
            .collect();
        let mut mean = vec![0.0f32; det.pixels()];
        for (v, &e) in map.src.iter().enumerate() {
            if e == AssemblyMap::GAP {
                continue;
            }
            let q = geo.center[v];
            let ring: f64 = rings
                .iter()
                .enumerate()
                .map(|(k, &qk)| {
                    let w = 0.15;
                    cfg.ring_photons / (1.0 + k as f64 * 0.3)
                        * (-(q - qk).powi(2) / (2.0 * w * w)).exp()
                })
                .sum();
            // A double-width pixel collects the photons of both virtual pixels it covers.
            mean[(e & 0x3fff_ffff) as usize] += (ring + cfg.background) as f32;
        }
        Ok(Self {
            cfg,
            cal,
            layout,
            mean,
        })
    }

    /// The calibration a generator with `cfg` uses, without building the generator (what a
    /// receiver loads when the run is synthetic).
    pub fn calibration_for(cfg: &SynthConfig, det: crate::model::Detector) -> Calibration {
        Calibration::synthetic(det, cfg.seed ^ 0x5eed)
    }

    /// The true calibration (pedestal means and gains).
    pub fn calibration(&self) -> &Calibration {
        &self.cal
    }

    /// The detector layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The configuration.
    pub fn config(&self) -> &SynthConfig {
        &self.cfg
    }

    /// Generates frame `n` (deterministic in the seed and `n`).
    pub fn frame(&self, n: u64) -> SynthFrame {
        let dark = self.cfg.dark.is_dark(n);
        let det = self.layout.detector();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(
            self.cfg.seed.wrapping_mul(0x9e37_79b9).wrapping_add(n),
        );
        let mut spot_add = vec![0.0f32; det.pixels()];
        let mut spots = Vec::new();
        if !dark {
            for _ in 0..self.cfg.spots {
                let m = rng.random_range(0..det.modules());
                let (y, x) = (
                    rng.random_range(3..MODULE_ROWS - 3),
                    rng.random_range(3..MODULE_COLS - 3),
                );
                let peak = self.cfg.spot_photons * (0.2 + 0.8 * rng.random::<f64>());
                spots.push(m * MODULE_PIXELS + y * MODULE_COLS + x);
                for dy in -3i64..=3 {
                    for dx in -3i64..=3 {
                        let r2 = (dy * dy + dx * dx) as f64;
                        let i = m * MODULE_PIXELS
                            + (y as i64 + dy) as usize * MODULE_COLS
                            + (x as i64 + dx) as usize;
                        spot_add[i] += (peak * (-r2 / (2.0 * 0.8 * 0.8)).exp()) as f32;
                    }
                }
            }
        }
        let mut raw = vec![0u16; det.pixels()];
        let mut photons = vec![0u32; det.pixels()];
        let seed = self.cfg.seed;
        let cfg = &self.cfg;
        let cal = &self.cal;
        raw.par_chunks_mut(MODULE_COLS)
            .zip(photons.par_chunks_mut(MODULE_COLS))
            .enumerate()
            .for_each(|(row, (rraw, rph))| {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(
                    seed ^ (n << 32) ^ (row as u64).wrapping_mul(0x2545_f491_4f6c_dd1d),
                );
                let noise = Normal::new(0.0, cfg.noise_adu.max(1e-9)).ok();
                let m = row / MODULE_ROWS;
                for (x, (w, ph)) in rraw.iter_mut().zip(rph.iter_mut()).enumerate() {
                    let i = row * MODULE_COLS + x;
                    let lam = if dark {
                        0.0
                    } else {
                        f64::from(self.mean[i] + spot_add[i])
                    };
                    let k = if lam > 0.0 {
                        Poisson::new(lam).map_or(0.0, |p| p.sample(&mut rng))
                    } else {
                        0.0
                    };
                    *ph = k as u32;
                    let e = k * f64::from(cfg.photon_energy_kev);
                    let local = i - m * MODULE_PIXELS;
                    let gain = |s: usize| cal.gain.map(m, s)[local];
                    let ped = |s: usize| f64::from(cal.pedestal.map(m, s)[local]);
                    let nz = noise.map_or(0.0, |d| d.sample(&mut rng));
                    *w = if e * gain(0) < 10_000.0 {
                        let adc = (ped(0) + e * gain(0) + nz).round().clamp(0.0, 16383.0);
                        encode(GainStage::G0, adc as u16)
                    } else if ped(1) + e * gain(1) > 500.0 {
                        let adc = (ped(1) + e * gain(1) + nz / 10.0)
                            .round()
                            .clamp(1.0, 16383.0);
                        encode(GainStage::G1, adc as u16)
                    } else {
                        let adc = (ped(2) + e * gain(2)).round();
                        if adc < 1.0 {
                            crate::model::SATURATION
                        } else {
                            encode(GainStage::G2, adc.min(16382.0) as u16)
                        }
                    };
                    if cfg.special_rate > 0.0 && rng.random::<f64>() < cfg.special_rate {
                        *w = match rng.random_range(0..3) {
                            0 => crate::model::ERROR_WORD,
                            1 => crate::model::ERROR_G1_ZERO,
                            _ => 0x8000 | rng.random_range(0..0x4000u16),
                        };
                    }
                }
            });
        SynthFrame {
            raw,
            dark,
            photons,
            spots,
        }
    }

    /// Writes frames `0..frames` as raw little-endian `u16` words, one frame after the other
    /// (the `frames.u16` layout of `remora daq synth`). One frame at a time, so memory stays
    /// that of one frame however many are written.
    pub fn write_raw(&self, frames: u64, mut out: impl std::io::Write) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(self.layout.detector().frame_bytes());
        for n in 0..frames {
            bytes.clear();
            bytes.extend(self.frame(n).raw.iter().flat_map(|w| w.to_le_bytes()));
            out.write_all(&bytes)?;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{decode, Word};

    #[test]
    fn frames_have_spots_rings_darks_and_special_words() {
        let mut cfg = SynthConfig::new(1).unwrap();
        cfg.special_rate = 1e-4;
        let s = Synth::new(cfg).unwrap();
        let f = s.frame(0);
        assert!(!f.dark && s.frame(1).dark);
        assert_eq!(f.spots.len(), 40);
        let words: Vec<Word> = f.raw.iter().map(|&w| decode(w)).collect();
        let g1 = words
            .iter()
            .filter(|w| {
                matches!(
                    w,
                    Word::Value {
                        stage: GainStage::G1,
                        ..
                    }
                )
            })
            .count();
        let errors = words
            .iter()
            .filter(|w| matches!(w, Word::Error | Word::InvalidGain))
            .count();
        assert!(g1 > 40, "spots switch gain: {g1}");
        assert!(errors > 10, "special words: {errors}");
        let total: u64 = f.photons.iter().map(|&p| u64::from(p)).sum();
        assert!(total > 40 * 1000);
        // Deterministic.
        assert_eq!(s.frame(0).raw, f.raw);
        let d = s.frame(1);
        assert!(d.photons.iter().all(|&p| p == 0));
    }

    #[test]
    fn write_raw_is_the_frames_in_order_little_endian() {
        let s = Synth::new(SynthConfig::new(1).unwrap()).unwrap();
        let mut out = Vec::new();
        s.write_raw(2, &mut out).unwrap();
        let words: Vec<u16> = out
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(words.len(), 2 * MODULE_PIXELS);
        assert_eq!(&words[..MODULE_PIXELS], &s.frame(0).raw[..]);
        assert_eq!(&words[MODULE_PIXELS..], &s.frame(1).raw[..]);
    }
}
