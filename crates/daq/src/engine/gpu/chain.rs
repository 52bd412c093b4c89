//! The chained frame: upload, conversion, the veto decided on the device, CSR, assembly,
//! integration and the packing of the results, recorded from a frame slot into one submission.
//! The host then reads the counts (and, when asked, the pixels) through the submission's
//! readback and, for a kept frame, maps exactly the CSR entries and bin sums it produced.
use remora_accel::gpu::{wgpu, ReadBytes, Readback};

use super::slot::{FrameSlot, SlotKey};
use super::{gpu_err, stats_of, GpuEngine};
use crate::calib::ConvTables;
use crate::engine::{process_stepwise, ConvStats, FrameOut, FramePlan};
use crate::sparse::SparseFrame;
use crate::Result;

/// The chained frame on the device: [`begin`] then [`finish`]. Falls back to the stages one by
/// one where the frame's rows do not line up with the table bands (a shape other than whole
/// raw rows) or the device has no host-visible storage buffers.
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
        Some(f) => finish(e, f, plan, energy, image),
        None => process_stepwise(e, raw, tables, plan, energy, image),
    }
}

/// A chained frame submitted to the device whose results are not read yet: the caller may
/// submit more frames first (up to the depth it chooses), so that uploads, compute and
/// readbacks of different frames overlap. The raw frame was copied out when it was submitted:
/// its buffer is free again. Dropping it unfinished is safe (its slot is discarded).
pub struct InFlight {
    slot: FrameSlot,
    back: Readback,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("slot", &self.slot.key)
            .finish()
    }
}

/// Records and submits the chain for one frame (sizes already checked); `None` when the chain
/// cannot run on the device for this shape.
pub(super) fn begin(
    e: &GpuEngine,
    raw: &[u16],
    tables: &ConvTables,
    plan: &FramePlan<'_>,
) -> Result<Option<InFlight>> {
    let gpu = &e.gpu;
    if !gpu
        .features()
        .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
    {
        return Ok(None);
    }
    let (_, cols) = plan.shape;
    let mut st = e.lock();
    // Fresh device copies first: re-making one moves the generation the slot key holds.
    if let Some((map, m)) = plan.integrate {
        st.map(e, map)?;
        st.matrix(e, m)?;
    }
    let dev = st.tables(e, tables)?;
    if cols == 0 || dev.bands.iter().any(|b| b.len() % cols != 0) {
        return Ok(None);
    }
    let key = SlotKey::new(st.generation(), plan, e.timestamps);
    let mut slot = match st.take_slot(&key) {
        Some(s) => s,
        None => {
            let (map, matrix) = match plan.integrate {
                Some((map, m)) => (Some(st.map(e, map)?), Some(st.matrix(e, m)?)),
                None => (None, None),
            };
            FrameSlot::build(e, st.tables(e, tables)?, map, matrix, tables, plan, key)?
        }
    };
    drop(st);
    slot.upload
        .fill(gpu, bytemuck::cast_slice(raw))
        .map_err(gpu_err)?;
    let mut enc = gpu.encoder();
    enc.clear_buffer(&slot.stats, 0, None);
    let mut q = 0u32;
    if let Some(s) = &slot.stamps {
        enc.write_timestamp(&s.set, q);
        q += 1;
    }
    super::copy_raw_bands(&slot.upload, &mut enc, &slot.bands, &slot.raw);
    if let Some(s) = &slot.stamps {
        enc.write_timestamp(&s.set, q);
        q += 1;
    }
    let set = slot.stamps.as_ref().map(|s| &s.set);
    slot.head
        .record(gpu, &mut enc, None, set.map(|s| (s, &mut q)));
    slot.tail
        .record(gpu, &mut enc, Some(&slot.args), set.map(|s| (s, &mut q)));
    if let Some(s) = &slot.stamps {
        enc.resolve_query_set(&s.set, 0..q, &s.resolve, 0);
    }
    let mut ranges = vec![(&*slot.stats, 0, 16)];
    if plan.host_pixels {
        for (o, band) in slot.conv.iter().zip(slot.bands.iter()) {
            ranges.push((&**o, 0, band.len() as u64 * 4));
        }
        if let Some(ib) = &slot.img_bands {
            for (o, band) in slot.images.iter().zip(ib.iter()) {
                ranges.push((&**o, 0, band.len() as u64 * 4));
            }
        }
    }
    if let Some(s) = &slot.stamps {
        ranges.push((&*s.resolve, 0, u64::from(q) * 8));
    }
    let back = gpu.submit_read(enc, &ranges).map_err(gpu_err)?;
    slot.upload.release(back.submission());
    Ok(Some(InFlight { slot, back }))
}

