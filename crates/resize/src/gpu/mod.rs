//! The GPU engine for the separable resample (`gpu-wgpu`): WGSL compute shaders through
//! `remora-accel`'s wgpu backend, on any Vulkan device. A leaf: it implements the crate's
//! [`Resampler`] trait (`resampler.rs`) and `registry.rs` lists it, so no CPU module names it.
//!
//! What it does: the weights of each axis are computed on the host exactly as fast_image_resize
//! computes them for the CPU engine (`weights.rs`), uploaded with the pixels, and both passes run
//! on the device, the intermediate kept there: vertical then horizontal (each only when its
//! side changes, fast_image_resize's order for 8-bit pixels), alpha premultiplied while the first
//! pass reads the source and divided out after the second, the same i32 fixed-point sums and
//! rounding as the CPU's. The contract is within one grey level of the CPU engine (room for
//! fast_image_resize's SIMD alpha division, done in f32); every case the tests and the
//! benchmark's photographs cover is identical. Images whose buffers would pass the device's
//! largest storage binding (128 MiB on lavapipe) are split into tiles (`plan.rs`) with the
//! source overlap each needs, two tiles in flight so that one's transfer overlaps the next
//! one's compute.
//!
//! What it does not: decode or encode (they stay on the CPU), pick a device by itself
//! ([`device`]: `REMORA_GPU`'s policy, or the one a program chose with [`use_device`]), or fall
//! back ([`ResampleEngine::Auto`](crate::ResampleEngine::Auto) does that in the caller).
//!
//! ```no_run
//! use remora_resize::gpu::{device, GpuResampler};
//! use remora_resize::resample::Resampler;
//! use remora_resize::Filter;
//! let gpu = GpuResampler::new(device().unwrap());
//! let rgb = vec![0u8; 640 * 480 * 3];
//! let small = gpu.resample(&rgb, (640, 480), 3, (320, 240), Filter::Lanczos3).unwrap();
//! assert_eq!(small.len(), 320 * 240 * 3);
//! ```
use std::borrow::Cow;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use remora_accel::gpu::{groups, wgpu, Pooled, Readback};
pub use remora_accel::gpu::{Gpu, GpuError, GpuPolicy};

use crate::error::{Error, Result};
use crate::options::Filter;
pub use crate::resampler::GPU_ENGINE;
use crate::resampler::{Purpose, Resampler};

mod plan;
mod weights;

use plan::Tile;
use weights::{Axis, Dir};

const WGSL: &str = include_str!("resample.wgsl");
const PIPELINES: &str = "remora-resize";
/// Invocations per workgroup (the shader's `@workgroup_size`), one output word each.
const GROUP: u32 = 64;
/// Byte offsets in the shader are u32: no buffer above 2 GiB whatever the device allows.
const MAX_BINDING: u64 = 1 << 31;

static DEVICE: OnceLock<Arc<Gpu>> = OnceLock::new();

/// Makes `gpu` the device of [`ResampleEngine::Gpu`](crate::ResampleEngine::Gpu) and
/// [`ResampleEngine::Auto`](crate::ResampleEngine::Auto) in this process, instead of `REMORA_GPU`'s choice
/// (tests use it to run on a CPU-type device without the variable). Only the first call counts:
/// `false` when a device was already chosen.
pub fn use_device(gpu: Arc<Gpu>) -> bool {
    DEVICE.set(gpu).is_ok()
}

/// The device the GPU engine uses: the one given to [`use_device`], else [`Gpu::shared`]
/// (opened once under `REMORA_GPU`'s policy: a hardware GPU unless `REMORA_GPU=any`).
pub fn device() -> std::result::Result<Arc<Gpu>, GpuError> {
    match DEVICE.get() {
        Some(g) => Ok(g.clone()),
        None => Gpu::shared(),
    }
}

/// The registry's constructor: the engine on [`device`], or why there is none; `auto` passes
/// over a CPU-type device (lavapipe), slower than the CPU engine.
pub(crate) fn open(purpose: Purpose) -> Result<Arc<dyn Resampler>> {
    resampler(device(), purpose == Purpose::Auto)
}

