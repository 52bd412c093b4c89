//! What the engine keeps between calls: the device copies of the conversion tables, the
//! assembly map and the integration matrix ([`super::copies`]), made anew when their keys say
//! a copy is stale, and the frame and dark-frame slots not in flight.
use super::copies::{DeviceMap, DeviceMatrix, DeviceTables, MatrixChunk};
use super::dark::DarkSlot;
use super::slot::{FrameSlot, SlotKey};
use super::{gpu_err, GpuEngine};
use crate::azint::AzMatrix;
use crate::calib::ConvTables;
use crate::geometry::AssemblyMap;
use crate::{DaqError, Result};

#[derive(Default)]
pub(crate) struct Resident {
    tables: Option<DeviceTables>,
    map: Option<std::sync::Arc<DeviceMap>>,
    matrix: Option<std::sync::Arc<DeviceMatrix>>,
    /// Moves whenever a device copy is made anew: frame slots bind the copies of one
    /// generation.
    generation: u64,
    /// Frame slots not in flight.
    free: Vec<FrameSlot>,
    /// What pedestal tracking keeps on the device.
    dark: Option<DarkSlot>,
}

/// Free slots kept; more frames in flight than this make slots that are dropped afterwards.
const FREE_SLOTS: usize = 8;

/// A cheap fingerprint of a map or matrix (lengths and a sample of entries), so that one built
/// anew at the address of a dropped one is not mistaken for it.
fn sample<T: Copy + Into<f64>>(v: &[T]) -> u64 {
    let mut h = v.len() as u64;
    let step = (v.len() / 61).max(1);
    for x in v.iter().step_by(step) {
        h = h.rotate_left(7) ^ (*x).into().to_bits();
        h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h
}

impl Resident {
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// A free slot built for `key`. Slots of another plan are dropped (a new layout or plan
    /// replaces them for good); those of the same plan with or without host pixels are kept,
    /// since a live view asks for pixels now and then between frames without them.
    pub(crate) fn take_slot(&mut self, key: &SlotKey) -> Option<FrameSlot> {
        self.free.retain(|s| s.key.same_plan(key));
        let i = self.free.iter().rposition(|s| &s.key == key)?;
        Some(self.free.remove(i))
    }

    /// The dark-frame slot made for `key`, if it is the one kept.
    pub(crate) fn take_dark(&mut self, key: &(u64, usize, usize, u16)) -> Option<DarkSlot> {
        self.dark.take().filter(|d| d.key() == key)
    }

    pub(crate) fn put_dark(&mut self, slot: DarkSlot) {
        self.dark = Some(slot);
    }

    pub(crate) fn put_slot(&mut self, slot: FrameSlot) {
        if slot.key.generation() == self.generation && self.free.len() < FREE_SLOTS {
            self.free.push(slot);
        }
    }

    /// The device copy of `t`, uploaded when missing or stale.
    pub(crate) fn tables(&mut self, e: &GpuEngine, t: &ConvTables) -> Result<&mut DeviceTables> {
        let n = t.pixels();
        let key = (t.pedestal[0].as_ptr() as usize, n);
        let fresh = matches!(&self.tables, Some(d) if d.key == key && d.revision == t.revision);
        if !fresh {
            self.tables = None;
            // Whole rows of a module where the frame is made of them (the chain's CSR works on
            // rows); two pixels at least, because raw words travel packed two per u32.
            let unit = if n % crate::model::MODULE_COLS == 0 {
                crate::model::MODULE_COLS
            } else {
                n.max(2)
            };
            let bands = e.bands(n, unit, 12)?;
            let (mut ped, mut gain) = (Vec::new(), Vec::new());
            for b in bands.iter() {
                let bytes = b.len() as u64 * 12;
                let p = e.gpu.storage("pedestal", bytes).map_err(gpu_err)?;
                let g = e.gpu.storage("gain", bytes).map_err(gpu_err)?;
                for s in 0..3 {
                    let at = s as u64 * b.len() as u64 * 4;
                    e.gpu
                        .write(&p, at, bytemuck::cast_slice(&t.pedestal[s][b.clone()]));
                    e.gpu
                        .write(&g, at, bytemuck::cast_slice(&t.gain[s][b.clone()]));
                }
                ped.push(p);
                gain.push(g);
            }
            self.generation += 1;
            self.tables = Some(DeviceTables {
                key,
                revision: t.revision,
                bands,
                ped,
                gain,
            });
        }
        Ok(self.tables.as_mut().expect("tables just made"))
    }

    /// The device copy of an assembly map.
    pub(crate) fn map(
        &mut self,
        e: &GpuEngine,
        m: &AssemblyMap,
    ) -> Result<std::sync::Arc<DeviceMap>> {
        let key = (m.src.as_ptr() as usize, m.src.len(), sample(&m.src));
        if let Some(d) = self.map.as_ref().filter(|d| d.key == key) {
            return Ok(d.clone());
        }
        let bands = e.bands(m.src.len(), 2, 4)?;
        let src = bands
            .iter()
            .map(|b| e.gpu.upload("assembly", &m.src[b]).map_err(gpu_err))
            .collect::<Result<_>>()?;
        self.generation += 1;
        let d = std::sync::Arc::new(DeviceMap { key, bands, src });
        self.map = Some(d.clone());
        Ok(d)
    }

    /// The device copy of an integration matrix, in chunks of whole bins that fit a binding.
    pub(crate) fn matrix(
        &mut self,
        e: &GpuEngine,
        m: &AzMatrix,
    ) -> Result<std::sync::Arc<DeviceMatrix>> {
        let key = (
            m.indices.as_ptr() as usize,
            m.indices.len(),
            sample(&m.indices) ^ sample(&m.coef).rotate_left(17) ^ sample(&m.indptr),
        );
        if let Some(d) = self.matrix.as_ref().filter(|d| d.key == key) {
            return Ok(d.clone());
        }
        let per = (e.limit() / 4) as usize;
        let mut chunks = Vec::new();
        let mut b0 = 0;
        while b0 < m.bins {
            let e0 = m.indptr[b0] as usize;
            let mut b1 = b0;
            while b1 < m.bins && m.indptr[b1 + 1] as usize - e0 <= per {
                b1 += 1;
            }
            if b1 == b0 {
                return Err(DaqError::Config(format!(
                    "gpu-wgpu: bin {b0} has {} matrix entries, more than one binding holds ({per})",
                    m.indptr[b0 + 1] - m.indptr[b0]
                )));
            }
            let e1 = m.indptr[b1] as usize;
            let ptr: Vec<u32> = m.indptr[b0..=b1].iter().map(|&p| p - e0 as u32).collect();
            let up = |what, v: &[u8]| e.gpu.upload::<u8>(what, v).map_err(gpu_err);
            chunks.push(MatrixChunk {
                bins: b0..b1,
                indptr: e.gpu.upload("indptr", &ptr).map_err(gpu_err)?,
                indices: up("indices", bytemuck::cast_slice(&m.indices[e0..e1]))?,
                coef: up("coef", bytemuck::cast_slice(&m.coef[e0..e1]))?,
                ncoef: up("ncoef", bytemuck::cast_slice(&m.ncoef[e0..e1]))?,
            });
            b0 = b1;
        }
        self.generation += 1;
        let d = std::sync::Arc::new(DeviceMatrix { key, chunks });
        self.matrix = Some(d.clone());
        Ok(d)
    }
}
