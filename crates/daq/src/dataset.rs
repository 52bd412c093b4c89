//! The frames an emulator streams, loaded into memory before the acquisition starts (a
//! detector's frames come from its ASICs at line rate; reading a file during the run would
//! measure the disk).
//!
//! Sources: the synthetic generator (with its ground truth), raw little-endian u16 frames, a
//! `.npy` array of u16, or an HDF5 dataset. The stream cycles through the loaded frames: the
//! acquisition's frame `i` is dataset frame `i mod len`.
use rayon::prelude::*;

use crate::access::{Estimate, Input};
use crate::config::{Config, SourceKind};
use crate::model::Detector;
use crate::pedestal::DarkPattern;
use crate::ring::MODULE_BYTES;
use crate::synth::{Synth, SynthConfig};
use crate::{DaqError, Result};

/// Loaded frames, detector order, back to back, as bytes (what the transmitters send from).
#[derive(Debug)]
pub struct Dataset {
    /// Modules per frame.
    pub modules: usize,
    /// Frames loaded.
    pub frames: usize,
    /// The frames' bytes (`frames × modules × MODULE_BYTES`).
    pub bytes: Vec<u8>,
    /// Where they came from, for the record.
    pub description: String,
}

impl Dataset {
    /// Bytes of one frame.
    pub fn frame_bytes(&self) -> usize {
        self.modules * MODULE_BYTES
    }

    /// Dataset frame streamed as acquisition frame `i`.
    pub fn index_of(&self, i: u64) -> usize {
        (i % self.frames as u64) as usize
    }

    /// Frame `d` as words.
    pub fn frame(&self, d: usize) -> Vec<u16> {
        let b = &self.bytes[d * self.frame_bytes()..(d + 1) * self.frame_bytes()];
        b.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()
    }

    /// Loads what the configuration names, through its [`crate::access::Access`]: a file source
    /// must be a regular file, and its frames must fit the memory budget before they are read.
    pub fn load(cfg: &Config) -> Result<Dataset> {
        let modules = cfg.detector.modules;
        match cfg.source.kind {
            SourceKind::Synthetic => {
                if let Some(b) = cfg.access.memory {
                    Estimate::of(cfg).check(b)?;
                }
                Self::synthetic(cfg)
            }
            SourceKind::Raw | SourceKind::Npy | SourceKind::Hdf5 => {
                let path = cfg.source.path.as_deref().expect("validated");
                let input = cfg.access.files.open("source.path", path)?;
                let fits = |bytes: u64| match cfg.access.memory {
                    Some(b) => Estimate::of(cfg).with_source(bytes).check(b),
                    None => Ok(()),
                };
                let detail = input.detail();
                let shown = format!("{:?}", path.display().to_string());
                let words = match cfg.source.kind {
                    SourceKind::Raw => {
                        fits(input.len())?;
                        input.read_all()?
                    }
                    SourceKind::Npy => {
                        fits(input.len())?;
                        npy_u16(input)?
                    }
                    _ => h5_u16(input, &cfg.source.dataset, fits)?,
                };
                let per = Detector::new(modules)?.frame_bytes();
                if words.is_empty() || words.len() % per != 0 {
                    let what = if detail {
                        format!("{} bytes", words.len())
                    } else {
                        // Nothing of the file's own size beneath a directory.
                        "the data".into()
                    };
                    return Err(DaqError::Config(format!(
                        "source.path: {shown}: {what} is not a whole number of {modules}-module frames ({per} bytes each)",
                    )));
                }
                Ok(Dataset {
                    modules,
                    frames: words.len() / per,
                    description: format!("{:?} {}", cfg.source.kind, path.display()),
                    bytes: words,
                })
            }
        }
    }

    /// The synthetic generator's configuration for a run (its dark pattern is the run's).
    pub fn synth_config(cfg: &Config) -> Result<SynthConfig> {
        let mut s = SynthConfig::new(cfg.detector.modules)?;
        s.seed = cfg.source.seed;
        s.spots = cfg.source.spots;
        s.photon_energy_kev = cfg.detector.photon_energy_kev;
        s.dark = DarkPattern::new(cfg.acquisition.dark_every, cfg.acquisition.dark_phase)?;
        Ok(s)
    }

    /// Frames the synthetic source generates: `distinct`, rounded up to a whole number of dark
    /// periods so that cycling keeps every frame's darkness.
    pub fn synthetic_frames(cfg: &Config) -> usize {
        let every = cfg.acquisition.dark_every.max(1) as usize;
        cfg.source.distinct.div_ceil(every) * every
    }

