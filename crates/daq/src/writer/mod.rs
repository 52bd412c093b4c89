//! The acquisition's NeXus/HDF5 writer, and the thread that runs it off the receive path.
//!
//! One file per receiver, laid out after NeXus NXmx where it applies, so that h5py (with
//! `hdf5plugin`), silx and pyFAI read it without remora:
//!
//! | path | what |
//! | --- | --- |
//! | `/entry` (NXentry, `definition` = NXmx) | `title`, `start_time`, `end_time_estimated`, `end_time` |
//! | `/entry/instrument/detector` (NXdetector) | JUNGFRAU, Si 320 µm, pixel size, distance, beam centre, `depends_on` its `transformations/translation` (the distance along the beam), `detector_module` |
//! | `/entry/instrument/detector/detector_module` (NXdetector_module) | `data_origin`, `data_size`, `module_offset` (the beam centre), `fast_pixel_direction` and `slow_pixel_direction` (each with `@transformation_type`, `@vector`, `@offset`, `@depends_on`) |
//! | `/entry/instrument/beam` (NXbeam) | `incident_wavelength` (Å), `incident_energy` (keV) |
//! | `/entry/sample`, `/entry/source` | names; the sample `depends_on` `.` (no goniometer) |
//! | `/entry/remora` (NXcollection) | the configuration (TOML), geometry (JSON), PONI, calibration, pipeline settings, the run's summary (JSON) |
//! | `/entry/frames` (NXcollection) | per frame: `frame_number`, `kind` (0 dark, 1 rejected, 2 kept, 3 not processed), `spots`, `kept`, `lost_modules` (bit per module) |
//! | `/entry/sparse` (NXcollection) | kept frames as CSR in the raw layout: `frame_number`, `entry_offset` (kept + 1), `row_ptr` (kept × rows + 1), `col`, `value` |
//! | `/entry/azint` (NXdata, `@signal` = I) | `I` (kept × bins), `radial_axis` (with `@units`), `frame_number` |
//! | `/entry/data` (NXdata) | `data`: converted, assembled images of kept frames (n × ny × nx), and their `frame_number`, when asked |
//! | `/entry/raw` (NXdata) | `data`: the detector's raw words (uint16, n × modules·512 × 1024, what an HDF5 source reads back), and their `frame_number`, when [`RunInfo::raw_frames`] asks and the receiver hands them over ([`Writer::write_raw`]) |
//!
//! Datasets grow as frames come, in chunks compressed with bitshuffle + LZ4 (HDF5 filter
//! 32008, [`bslz4`], registered with the library by [`filter`]); `h5` holds the HDF5 building
//! blocks (NeXus groups, datasets with units, growing datasets), `nexus` the layout above (one
//! fn per group). With several receivers,
//! [`master`] joins their files into one with virtual datasets once they are closed.
use std::path::{Path, PathBuf};

use hdf5::Group;

use crate::sparse::SparseFrame;
use crate::{DaqError, Result};
use h5::{h5err, string, Growing};
use nexus::WithFrames;

mod bitshuffle;
pub mod bslz4;
pub mod filter;
mod h5;
pub mod inspect;
pub mod master;
mod nexus;
mod thread;

pub use thread::{WriterThread, QUEUE_DATA_BYTES};

/// What the file records about the run.
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    /// The configuration (TOML), stored verbatim.
    pub config_toml: String,
    /// A one-line title.
    pub title: String,
    /// Modules.
    pub detector_modules: usize,
    /// Module placement (layout JSON).
    pub layout_json: String,
    /// The PONI geometry used.
    pub poni_text: Option<String>,
    /// Sample–detector distance (m).
    pub distance_m: Option<f64>,
    /// Beam centre (x, y) in image pixels.
    pub beam_center_px: Option<(f64, f64)>,
    /// Wavelength (Å).
    pub wavelength_angstrom: Option<f64>,
    /// Pixel size (m).
    pub pixel_size_m: f64,
    /// Photon energy (keV).
    pub photon_energy_kev: f32,
    /// Where the calibration came from.
    pub calibration: String,
    /// Pipeline settings.
    pub pipeline: Vec<(String, String)>,
    /// Raw frame shape (rows, columns).
    pub raw_shape: (usize, usize),
    /// Keep the raw frames too (`/entry/raw`), fed by [`Writer::write_raw`].
    pub raw_frames: bool,
    /// Assembled image shape, when images are written.
    pub image_shape: Option<(usize, usize)>,
    /// NXmx pixel mask of the image, when given.
    pub pixel_mask: Option<Vec<u32>>,
    /// Bin centres and unit name, when integrating.
    pub radial: Option<(Vec<f64>, String)>,
    /// ISO 8601 start time.
    pub start_time: String,
    /// When the last frame is due (ISO 8601), when known at the start; otherwise the writer
    /// records the end time here when it finishes.
    pub end_time_estimated: Option<String>,
}

