//! What a receiver records about its run in the output file (configuration, calibration,
//! geometry, pipeline settings), gathered from the configuration and the processing setup.
use crate::azint::AzMatrix;
use crate::config::Config;
use crate::poni::JUNGFRAU_PIXEL;
use crate::setup::Setup;
use crate::timestamp::unix_seconds;
pub use crate::timestamp::{iso8601, now_iso8601};
use crate::writer::RunInfo;
use crate::Result;

/// The file header of receiver `index`'s output.
pub fn run_info(cfg: &Config, setup: &Setup, matrix: Option<&AzMatrix>) -> Result<RunInfo> {
    let rows = setup.layout.rows;
    let cols = setup.layout.cols;
    let p = &setup.poni;
    let wavelength = p.wavelength.map(|w| w * 1e10);
    let pl = &setup.pipeline;
    let mut pipeline = vec![
        ("veto_pixel_kev".into(), pl.veto_pixel_kev.to_string()),
        ("veto_min_pixels".into(), pl.veto_min_pixels.to_string()),
        ("sparse_kev".into(), pl.sparse_kev.to_string()),
        ("pedestal_window".into(), pl.pedestal_window.to_string()),
        (
            "dark_frames".into(),
            format!("every {} phase {}", pl.dark.every, pl.dark.phase),
        ),
        (
            "engine".into(),
            cfg.pipeline.engine.clone().unwrap_or_else(|| "auto".into()),
        ),
    ];
    let now = unix_seconds();
    let radial = match (&pl.integrate, matrix) {
        (Some((_, az)), Some(m)) => {
            pipeline.push(("integration_unit".into(), az.unit.name().into()));
            pipeline.push(("integration_bins".into(), az.bins.to_string()));
            Some((m.radial.clone(), az.unit.name().to_string()))
        }
        _ => None,
    };
    Ok(RunInfo {
        config_toml: toml::to_string(cfg).unwrap_or_default(),
        title: format!(
            "remora JUNGFRAU {}-module acquisition, {} frames",
            cfg.detector.modules, cfg.acquisition.frames
        ),
        detector_modules: cfg.detector.modules,
        layout_json: setup.layout.to_json(),
        poni_text: Some(p.to_text((rows, cols))),
        distance_m: Some(p.dist),
        beam_center_px: Some((p.poni2 / p.pixel2, p.poni1 / p.pixel1)),
        wavelength_angstrom: wavelength,
        pixel_size_m: JUNGFRAU_PIXEL,
        photon_energy_kev: cfg.detector.photon_energy_kev,
        calibration: setup.calibration_source.clone(),
        pipeline,
        raw_shape: (
            cfg.detector.modules * crate::model::MODULE_ROWS,
            crate::model::MODULE_COLS,
        ),
        raw_frames: cfg.output.raw,
        image_shape: cfg.output.images.then_some((rows, cols)),
        pixel_mask: cfg.output.images.then(|| nxmx_mask(setup)).transpose()?,
        radial,
        start_time: iso8601(now),
        // At a set rate the detector's last frame is due `frames / rate` seconds after the
        // start; as fast as possible, nothing is known until the end (written then).
        end_time_estimated: (cfg.acquisition.rate_hz > 0.0).then(|| {
            iso8601(now + (cfg.acquisition.frames as f64 / cfg.acquisition.rate_hz).ceil() as u64)
        }),
    })
}

/// The NXmx pixel mask of the assembled image: bit 0 for gaps between modules and chips' virtual
/// pixels that no raw pixel feeds, bit 8 (user mask) for pixels masked in the configuration.
fn nxmx_mask(setup: &Setup) -> Result<Vec<u32>> {
    let map = setup.layout.assembly_map(setup.mask.as_deref())?;
    Ok(map
        .src
        .iter()
        .zip(&map.mask)
        .map(
            |(&e, &m)| match (e == crate::geometry::AssemblyMap::GAP, m != 0) {
                (true, _) => 1,
                (false, true) => 1 << 8,
                (false, false) => 0,
            },
        )
        .collect())
}
