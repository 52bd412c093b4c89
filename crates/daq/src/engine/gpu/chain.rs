//! Recording the stages into one command encoder, and the chained frame: conversion, the veto
//! decided on the device, CSR, assembly and integration in one submission.
use remora_accel::gpu::{groups, wgpu, Pooled, ReadBytes, Readback};

use super::resident::{Bands, DeviceMap, DeviceMatrix};
use super::{f32_bits, gpu_err, stats_of, GpuEngine, ASSEMBLE, COMPRESS, DECIDE, INTEGRATE, WG};
use crate::azint::{AzMatrix, Profile};
use crate::calib::ConvTables;
use crate::engine::{process_stepwise, FrameOut, FramePlan};
use crate::sparse::SparseFrame;
use crate::Result;

/// Dispatches sized by the device: each launch takes the next three words of `args`, and its
/// full size goes to `groups` (what `decide` copies there for a kept frame).
pub(crate) struct Indirect<'a> {
    args: &'a wgpu::Buffer,
    groups: Vec<u32>,
}

/// One band's CSR buffers on the device.
pub(crate) struct Csr {
    pub(crate) rows: usize,
    pub(crate) row_ptr: Pooled,
    col: Pooled,
    val: Pooled,
}

impl GpuEngine {
    fn launch(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pipe: &wgpu::ComputePipeline,
        bind: &wgpu::BindGroup,
        n: u32,
        ind: &mut Option<&mut Indirect<'_>>,
    ) {
        match ind {
            Some(i) => {
                let at = i.groups.len() as u64 * 12;
                i.groups.push(n);
                self.gpu.dispatch_indirect(enc, pipe, bind, i.args, at);
            }
            None => self.gpu.dispatch(enc, pipe, bind, n),
        }
    }