    fn synthetic(cfg: &Config) -> Result<Dataset> {
        let synth = Synth::new(Self::synth_config(cfg)?)?;
        let n = Self::synthetic_frames(cfg);
        let per = synth.layout().detector().frame_bytes();
        let mut bytes = vec![0u8; n * per];
        bytes.par_chunks_mut(per).enumerate().for_each(|(d, out)| {
            let f = synth.frame(d as u64);
            for (o, w) in out.chunks_exact_mut(2).zip(&f.raw) {
                o.copy_from_slice(&w.to_le_bytes());
            }
        });
        Ok(Dataset {
            modules: cfg.detector.modules,
            frames: n,
            bytes,
            description: format!("synthetic, seed {}, {n} distinct frames", cfg.source.seed),
        })
    }
}

/// An HDF5 dataset of u16 words (any shape, C order) as little-endian bytes; `fits` sees its
/// size in bytes before it is read (a compressed dataset can be far larger than its file).
fn h5_u16(input: Input, dataset: &str, fits: impl Fn(u64) -> Result<()>) -> Result<Vec<u8>> {
    let shown = format!("{:?}", input.shown().display().to_string());
    let bad = |e: hdf5::Error| DaqError::Config(format!("source.path: {shown}: {dataset}: {e}"));
    // Bitshuffle/LZ4 chunks (remora's own files, Jungfraujoch's, Dectris') decode through the
    // filter remora registers; another compression inside that filter is refused by name.
    if !crate::writer::filter::register() {
        return Err(DaqError::Acquisition(
            "the HDF5 library refused the bitshuffle filter".into(),
        ));
    }
    // HDF5 opens by name: the name of the very file opened and checked above.
    let f = hdf5::File::open(input.fd_path()).map_err(bad)?;
    let d = f.dataset(dataset).map_err(bad)?;
    for filter in d.filters() {
        if let hdf5::filters::Filter::User(id, cd) = filter {
            if id == crate::writer::filter::BSLZ4 {
                crate::writer::filter::check_params(&cd).map_err(|why| {
                    DaqError::Config(format!("source.path: {shown}: {dataset}: {why}"))
                })?;
            }
        }
    }
    let dtype = d.dtype().and_then(|t| t.to_descriptor()).map_err(bad)?;
    if dtype != hdf5::types::TypeDescriptor::Unsigned(hdf5::types::IntSize::U2) {
        return Err(DaqError::Config(format!(
            "source.path: {shown}: {dataset}: holds {dtype}, not the detector's raw uint16 words"
        )));
    }
    fits((d.size() as u64).saturating_mul(2))?;
    let words: Vec<u16> = d.read_raw().map_err(bad)?;
    drop(input);
    Ok(words.iter().flat_map(|w| w.to_le_bytes()).collect())
}

/// The data bytes of a little-endian u16 `.npy` file (C order), checked.
fn npy_u16(input: Input) -> Result<Vec<u8>> {
    let shown = format!("{:?}", input.shown().display().to_string());
    let bad = |m: &str| DaqError::Config(format!("source.path: {shown}: {m}"));
    let b = input.read_all()?;
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(bad("not a .npy file"));
    }
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        _ => return Err(bad("not a .npy file of a version this reads (1, 2 or 3)")),
    };
    let header = b
        .get(start..start + hlen)
        .ok_or_else(|| bad("truncated header"))?;
    let header = String::from_utf8_lossy(header);
    if !(header.contains("'<u2'") || header.contains("'uint16'")) {
        return Err(bad("array must be little-endian uint16 ('<u2')"));
    }
    if header.contains("'fortran_order': True") {
        return Err(bad("array must be in C order"));
    }
    Ok(b[start + hlen..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Files;

    #[test]
    fn synthetic_frames_keep_their_darkness_when_cycled() {
        let mut cfg = Config::parse(
            "[detector]\nmodules = 1\n[acquisition]\nframes = 10\ndark_every = 3\n[source]\ndistinct = 4\n",
        )
        .unwrap();
        cfg.acquisition.dark_phase = 1;
        assert_eq!(Dataset::synthetic_frames(&cfg), 6);
    }

    #[test]
    fn a_bad_npy_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("remora-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.npy");
        std::fs::write(&p, b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}").unwrap();
        let open = || Files::Any.open("source.path", &p).unwrap();
        let e = npy_u16(open()).unwrap_err().to_string();
        assert!(e.contains("uint16"), "{e}");
        std::fs::write(&p, b"hello").unwrap();
        assert!(npy_u16(open())
            .unwrap_err()
            .to_string()
            .contains("not a .npy"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
