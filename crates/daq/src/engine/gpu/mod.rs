//! The `gpu-wgpu` engine: the JUNGFRAU kernels as WGSL compute shaders on any Vulkan device.
//!
//! Tables, the assembly map and the integration matrix are uploaded once and kept on the device
//! (re-sent only when [`ConvTables::revision`] or the map/matrix change). Every stage is exact
//! against the CPU engines: conversion, pedestal tracking, counts, assembly and CSR bit for bit
//! (IEEE division and rounding in f32, special words tested on the bits); integration sums in
//! compensated f32 pairs (two-sum, the product's error from `fma`), within 1e-5 relative of
//! the f64 reference. [`Engine::process_frame`] runs the whole chain in one submission: the
//! veto is decided on the device, which writes the indirect dispatch sizes of the later stages
//! (zero for a rejected frame), and the host reads back only the results.
//!
//! Frames, tables, images and matrices larger than one storage binding (128 MiB on lavapipe)
//! are cut into bands of whole rows (pixels) or of whole bins (matrix); assembly and
//! integration run one pass per pair of bands.
use std::sync::{Arc, Mutex};

use remora_accel::gpu::{groups, wgpu, Gpu, GpuError, Pooled, ReadBytes};
use remora_accel::BackendInfo;

use super::{ConvOut, ConvStats, Engine, FrameOut, FramePlan};
use crate::azint::{AzMatrix, Profile};
use crate::calib::ConvTables;
use crate::geometry::AssemblyMap;
use crate::sparse::SparseFrame;
use crate::{DaqError, Result};

mod chain;
mod resident;

pub use chain::InFlight;

use resident::{Bands, Resident};

const CONVERT: &str = concat!(include_str!("common.wgsl"), include_str!("convert.wgsl"));
const COMPRESS: &str = concat!(include_str!("common.wgsl"), include_str!("compress.wgsl"));
const ASSEMBLE: &str = concat!(include_str!("common.wgsl"), include_str!("assemble.wgsl"));
const INTEGRATE: &str = concat!(include_str!("common.wgsl"), include_str!("integrate.wgsl"));
const DECIDE: &str = concat!(include_str!("common.wgsl"), include_str!("decide.wgsl"));

/// Invocations per workgroup in every kernel but `decide`.
const WG: u32 = 256;

fn gpu_err(e: GpuError) -> DaqError {
    DaqError::Config(format!("gpu-wgpu: {e}"))
}

/// The GPU engine. Calls are serialised on one engine (its device copies are shared state);
/// the work inside a call runs on the whole device.
pub struct GpuEngine {
    gpu: Arc<Gpu>,
    max_binding: u64,
    state: Mutex<Resident>,
}

impl std::fmt::Debug for GpuEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuEngine")
            .field("device", self.gpu.info())
            .finish()
    }
}

/// Kernel parameters: eight 32-bit words (`f32` passed as bits).
type Params = [u32; 8];

impl GpuEngine {
    /// The engine on the process' device (`REMORA_GPU` decides which; see
    /// [`remora_accel::gpu::GpuPolicy`]); an error saying why when there is none.
    pub fn new() -> Result<Self> {
        Ok(Self::on(Gpu::shared().map_err(gpu_err)?))
    }

    /// The engine on a given device.
    pub fn on(gpu: Arc<Gpu>) -> Self {
        Self {
            max_binding: u64::MAX,
            gpu,
            state: Mutex::new(Resident::default()),
        }
    }

    /// Caps the bytes one binding may hold below the device's limit, so that tests exercise
    /// the band splitting with small frames.
    pub fn with_max_binding(mut self, bytes: u64) -> Self {
        self.max_binding = bytes.max(4096);
        self
    }

    /// The device this engine runs on.
    pub fn device(&self) -> &Gpu {
        &self.gpu
    }

    /// Bytes one storage binding may hold.
    fn limit(&self) -> u64 {
        let i = self.gpu.info();
        self.max_binding.min(i.max_binding).min(i.max_buffer)
    }

    /// Bands of `unit`-aligned pieces of `total` items of `bytes_each`.
    fn bands(&self, total: usize, unit: usize, bytes_each: u64) -> Result<Bands> {
        let per = (self.limit() / bytes_each) as usize / unit * unit;
        if per == 0 && total > 0 {
            return Err(gpu_err(GpuError::TooLarge {
                what: "one row",
                bytes: unit as u64 * bytes_each,
                limit: self.limit(),
            }));
        }
        Ok(Bands::new(total, per.max(unit)))
    }

