//! The memory a configuration implies, estimated from its values before anything is allocated,
//! and the budget it is checked against.
//!
//! A configuration can ask for far more memory than the host has (`modules = 32` with
//! `source.distinct = 4096` is 128 GiB of frames): allocating it would abort the process (Rust
//! aborts on a failed allocation), and a control service would take every other client down
//! with it. [`Estimate::of`] adds up what each part of a run holds, from the configuration
//! alone, with the key that drives it; [`Estimate::check`] refuses one over the budget with the
//! biggest part named. A file source's size is only known once it is opened: the dataset loader
//! checks it then ([`Estimate::with_source`]), before reading.
//!
//! The figures are upper estimates, not measurements: per receiver, the calibration (gains as
//! `f64`, pedestals as `f32`), conversion tables, pedestal tracking and the frame buffers of the
//! pipeline come to about [`PER_PIXEL_PER_RECEIVER`] bytes a detector pixel, and the assembled
//! image, its map, the integration matrix and building it to [`PER_IMAGE_PIXEL_PER_RECEIVER`]
//! bytes an image pixel; rings, the loaded frames (held twice: loaded, and registered for
//! sending), the writer's queue (bounded in bytes: [`writer_queue_bytes`]) and the synthetic
//! generator are counted from their sizes. Measured against the peak resident memory of
//! in-process runs writing a file (one receiver, 8 distinct frames, shm): 1, 4 and 8 modules
//! peaked at 0.18, 0.57 and 1.03 GB; the estimates are 0.56, 1.05 and 1.70 GB.
use std::fmt;

pub use super::bytes::{parse_bytes, Bytes};
use crate::config::{Config, SourceKind};
use crate::dataset::Dataset;
use crate::geometry::Layout;
use crate::model::MODULE_PIXELS;
use crate::ring::MODULE_BYTES;
use crate::writer::QUEUE_DATA_BYTES;
use crate::{DaqError, Result};

/// Bytes a receiver holds per detector pixel for calibration and processing (see the module
/// documentation), apart from what scales with the assembled image.
pub const PER_PIXEL_PER_RECEIVER: u64 = 128;

/// Bytes a receiver holds per pixel of the assembled image: the image and its preview, the
/// assembly map and mask, the integration matrix and what building it takes.
pub const PER_IMAGE_PIXEL_PER_RECEIVER: u64 = 64;

/// Bytes per pixel the synthetic generator holds while it makes the frames (its calibration,
/// the ring pattern, a frame in flight per thread).
const SYNTH_PER_PIXEL: u64 = 64;

/// A fixed part: the writer (HDF5 caches, its thread), the service, the threads' stacks.
const FIXED: u64 = 128 << 20;

/// The most memory a configuration may imply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    /// Bytes.
    pub bytes: u64,
}

impl MemoryBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> MemoryBudget {
        MemoryBudget { bytes }
    }

    /// Half of this host's memory (`MemTotal` in `/proc/meminfo`); 4 GiB when it cannot be
    /// read.
    pub fn half_of_host() -> MemoryBudget {
        let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|kib| kib * 1024)
        });
        MemoryBudget::new(total.map_or(4 << 30, |t| t / 2))
    }
}

impl fmt::Display for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Bytes(self.bytes))
    }
}

/// One part of an estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The configuration key that drives it.
    pub key: &'static str,
    /// What it is, for people.
    pub what: String,
    /// Bytes.
    pub bytes: u64,
}

/// What a configuration implies, part by part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    /// The parts, in no particular order.
    pub parts: Vec<Part>,
}

/// Pixels of the standard layout's assembled image for `cfg`'s modules.
pub fn standard_image_pixels(cfg: &Config) -> u64 {
    Layout::standard(cfg.detector.modules)
        .map(|l| (l.rows * l.cols) as u64)
        .unwrap_or((cfg.detector.modules * MODULE_PIXELS) as u64 * 9 / 8)
}

/// The most a receiver's writer queue holds: `output.queue` assembled images (when images are
/// written) and [`QUEUE_DATA_BYTES`] of sparse frames and profiles.
pub fn writer_queue_bytes(cfg: &Config, image_pixels: u64) -> u64 {
    let images = if cfg.output.images {
        (cfg.output.queue as u64)
            .saturating_mul(image_pixels)
            .saturating_mul(4)
    } else {
        0
    };
    images.saturating_add(QUEUE_DATA_BYTES)
}

impl Estimate {
    /// The estimate for `cfg`, with the standard layout's image (a file source counts once it
    /// is opened: [`Estimate::with_source`]; a geometry file once it is read:
    /// [`Estimate::with_image`]).
    pub fn of(cfg: &Config) -> Estimate {
        Self::with_image(cfg, standard_image_pixels(cfg))
    }