/// The GPU engine on `device`, or [`Error::Gpu`] saying why not; with `hardware_only`, a
/// CPU-type device (lavapipe) is refused too.
pub(crate) fn resampler(
    device: std::result::Result<Arc<Gpu>, GpuError>,
    hardware_only: bool,
) -> Result<Arc<dyn Resampler>> {
    let gpu = device.map_err(gpu_error)?;
    if hardware_only && gpu.info().kind == "cpu" {
        return Err(Error::Gpu(format!(
            "{} is a CPU-type device, slower than the CPU engine",
            gpu.info().name
        )));
    }
    Ok(Arc::new(GpuResampler::new(gpu)))
}

fn gpu_error(e: GpuError) -> Error {
    Error::Gpu(e.to_string())
}

/// The GPU resampling engine on one device. Cheap to clone; safe to share between threads
/// (each call has its own buffers from the device's pool).
#[derive(Debug, Clone)]
pub struct GpuResampler {
    gpu: Arc<Gpu>,
    limit: u64,
}

impl GpuResampler {
    /// The engine on `gpu`.
    pub fn new(gpu: Arc<Gpu>) -> GpuResampler {
        let info = gpu.info();
        let limit = info.max_binding.min(info.max_buffer).min(MAX_BINDING);
        GpuResampler { gpu, limit }
    }

    /// The device.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Lowers the largest buffer the engine binds to `bytes` (never above the device's limit),
    /// so that small images are split into tiles as large ones are: how the tests exercise the
    /// split.
    pub fn with_binding_limit(mut self, bytes: u64) -> GpuResampler {
        self.limit = self.limit.min(bytes.max(4));
        self
    }

    /// The largest buffer the engine binds, in bytes.
    pub fn binding_limit(&self) -> u64 {
        self.limit
    }

    /// How many tiles resampling `size` to `to` is split into on this engine (1 when every
    /// buffer fits one binding, 0 when the size does not change: a copy).
    pub fn tiles(
        &self,
        size: (u32, u32),
        channels: u8,
        to: (u32, u32),
        filter: Filter,
    ) -> Result<usize> {
        if size == to {
            return Ok(0);
        }
        Ok(self.plan(&[], size, channels, to, filter)?.tiles.len())
    }

