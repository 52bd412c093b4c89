//! The stages as lists of dispatches: each pipeline with its bind group and workgroup count,
//! built once and recorded into an encoder as often as needed. A frame slot builds its lists
//! when it is made and records them for every frame, so the steady state creates no bind group
//! and writes no parameters; the single-stage calls build a list per call.
use std::sync::Arc;

use remora_accel::gpu::{groups, wgpu, Gpu, Pooled};

use super::copies::{Bands, DeviceMap, DeviceMatrix, DeviceTables};
use super::{f32_bits, gpu_err, GpuEngine, ASSEMBLE, COMPRESS, CONVERT, INTEGRATE, WG};
use crate::Result;

/// One dispatch.
struct Step {
    pipe: Arc<wgpu::ComputePipeline>,
    bind: wgpu::BindGroup,
    groups: u32,
    /// Byte offset of its grid in the indirect-argument buffer.
    indirect: Option<u64>,
}

/// Dispatches in order, the buffers their bind groups need (parameters), and stage marks.
#[derive(Default)]
pub(crate) struct Steps {
    list: Vec<Step>,
    keep: Vec<Pooled>,
    /// For an indirect list: the full grid of each launch (what the veto copies in for a kept
    /// frame).
    sizes: Option<Vec<u32>>,
    /// (steps recorded before it, name): where a stage ends.
    marks: Vec<(usize, &'static str)>,
}

impl Steps {
    /// Dispatches with grids fixed when recorded.
    pub(crate) fn direct() -> Self {
        Self::default()
    }

    /// Dispatches whose grids the device writes (see `decide.wgsl`).
    pub(crate) fn indirect() -> Self {
        Self {
            sizes: Some(Vec::new()),
            ..Self::default()
        }
    }

    /// Full grid of every indirect launch, in order.
    pub(crate) fn sizes(&self) -> &[u32] {
        self.sizes.as_deref().unwrap_or(&[])
    }

    fn launch(&mut self, pipe: Arc<wgpu::ComputePipeline>, bind: wgpu::BindGroup, groups: u32) {
        let indirect = self.sizes.as_mut().map(|s| {
            s.push(groups);
            (s.len() as u64 - 1) * 12
        });
        self.list.push(Step {
            pipe,
            bind,
            groups,
            indirect,
        });
    }

    /// Ends a stage: its device time is taken here when timestamps are recorded.
    pub(crate) fn mark(&mut self, name: &'static str) {
        self.marks.push((self.list.len(), name));
    }

    /// Stage names in order.
    pub(crate) fn stages(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.marks.iter().map(|m| m.1)
    }

    /// Parameters uploaded once and held as long as the list.
    fn params(&mut self, gpu: &Gpu, p: super::Params) -> Result<usize> {
        self.keep.push(gpu.upload("params", &p).map_err(gpu_err)?);
        Ok(self.keep.len() - 1)
    }