    /// The estimate for `cfg` with an assembled image of `image_pixels`.
    pub fn with_image(cfg: &Config, image_pixels: u64) -> Estimate {
        let m = cfg.detector.modules as u64;
        let r = cfg.receivers.len() as u64;
        let pixels = m * MODULE_PIXELS as u64;
        let frame = m * MODULE_BYTES as u64;
        let per_receiver = pixels
            .saturating_mul(PER_PIXEL_PER_RECEIVER)
            .saturating_add(image_pixels.saturating_mul(PER_IMAGE_PIXEL_PER_RECEIVER));
        let mut parts = vec![Part {
            key: "detector.modules",
            what: format!(
                "calibration and processing of {m} module(s) ({image_pixels} image pixels) in {r} receiver(s)"
            ),
            bytes: r.saturating_mul(per_receiver).saturating_add(FIXED),
        }];
        let bunch = cfg.acquisition.bunch as u64;
        // Every receiver's ring (native: its frame slots), as deep as its frame buffer (which
        // the configuration has already been checked to allow).
        let rings: u64 = (0..cfg.receivers.len())
            .filter_map(|i| crate::flow::ring_for(cfg, i).ok())
            .map(|(ring, _)| ring.bytes() as u64)
            .sum();
        parts.push(Part {
            key: "receiver.buffer",
            what: format!("{r} receiver frame buffer(s) of {bunch}-frame stacks"),
            bytes: rings,
        });
        if cfg.source.kind == SourceKind::Synthetic {
            let n = Dataset::synthetic_frames(cfg) as u64;
            parts.push(Part {
                key: "source.distinct",
                what: format!(
                    "{n} synthetic frame(s) of {m} module(s), generated and registered for sending"
                ),
                bytes: n
                    .saturating_mul(frame)
                    .saturating_mul(2)
                    .saturating_add(pixels * SYNTH_PER_PIXEL),
            });
        }
        if cfg.output.file.is_some() {
            let q = cfg.output.queue;
            parts.push(Part {
                key: "output.queue",
                what: format!("writer queue(s) of {q} record(s) per receiver"),
                bytes: r.saturating_mul(writer_queue_bytes(cfg, image_pixels)),
            });
        }
        Estimate { parts }
    }

    /// Adds a file source of `len` bytes (held twice: loaded, and registered for sending).
    pub fn with_source(mut self, len: u64) -> Estimate {
        self.parts.push(Part {
            key: "source.path",
            what: "the source file's frames, loaded and registered for sending".into(),
            bytes: len.saturating_mul(2),
        });
        self
    }

    /// All parts together.
    pub fn total(&self) -> u64 {
        self.parts
            .iter()
            .fold(0u64, |a, p| a.saturating_add(p.bytes))
    }

    /// Refuses an estimate over `budget`: the message names the biggest part's key, the total
    /// and the budget.
    pub fn check(&self, budget: MemoryBudget) -> Result<()> {
        let total = self.total();
        if total <= budget.bytes {
            return Ok(());
        }
        let mut parts: Vec<&Part> = self.parts.iter().collect();
        parts.sort_by_key(|p| std::cmp::Reverse(p.bytes));
        let list = parts
            .iter()
            .filter(|p| p.bytes > 0)
            .map(|p| format!("{} ({}): {}", p.what, p.key, Bytes(p.bytes)))
            .collect::<Vec<_>>()
            .join("; ");
        Err(DaqError::Config(format!(
            "{}: this configuration needs about {} of memory, over the memory budget of {budget} \
             (remora daq serve --memory-budget): {list}",
            parts[0].key,
            Bytes(total)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> Config {
        Config::parse(&format!(
            "[detector]\nmodules = 32\n[acquisition]\nframes = 10\n{extra}"
        ))
        .unwrap()
    }

    #[test]
    fn distinct_frames_of_a_large_detector_are_refused_naming_the_key_and_the_budget() {
        let c = cfg("[source]\ndistinct = 4096\n");
        let e = Estimate::of(&c);
        // 4096 frames of 32 MiB, twice.
        assert!(e.total() > 256 << 30, "{}", e.total());
        let m = e.check(MemoryBudget::new(8 << 30)).unwrap_err().to_string();
        assert!(m.contains("source.distinct"), "{m}");
        assert!(m.contains("memory budget of 8.0 GiB"), "{m}");
    }

    #[test]
    fn the_demo_fits_in_a_few_gibibytes() {
        let mut c = Config::parse(include_str!("../../../../examples/demo.toml")).unwrap();
        // Under a budget the default frame buffer takes a quarter of it.
        c.access.memory = Some(MemoryBudget::new(3 << 30));
        let e = Estimate::of(&c);
        assert!(e.total() < 3 << 30, "{e:?}");
        e.check(MemoryBudget::new(3 << 30)).unwrap();
    }

    #[test]
    fn the_largest_values_do_not_overflow() {
        let mut c = cfg("[source]\ndistinct = 4096\n[output]\nfile = \"x.h5\"\nimages = true\nqueue = 1048576\n");
        c.acquisition.bunch = 4096;
        c.receivers = vec![Default::default(); 16];
        let e = Estimate::of(&c).with_source(u64::MAX);
        assert_eq!(e.total(), u64::MAX);
        assert!(e.check(MemoryBudget::new(u64::MAX - 1)).is_err());
    }
}