    /// The fixed parts of one resample, or [`Error::Gpu`] when a single output pixel's source
    /// window does not fit the binding limit.
    fn plan<'a>(
        &self,
        src: &'a [u8],
        size: (u32, u32),
        channels: u8,
        to: (u32, u32),
        filter: Filter,
    ) -> Result<Work<'a>> {
        let h = (size.0 != to.0).then(|| weights::axis(size.0, to.0, filter, Dir::Horizontal));
        let v = (size.1 != to.1).then(|| weights::axis(size.1, to.1, filter, Dir::Vertical));
        let tiles =
            plan::tiles(h.as_ref(), v.as_ref(), to, channels, self.limit).ok_or_else(|| {
                Error::Gpu(format!(
                    "resampling {}x{} to {}x{} ({filter}) needs more than the {} bytes one \
                     buffer may hold on {}",
                    size.0,
                    size.1,
                    to.0,
                    to.1,
                    self.limit,
                    self.gpu.info().name
                ))
            })?;
        Ok(Work {
            src,
            width: size.0,
            channels,
            h,
            v,
            // Nearest neighbour copies samples: no alpha weighting, as fast_image_resize.
            alpha: matches!(channels, 2 | 4) && filter != Filter::Point,
            tiles,
        })
    }

    /// Records `pass` reading `input` into a new buffer; everything it binds goes to `keep`.
    fn record(
        &self,
        enc: &mut wgpu::CommandEncoder,
        input: &wgpu::Buffer,
        pass: Pass<'_>,
        keep: &mut Vec<Pooled>,
    ) -> Result<Pooled> {
        let g = &self.gpu;
        let pipe = g.pipeline(PIPELINES, WGSL, pass.entry).map_err(gpu_error)?;
        let out = g
            .storage("resize output", pass.bytes.max(4))
            .map_err(gpu_error)?;
        let mut tables = vec![g.upload("resize params", &pass.params).map_err(gpu_error)?];
        if let Some((a, range, base)) = pass.axis {
            // The tile's bounds, rebased on its source region, and its weights.
            let (i, j) = (range.start as usize, range.end as usize);
            let bounds: Vec<u32> = a.bounds[i..j]
                .iter()
                .flat_map(|&[start, taps]| [if taps > 0 { start - base } else { 0 }, taps])
                .collect();
            let w = &a.weights[i * a.window..j * a.window];
            tables.push(g.upload("resize bounds", &bounds).map_err(gpu_error)?);
            tables.push(g.upload("resize weights", w).map_err(gpu_error)?);
        }
        let mut bind = vec![input.as_entire_binding(), out.as_entire_binding()];
        bind.extend(tables.iter().map(|t| t.as_entire_binding()));
        let bind = g.bind(&pipe, &bind);
        g.dispatch(enc, &pipe, &bind, groups(pass.bytes.div_ceil(4), GROUP));
        // Bound buffers stay on loan until the readback: back in the pool, one could be handed
        // to the next pass and overwritten before this one runs.
        keep.extend(tables);
        Ok(out)
    }

    /// Uploads `tile`'s source region and submits its passes; the readback stays in flight.
    fn submit(&self, work: &Work<'_>, tile: &Tile) -> Result<Flight> {
        let g = &self.gpu;
        let region = region(work.src, work.width, work.channels, tile);
        let src = g
            .storage("resize source", (region.len() as u64).max(4))
            .map_err(gpu_error)?;
        // Whole words straight from the caller's pixels; only a ragged tail is copied.
        let whole = region.len() / 4 * 4;
        g.write(&src, 0, &region[..whole]);
        g.write(&src, whole as u64, &region[whole..]);
        let rows = tile.rows.end - tile.rows.start;
        let cols = tile.cols.end - tile.cols.start;
        let src_cols = tile.src_cols.end - tile.src_cols.start;
        let (c, stride) = (u32::from(work.channels), g.row_stride());
        let size = |w: u32| u64::from(rows) * u64::from(w) * u64::from(c);
        // Params: output width and height, input width, channels, weight precision, window,
        // premultiply while reading, grid stride (the shader's `Params`).
        let mut passes = Vec::with_capacity(3);
        let mut premul = u32::from(work.alpha);
        if let Some(a) = &work.v {
            passes.push(Pass {
                entry: "vertical",
                params: [
                    src_cols,
                    rows,
                    src_cols,
                    c,
                    a.precision,
                    a.window as u32,
                    premul,
                    stride,
                ],
                axis: Some((a, tile.rows.clone(), tile.src_rows.start)),
                bytes: size(src_cols),
            });
            premul = 0;
        }
        if let Some(a) = &work.h {
            passes.push(Pass {
                entry: "horizontal",
                params: [
                    cols,
                    rows,
                    src_cols,
                    c,
                    a.precision,
                    a.window as u32,
                    premul,
                    stride,
                ],
                axis: Some((a, tile.cols.clone(), tile.src_cols.start)),
                bytes: size(cols),
            });
        }
        if work.alpha {
            passes.push(Pass {
                entry: "unpremultiply",
                params: [cols, rows, cols, c, 0, 0, 0, stride],
                axis: None,
                bytes: size(cols),
            });
        }
        let mut enc = g.encoder();
        let mut keep = Vec::new();
        let mut cur: Option<Pooled> = None;
        for pass in passes {
            let input: &wgpu::Buffer = cur.as_deref().unwrap_or(&src);
            let out = self.record(&mut enc, input, pass, &mut keep)?;
            keep.extend(cur.replace(out));
        }
        let out = cur.expect("at least one pass: the size changed");
        let read = g
            .submit_read(enc, &[(&out, 0, size(cols))])
            .map_err(gpu_error)?;
        keep.extend([out, src]);
        Ok(Flight {
            tile: tile.clone(),
            read,
            _keep: keep,
        })
    }
}

