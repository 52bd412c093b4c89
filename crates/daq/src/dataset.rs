//! The frames an emulator streams, loaded into memory before the acquisition starts (a
//! detector's frames come from its ASICs at line rate; reading a file during the run would
//! measure the disk).
//!
//! Sources: the synthetic generator (with its ground truth), raw little-endian u16 frames, a
//! `.npy` array of u16, or an HDF5 dataset. The stream cycles through the loaded frames: the
//! acquisition's frame `i` is dataset frame `i mod len`.
use rayon::prelude::*;
use remora_wire::npy;

use crate::access::{Estimate, Input};
use crate::config::{Config, SourceKind};
use crate::model::{Detector, MODULE_COLS, MODULE_ROWS};
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
                let detector = Detector::new(modules)?;
                let words = match cfg.source.kind {
                    SourceKind::Raw => {
                        fits(input.len())?;
                        input.read_all()?
                    }
                    SourceKind::Npy => {
                        fits(input.len())?;
                        npy_u16(input, detector)?
                    }
                    _ => h5_u16(input, &cfg.source.dataset, fits)?,
                };
                let per = detector.frame_bytes();
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

/// The data bytes of a `.npy` array of `detector`'s raw frames, read through
/// [`remora_wire::npy`]: little-endian u16 (`<u2`), C order, and a shape of whole frames,
/// (frames, 512·modules, 1024), (512·modules, 1024) for one frame, or (frames, modules, 512,
/// 1024); the data must be exactly what the shape needs. Beneath a directory the messages name
/// no value found in the file ([`Input::detail`]).
fn npy_u16(input: Input, detector: Detector) -> Result<Vec<u8>> {
    let detail = input.detail();
    let shown = format!("{:?}", input.shown().display().to_string());
    let bad = |m: &str| DaqError::Config(format!("source.path: {shown}: {m}"));
    // The reader's own message where it may describe the file, `generic` where it may not.
    let refuse = |e: npy::NpyError, generic: &str| {
        bad(&if detail {
            e.to_string()
        } else {
            generic.into()
        })
    };
    const DTYPE: &str = "array must be little-endian uint16 ('<u2')";
    let mut b = input.read_all()?;
    let h = npy::Header::parse(&b).map_err(|e| match e {
        npy::NpyError::NotNpy => bad("not a .npy file"),
        npy::NpyError::UnsupportedDtype(d) if detail => bad(&format!("{DTYPE}, not '{d}'")),
        npy::NpyError::UnsupportedDtype(_) => bad(DTYPE),
        npy::NpyError::Truncated { .. } => refuse(e, "truncated header"),
        e => refuse(
            e,
            "not a .npy file this reads (version 1.0, 2.0 or 3.0, NumPy's header)",
        ),
    })?;
    if h.descr != npy::Dtype::U2 {
        return Err(if detail {
            bad(&format!("{DTYPE}, not '{}'", h.descr))
        } else {
            bad(DTYPE)
        });
    }
    h.check_c_order().map_err(|e| bad(&e.to_string()))?;
    let m = detector.modules();
    let (rows, cols) = detector.raw_shape();
    let whole_frames = match h.shape[..] {
        [_, r, c] | [r, c] => (r, c) == (rows, cols),
        [_, mm, r, c] => (mm, r, c) == (m, MODULE_ROWS, MODULE_COLS),
        _ => false,
    };
    if !whole_frames {
        let found = if detail {
            format!("shape {}", npy::shape_repr(&h.shape))
        } else {
            "the array's shape".into()
        };
        return Err(bad(&format!(
            "{found} is not one of {m}-module frames: expected (frames, {rows}, {cols}), \
             ({rows}, {cols}) for one frame, or (frames, {m}, {MODULE_ROWS}, {MODULE_COLS})"
        )));
    }
    h.data(&b)
        .map_err(|e| refuse(e, "the data is not the size the array's shape needs"))?;
    // The data in place of the whole file: no second copy of the frames.
    b.drain(..h.data_offset);
    Ok(b)
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

    /// A version 1.0 `.npy` file with `dict` as its header text and `data` after it.
    fn npy_file(dict: &str, data: &[u8]) -> Vec<u8> {
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        b.extend_from_slice(dict.as_bytes());
        b.extend_from_slice(data);
        b
    }

    /// What `npy_u16` makes of `bytes` for a detector of `modules`, opened with `files`.
    fn load(files: &Files, dir: &std::path::Path, bytes: &[u8], modules: usize) -> Result<Vec<u8>> {
        std::fs::write(dir.join("x.npy"), bytes).unwrap();
        let path = if matches!(files, Files::Any) {
            dir.join("x.npy")
        } else {
            "x.npy".into()
        };
        npy_u16(
            files.open("source.path", &path).unwrap(),
            Detector::new(modules).unwrap(),
        )
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("remora-npy-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_bad_npy_is_a_clear_error() {
        let dir = temp_dir("bad");
        let msg = |bytes: &[u8]| load(&Files::Any, &dir, bytes, 1).unwrap_err().to_string();
        let header = |descr: &str, fortran: &str| {
            format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': (512, 1024), }}")
        };
        let e = msg(&npy_file(&header("<f4", "False"), &[]));
        assert!(e.contains("uint16 ('<u2'), not '<f4'"), "{e}");
        let e = msg(&npy_file(&header(">u2", "False"), &[]));
        assert!(e.contains("uint16 ('<u2'), not '>u2'"), "{e}");
        let e = msg(&npy_file(&header("<u2", "True"), &[]));
        assert!(e.contains("array must be in C order"), "{e}");
        let e = msg(&npy_file("{'descr': '<u2'}", &[]));
        assert!(e.contains("bad .npy header: no 'fortran_order' key"), "{e}");
        let e = msg(&npy_file(&header("<u2", "False"), &[0; 6]));
        assert!(
            e.contains("data is 6 bytes, shape (512, 1024) of '<u2' needs 1048576"),
            "{e}"
        );
        let e = msg(&b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}"[..20]);
        assert!(e.contains("truncated header"), "{e}");
        let e = msg(b"hello");
        assert!(
            e.contains("source.path: ") && e.ends_with("not a .npy file"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn npy_shapes_must_be_whole_frames() {
        let dir = temp_dir("shape");
        let frame = |n: u16| -> Vec<u8> {
            (0..MODULE_ROWS * MODULE_COLS)
                .flat_map(|i| (i as u16 ^ n).to_le_bytes())
                .collect()
        };
        let two: Vec<u8> = [frame(1), frame(2)].concat();
        for shape in [&[2, 512, 1024][..], &[512, 1024], &[2, 1, 512, 1024]] {
            let data = if shape.len() == 2 {
                &two[..two.len() / 2]
            } else {
                &two[..]
            };
            let b = npy::encode(npy::Dtype::U2, shape, data).unwrap();
            assert_eq!(load(&Files::Any, &dir, &b, 1).unwrap(), data, "{shape:?}");
        }
        // Two modules: the frame is 1024 rows, or 2 x 512.
        let b = npy::encode(npy::Dtype::U2, &[1, 2, 512, 1024], &two).unwrap();
        assert_eq!(load(&Files::Any, &dir, &b, 2).unwrap(), two);
        let b = npy::encode(npy::Dtype::U2, &[1024, 1024], &two).unwrap();
        assert_eq!(load(&Files::Any, &dir, &b, 2).unwrap(), two);

        let expected = "expected (frames, 1024, 1024), (1024, 1024) for one frame, \
                        or (frames, 2, 512, 1024)";
        for shape in [
            "(2, 512, 1024)",
            "(1048576,)",
            "(1024, 512, 2)",
            "(1, 1, 512, 1024)",
            "()",
        ] {
            let b = npy_file(
                &format!("{{'descr': '<u2', 'fortran_order': False, 'shape': {shape}, }}"),
                &[],
            );
            let e = load(&Files::Any, &dir, &b, 2).unwrap_err();
            assert!(matches!(e, DaqError::Config(_)));
            let e = e.to_string();
            assert!(
                e.contains(&format!(
                    "shape {shape} is not one of 2-module frames: {expected}"
                )),
                "{e}"
            );
        }
        // A shape of whole frames whose product overflows is an error, not an allocation.
        let b = npy_file(
            &format!(
                "{{'descr': '<u2', 'fortran_order': False, 'shape': ({}, 512, 1024), }}",
                1usize << 60
            ),
            &[0; 8],
        );
        let e = load(&Files::Any, &dir, &b, 1).unwrap_err().to_string();
        assert!(e.contains("needs more than"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn npy_messages_beneath_a_directory_name_nothing_in_the_file() {
        let dir = temp_dir("beneath");
        let files = Files::beneath(None, Some(&dir)).unwrap();
        let msg = |b: &[u8]| load(&files, &dir, b, 1).unwrap_err().to_string();
        let e = msg(&npy_file(
            "{'descr': '<u2', 'fortran_order': False, 'shape': (3, 77), }",
            &[],
        ));
        assert!(
            e.contains("the array's shape is not one of 1-module frames"),
            "{e}"
        );
        assert!(!e.contains("77"), "{e}");
        let e = msg(&npy_file(
            "{'descr': '<i8', 'fortran_order': False, 'shape': (3, 77), }",
            &[],
        ));
        assert!(
            e.ends_with("array must be little-endian uint16 ('<u2')"),
            "{e}"
        );
        let e = msg(&npy_file(
            "{'descr': '<u2', 'fortran_order': False, 'shape': (512, 1024), }",
            &[0; 6],
        ));
        assert!(
            e.ends_with("the data is not the size the array's shape needs"),
            "{e}"
        );
        let e = msg(&npy_file("{'descr': '<u2', 'secret': 1}", &[]));
        assert!(
            e.contains("not a .npy file this reads") && !e.contains("secret"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