    /// Records the three CSR passes over `rows` rows of `frame`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_compress(
        &self,
        enc: &mut wgpu::CommandEncoder,
        frame: &wgpu::Buffer,
        rows: usize,
        cols: usize,
        threshold: f32,
        mut ind: Option<&mut Indirect<'_>>,
        keep: &mut Vec<Pooled>,
    ) -> Result<Csr> {
        let n = (rows * cols) as u64;
        let row_ptr = self
            .gpu
            .storage("row_ptr", (rows as u64 + 1) * 4)
            .map_err(gpu_err)?;
        let col = self.gpu.storage("csr_col", n * 4).map_err(gpu_err)?;
        let val = self.gpu.storage("csr_val", n * 4).map_err(gpu_err)?;
        let stride = self.gpu.row_stride();
        self.params(
            [
                rows as u32,
                cols as u32,
                stride,
                0,
                f32_bits(threshold),
                0,
                0,
                0,
            ],
            keep,
        )?;
        let p = keep.last().expect("params");
        for (entry, g) in [
            ("count_rows", rows as u32),
            ("scan_rows", 1),
            ("fill_rows", rows as u32),
        ] {
            let pipe = self.pipe(COMPRESS, "daq-compress", entry)?;
            let mut b = vec![
                (0, frame.as_entire_binding()),
                (1, row_ptr.as_entire_binding()),
                (4, p.as_entire_binding()),
            ];
            if entry == "fill_rows" {
                b.push((2, col.as_entire_binding()));
                b.push((3, val.as_entire_binding()));
            }
            if entry == "scan_rows" {
                b.remove(0);
            }
            let bind = self.gpu.bind_at(&pipe, &b);
            self.launch(enc, &pipe, &bind, g, &mut ind);
        }
        Ok(Csr {
            rows,
            row_ptr,
            col,
            val,
        })
    }

    /// Reads the entries of each band's CSR (its row pointers already read into `ptrs`) and
    /// joins the bands.
    pub(crate) fn finish_csr(
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

    /// Records assembly: one pass per (image band, raw band).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_assemble(
        &self,
        enc: &mut wgpu::CommandEncoder,
        dm: &DeviceMap,
        raw_bands: &Bands,
        energy: &[Pooled],
        images: &[Pooled],
        total: usize,
        mut ind: Option<&mut Indirect<'_>>,
        keep: &mut Vec<Pooled>,
    ) -> Result<()> {
        let pipe = self.pipe(ASSEMBLE, "daq-assemble", "assemble")?;
        for (ib, band) in dm.bands.iter().enumerate() {
            for (rb, raw) in raw_bands.iter().enumerate() {
                self.params(
                    [
                        band.len() as u32,
                        self.gpu.row_stride(),
                        raw.start as u32,
                        raw.end as u32,
                        total as u32,
                        u32::from(rb == 0),
                        0,
                        0,
                    ],
                    keep,
                )?;
                let p = keep.last().expect("params");
                let bind = self.gpu.bind(
                    &pipe,
                    &[
                        dm.src[ib].as_entire_binding(),
                        energy[rb].as_entire_binding(),
                        images[ib].as_entire_binding(),
                        p.as_entire_binding(),
                    ],
                );
                self.launch(enc, &pipe, &bind, groups(band.len() as u64, WG), &mut ind);
            }
        }
        Ok(())
    }

    /// Records integration: one pass per (bin chunk, image band); returns each chunk's sums.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_integrate(
        &self,
        enc: &mut wgpu::CommandEncoder,
        dm: &DeviceMatrix,
        img_bands: &Bands,
        images: &[Pooled],
        total: usize,
        mut ind: Option<&mut Indirect<'_>>,
        keep: &mut Vec<Pooled>,
    ) -> Result<Vec<Pooled>> {
        let pipe = self.pipe(INTEGRATE, "daq-integrate", "integrate")?;
        let mut accs = Vec::new();
        for c in &dm.chunks {
            let acc = self
                .gpu
                .storage("bin sums", c.bins.len() as u64 * 32)
                .map_err(gpu_err)?;
            for (k, band) in img_bands.iter().enumerate() {
                self.params(
                    [
                        c.bins.len() as u32,
                        self.gpu.row_stride(),
                        band.start as u32,
                        band.end as u32,
                        total as u32,
                        u32::from(k == 0),
                        0,
                        0,
                    ],
                    keep,
                )?;
                let p = keep.last().expect("params");
                let bind = self.gpu.bind(
                    &pipe,
                    &[
                        c.indptr.as_entire_binding(),
                        c.indices.as_entire_binding(),
                        c.coef.as_entire_binding(),
                        c.ncoef.as_entire_binding(),
                        images[k].as_entire_binding(),
                        acc.as_entire_binding(),
                        p.as_entire_binding(),
                    ],
                );
                self.launch(enc, &pipe, &bind, c.bins.len() as u32, &mut ind);
            }
            accs.push(acc);
        }
        Ok(accs)
    }

    /// The profile from each chunk's sums (signal, and what invalid pixels would have added,
    /// taken off the matrix totals).
    pub(crate) fn finish_profile(
        &self,
        m: &AzMatrix,
        dm: &DeviceMatrix,
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
        Profile::from_sums(m, sums, crate::engine::Engine::info(self))
    }
}

/// The chained frame on the device: [`begin`] then [`finish`]. Falls back to the stages one by
/// one where the frame's rows do not line up with the table bands (a shape other than whole
/// raw rows).
pub(super) fn process(
    e: &GpuEngine,
    raw: &[u16],
    tables: &ConvTables,
    plan: &FramePlan<'_>,
    energy: &mut [f32],
    image: &mut [f32],
) -> Result<FrameOut> {
    crate::engine::check_convert(raw, tables, energy.len())?;
    crate::engine::check_compress(energy, plan.shape.0, plan.shape.1)?;
    if let Some((map, m)) = plan.integrate {
        crate::engine::check_assemble(energy, map, image)?;
        m.check_image(image)?;
    }
    match begin(e, raw, tables, plan)? {
        Some(f) => finish(e, f, energy, image),
        None => process_stepwise(e, raw, tables, plan, energy, image),
    }
}