/// One resample's fixed parts.
struct Work<'a> {
    src: &'a [u8],
    width: u32,
    channels: u8,
    /// Each axis' weights; `None` when that side does not change (no pass).
    h: Option<Axis>,
    v: Option<Axis>,
    /// Alpha weighted (premultiplied) while resampling.
    alpha: bool,
    tiles: Vec<Tile>,
}

/// One dispatch: the shader entry, its `Params`, the axis rows of its tile (with the source
/// index they are rebased on) and the bytes it writes.
struct Pass<'a> {
    entry: &'static str,
    params: [u32; 8],
    axis: Option<(&'a Axis, Range<u32>, u32)>,
    bytes: u64,
}

/// A tile whose passes are submitted and whose output is being read back; its buffers stay on
/// loan until then.
struct Flight {
    tile: Tile,
    read: Readback,
    _keep: Vec<Pooled>,
}

impl Flight {
    /// Waits for the tile and copies its rows into `out` (`tw` pixels per row).
    fn land(self, gpu: &Gpu, out: &mut [u8], tw: u32, channels: u8) -> Result<()> {
        let data = self.read.wait(gpu).map_err(gpu_error)?;
        let c = usize::from(channels);
        let t = &self.tile;
        let row = (t.cols.end - t.cols.start) as usize * c;
        for (k, r) in data[0].chunks_exact(row).enumerate() {
            let at = ((t.rows.start as usize + k) * tw as usize + t.cols.start as usize) * c;
            out[at..at + row].copy_from_slice(r);
        }
        Ok(())
    }
}

/// The source rows and columns `tile` reads, borrowed when they are whole rows.
fn region<'a>(src: &'a [u8], width: u32, channels: u8, tile: &Tile) -> Cow<'a, [u8]> {
    let c = usize::from(channels);
    let row = width as usize * c;
    let rows = &src[tile.src_rows.start as usize * row..tile.src_rows.end as usize * row];
    if tile.src_cols == (0..width) {
        return Cow::Borrowed(rows);
    }
    let (a, b) = (
        tile.src_cols.start as usize * c,
        tile.src_cols.end as usize * c,
    );
    Cow::Owned(
        rows.chunks_exact(row)
            .flat_map(|r| &r[a..b])
            .copied()
            .collect(),
    )
}

impl Resampler for GpuResampler {
    fn name(&self) -> &'static str {
        GPU_ENGINE
    }

    fn resize_checked(
        &self,
        src: &[u8],
        size: (u32, u32),
        channels: u8,
        to: (u32, u32),
        filter: Filter,
    ) -> Result<Vec<u8>> {
        let work = self.plan(src, size, channels, to, filter)?;
        let mut out = vec![0u8; to.0 as usize * to.1 as usize * usize::from(channels)];
        // Two tiles in flight: one's readback overlaps the next one's upload and compute.
        let mut flights = VecDeque::new();
        for t in &work.tiles {
            flights.push_back(self.submit(&work, t)?);
            if flights.len() > 1 {
                let f: Flight = flights.pop_front().expect("two in flight");
                f.land(&self.gpu, &mut out, to.0, channels)?;
            }
        }
        for f in flights {
            f.land(&self.gpu, &mut out, to.0, channels)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_device_is_a_gpu_error_carrying_the_reason() {
        let e = resampler(Err(GpuError::NoAdapter(Vec::new())), false).unwrap_err();
        assert!(matches!(e, Error::Gpu(_)), "{e}");
        assert!(e.to_string().contains("no usable GPU adapter"), "{e}");
        let e = resampler(
            Err(GpuError::Policy("GPU disabled (REMORA_GPU=off)".into())),
            true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("REMORA_GPU=off"), "{e}");
    }
}