/// What became of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A dark frame (pedestal update).
    Dark = 0,
    /// Rejected by the veto.
    Rejected = 1,
    /// Kept.
    Kept = 2,
    /// Received but not processed (processing off).
    Unprocessed = 3,
}

/// One frame's results.
#[derive(Debug, Clone)]
pub struct FrameRecord {
    /// Detector frame number.
    pub frame: u64,
    /// What became of it.
    pub kind: FrameKind,
    /// Veto count.
    pub spots: u64,
    /// Modules masked (bit per module).
    pub lost_modules: u64,
    /// CSR of a kept frame.
    pub sparse: Option<SparseFrame>,
    /// Profile intensities of a kept frame.
    pub profile: Option<Vec<f64>>,
    /// Converted, assembled image (when images are written).
    pub image: Option<Vec<f32>>,
}

/// What a writer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Frame records written.
    pub frames: u64,
    /// Kept frames written.
    pub kept: u64,
    /// Records dropped because the queue was full.
    pub dropped: u64,
}

/// The synchronous writer.
pub struct Writer {
    path: PathBuf,
    file: hdf5::File,
    entry: Group,
    frame_number: Growing<u64>,
    kind: Growing<u8>,
    spots: Growing<u64>,
    kept: Growing<u8>,
    lost: Growing<u64>,
    sp_frame: Growing<u64>,
    sp_offset: Growing<u64>,
    sp_rows: Growing<u32>,
    sp_col: Growing<u16>,
    sp_value: Growing<f32>,
    az: Option<WithFrames<f64>>,
    images: Option<WithFrames<f32>>,
    raw: Option<WithFrames<u16>>,
    entries: u64,
    /// No estimate was known at the start: the end time is recorded as the estimate too.
    estimate_at_end: bool,
    stats: WriterStats,
}

impl Writer {
    /// Creates the file (replacing one already there) and writes the run's header.
    pub fn create(path: &Path, info: &RunInfo) -> Result<Writer> {
        if !filter::register() {
            return Err(DaqError::Acquisition(
                "the HDF5 library refused the bitshuffle filter".into(),
            ));
        }
        Self::create_inner(path, info).map_err(h5err(path))
    }

    /// Lays the file out (see [`nexus`]) and opens its growing datasets, in the order the
    /// groups and datasets have always been created.
    fn create_inner(path: &Path, info: &RunInfo) -> hdf5::Result<Writer> {
        let file = hdf5::File::create(path)?;
        let entry = nexus::entry(&file, info)?;
        nexus::instrument(&entry, info)?;
        nexus::sample_and_source(&entry)?;
        nexus::remora(&entry, info)?;
        let (frames, kind, lost) = nexus::frames(&entry)?;
        let (sparse, sp_offset) = nexus::sparse(&entry, info)?;
        let az = nexus::azint(&entry, info)?;
        let images = nexus::images(&entry, info)?;
        let raw = nexus::raw(&entry, info)?;
        let (raw_rows, _) = info.raw_shape;
        Ok(Writer {
            path: Default::default(),
            raw,
            frame_number: Growing::new(&frames, "frame_number", 1, 4096)?,
            kind,
            spots: Growing::new(&frames, "spots", 1, 4096)?,
            kept: Growing::new(&frames, "kept", 1, 4096)?,
            lost,
            sp_frame: Growing::new(&sparse, "frame_number", 1, 4096)?,
            sp_offset,
            sp_rows: Growing::new(&sparse, "row_ptr", raw_rows + 1, 1)?,
            sp_col: Growing::new(&sparse, "col", 1, 1 << 16)?,
            sp_value: Growing::new(&sparse, "value", 1, 1 << 16)?,
            az,
            images,
            entries: 0,
            estimate_at_end: info.end_time_estimated.is_none(),
            stats: WriterStats::default(),
            file,
            entry,
        }
        .with_path(path))
    }