/// A chained frame submitted to the device whose results are not read yet: the caller may
/// submit the next frame first, so that its upload and the device's work overlap with this
/// frame's readback.
pub struct InFlight<'a> {
    plan: FramePlan<'a>,
    bands: Bands,
    img_bands: Option<Bands>,
    matrix: Option<(std::sync::Arc<DeviceMatrix>, &'a AzMatrix)>,
    stats: Pooled,
    csr: Vec<Csr>,
    accs: Vec<Pooled>,
    conv_out: Vec<Pooled>,
    images: Vec<Pooled>,
    back: Readback,
    _keep: Vec<Pooled>,
}

/// Records and submits the chain for one frame (sizes already checked); `None` when the
/// frame's rows do not line up with the table bands.
pub(super) fn begin<'a>(
    e: &GpuEngine,
    raw: &[u16],
    tables: &ConvTables,
    plan: &FramePlan<'a>,
) -> Result<Option<InFlight<'a>>> {
    let (_, cols) = plan.shape;
    let mut st = e.lock();
    let (map, matrix) = match plan.integrate {
        Some((map, m)) => (Some(st.map(e, map)?), Some((st.matrix(e, m)?, m))),
        None => (None, None),
    };
    let dev = st.tables(e, tables)?;
    if cols == 0 || dev.bands.iter().any(|b| b.len() % cols != 0) {
        return Ok(None);
    }
    let gpu = &e.gpu;
    let mut keep = Vec::new();
    let mut enc = gpu.encoder();
    let stats = e.stats_buffer()?;
    // Conversion, band by band, into device buffers that the later stages read.
    let conv_out = e.record_convert(
        &mut enc,
        raw,
        dev,
        &stats,
        (0, plan.veto_kev, 1.0),
        &mut keep,
    )?;
    // The veto: the device sizes every later dispatch from the count it just made.
    let img_bands = map.as_ref().map(|d| d.bands.clone());
    let slots = 3 * dev.bands.len()
        + img_bands.as_ref().map_or(0, |b| b.len() * dev.bands.len())
        + matrix.as_ref().map_or(0, |(d, _)| {
            d.chunks.len() * img_bands.as_ref().map_or(0, Bands::len)
        });
    let args = gpu
        .buffer(
            "indirect args",
            slots as u64 * 12,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::INDIRECT,
        )
        .map_err(gpu_err)?;
    let sizes = gpu
        .storage("dispatch sizes", slots as u64 * 4)
        .map_err(gpu_err)?;
    let decide = e.pipe(DECIDE, "daq-decide", "decide")?;
    let min = u32::try_from(plan.veto_min).unwrap_or(u32::MAX);
    e.params(
        [min, gpu.row_stride(), slots as u32, 0, 0, 0, 0, 0],
        &mut keep,
    )?;
    let p = keep.last().expect("params");
    let bind = gpu.bind(
        &decide,
        &[
            stats.as_entire_binding(),
            sizes.as_entire_binding(),
            args.as_entire_binding(),
            p.as_entire_binding(),
        ],
    );
    gpu.dispatch(&mut enc, &decide, &bind, 1);
    let mut ind = Indirect {
        args: &args,
        groups: Vec::new(),
    };
    let mut csr = Vec::new();
    for (k, band) in dev.bands.iter().enumerate() {
        csr.push(e.record_compress(
            &mut enc,
            &conv_out[k],
            band.len() / cols,
            cols,
            plan.sparse_kev,
            Some(&mut ind),
            &mut keep,
        )?);
    }
    let mut images = Vec::new();
    let mut accs = Vec::new();
    if let (Some(dm), Some((dmat, _)), Some(ib)) = (&map, &matrix, &img_bands) {
        images = e.image_buffers(ib)?;
        e.record_assemble(
            &mut enc,
            dm,
            &dev.bands,
            &conv_out,
            &images,
            raw.len(),
            Some(&mut ind),
            &mut keep,
        )?;
        accs = e.record_integrate(
            &mut enc,
            dmat,
            ib,
            &images,
            plan.integrate.map_or(0, |(map, _)| map.pixels()),
            Some(&mut ind),
            &mut keep,
        )?;
    }
    debug_assert_eq!(ind.groups.len(), slots);
    gpu.write(&sizes, 0, bytemuck::cast_slice(&ind.groups));
    // First readback: counts, row pointers, bin sums and (when asked) the converted frame.
    let mut ranges = vec![(&*stats, 0, 16)];
    for c in &csr {
        ranges.push((&*c.row_ptr, 0, (c.rows as u64 + 1) * 4));
    }
    if let Some((dmat, _)) = &matrix {
        for (a, c) in accs.iter().zip(&dmat.chunks) {
            ranges.push((&**a, 0, c.bins.len() as u64 * 32));
        }
    }
    if plan.host_pixels {
        for (o, band) in conv_out.iter().zip(dev.bands.iter()) {
            ranges.push((&**o, 0, band.len() as u64 * 4));
        }
    }
    let back = gpu.submit_read(enc, &ranges).map_err(gpu_err)?;
    let bands = dev.bands.clone();
    Ok(Some(InFlight {
        plan: *plan,
        bands,
        img_bands,
        matrix,
        stats,
        csr,
        accs,
        conv_out,
        images,
        back,
        _keep: keep,
    }))
}