    fn pipe(&self, src: &str, name: &str, entry: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        self.gpu.pipeline(name, src, entry).map_err(gpu_err)
    }

    fn params(&self, p: Params, keep: &mut Vec<Pooled>) -> Result<()> {
        keep.push(self.gpu.upload("params", &p).map_err(gpu_err)?);
        Ok(())
    }

    fn stats_buffer(&self) -> Result<Pooled> {
        let b = self.gpu.storage("stats", 16).map_err(gpu_err)?;
        self.gpu.write(&b, 0, &[0u8; 16]);
        Ok(b)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Resident> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn f32_bits(x: f32) -> u32 {
    x.to_bits()
}

fn stats_of(back: &ReadBytes) -> ConvStats {
    let w = back.words();
    ConvStats {
        above: u64::from(w[0]),
        saturated: u64::from(w[1]),
        errors: u64::from(w[2]),
        invalid_gain: u64::from(w[3]),
    }
}

impl Engine for GpuEngine {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "gpu-wgpu",
            threads: 0,
            simd: if self.gpu.info().kind == "cpu" {
                "wgsl-cpu"
            } else {
                "wgsl"
            },
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
        let mut st = self.lock();
        let dev = st.tables(self, tables)?;
        let (photons, energy) = match &out {
            ConvOut::Energy(_) => (0, 1.0),
            ConvOut::Photons { energy_kev, .. } => (1, *energy_kev),
        };
        let stats = self.stats_buffer()?;
        let mut keep = Vec::new();
        let mut enc = self.gpu.encoder();
        let outs = self.record_convert(
            &mut enc,
            raw,
            dev,
            &stats,
            (photons, threshold, energy),
            &mut keep,
        )?;
        let mut ranges = vec![(&*stats, 0, 16)];
        for (o, band) in outs.iter().zip(dev.bands.iter()) {
            ranges.push((o, 0, band.len() as u64 * 4));
        }
        let back = self.gpu.read(enc, &ranges).map_err(gpu_err)?;
        let parts = dev.bands.iter().zip(&back[1..]);
        match out {
            ConvOut::Energy(o) => {
                for (band, b) in parts {
                    o[band].copy_from_slice(b.floats());
                }
            }
            ConvOut::Photons { out, .. } => {
                for (band, b) in parts {
                    for (o, w) in out[band].iter_mut().zip(b.words()) {
                        *o = *w as i32;
                    }
                }
            }
        }
        Ok(stats_of(&back[0]))
    }

    fn track_pedestal(
        &self,
        raw: &[u16],
        tables: &mut ConvTables,
        counts: &mut [u16],
        window: u16,
    ) -> Result<()> {
        super::check_pedestal(raw, tables, counts, window)?;
        let mut st = self.lock();
        let dev = st.tables(self, tables)?;
        let pipe = self.pipe(CONVERT, "daq-convert", "track")?;
        let mut keep = Vec::new();
        let mut cnt = Vec::new();
        let mut enc = self.gpu.encoder();
        for (k, band) in dev.bands.iter().enumerate() {
            let r = self
                .gpu
                .upload("dark", &raw[band.clone()])
                .map_err(gpu_err)?;
            let c32: Vec<u32> = counts[band.clone()].iter().map(|&c| u32::from(c)).collect();
            let c = self.gpu.upload("counts", &c32).map_err(gpu_err)?;
            self.params(
                [
                    band.len() as u32,
                    self.gpu.row_stride(),
                    0,
                    u32::from(window),
                    0,
                    0,
                    0,
                    0,
                ],
                &mut keep,
            )?;
            let p = keep.last().expect("params");
            let bind = self.gpu.bind_at(
                &pipe,
                &[
                    (0, r.as_entire_binding()),
                    (1, dev.ped[k].as_entire_binding()),
                    (3, c.as_entire_binding()),
                    (5, p.as_entire_binding()),
                ],
            );
            self.gpu
                .dispatch(&mut enc, &pipe, &bind, groups(band.len() as u64, WG));
            keep.push(r);
            cnt.push(c);
        }
        let mut ranges = Vec::new();
        for (k, band) in dev.bands.iter().enumerate() {
            ranges.push((&*dev.ped[k], 0, band.len() as u64 * 4));
            ranges.push((&*cnt[k], 0, band.len() as u64 * 4));
        }
        let back = self.gpu.read(enc, &ranges).map_err(gpu_err)?;
        for (k, band) in dev.bands.iter().enumerate() {
            tables.pedestal[0][band.clone()].copy_from_slice(back[2 * k].floats());
            for (c, &n) in counts[band.clone()].iter_mut().zip(back[2 * k + 1].words()) {
                *c = n as u16;
            }
        }
        // The device copy already holds the new pedestal: it stays valid.
        tables.revision += 1;
        dev.revision = tables.revision;
        Ok(())
    }

    fn count_above(&self, data: &[f32], threshold: f32) -> u64 {
        self.try_count(data, threshold).unwrap_or_else(|e| {
            // The trait gives this method no error path: a failed device falls back to the
            // host, loudly, rather than returning a wrong count.
            tracing::warn!("gpu-wgpu count_above failed, counted on the host: {e}");
            super::kernels::count_above(data, threshold)
        })
    }

    fn assemble(&self, raw: &[f32], map: &AssemblyMap, out: &mut [f32]) -> Result<()> {
        super::check_assemble(raw, map, out)?;
        let mut st = self.lock();
        let dm = st.map(self, map)?;
        let raw_bands = self.bands(raw.len(), 2, 4)?;
        let mut keep = Vec::new();
        let mut enc = self.gpu.encoder();
        let energy: Vec<Pooled> = raw_bands
            .iter()
            .map(|b| self.gpu.upload("energy", &raw[b]).map_err(gpu_err))
            .collect::<Result<_>>()?;
        let images = self.image_buffers(&dm.bands)?;
        self.record_assemble(
            &mut enc,
            &dm,
            &raw_bands,
            &energy,
            &images,
            raw.len(),
            None,
            &mut keep,
        )?;
        let ranges: Vec<_> = images
            .iter()
            .zip(dm.bands.iter())
            .map(|(b, band)| (&**b, 0, band.len() as u64 * 4))
            .collect();
        let back = self.gpu.read(enc, &ranges).map_err(gpu_err)?;
        for (band, b) in dm.bands.iter().zip(&back) {
            out[band].copy_from_slice(b.floats());
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
        if rows == 0 || cols == 0 {
            return Ok(SparseFrame::from_parts(rows, cols, threshold, Vec::new()));
        }
        let bands = self.bands(frame.len(), cols, 4)?;
        let mut keep = Vec::new();
        let mut enc = self.gpu.encoder();
        let mut csr = Vec::new();
        for band in bands.iter() {
            let f = self
                .gpu
                .upload("frame", &frame[band.clone()])
                .map_err(gpu_err)?;
            let c = self.record_compress(
                &mut enc,
                &f,
                band.len() / cols,
                cols,
                threshold,
                None,
                &mut keep,
            )?;
            keep.push(f);
            csr.push(c);
        }
        let ptrs: Vec<_> = csr
            .iter()
            .map(|c| (&*c.row_ptr, 0, (c.rows as u64 + 1) * 4))
            .collect();
        let back = self.gpu.read(enc, &ptrs).map_err(gpu_err)?;
        self.finish_csr(rows, cols, threshold, &csr, &back)
    }

    fn integrate(&self, m: &AzMatrix, image: &[f32]) -> Result<Profile> {
        m.check_image(image)?;
        let mut st = self.lock();
        let dm = st.matrix(self, m)?;
        let img_bands = self.bands(image.len(), 2, 4)?;
        let imgs: Vec<Pooled> = img_bands
            .iter()
            .map(|b| self.gpu.upload("image", &image[b]).map_err(gpu_err))
            .collect::<Result<_>>()?;
        let mut keep = Vec::new();
        let mut enc = self.gpu.encoder();
        let accs = self.record_integrate(
            &mut enc,
            &dm,
            &img_bands,
            &imgs,
            image.len(),
            None,
            &mut keep,
        )?;
        let ranges: Vec<_> = accs
            .iter()
            .zip(&dm.chunks)
            .map(|(a, c)| (&**a, 0, c.bins.len() as u64 * 32))
            .collect();
        let back = self.gpu.read(enc, &ranges).map_err(gpu_err)?;
        Ok(self.finish_profile(m, &dm, &back))
    }

    fn process_frame(
        &self,
        raw: &[u16],
        tables: &ConvTables,
        plan: &FramePlan<'_>,
        energy: &mut [f32],
        image: &mut [f32],
    ) -> Result<FrameOut> {
        chain::process(self, raw, tables, plan, energy, image)
    }
}

impl GpuEngine {
    /// Records the conversion of `raw`, band by band, into new device buffers (returned) with
    /// the counts added into `stats`. `how` is (photons, veto threshold, photon energy).
    pub(crate) fn record_convert(
        &self,
        enc: &mut wgpu::CommandEncoder,
        raw: &[u16],
        dev: &resident::DeviceTables,
        stats: &wgpu::Buffer,
        how: (u32, f32, f32),
        keep: &mut Vec<Pooled>,
    ) -> Result<Vec<Pooled>> {
        let (photons, threshold, energy) = how;
        let pipe = self.pipe(CONVERT, "daq-convert", "convert")?;
        let mut outs = Vec::new();
        for (k, band) in dev.bands.iter().enumerate() {
            let r = self
                .gpu
                .upload("raw", &raw[band.clone()])
                .map_err(gpu_err)?;
            let o = self
                .gpu
                .storage("converted", band.len() as u64 * 4)
                .map_err(gpu_err)?;
            let n = band.len() as u32;
            let stride = self.gpu.row_stride();
            let t = f32_bits(threshold);
            self.params([n, stride, photons, 0, t, f32_bits(energy), 0, 0], keep)?;
            let p = keep.last().expect("params");
            let bind = self.gpu.bind(
                &pipe,
                &[
                    r.as_entire_binding(),
                    dev.ped[k].as_entire_binding(),
                    dev.gain[k].as_entire_binding(),
                    o.as_entire_binding(),
                    stats.as_entire_binding(),
                    p.as_entire_binding(),
                ],
            );
            self.gpu
                .dispatch(enc, &pipe, &bind, groups(band.len() as u64, WG));
            keep.push(r);
            outs.push(o);
        }
        Ok(outs)
    }

    /// Submits the chain for one non-dark frame without waiting (sizes are checked here as in
    /// [`Engine::process_frame`]); [`finish_frame`](Self::finish_frame) reads its results.
    /// Submitting frame n + 1 before finishing frame n overlaps its upload and the device's
    /// work with frame n's readback (double buffering). Frames whose rows do not line up with
    /// the device bands are refused here (use `process_frame`).
    pub fn begin_frame<'a>(
        &self,
        raw: &[u16],
        tables: &ConvTables,
        plan: &FramePlan<'a>,
    ) -> Result<InFlight<'a>> {
        super::check_convert(raw, tables, tables.pixels())?;
        DaqError::check_len("frame shape", raw.len(), plan.shape.0 * plan.shape.1)?;
        super::check_compress(&[], 0, plan.shape.1)?;
        chain::begin(self, raw, tables, plan)?.ok_or_else(|| {
            DaqError::Config(format!(
                "gpu-wgpu: rows of {} pixels do not line up with the device bands",
                plan.shape.1
            ))
        })
    }

