//! The file's NXmx layout as [`super::Writer::create`] lays it down: one fn per NeXus group
//! (entry, instrument with its detector, detector module and beam, sample and source, remora's
//! own collection, frames, sparse, azint, data, raw), called in the order the groups are
//! written. The table in [`super`]'s doc says what each holds.
use hdf5::Group;

use super::h5::{attr, group, number, string, text, translation, Growing};
use super::RunInfo;

/// Where the detector's frame is placed along the beam (NXmx's chain ends there).
const DETECTOR_TRANSLATION: &str = "/entry/instrument/detector/transformations/translation";
/// The module's origin, on which its pixel directions depend.
const MODULE_OFFSET: &str = "/entry/instrument/detector/detector_module/module_offset";

/// A growing dataset of values and the frame number of each row.
pub(super) type WithFrames<T> = (Growing<T>, Growing<u64>);

/// `/entry` (NXentry) with its title and times; the file's `default` points at it.
pub(super) fn entry(file: &hdf5::File, info: &RunInfo) -> hdf5::Result<Group> {
    attr(file, "default", "entry")?;
    let entry = group(file, "entry", "NXentry")?;
    string(&entry, "definition", "NXmx")?;
    string(&entry, "title", &info.title)?;
    string(&entry, "start_time", &info.start_time)?;
    if let Some(t) = &info.end_time_estimated {
        string(&entry, "end_time_estimated", t)?;
    }
    Ok(entry)
}

/// `/entry/instrument` (NXinstrument): its name, the detector and the beam.
pub(super) fn instrument(entry: &Group, info: &RunInfo) -> hdf5::Result<()> {
    let inst = group(entry, "instrument", "NXinstrument")?;
    string(&inst, "name", "remora JUNGFRAU emulator")?;
    detector(&inst, info)?;
    beam(&inst, info)
}

/// `/entry/instrument/detector` (NXdetector): the sensor, pixel size, distance, beam centre,
/// pixel mask, its transformation and its module.
fn detector(inst: &Group, info: &RunInfo) -> hdf5::Result<()> {
    let det = group(inst, "detector", "NXdetector")?;
    string(&det, "description", "JUNGFRAU")?;
    string(&det, "sensor_material", "Si")?;
    number(&det, "sensor_thickness", 320e-6f64, Some("m"))?;
    number(&det, "x_pixel_size", info.pixel_size_m, Some("m"))?;
    number(&det, "y_pixel_size", info.pixel_size_m, Some("m"))?;
    number(&det, "saturation_value", 0xc000u32, None)?;
    number(&det, "bit_depth_readout", 16u32, None)?;
    if let Some(d) = info.distance_m {
        number(&det, "distance", d, Some("m"))?;
    }
    if let Some((x, y)) = info.beam_center_px {
        number(&det, "beam_center_x", x, Some("pixel"))?;
        number(&det, "beam_center_y", y, Some("pixel"))?;
    }
    if let Some(mask) = &info.pixel_mask {
        // NXmx: one value per image pixel, shaped as the image (slow, fast).
        let (ny, nx) = info.image_shape.unwrap_or((1, mask.len()));
        let m = ndarray::ArrayView2::from_shape((ny, nx), &mask[..])
            .map_err(|e| hdf5::Error::from(format!("pixel_mask: {e}")))?;
        det.new_dataset_builder()
            .with_data(m)
            .create("pixel_mask")?;
    }
    // NXmx geometry (McStas frame: z along the beam, y up): the detector plane sits
    // `distance` down the beam; the module's origin is placed so that the beam centre is
    // on the axis; pixel columns run along -x and rows along -y (as Dectris and
    // Jungfraujoch files have it).
    string(&det, "depends_on", DETECTOR_TRANSLATION)?;
    let tr = group(&det, "transformations", "NXtransformations")?;
    translation(
        &tr,
        "translation",
        info.distance_m.unwrap_or(0.0),
        [0.0, 0.0, 1.0],
        [0.0; 3],
        ".",
    )?;
    detector_module(&det, info)
}

/// `/entry/instrument/detector/detector_module` (NXdetector_module): its offset (the beam
/// centre), origin and size, and its pixel directions.
fn detector_module(det: &Group, info: &RunInfo) -> hdf5::Result<()> {
    let module = group(det, "detector_module", "NXdetector_module")?;
    let (bx, by) = info.beam_center_px.unwrap_or((0.0, 0.0));
    translation(
        &module,
        "module_offset",
        0.0,
        [1.0, 0.0, 0.0],
        [bx * info.pixel_size_m, by * info.pixel_size_m, 0.0],
        DETECTOR_TRANSLATION,
    )?;
    let (rows, cols) = info.image_shape.unwrap_or(info.raw_shape);
    module
        .new_dataset_builder()
        .with_data(&[0u32, 0][..])
        .create("data_origin")?;
    module
        .new_dataset_builder()
        .with_data(&[rows as u32, cols as u32][..])
        .create("data_size")?;
    for (name, v) in [
        ("fast_pixel_direction", [-1.0f64, 0.0, 0.0]),
        ("slow_pixel_direction", [0.0, -1.0, 0.0]),
    ] {
        translation(&module, name, info.pixel_size_m, v, [0.0; 3], MODULE_OFFSET)?;
    }
    Ok(())
}