/// Waits for a frame [`begin`] submitted and reads its results.
pub(super) fn finish(
    e: &GpuEngine,
    f: InFlight<'_>,
    energy: &mut [f32],
    image: &mut [f32],
) -> Result<FrameOut> {
    let gpu = &e.gpu;
    let plan = f.plan;
    let (rows, cols) = plan.shape;
    if plan.host_pixels {
        crate::DaqError::check_len("converted frame", rows * cols, energy.len())?;
        if let Some((map, _)) = plan.integrate {
            crate::DaqError::check_len("image", map.pixels(), image.len())?;
        }
    }
    let back = f.back.wait(gpu).map_err(gpu_err)?;
    let stats_v = stats_of(&back[0]);
    let ptrs = &back[1..1 + f.csr.len()];
    let mut at = 1 + f.csr.len();
    let sums = match &f.matrix {
        Some((dmat, _)) => {
            let s = &back[at..at + dmat.chunks.len()];
            at += dmat.chunks.len();
            Some(s)
        }
        None => None,
    };
    if plan.host_pixels {
        for (band, b) in f.bands.iter().zip(&back[at..]) {
            energy[band].copy_from_slice(b.floats());
        }
    }
    if stats_v.above < plan.veto_min {
        return Ok(FrameOut {
            stats: stats_v,
            kept: None,
        });
    }
    // Kept: the CSR entries and (when asked) the image.
    let sparse = e.finish_csr(rows, cols, plan.sparse_kev, &f.csr, ptrs)?;
    let profile = match (&f.matrix, sums) {
        (Some((dmat, m)), Some(s)) => Some(e.finish_profile(m, dmat, s)),
        _ => None,
    };
    if plan.host_pixels {
        if let Some(ib) = &f.img_bands {
            let r: Vec<_> = f
                .images
                .iter()
                .zip(ib.iter())
                .map(|(b, band)| (&**b, 0, band.len() as u64 * 4))
                .collect();
            let imgs = gpu.read(gpu.encoder(), &r).map_err(gpu_err)?;
            for (band, b) in ib.iter().zip(&imgs) {
                image[band].copy_from_slice(b.floats());
            }
        }
    }
    drop(f.stats);
    drop(f.accs);
    drop(f.conv_out);
    Ok(FrameOut {
        stats: stats_v,
        kept: Some((sparse, profile)),
    })
}