    /// Waits for a frame submitted by [`begin_frame`](Self::begin_frame) and returns its
    /// results (`energy` and `image` filled when the plan asked for host pixels).
    pub fn finish_frame(
        &self,
        frame: InFlight<'_>,
        energy: &mut [f32],
        image: &mut [f32],
    ) -> Result<FrameOut> {
        chain::finish(self, frame, energy, image)
    }

    fn try_count(&self, data: &[f32], threshold: f32) -> Result<u64> {
        let pipe = self.pipe(CONVERT, "daq-convert", "count")?;
        let stats = self.stats_buffer()?;
        let mut keep = Vec::new();
        let mut enc = self.gpu.encoder();
        for band in self.bands(data.len(), 1, 4)?.iter() {
            let d = self
                .gpu
                .upload("data", &data[band.clone()])
                .map_err(gpu_err)?;
            self.params(
                [
                    band.len() as u32,
                    self.gpu.row_stride(),
                    0,
                    0,
                    f32_bits(threshold),
                    0,
                    0,
                    0,
                ],
                &mut keep,
            )?;
            let p = keep.last().expect("params");
            let bind = self.gpu.bind_at(
                &pipe,
                &[
                    (1, d.as_entire_binding()),
                    (4, stats.as_entire_binding()),
                    (5, p.as_entire_binding()),
                ],
            );
            self.gpu
                .dispatch(&mut enc, &pipe, &bind, groups(band.len() as u64, WG));
            keep.push(d);
        }
        let back = self.gpu.read(enc, &[(&stats, 0, 16)]).map_err(gpu_err)?;
        Ok(stats_of(&back[0]).above)
    }

    fn image_buffers(&self, bands: &Bands) -> Result<Vec<Pooled>> {
        bands
            .iter()
            .map(|b| {
                self.gpu
                    .storage("image", b.len() as u64 * 4)
                    .map_err(gpu_err)
            })
            .collect()
    }
}
