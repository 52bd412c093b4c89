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
//! The chain's steady state: each frame in flight owns a slot (see `slot.rs`) made on first
//! use with every buffer, bind group and parameter it needs; a frame is one fill of the slot's
//! mapped upload buffer (the raw frame, the only bytes sent), one submission, the counts read
//! back, and for a kept frame the CSR entries and bin sums mapped in place from host-visible
//! buffers, exactly as many bytes as the frame produced. [`GpuEngine::begin_frame`] and
//! [`GpuEngine::finish_frame`] keep as many frames in flight as the caller wants.
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
mod copies;
mod dark;
mod resident;
mod slot;
mod steps;

pub use chain::InFlight;

use copies::Bands;
use resident::Resident;
use slot::FrameSlot;
use steps::{Csr, Steps};

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
    timestamps: bool,
    times: Mutex<StageTimes>,
}

/// Device time per stage of the chained frames since [`GpuEngine::take_stage_times`] was last
/// called (timestamp queries; see [`GpuEngine::with_timestamps`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageTimes {
    /// Frames measured.
    pub frames: u64,
    /// (stage, total milliseconds over those frames), in chain order.
    pub total_ms: Vec<(&'static str, f64)>,
}

impl StageTimes {
    /// Mean milliseconds per frame of each stage (the bands of a stage added up), in chain
    /// order.
    pub fn per_frame(&self) -> Vec<(&'static str, f64)> {
        let n = self.frames.max(1) as f64;
        let mut out: Vec<(&'static str, f64)> = Vec::new();
        for &(s, t) in &self.total_ms {
            match out.iter_mut().find(|o| o.0 == s) {
                Some(o) => o.1 += t / n,
                None => out.push((s, t / n)),
            }
        }
        out
    }
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
            timestamps: false,
            times: Mutex::new(StageTimes::default()),
        }
    }

    /// Times every stage of the chained frames on the device with timestamp queries, where
    /// the device has them (see [`timestamps`](Self::timestamps)); off by default, because
    /// the readback of the times adds a few bytes to every frame.
    pub fn with_timestamps(mut self, on: bool) -> Self {
        use wgpu::Features as F;
        let f = self.gpu.features();
        self.timestamps = on && f.contains(F::TIMESTAMP_QUERY | F::TIMESTAMP_QUERY_INSIDE_ENCODERS);
        self
    }

    /// Whether stage times are being measured.
    pub fn timestamps(&self) -> bool {
        self.timestamps
    }

    /// The stage times gathered so far, resetting them.
    pub fn take_stage_times(&self) -> StageTimes {
        std::mem::take(&mut *self.times.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn record_times(&self, names: &[&'static str], ticks: &[u32]) {
        let period = f64::from(self.gpu.queue().get_timestamp_period());
        let stamp = |k: usize| {
            u64::from(ticks[2 * k]) | (u64::from(ticks.get(2 * k + 1).copied().unwrap_or(0)) << 32)
        };
        if ticks.len() < 2 * (names.len() + 1) {
            return;
        }
        let mut t = self.times.lock().unwrap_or_else(|p| p.into_inner());
        if t.total_ms.len() != names.len() {
            t.total_ms = names.iter().map(|&n| (n, 0.0)).collect();
            t.frames = 0;
        }
        for k in 0..names.len() {
            let d = stamp(k + 1).saturating_sub(stamp(k)) as f64 * period / 1e6;
            t.total_ms[k].1 += d;
        }
        t.frames += 1;
    }

    /// Returns a slot whose frame is finished to the free list.
    fn put_slot(&self, slot: FrameSlot) {
        self.lock().put_slot(slot);
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

/// Records the copies of a raw frame's bands (two bytes a pixel) out of its upload buffer into
/// the device buffers `raw`; an odd tail is rounded up to whole words, as uploads are.
fn copy_raw_bands(
    upload: &remora_accel::gpu::Upload,
    enc: &mut wgpu::CommandEncoder,
    bands: &Bands,
    raw: &[Pooled],
) {
    for (k, band) in bands.iter().enumerate() {
        let at = band.start as u64 * 2;
        let len = (band.len() as u64 * 2)
            .next_multiple_of(4)
            .min(upload.capacity() - at);
        upload.copy_to(enc, at, &raw[k], 0, len);
    }
}

fn f32_bits(x: f32) -> u32 {
    x.to_bits()
}

/// The four counts the conversion leaves (16 bytes, little-endian `u32`s; missing ones read 0).
fn stats_of(back: &[u8]) -> ConvStats {
    let w = |k: usize| {
        back.get(4 * k..4 * k + 4).map_or(0, |b| {
            u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        })
    };
    ConvStats {
        above: w(0),
        saturated: w(1),
        errors: w(2),
        invalid_gain: w(3),
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
        let raws = self.upload_raw(raw, &dev.bands)?;
        let mut steps = Steps::direct();
        let outs =
            self.record_convert(&mut steps, &raws, dev, &stats, (photons, threshold, energy))?;
        let mut enc = self.gpu.encoder();
        steps.record(&self.gpu, &mut enc, None, None);
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
        dark::track(self, raw, tables, counts, window)
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
        let energy: Vec<Pooled> = raw_bands
            .iter()
            .map(|b| self.gpu.upload("energy", &raw[b]).map_err(gpu_err))
            .collect::<Result<_>>()?;
        let images = self.image_buffers(&dm.bands)?;
        let mut steps = Steps::direct();
        self.record_assemble(&mut steps, &dm, &raw_bands, &energy, &images, raw.len())?;
        let mut enc = self.gpu.encoder();
        steps.record(&self.gpu, &mut enc, None, None);
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
        let mut steps = Steps::direct();
        let mut keep = Vec::new();
        let mut csr = Vec::new();
        for band in bands.iter() {
            let f = self
                .gpu
                .upload("frame", &frame[band.clone()])
                .map_err(gpu_err)?;
            csr.push(self.record_compress(&mut steps, &f, band.len() / cols, cols, threshold)?);
            keep.push(f);
        }
        let mut enc = self.gpu.encoder();
        steps.record(&self.gpu, &mut enc, None, None);
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
        let mut steps = Steps::direct();
        let accs = self.record_integrate(
            &mut steps,
            &dm,
            &img_bands,
            &imgs,
            image.len(),
            wgpu::BufferUsages::COPY_SRC,
        )?;
        let mut enc = self.gpu.encoder();
        steps.record(&self.gpu, &mut enc, None, None);
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

    fn as_gpu(&self) -> Option<&GpuEngine> {
        Some(self)
    }
}

impl GpuEngine {
    /// The raw frame's bands in new device buffers (two pixels per word).
    fn upload_raw(&self, raw: &[u16], bands: &Bands) -> Result<Vec<Pooled>> {
        bands
            .iter()
            .map(|b| self.gpu.upload("raw", &raw[b]).map_err(gpu_err))
            .collect()
    }

    /// Reads the entries of each band's CSR (its row pointers already read into `ptrs`) and
    /// joins the bands.
    fn finish_csr(
        &self,
        rows: usize,
        cols: usize,
        threshold: f32,
        csr: &[Csr],
        ptrs: &[ReadBytes],
    ) -> Result<SparseFrame> {
        let nnz: Vec<u64> = ptrs
            .iter()
            .map(|p| u64::from(*p.words().last().unwrap_or(&0)))
            .collect();
        let mut ranges = Vec::new();
        for (c, &k) in csr.iter().zip(&nnz) {
            ranges.push((&*c.col, 0, k * 4));
            ranges.push((&*c.val, 0, k * 4));
        }
        let back = self
            .gpu
            .read(self.gpu.encoder(), &ranges)
            .map_err(gpu_err)?;
        let parts = ptrs
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let w = p.words();
                let per_row = w.windows(2).map(|x| x[1] - x[0]).collect();
                let cs = back[2 * k].words().iter().map(|&c| c as u16).collect();
                (per_row, cs, back[2 * k + 1].floats().to_vec())
            })
            .collect();
        Ok(SparseFrame::from_parts(rows, cols, threshold, parts))
    }

    /// The profile from each chunk's sums (signal, and what invalid pixels would have added,
    /// taken off the matrix totals).
    fn finish_profile(
        &self,
        m: &AzMatrix,
        dm: &copies::DeviceMatrix,
        back: &[ReadBytes],
    ) -> Profile {
        let mut sums = vec![(0.0, 0.0, 0.0); m.bins];
        for (c, b) in dm.chunks.iter().zip(back) {
            let f = b.floats();
            for (j, bin) in c.bins.clone().enumerate() {
                let a = &f[j * 8..j * 8 + 6];
                let pair = |k: usize| f64::from(a[k]) + f64::from(a[k + 1]);
                sums[bin] = (
                    pair(0),
                    m.norm_total[bin] - pair(2),
                    m.count_total[bin] - pair(4),
                );
            }
        }
        Profile::from_sums(m, sums, Engine::info(self))
    }

    /// Submits the chain for one non-dark frame without waiting (sizes are checked here as in
    /// [`Engine::process_frame`]); [`finish_frame`](Self::finish_frame) reads its results.
    /// Frames in flight are the caller's choice: submitting frames n + 1 … n + d − 1 before
    /// finishing frame n overlaps their uploads and the device's work with frame n's readback,
    /// and after the first d frames nothing more is created on the device. Frames whose rows
    /// do not line up with the device bands are refused here (use `process_frame`).
    pub fn begin_frame(
        &self,
        raw: &[u16],
        tables: &ConvTables,
        plan: &FramePlan<'_>,
    ) -> Result<InFlight> {
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

    /// Waits for a frame submitted by [`begin_frame`](Self::begin_frame) with the same `plan`
    /// and returns its results (`energy` and `image` filled when the plan asked for host
    /// pixels). Frames may be finished in any order.
    pub fn finish_frame(
        &self,
        frame: InFlight,
        plan: &FramePlan<'_>,
        energy: &mut [f32],
        image: &mut [f32],
    ) -> Result<FrameOut> {
        chain::finish(self, frame, plan, energy, image)
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