    fn with_path(mut self, path: &Path) -> Writer {
        self.path = path.to_owned();
        self
    }

    /// Appends one frame's record.
    pub fn write(&mut self, rec: &FrameRecord) -> Result<()> {
        let path = self.path.clone();
        self.write_inner(rec).map_err(h5err(&path))
    }

    fn write_inner(&mut self, rec: &FrameRecord) -> hdf5::Result<()> {
        self.frame_number.push(&[rec.frame])?;
        self.kind.push(&[rec.kind as u8])?;
        self.spots.push(&[rec.spots])?;
        self.kept.push(&[u8::from(rec.kind == FrameKind::Kept)])?;
        self.lost.push(&[rec.lost_modules])?;
        self.stats.frames += 1;
        if rec.kind == FrameKind::Kept {
            self.stats.kept += 1;
        }
        if let Some(s) = &rec.sparse {
            if s.row_ptr.len() == self.sp_rows.row {
                self.sp_frame.push(&[rec.frame])?;
                self.sp_rows.push(&s.row_ptr)?;
                self.sp_col.push(&s.col)?;
                self.sp_value.push(&s.values)?;
                self.entries += s.col.len() as u64;
                self.sp_offset.push(&[self.entries])?;
            }
        }
        if let (Some((i, n)), Some(p)) = (&mut self.az, &rec.profile) {
            if p.len() == i.row {
                i.push(p)?;
                n.push(&[rec.frame])?;
            }
        }
        if let (Some((d, n)), Some(img)) = (&mut self.images, &rec.image) {
            if img.len() == d.row {
                d.push(img)?;
                n.push(&[rec.frame])?;
            }
        }
        Ok(())
    }

    /// Appends one frame's raw words to `/entry/raw` (a file created with
    /// [`RunInfo::raw_frames`]); any frame, dark, rejected or kept, in the order received.
    pub fn write_raw(&mut self, frame: u64, words: &[u16]) -> Result<()> {
        let path = self.path.clone();
        let Some((d, n)) = &mut self.raw else {
            return Err(DaqError::Acquisition(format!(
                "{}: raw frames were not asked for when the file was created",
                path.display()
            )));
        };
        if words.len() != d.row {
            return Err(DaqError::Acquisition(format!(
                "{}: a raw frame of {} words, not {}",
                path.display(),
                words.len(),
                d.row
            )));
        }
        d.push(words)
            .and_then(|()| n.push(&[frame]))
            .map_err(h5err(&path))
    }

    /// Stores the summary and the end time, and closes the file.
    pub fn finish(mut self, summary_json: &str) -> Result<WriterStats> {
        let path = self.path.clone();
        self.finish_inner(summary_json).map_err(h5err(&path))?;
        Ok(self.stats)
    }

    fn finish_inner(&mut self, summary_json: &str) -> hdf5::Result<()> {
        self.frame_number.flush()?;
        self.kind.flush()?;
        self.spots.flush()?;
        self.kept.flush()?;
        self.lost.flush()?;
        self.sp_frame.flush()?;
        self.sp_offset.flush()?;
        self.sp_rows.flush()?;
        self.sp_col.flush()?;
        self.sp_value.flush()?;
        if let Some((i, n)) = &mut self.az {
            i.flush()?;
            n.flush()?;
        }
        if let Some((d, n)) = &mut self.images {
            d.flush()?;
            n.flush()?;
        }
        if let Some((d, n)) = &mut self.raw {
            d.flush()?;
            n.flush()?;
        }
        let end = crate::timestamp::now_iso8601();
        string(&self.entry, "end_time", &end)?;
        if self.estimate_at_end {
            string(&self.entry, "end_time_estimated", &end)?;
        }
        let r = self.entry.group("remora")?;
        string(&r, "summary", summary_json)?;
        self.file.flush()
    }
}