/// Waits for a frame [`begin`] submitted and reads its results.
pub(super) fn finish(
    e: &GpuEngine,
    f: InFlight,
    plan: &FramePlan<'_>,
    energy: &mut [f32],
    image: &mut [f32],
) -> Result<FrameOut> {
    let gpu = &e.gpu;
    let InFlight { slot, back } = f;
    if SlotKey::new(slot.key.generation(), plan, slot.key.timestamps()) != slot.key {
        return Err(crate::DaqError::Config(
            "gpu-wgpu: a frame was finished with another plan than it was begun with".into(),
        ));
    }
    let (rows, cols) = plan.shape;
    if plan.host_pixels {
        crate::DaqError::check_len("converted frame", rows * cols, energy.len())?;
        if let Some((map, _)) = plan.integrate {
            crate::DaqError::check_len("image", map.pixels(), image.len())?;
        }
    }
    let index = back.submission();
    // The ranges come in the order `begin` asked for them: the counts, then (with host pixels)
    // the converted bands and the image bands, then the timestamps. Pixels go from the mapped
    // ranges straight into the caller's buffers, the image only for a kept frame (a rejected
    // one is not assembled), as the host engines leave them.
    let bands: Vec<_> = slot.bands.iter().collect();
    let img_bands: Vec<_> = slot
        .img_bands
        .as_ref()
        .map_or(Vec::new(), |b| b.iter().collect());
    let (n_e, n_i) = if plan.host_pixels {
        (bands.len(), img_bands.len())
    } else {
        (0, 0)
    };
    let mut stats = ConvStats::default();
    let mut ticks = Vec::new();
    let mut sizes_ok = true;
    back.wait_with(gpu, |i, bytes| {
        if i == 0 {
            stats = stats_of(bytes);
        } else if i <= n_e {
            sizes_ok &= copy_le(&mut energy[bands[i - 1].clone()], bytes, f32::from_le_bytes);
        } else if i <= n_e + n_i {
            if stats.above >= plan.veto_min {
                let band = img_bands[i - 1 - n_e].clone();
                sizes_ok &= copy_le(&mut image[band], bytes, f32::from_le_bytes);
            }
        } else {
            extend_le(&mut ticks, bytes, u32::from_le_bytes);
        }
    })
    .map_err(gpu_err)?;
    if !sizes_ok {
        return Err(crate::DaqError::Acquisition(
            "gpu-wgpu: a read-back band does not match its buffer".into(),
        ));
    }
    if let Some(s) = &slot.stamps {
        e.record_times(&s.names, &ticks);
    }
    if stats.above < plan.veto_min {
        e.put_slot(slot);
        return Ok(FrameOut { stats, kept: None });
    }
    // Kept: exactly the entries and sums the frame produced, read from the mapped buffers
    // straight into the frame's arrays (at 2000 frames/s the host has 0.5 ms per frame, and
    // copying through intermediate vectors took about that here).
    let ptrs = slot
        .packed
        .iter()
        .map(|p| gpu.read_mapped(&p.ptr, (p.rows as u64 + 1) * 4, &index))
        .collect::<std::result::Result<Vec<ReadBytes>, _>>()
        .map_err(gpu_err)?;
    let nnz = |w: &ReadBytes| w.words().last().copied().unwrap_or(0);
    let total: usize = ptrs.iter().map(|w| nnz(w) as usize).sum();
    let mut row_ptr = Vec::with_capacity(rows + 1);
    row_ptr.push(0u32);
    let mut col = Vec::<u16>::with_capacity(total);
    let mut values = Vec::<f32>::with_capacity(total);
    for (p, w) in slot.packed.iter().zip(&ptrs) {
        let (base, n) = (values.len() as u32, nnz(w));
        row_ptr.extend(w.words().iter().skip(1).map(|&x| base + x));
        // Two 16-bit columns per word, the lower first: little-endian bytes in entry order.
        let bytes = u64::from(n).div_ceil(2) * 4;
        gpu.read_mapped_with(&p.col, bytes, &index, |b| {
            extend_le(&mut col, &b[..2 * n as usize], u16::from_le_bytes)
        })
        .map_err(gpu_err)?;
        gpu.read_mapped_with(&p.val, u64::from(n) * 4, &index, |b| {
            extend_le(&mut values, b, f32::from_le_bytes)
        })
        .map_err(gpu_err)?;
    }
    let sparse = SparseFrame::from_arrays(rows, cols, plan.sparse_kev, row_ptr, col, values)?;
    let profile = match (&slot.matrix, plan.integrate) {
        (Some(dmat), Some((_, m))) => {
            let sums = slot
                .accs
                .iter()
                .zip(&dmat.chunks)
                .map(|(a, c)| gpu.read_mapped(a, c.bins.len() as u64 * 32, &index))
                .collect::<std::result::Result<Vec<ReadBytes>, _>>()
                .map_err(gpu_err)?;
            Some(e.finish_profile(m, dmat, &sums))
        }
        _ => None,
    };
    e.put_slot(slot);
    Ok(FrameOut {
        stats,
        kept: Some((sparse, profile)),
    })
}

/// `bytes` as little-endian `T`s: the device's layout. Where the host is little-endian too and
/// the bytes are aligned for `T` (mapped ranges are), they are `T`s as they lie.
fn as_le<T: bytemuck::Pod>(bytes: &[u8]) -> Option<&[T]> {
    if cfg!(target_endian = "little") {
        bytemuck::try_cast_slice(bytes).ok()
    } else {
        None
    }
}

/// Appends the little-endian elements of `bytes` to `out` (one copy where [`as_le`] allows).
fn extend_le<T: bytemuck::Pod, const N: usize>(
    out: &mut Vec<T>,
    bytes: &[u8],
    from_le: fn([u8; N]) -> T,
) {
    match as_le(bytes) {
        Some(v) => out.extend_from_slice(v),
        None => out.extend(
            bytes
                .chunks_exact(N)
                .map(|c| from_le(c.try_into().unwrap_or([0; N]))),
        ),
    }
}

/// Copies the little-endian elements of `bytes` into `dst`; false when the lengths differ.
fn copy_le<T: bytemuck::Pod, const N: usize>(
    dst: &mut [T],
    bytes: &[u8],
    from_le: fn([u8; N]) -> T,
) -> bool {
    if std::mem::size_of_val(dst) != bytes.len() {
        return false;
    }
    match as_le(bytes) {
        Some(v) => dst.copy_from_slice(v),
        None => {
            for (x, c) in dst.iter_mut().zip(bytes.chunks_exact(N)) {
                *x = from_le(c.try_into().unwrap_or([0; N]));
            }
        }
    }
    true
}