    /// Records every dispatch; `args` is the indirect-argument buffer of an indirect list.
    /// With `ts`, a timestamp is written at each mark (query index advanced).
    pub(crate) fn record(
        &self,
        gpu: &Gpu,
        enc: &mut wgpu::CommandEncoder,
        args: Option<&wgpu::Buffer>,
        mut ts: Option<(&wgpu::QuerySet, &mut u32)>,
    ) {
        let mut marks = self.marks.iter().peekable();
        for (i, s) in self.list.iter().enumerate() {
            while let Some((at, _)) = marks.next_if(|m| m.0 == i) {
                debug_assert_eq!(*at, i);
                if let Some((q, n)) = ts.as_mut() {
                    enc.write_timestamp(q, **n);
                    **n += 1;
                }
            }
            match (s.indirect, args) {
                (Some(at), Some(a)) => gpu.dispatch_indirect(enc, &s.pipe, &s.bind, a, at),
                _ => gpu.dispatch(enc, &s.pipe, &s.bind, s.groups),
            }
        }
        for _ in marks {
            if let Some((q, n)) = ts.as_mut() {
                enc.write_timestamp(q, **n);
                **n += 1;
            }
        }
    }
}

/// One band's CSR on the device: row pointers, and column/value per entry.
pub(crate) struct Csr {
    pub(crate) rows: usize,
    pub(crate) row_ptr: Pooled,
    pub(crate) col: Pooled,
    pub(crate) val: Pooled,
}

/// One band's CSR as it travels to the host: row pointers, columns packed two `u16` per word,
/// values; in host-visible buffers, so that only the entries a frame kept are read.
pub(crate) struct PackedCsr {
    pub(crate) rows: usize,
    pub(crate) ptr: Pooled,
    pub(crate) col: Pooled,
    pub(crate) val: Pooled,
}

impl GpuEngine {
    /// Conversion of the raw bands (`raw`, two pixels per word) into new device buffers
    /// (returned), the counts added into `stats`. `how` is (photons, veto threshold, photon
    /// energy).
    pub(crate) fn record_convert(
        &self,
        steps: &mut Steps,
        raw: &[Pooled],
        dev: &DeviceTables,
        stats: &wgpu::Buffer,
        how: (u32, f32, f32),
    ) -> Result<Vec<Pooled>> {
        let (photons, threshold, energy) = how;
        let pipe = self.pipe(CONVERT, "daq-convert", "convert")?;
        let mut outs = Vec::new();
        for (k, band) in dev.bands.iter().enumerate() {
            let o = self
                .gpu
                .storage("converted", band.len() as u64 * 4)
                .map_err(gpu_err)?;
            let n = band.len() as u32;
            let stride = self.gpu.row_stride();
            let t = f32_bits(threshold);
            let p = steps.params(
                &self.gpu,
                [n, stride, photons, 0, t, f32_bits(energy), 0, 0],
            )?;
            let bind = self.gpu.bind(
                &pipe,
                &[
                    raw[k].as_entire_binding(),
                    dev.ped[k].as_entire_binding(),
                    dev.gain[k].as_entire_binding(),
                    o.as_entire_binding(),
                    stats.as_entire_binding(),
                    steps.keep[p].as_entire_binding(),
                ],
            );
            steps.launch(pipe.clone(), bind, groups(band.len() as u64, WG));
            outs.push(o);
        }
        Ok(outs)
    }

    /// The three CSR passes over `rows` rows of `frame`.
    pub(crate) fn record_compress(
        &self,
        steps: &mut Steps,
        frame: &wgpu::Buffer,
        rows: usize,
        cols: usize,
        threshold: f32,
    ) -> Result<Csr> {
        let n = (rows * cols) as u64;
        let row_ptr = self
            .gpu
            .storage("row_ptr", (rows as u64 + 1) * 4)
            .map_err(gpu_err)?;
        let col = self.gpu.storage("csr_col", n * 4).map_err(gpu_err)?;
        let val = self.gpu.storage("csr_val", n * 4).map_err(gpu_err)?;
        let stride = self.gpu.row_stride();
        let p = steps.params(
            &self.gpu,
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
        )?;
        for (entry, g) in [
            ("count_rows", rows as u32),
            ("scan_rows", 1),
            ("fill_rows", rows as u32),
        ] {
            let pipe = self.pipe(COMPRESS, "daq-compress", entry)?;
            let mut b = vec![
                (0, frame.as_entire_binding()),
                (1, row_ptr.as_entire_binding()),
                (4, steps.keep[p].as_entire_binding()),
            ];
            if entry == "fill_rows" {
                b.push((2, col.as_entire_binding()));
                b.push((3, val.as_entire_binding()));
            }
            if entry == "scan_rows" {
                b.remove(0);
            }
            let bind = self.gpu.bind_at(&pipe, &b);
            steps.launch(pipe, bind, g);
            steps.mark(match entry {
                "count_rows" => "csr count",
                "scan_rows" => "csr scan",
                _ => "csr fill",
            });
        }
        Ok(Csr {
            rows,
            row_ptr,
            col,
            val,
        })
    }

    /// Copies a band's CSR into host-visible buffers, columns packed to 16 bits.
    pub(crate) fn record_pack(
        &self,
        steps: &mut Steps,
        csr: &Csr,
        cols: usize,
    ) -> Result<PackedCsr> {
        use wgpu::BufferUsages as U;
        let n = (csr.rows * cols) as u64;
        let out = |what, bytes: u64| {
            self.gpu
                .buffer(what, bytes.max(4), U::STORAGE | U::MAP_READ)
                .map_err(gpu_err)
        };
        let ptr = out("csr ptr out", (csr.rows as u64 + 1) * 4)?;
        // Whole groups of four entries: `pack` stores them as one vec4 and one vec2.
        let col = out("csr col out", n.div_ceil(4) * 8)?;
        let val = out("csr val out", n.div_ceil(4) * 16)?;
        let p = steps.params(
            &self.gpu,
            [
                csr.rows as u32,
                cols as u32,
                self.gpu.row_stride(),
                0,
                0,
                0,
                0,
                0,
            ],
        )?;
        let pipe = self.pipe(COMPRESS, "daq-compress", "pack")?;
        let bind = self.gpu.bind_at(
            &pipe,
            &[
                (1, csr.row_ptr.as_entire_binding()),
                (2, csr.col.as_entire_binding()),
                (3, csr.val.as_entire_binding()),
                (4, steps.keep[p].as_entire_binding()),
                (5, ptr.as_entire_binding()),
                (6, col.as_entire_binding()),
                (7, val.as_entire_binding()),
            ],
        );
        let threads = (csr.rows as u64 + 1).max(n.div_ceil(4));
        steps.launch(pipe, bind, groups(threads, WG));
        steps.mark("csr pack");
        Ok(PackedCsr {
            rows: csr.rows,
            ptr,
            col,
            val,
        })
    }

