//! Pedestal tracking with the pedestal resident on both sides: the device updates its copy from
//! the dark frame (sent once, through a mapped upload buffer) and its own copy of the per-pixel
//! counts, while the host applies the same update to its copy with the CPU kernel (bit for bit
//! the same rule). Nothing is read back, so a dark frame costs its upload and one submission;
//! before, it read the pedestal plane and the counts back (4 bytes a pixel each) and sent the
//! counts up again, which made every other frame of a run with `dark_every = 2` cost ~12 ms on
//! an H200.
use std::sync::OnceLock;

use remora_accel::gpu::{groups, Pooled, Upload};

use super::steps::Steps;
use super::{gpu_err, GpuEngine, CONVERT, WG};
use crate::calib::ConvTables;
use crate::engine::{CpuEngine, Engine};
use crate::Result;

/// What a dark frame needs on the device, made once per tables and counts array.
pub(crate) struct DarkSlot {
    /// (tables generation, address and length of the host's counts, window).
    key: (u64, usize, usize, u16),
    upload: Upload,
    raw: Vec<Pooled>,
    steps: Steps,
    _counts: Vec<Pooled>,
}

impl DarkSlot {
    pub(crate) fn key(&self) -> &(u64, usize, usize, u16) {
        &self.key
    }
}

/// The host's copy is updated by the CPU kernel on all cores.
fn host() -> crate::Result<&'static CpuEngine> {
    static HOST: OnceLock<std::result::Result<CpuEngine, String>> = OnceLock::new();
    HOST.get_or_init(|| CpuEngine::new(0).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| crate::DaqError::Config(e.clone()))
}

pub(super) fn track(
    e: &GpuEngine,
    raw: &[u16],
    tables: &mut ConvTables,
    counts: &mut [u16],
    window: u16,
) -> Result<()> {
    let gpu = &e.gpu;
    let mut st = e.lock();
    st.tables(e, tables)?;
    let key = (
        st.generation(),
        counts.as_ptr() as usize,
        counts.len(),
        window,
    );
    let mut slot = match st.take_dark(&key) {
        Some(s) => s,
        None => {
            let dev = st.tables(e, tables)?;
            let pipe = gpu
                .pipeline("daq-convert", CONVERT, "track")
                .map_err(gpu_err)?;
            let upload = gpu
                .upload_buffer("dark upload", raw.len() as u64 * 2)
                .map_err(gpu_err)?;
            let mut steps = Steps::direct();
            let (mut raws, mut cnts) = (Vec::new(), Vec::new());
            for (k, band) in dev.bands.iter().enumerate() {
                let r = gpu
                    .storage("dark", band.len() as u64 * 2)
                    .map_err(gpu_err)?;
                // The counts as they are now; from here both sides apply the same updates.
                let c32: Vec<u32> = counts[band.clone()].iter().map(|&c| u32::from(c)).collect();
                let c = gpu.upload("counts", &c32).map_err(gpu_err)?;
                let p = e.step_params(
                    &mut steps,
                    [
                        band.len() as u32,
                        gpu.row_stride(),
                        0,
                        u32::from(window),
                        0,
                        0,
                        0,
                        0,
                    ],
                )?;
                e.step_launch_at(
                    &mut steps,
                    pipe.clone(),
                    &[
                        (0, r.as_entire_binding()),
                        (1, dev.ped[k].as_entire_binding()),
                        (3, c.as_entire_binding()),
                    ],
                    (5, p),
                    groups(band.len() as u64, WG),
                );
                raws.push(r);
                cnts.push(c);
            }
            DarkSlot {
                key,
                upload,
                raw: raws,
                steps,
                _counts: cnts,
            }
        }
    };
    let bands = st.tables(e, tables)?.bands.clone();
    slot.upload
        .fill(gpu, bytemuck::cast_slice(raw))
        .map_err(gpu_err)?;
    let mut enc = gpu.encoder();
    super::copy_raw_bands(&slot.upload, &mut enc, &bands, &slot.raw);
    slot.steps.record(gpu, &mut enc, None, None);
    let index = gpu.submit(enc);
    slot.upload.release(index);
    st.put_dark(slot);
    // Taken while the device copy is still current (the host's update moves the revision).
    let dev = st.tables(e, tables)?;
    // The host's copy, while the device works on its own.
    host()?.track_pedestal(raw, tables, counts, window)?;
    // Both copies now hold the new pedestal: the device's stays valid.
    dev.revision = tables.revision;
    Ok(())
}
