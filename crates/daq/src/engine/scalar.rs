//! The `cpu-scalar` engine: one thread, one pixel at a time, through [`crate::model::decode`].
//! Deliberately plain: it is the reference the fast engines are compared with.
use remora_accel::BackendInfo;

use super::{ConvOut, ConvStats, Engine};
use crate::azint::{AzMatrix, Profile};
use crate::calib::ConvTables;
use crate::geometry::AssemblyMap;
use crate::model::{decode, Word};
use crate::sparse::SparseFrame;
use crate::Result;

/// Single-threaded reference engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScalarEngine;

impl ScalarEngine {
    fn energy(raw: u16, t: &ConvTables, i: usize, st: &mut ConvStats) -> f32 {
        if t.mask[i] != 0 {
            return f32::NAN;
        }
        match decode(raw) {
            Word::Saturated => {
                st.saturated += 1;
                f32::INFINITY
            }
            Word::Error => {
                st.errors += 1;
                f32::NAN
            }
            Word::InvalidGain => {
                st.invalid_gain += 1;
                f32::NAN
            }
            Word::Value { stage, adc } => {
                let s = stage as usize;
                (f32::from(adc) - t.pedestal[s][i]) / t.gain[s][i]
            }
        }
    }
}

impl Engine for ScalarEngine {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "cpu-scalar",
            threads: 1,
            simd: "baseline",
        }
    }

    fn convert(
        &self,
        raw: &[u16],
        tables: &ConvTables,
        out: ConvOut<'_>,
        threshold: f32,
    ) -> Result<ConvStats> {
        super::check_convert(raw, tables, out.len())?;
        super::check_energy(&out)?;
        let mut st = ConvStats::default();
        match out {
            ConvOut::Energy(o) => {
                for (i, (&w, o)) in raw.iter().zip(o.iter_mut()).enumerate() {
                    *o = Self::energy(w, tables, i, &mut st);
                    st.above += u64::from(*o > threshold);
                }
            }
            ConvOut::Photons { out, energy_kev } => {
                for (i, (&w, o)) in raw.iter().zip(out.iter_mut()).enumerate() {
                    let e = Self::energy(w, tables, i, &mut st);
                    st.above += u64::from(e > threshold);
                    *o = if e.is_nan() {
                        i32::MIN
                    } else if e == f32::INFINITY {
                        i32::MAX
                    } else {
                        (e / energy_kev).round_ties_even() as i32
                    };
                }
            }
        }
        Ok(st)
    }

    fn track_pedestal(
        &self,
        raw: &[u16],
        tables: &mut ConvTables,
        counts: &mut [u16],
        window: u16,
    ) -> Result<()> {
        super::check_pedestal(raw, tables, counts, window)?;
        tables.revision += 1;
        for (i, &w) in raw.iter().enumerate() {
            if let Word::Value {
                stage: crate::model::GainStage::G0,
                adc,
            } = decode(w)
            {
                let n = counts[i].saturating_add(1).min(window);
                counts[i] = n;
                let p = &mut tables.pedestal[0][i];
                *p += (f32::from(adc) - *p) / f32::from(n);
            }
        }
        Ok(())
    }

    fn count_above(&self, data: &[f32], threshold: f32) -> u64 {
        data.iter().filter(|&&v| v > threshold).count() as u64
    }

    fn assemble(&self, raw: &[f32], map: &AssemblyMap, out: &mut [f32]) -> Result<()> {
        super::check_assemble(raw, map, out)?;
        for (o, &e) in out.iter_mut().zip(&map.src) {
            *o = AssemblyMap::gather(e, raw);
        }
        Ok(())
    }

    fn compress(
        &self,
        frame: &[f32],
        rows: usize,
        cols: usize,
        threshold: f32,
    ) -> Result<SparseFrame> {
        super::check_compress(frame, rows, cols)?;
        let mut per_row = Vec::with_capacity(rows);
        let (mut cs, mut vs) = (Vec::new(), Vec::new());
        for r in 0..rows {
            let mut n = 0;
            for (x, &v) in frame[r * cols..(r + 1) * cols].iter().enumerate() {
                if v > threshold {
                    cs.push(x as u16);
                    vs.push(v);
                    n += 1;
                }
            }
            per_row.push(n);
        }
        Ok(SparseFrame::from_parts(
            rows,
            cols,
            threshold,
            vec![(per_row, cs, vs)],
        ))
    }

    fn integrate(&self, m: &AzMatrix, image: &[f32]) -> Result<Profile> {
        m.check_image(image)?;
        // Plain f64 sums in pixel order, one bin at a time: an independent check of the fast
        // kernels' grouped sums, equal to well below the 1e-4 tolerance.
        let mut sums = vec![(0.0f64, 0.0f64, 0.0f64); m.bins];
        for (b, s) in sums.iter_mut().enumerate() {
            for k in m.indptr[b] as usize..m.indptr[b + 1] as usize {
                let v = image
                    .get(m.indices[k] as usize)
                    .copied()
                    .unwrap_or(f32::NAN);
                if v.is_finite() {
                    s.0 += f64::from(m.coef[k]) * f64::from(v);
                    s.1 += f64::from(m.ncoef[k]);
                    s.2 += f64::from(m.coef[k]);
                }
            }
        }
        Ok(Profile::from_sums(m, sums, self.info()))
    }
}