    /// Assembly: one pass per (image band, raw band).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_assemble(
        &self,
        steps: &mut Steps,
        dm: &DeviceMap,
        raw_bands: &Bands,
        energy: &[Pooled],
        images: &[Pooled],
        total: usize,
    ) -> Result<()> {
        let pipe = self.pipe(ASSEMBLE, "daq-assemble", "assemble")?;
        for (ib, band) in dm.bands.iter().enumerate() {
            for (rb, raw) in raw_bands.iter().enumerate() {
                let p = steps.params(
                    &self.gpu,
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
                )?;
                let bind = self.gpu.bind(
                    &pipe,
                    &[
                        dm.src[ib].as_entire_binding(),
                        energy[rb].as_entire_binding(),
                        images[ib].as_entire_binding(),
                        steps.keep[p].as_entire_binding(),
                    ],
                );
                steps.launch(pipe.clone(), bind, groups(band.len() as u64, WG));
            }
        }
        Ok(())
    }

    /// Integration: one pass per (bin chunk, image band); returns each chunk's sums, in
    /// buffers with `usage` besides storage (host-visible ones are read in place).
    pub(crate) fn record_integrate(
        &self,
        steps: &mut Steps,
        dm: &DeviceMatrix,
        img_bands: &Bands,
        images: &[Pooled],
        total: usize,
        usage: wgpu::BufferUsages,
    ) -> Result<Vec<Pooled>> {
        let pipe = self.pipe(INTEGRATE, "daq-integrate", "integrate")?;
        let mut accs = Vec::new();
        for c in &dm.chunks {
            let acc = self
                .gpu
                .buffer(
                    "bin sums",
                    c.bins.len() as u64 * 32,
                    wgpu::BufferUsages::STORAGE | usage,
                )
                .map_err(gpu_err)?;
            for (k, band) in img_bands.iter().enumerate() {
                let p = steps.params(
                    &self.gpu,
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
                )?;
                let bind = self.gpu.bind(
                    &pipe,
                    &[
                        c.indptr.as_entire_binding(),
                        c.indices.as_entire_binding(),
                        c.coef.as_entire_binding(),
                        c.ncoef.as_entire_binding(),
                        images[k].as_entire_binding(),
                        acc.as_entire_binding(),
                        steps.keep[p].as_entire_binding(),
                    ],
                );
                steps.launch(pipe.clone(), bind, c.bins.len() as u32);
            }
            accs.push(acc);
        }
        Ok(accs)
    }

    /// Parameters for a list the caller builds by hand (the decide step).
    pub(crate) fn step_params(&self, steps: &mut Steps, p: super::Params) -> Result<usize> {
        steps.params(&self.gpu, p)
    }

    /// Adds a hand-built dispatch with explicit binding numbers; `params` is (binding, index
    /// in `steps` of the parameters).
    pub(crate) fn step_launch_at(
        &self,
        steps: &mut Steps,
        pipe: Arc<wgpu::ComputePipeline>,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
        params: (u32, usize),
        groups: u32,
    ) {
        let mut b = bindings.to_vec();
        b.push((params.0, steps.keep[params.1].as_entire_binding()));
        let bind = self.gpu.bind_at(&pipe, &b);
        steps.launch(pipe, bind, groups);
    }

    /// Adds a hand-built dispatch (bindings in order, parameters at `steps` index `p` last).
    pub(crate) fn step_launch(
        &self,
        steps: &mut Steps,
        pipe: Arc<wgpu::ComputePipeline>,
        bindings: &[wgpu::BindingResource<'_>],
        p: usize,
        groups: u32,
    ) {
        let mut b = bindings.to_vec();
        b.push(steps.keep[p].as_entire_binding());
        let bind = self.gpu.bind(&pipe, &b);
        steps.launch(pipe, bind, groups);
    }
}
