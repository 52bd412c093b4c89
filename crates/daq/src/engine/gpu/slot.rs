//! A frame slot: every device object one frame in flight needs (upload staging, raw and
//! converted bands, counts, CSR, image, bin sums, host-visible outputs, the dispatch lists with
//! their bind groups), made once per layout and reused frame after frame. The engine keeps a
//! few free slots; a caller with `d` frames in flight uses `d` of them, so after the first `d`
//! frames nothing is created.
use std::sync::Arc;

use remora_accel::gpu::{groups, wgpu, Pooled, Upload};

use super::copies::{Bands, DeviceMap, DeviceMatrix, DeviceTables};
use super::steps::{PackedCsr, Steps};
use super::{f32_bits, gpu_err, GpuEngine, DECIDE};
use crate::calib::ConvTables;
use crate::engine::FramePlan;
use crate::Result;

/// What a slot was built for: the device copies it binds (by generation) and the plan's values
/// baked into its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotKey {
    generation: u64,
    shape: (usize, usize),
    veto_kev: u32,
    veto_min: u64,
    sparse_kev: u32,
    integrate: bool,
    host_pixels: bool,
    timestamps: bool,
}

impl SlotKey {
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn timestamps(&self) -> bool {
        self.timestamps
    }

    /// The same plan, whether or not the host pixels come back.
    pub(crate) fn same_plan(&self, other: &SlotKey) -> bool {
        let with = |k: &SlotKey| SlotKey {
            host_pixels: false,
            ..k.clone()
        };
        with(self) == with(other)
    }

    pub(crate) fn new(generation: u64, plan: &FramePlan<'_>, timestamps: bool) -> Self {
        Self {
            generation,
            shape: plan.shape,
            veto_kev: f32_bits(plan.veto_kev),
            veto_min: plan.veto_min,
            sparse_kev: f32_bits(plan.sparse_kev),
            integrate: plan.integrate.is_some(),
            host_pixels: plan.host_pixels,
            timestamps,
        }
    }
}

/// Timestamp queries of one slot: one before the upload, one after each stage.
pub(crate) struct Stamps {
    pub(crate) set: wgpu::QuerySet,
    pub(crate) resolve: Pooled,
    pub(crate) names: Vec<&'static str>,
}

pub(crate) struct FrameSlot {
    pub(crate) key: SlotKey,
    pub(crate) upload: Upload,
    pub(crate) bands: Bands,
    pub(crate) raw: Vec<Pooled>,
    pub(crate) conv: Vec<Pooled>,
    pub(crate) stats: Pooled,
    pub(crate) args: Pooled,
    pub(crate) head: Steps,
    pub(crate) tail: Steps,
    pub(crate) packed: Vec<PackedCsr>,
    pub(crate) img_bands: Option<Bands>,
    pub(crate) images: Vec<Pooled>,
    pub(crate) matrix: Option<Arc<DeviceMatrix>>,
    pub(crate) accs: Vec<Pooled>,
    pub(crate) stamps: Option<Stamps>,
    /// Kept for the bind groups that refer to them.
    _keep: Vec<Pooled>,
}

impl FrameSlot {
    /// Builds a slot for `plan` on the resident copies (already made fresh by the caller):
    /// `dev` of `tables`, and with integration `map` and `matrix` of `plan.integrate`.
    pub(crate) fn build(
        e: &GpuEngine,
        dev: &DeviceTables,
        map: Option<Arc<DeviceMap>>,
        matrix: Option<Arc<DeviceMatrix>>,
        tables: &ConvTables,
        plan: &FramePlan<'_>,
        key: SlotKey,
    ) -> Result<Self> {
        use wgpu::BufferUsages as U;
        let gpu = &e.gpu;
        let (_, cols) = plan.shape;
        let n = tables.pixels();
        let upload = gpu
            .upload_buffer("raw upload", n as u64 * 2)
            .map_err(gpu_err)?;
        let raw = dev
            .bands
            .iter()
            .map(|b| gpu.storage("raw", b.len() as u64 * 2).map_err(gpu_err))
            .collect::<Result<Vec<_>>>()?;
        let stats = gpu.storage("stats", 16).map_err(gpu_err)?;
        let mut head = Steps::direct();
        let conv = e.record_convert(&mut head, &raw, dev, &stats, (0, plan.veto_kev, 1.0))?;
        head.mark("convert");

        let mut tail = Steps::indirect();
        let mut packed = Vec::new();
        let mut csrs = Vec::new();
        for (k, band) in dev.bands.iter().enumerate() {
            csrs.push(e.record_compress(
                &mut tail,
                &conv[k],
                band.len() / cols,
                cols,
                plan.sparse_kev,
            )?);
        }
        for c in &csrs {
            packed.push(e.record_pack(&mut tail, c, cols)?);
        }
        let img_bands = map.as_ref().map(|d| d.bands.clone());
        let mut images = Vec::new();
        let mut accs = Vec::new();
        if let (Some(dm), Some(dmat), Some(ib)) = (&map, &matrix, &img_bands) {
            images = e.image_buffers(ib)?;
            e.record_assemble(&mut tail, dm, &dev.bands, &conv, &images, n)?;
            tail.mark("assemble");
            let pixels = plan.integrate.map_or(0, |(map, _)| map.pixels());
            accs = e.record_integrate(&mut tail, dmat, ib, &images, pixels, U::MAP_READ)?;
            tail.mark("integrate");
        }

        // The veto: `decide` writes every later grid from the count (zero for a rejected
        // frame). Its list goes between conversion and the rest.
        let slots = tail.sizes().len();
        let args = gpu
            .buffer("indirect args", slots as u64 * 12, U::STORAGE | U::INDIRECT)
            .map_err(gpu_err)?;
        let sizes = gpu
            .upload::<u32>("dispatch sizes", tail.sizes())
            .map_err(gpu_err)?;
        let decide = gpu
            .pipeline("daq-decide", DECIDE, "decide")
            .map_err(gpu_err)?;
        let min = u32::try_from(plan.veto_min).unwrap_or(u32::MAX);
        let p = e.step_params(
            &mut head,
            [min, gpu.row_stride(), slots as u32, 0, 0, 0, 0, 0],
        )?;
        e.step_launch(
            &mut head,
            decide,
            &[
                stats.as_entire_binding(),
                sizes.as_entire_binding(),
                args.as_entire_binding(),
            ],
            p,
            groups(1, 1),
        );
        head.mark("decide");

        let stamps = if key.timestamps {
            let names: Vec<_> = std::iter::once("upload")
                .chain(head.stages())
                .chain(tail.stages())
                .collect();
            let count = names.len() as u32 + 1;
            let set = gpu.device().create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("daq stage times"),
                ty: wgpu::QueryType::Timestamp,
                count,
            });
            let resolve = gpu
                .buffer(
                    "stage times",
                    u64::from(count) * 8,
                    U::QUERY_RESOLVE | U::COPY_SRC,
                )
                .map_err(gpu_err)?;
            Some(Stamps {
                set,
                resolve,
                names,
            })
        } else {
            None
        };
        Ok(Self {
            key,
            upload,
            bands: dev.bands.clone(),
            raw,
            conv,
            stats,
            args,
            head,
            tail,
            packed,
            img_bands,
            images,
            matrix,
            accs,
            stamps,
            _keep: vec![sizes]
                .into_iter()
                .chain(csrs.into_iter().flat_map(|c| [c.row_ptr, c.col, c.val]))
                .collect(),
        })
    }
}