/// `/entry/instrument/beam` (NXbeam): wavelength and energy.
fn beam(inst: &Group, info: &RunInfo) -> hdf5::Result<()> {
    let beam = group(inst, "beam", "NXbeam")?;
    if let Some(w) = info.wavelength_angstrom {
        number(&beam, "incident_wavelength", w, Some("angstrom"))?;
    }
    number(
        &beam,
        "incident_energy",
        f64::from(info.photon_energy_kev),
        Some("keV"),
    )?;
    Ok(())
}

/// `/entry/sample` (NXsample) and `/entry/source` (NXsource).
pub(super) fn sample_and_source(entry: &Group) -> hdf5::Result<()> {
    let sample = group(entry, "sample", "NXsample")?;
    string(&sample, "name", "emulated")?;
    // No goniometer: the sample sits at the origin, and its chain ends at once.
    string(&sample, "depends_on", ".")?;
    let source = group(entry, "source", "NXsource")?;
    string(&source, "name", "remora detector emulator")?;
    Ok(())
}

/// `/entry/remora` (NXcollection): the configuration, geometry, PONI, calibration and
/// pipeline settings (the summary is added when the file is finished).
pub(super) fn remora(entry: &Group, info: &RunInfo) -> hdf5::Result<()> {
    let r = group(entry, "remora", "NXcollection")?;
    string(&r, "config", &info.config_toml)?;
    string(&r, "geometry", &info.layout_json)?;
    if let Some(p) = &info.poni_text {
        string(&r, "poni", p)?;
    }
    string(&r, "calibration", &info.calibration)?;
    let pl = group(&r, "pipeline", "NXcollection")?;
    for (k, v) in &info.pipeline {
        string(&pl, k, v)?;
    }
    Ok(())
}

/// `/entry/frames` (NXcollection), and its two described datasets: `kind` and `lost_modules`
/// (the writer adds the others to the group afterwards).
pub(super) fn frames(entry: &Group) -> hdf5::Result<(Group, Growing<u8>, Growing<u64>)> {
    let frames = group(entry, "frames", "NXcollection")?;
    let kind = Growing::new(&frames, "kind", 1, 4096)?;
    attr(
        &kind.ds,
        "description",
        "0 dark, 1 rejected by the veto, 2 kept, 3 not processed",
    )?;
    let lost = Growing::new(&frames, "lost_modules", 1, 4096)?;
    attr(
        &lost.ds,
        "description",
        "bit m set: module m did not arrive whole and was masked",
    )?;
    Ok((frames, kind, lost))
}

/// `/entry/sparse` (NXcollection): the raw frame's shape and `entry_offset`, started at 0
/// (the writer adds the CSR datasets to the group afterwards).
pub(super) fn sparse(entry: &Group, info: &RunInfo) -> hdf5::Result<(Group, Growing<u64>)> {
    let sparse = group(entry, "sparse", "NXcollection")?;
    attr(
        &sparse,
        "layout",
        "CSR of the raw frame (modules x 512 rows, 1024 columns)",
    )?;
    let (raw_rows, raw_cols) = info.raw_shape;
    number(&sparse, "rows", raw_rows as u64, None)?;
    number(&sparse, "cols", raw_cols as u64, None)?;
    let mut sp_offset = Growing::new(&sparse, "entry_offset", 1, 4096)?;
    sp_offset.push(&[0])?;
    Ok((sparse, sp_offset))
}

/// `/entry/azint` (NXdata), when integrating: the radial axis, and the growing profiles with
/// their frame numbers; the entry's `default` then points at it.
pub(super) fn azint(entry: &Group, info: &RunInfo) -> hdf5::Result<Option<WithFrames<f64>>> {
    let Some((radial, unit)) = &info.radial else {
        return Ok(None);
    };
    let g = group(entry, "azint", "NXdata")?;
    attr(&g, "signal", "I")?;
    g.new_attr_builder()
        .with_data(&[text("."), text("radial_axis")][..])
        .create("axes")?;
    let ax = g
        .new_dataset_builder()
        .with_data(&radial[..])
        .create("radial_axis")?;
    attr(&ax, "units", unit)?;
    attr(entry, "default", "azint")?;
    Ok(Some((
        Growing::new(&g, "I", radial.len().max(1), 1)?,
        Growing::new(&g, "frame_number", 1, 4096)?,
    )))
}

/// `/entry/data` (NXdata), when images are written: the growing images and their frame
/// numbers.
pub(super) fn images(entry: &Group, info: &RunInfo) -> hdf5::Result<Option<WithFrames<f32>>> {
    let Some((ny, nx)) = info.image_shape else {
        return Ok(None);
    };
    let g = group(entry, "data", "NXdata")?;
    attr(&g, "signal", "data")?;
    Ok(Some((
        Growing::images(&g, "data", ny, nx)?,
        Growing::new(&g, "frame_number", 1, 4096)?,
    )))
}

/// `/entry/raw` (NXdata), when [`RunInfo::raw_frames`] asks: the growing raw frames and their
/// frame numbers.
pub(super) fn raw(entry: &Group, info: &RunInfo) -> hdf5::Result<Option<WithFrames<u16>>> {
    if !info.raw_frames {
        return Ok(None);
    }
    let (raw_rows, raw_cols) = info.raw_shape;
    let g = group(entry, "raw", "NXdata")?;
    attr(&g, "signal", "data")?;
    attr(
        &g,
        "description",
        "the detector's raw words (gain bits 15-14, ADC 13-0), modules stacked by rows",
    )?;
    Ok(Some((
        Growing::images(&g, "data", raw_rows, raw_cols)?,
        Growing::new(&g, "frame_number", 1, 4096)?,
    )))
}
