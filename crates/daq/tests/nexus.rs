//! Files every reader accepts (issue 32, item 5): remora's own bitshuffle/LZ4 file read back as
//! an HDF5 source, chunks of another bitshuffle compression refused by name, the NXmx fields
//! and their transformation chains, and the master file that joins a multi-receiver run's
//! files with virtual datasets.
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hdf5::dataset::Layout;
use hdf5::types::VarLenUnicode;
use remora_daq::config::Config;
use remora_daq::dataset::Dataset;
use remora_daq::manager::{run_in_process, Summary};
use remora_daq::receiver::FrameResult;
use remora_daq::writer::{bslz4, filter, RunInfo, Writer};

/// One acquisition at a time (two cores; UC drops what a starved receiver cannot take).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static RUNS: Mutex<()> = Mutex::new(());
    RUNS.lock().unwrap_or_else(|e| e.into_inner())
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("remora-nexus-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn config(text: &str, dir: &Path) -> Config {
    let mut c = Config::parse(text).unwrap_or_else(|e| panic!("test config: {e}"));
    c.rebase(dir);
    c
}

fn acquire(cfg: &Config) -> (Summary, Vec<FrameResult>) {
    let got = Mutex::new(Vec::new());
    let s = run_in_process(
        cfg,
        Some(&|_, f: &FrameResult| got.lock().unwrap().push(f.clone())),
        &|_, _| {},
    )
    .unwrap_or_else(|e| panic!("acquisition failed: {e}"));
    let mut frames = got.into_inner().unwrap();
    frames.sort_by_key(|f| f.frame);
    (s, frames)
}

/// The rows of `table` with their frame numbers (`numbers`), each row as bytes (so that NaNs
/// compare equal to themselves).
fn rows_by_frame(f: &hdf5::File, table: &str, numbers: &str) -> Vec<(u64, Vec<u8>)> {
    use hdf5::types::{FloatSize, IntSize, TypeDescriptor as T};
    let frames: Vec<u64> = read(f, numbers);
    let ds = f.dataset(table).unwrap();
    let bytes: Vec<u8> = match ds.dtype().unwrap().to_descriptor().unwrap() {
        T::Unsigned(IntSize::U1) => read::<u8>(f, table),
        T::Unsigned(IntSize::U8) => read::<u64>(f, table)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        T::Float(FloatSize::U4) => read::<f32>(f, table)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        T::Float(FloatSize::U8) => read::<f64>(f, table)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        t => panic!("{table}: {t}"),
    };
    let row = bytes.len() / frames.len().max(1);
    frames
        .into_iter()
        .enumerate()
        .map(|(i, n)| (n, bytes[i * row..(i + 1) * row].to_vec()))
        .collect()
}

fn read<T: hdf5::H5Type>(f: &hdf5::File, path: &str) -> Vec<T> {
    f.dataset(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .read_raw()
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn text(f: &hdf5::File, path: &str) -> String {
    let v: VarLenUnicode = f
        .dataset(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .read_scalar()
        .unwrap();
    v.as_str().to_owned()
}

fn text_attr(f: &hdf5::File, path: &str, name: &str) -> String {
    let v: VarLenUnicode = f
        .dataset(path)
        .unwrap()
        .attr(name)
        .unwrap_or_else(|e| panic!("{path}@{name}: {e}"))
        .read_scalar()
        .unwrap();
    v.as_str().to_owned()
}

const SYNTHETIC: &str = "[detector]\nmodules = 1\n[source]\ndistinct = 4\n\
    [acquisition]\nframes = 8\nbunch = 4\nrate_hz = 200\ndeadline_ms = 10000\n\
    [pipeline]\nbins = 100\n";

#[test]
fn an_hdf5_source_reads_remoras_own_bitshuffle_lz4_file() {
    let _one = one_at_a_time();
    let d = dir("replay");
    let synthetic = config(SYNTHETIC, &d);
    let truth = Dataset::load(&synthetic).unwrap();
    // remora's writer keeps the raw words of every frame, in bitshuffle/LZ4 chunks.
    let path = d.join("recorded.h5");
    let mut w = Writer::create(
        &path,
        &RunInfo {
            raw_shape: (512, 1024),
            raw_frames: true,
            pixel_size_m: 75e-6,
            ..RunInfo::default()
        },
    )
    .unwrap();
    for i in 0..truth.frames {
        w.write_raw(i as u64, &truth.frame(i)).unwrap();
    }
    w.finish("{}").unwrap();
    let f = hdf5::File::open(&path).unwrap();
    let ds = f.dataset("/entry/raw/data").unwrap();
    assert!(ds.filters().iter().any(|fl| fl.id() == filter::BSLZ4));
    assert_eq!(ds.shape(), [truth.frames, 512, 1024]);
    drop(f);

    let replay = config(
        &SYNTHETIC.replace(
            "[source]\ndistinct = 4\n",
            "[source]\nkind = \"hdf5\"\npath = \"recorded.h5\"\ndataset = \"/entry/raw/data\"\n",
        ),
        &d,
    );
    let loaded = Dataset::load(&replay).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.bytes, truth.bytes,
        "the frames read back are the frames written"
    );
    // The replay gives the synthetic run's results, frame for frame.
    let (s, replayed) = acquire(&replay);
    assert_eq!(s.frames_complete, 8, "{s:?}");
    let (_, direct) = acquire(&synthetic);
    assert_eq!(replayed.len(), direct.len());
    for (a, b) in replayed.iter().zip(&direct) {
        assert_eq!(a.frame, b.frame);
        assert_eq!(format!("{:?}", a.outcome), format!("{:?}", b.outcome));
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_source_of_another_bitshuffle_compression_is_refused_by_name() {
    let d = dir("zstd");
    let path = d.join("zstd.h5");
    assert!(filter::register());
    // One 1-module frame whose chunk is LZ4 but whose parameters say zstd (3): a decoder that
    // ignored cd_values[4] would read it without complaint.
    let words: Vec<u16> = (0..512 * 1024).map(|i| (i % 4000) as u16).collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let chunk = bslz4::encode(&bytes, 2, bslz4::default_block(2));
    let f = hdf5::File::create(&path).unwrap();
    let ds = f
        .new_dataset::<u16>()
        .shape([1, 512, 1024])
        .chunk([1, 512, 1024])
        .add_filter(filter::BSLZ4, &[0, 4, 2, 0, 3])
        .create("data")
        .unwrap();
    let offset = [0u64; 3];
    // SAFETY: `ds` is an open chunked dataset of rank 3, `offset` has 3 entries and `chunk`
    // is a live buffer of `chunk.len()` bytes; default transfer list, no filter skipped.
    let r = hdf5::sync::sync(|| unsafe {
        hdf5_sys::h5d::H5Dwrite_chunk(
            ds.id(),
            hdf5_sys::h5p::H5P_DEFAULT,
            0,
            offset.as_ptr(),
            chunk.len(),
            chunk.as_ptr().cast(),
        )
    });
    assert!(r >= 0, "H5Dwrite_chunk");
    drop(ds);
    drop(f);

    let want = "bitshuffle compression type 3 (zstd) is not supported; only 2 (lz4)";
    // Through the library: the filter refuses the chunk and says why.
    let f = hdf5::File::open(&path).unwrap();
    let e = f
        .dataset("data")
        .unwrap()
        .read_raw::<u16>()
        .expect_err("a zstd chunk must not decode")
        .to_string();
    assert!(e.contains(want), "{e}");
    drop(f);
    // As a run's source: refused before anything is read, naming the file and the dataset.
    let cfg = config(
        &SYNTHETIC.replace(
            "[source]\ndistinct = 4\n",
            "[source]\nkind = \"hdf5\"\npath = \"zstd.h5\"\ndataset = \"/data\"\n",
        ),
        &d,
    );
    let e = Dataset::load(&cfg).unwrap_err().to_string();
    assert!(
        e.contains(want) && e.contains("zstd.h5") && e.contains("/data"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_source_that_is_not_raw_words_is_refused() {
    let d = dir("f32");
    let f = hdf5::File::create(d.join("images.h5")).unwrap();
    f.new_dataset_builder()
        .with_data(&vec![0f32; 512 * 1024][..])
        .create("data")
        .unwrap();
    drop(f);
    let cfg = config(
        &SYNTHETIC.replace(
            "[source]\ndistinct = 4\n",
            "[source]\nkind = \"hdf5\"\npath = \"images.h5\"\ndataset = \"/data\"\n",
        ),
        &d,
    );
    let e = Dataset::load(&cfg).unwrap_err().to_string();
    assert!(e.contains("not the detector's raw uint16 words"), "{e}");
    std::fs::remove_dir_all(&d).ok();
}

/// Follows `depends_on` from `start` to the end of the chain ("."), checking every link.
#[track_caller]
fn assert_chain_ends(f: &hdf5::File, mut at: String) {
    for _ in 0..8 {
        if at == "." {
            return;
        }
        let ds = f
            .dataset(&at)
            .unwrap_or_else(|e| panic!("depends_on names {at}, which is not there: {e}"));
        for a in ["transformation_type", "vector", "offset", "depends_on"] {
            assert!(ds.attr(a).is_ok(), "{at} lacks @{a}");
        }
        at = text_attr(f, &at, "depends_on");
    }
    panic!("the depends_on chain does not end");
}

#[test]
fn the_file_has_the_nxmx_fields_and_chains_that_end() {
    let _one = one_at_a_time();
    let d = dir("nxmx");
    let cfg = config(
        &format!("{SYNTHETIC}[output]\nfile = \"run.h5\"\nimages = true\n"),
        &d,
    );
    acquire(&cfg);
    let f = hdf5::File::open(d.join("run.h5")).unwrap();
    // At 200 frames/s, 8 frames end within a second of the start.
    let (start, est) = (
        text(&f, "/entry/start_time"),
        text(&f, "/entry/end_time_estimated"),
    );
    assert!(est.len() == 20 && est >= start, "{start} {est}");
    assert_eq!(text(&f, "/entry/sample/depends_on"), ".");
    let module = "/entry/instrument/detector/detector_module";
    for dir in ["fast_pixel_direction", "slow_pixel_direction"] {
        assert_chain_ends(&f, format!("{module}/{dir}"));
    }
    assert_chain_ends(&f, text(&f, "/entry/instrument/detector/depends_on"));
    let offset: Vec<f64> = f
        .dataset(&format!("{module}/module_offset"))
        .unwrap()
        .attr("offset")
        .unwrap()
        .read_raw()
        .unwrap();
    let bx: Vec<f64> = read(&f, "/entry/instrument/detector/beam_center_x");
    assert!((offset[0] - bx[0] * 75e-6).abs() < 1e-12, "{offset:?}");
    // The mask is shaped as the image.
    let mask = f.dataset("/entry/instrument/detector/pixel_mask").unwrap();
    assert_eq!(
        mask.shape(),
        f.dataset("/entry/data/data").unwrap().shape()[1..]
    );
    std::fs::remove_dir_all(&d).ok();
}

const FANOUT: &str = "[detector]\nmodules = 1\n[source]\ndistinct = 4\n\
    [acquisition]\nframes = 16\nbunch = 4\nrate_hz = 200\ndeadline_ms = 10000\ndark_every = 0\n\
    [pipeline]\nbins = 100\n[output]\nfile = \"run.h5\"\nimages = true\n";

#[test]
fn a_time_fanout_master_reads_as_one_receivers_file() {
    let _one = one_at_a_time();
    let (d1, d2) = (dir("one"), dir("two"));
    // No dark frames: each receiver would track the pedestal on its own share of them.
    let one = config(FANOUT, &d1);
    let two = config(
        &format!("{FANOUT}[emulator]\nfanout = \"time\"\n[[receivers]]\n[[receivers]]\n"),
        &d2,
    );
    let (s1, _) = acquire(&one);
    let (s2, _) = acquire(&two);
    assert_eq!(s1.master, None, "one receiver: its file is the run's");
    let master = d2.join("run.h5");
    assert_eq!(s2.master.as_deref(), Some(master.to_str().unwrap()));
    let a = hdf5::File::open(d1.join("run.h5")).unwrap();
    let m = hdf5::File::open(&master).unwrap();
    let parts: Vec<hdf5::File> = (0..2)
        .map(|i| hdf5::File::open(d2.join(format!("run_r{i}.h5"))).unwrap())
        .collect();
    let frames = "/entry/frames/frame_number";
    // Time slicing: receiver 1 had the odd frames.
    assert!(read::<u64>(&parts[1], frames).iter().all(|n| n % 2 == 1));
    let (azint, data) = ("/entry/azint/frame_number", "/entry/data/frame_number");
    for (table, numbers) in [
        (frames, frames),
        ("/entry/frames/kind", frames),
        ("/entry/frames/spots", frames),
        ("/entry/frames/kept", frames),
        ("/entry/frames/lost_modules", frames),
        ("/entry/azint/I", azint),
        (azint, azint),
        ("/entry/data/data", data),
        (data, data),
    ] {
        assert_eq!(
            m.dataset(table).unwrap().layout(),
            Layout::Virtual,
            "{table}"
        );
        // Every row of both receivers' files, in frame order: one dataset for the run.
        let mut want: Vec<(u64, Vec<u8>)> = parts
            .iter()
            .flat_map(|p| rows_by_frame(p, table, numbers))
            .collect();
        want.sort_by_key(|r| r.0);
        let got = rows_by_frame(&m, table, numbers);
        assert!(!got.is_empty(), "{table}");
        assert!(
            got == want,
            "{table}: the master's rows are not its parts' in frame order"
        );
        // The same rows as the one-receiver run's, frame for frame.
        let single = rows_by_frame(&a, table, numbers);
        let mut both = 0;
        for (n, row) in &got {
            if let Some((_, r)) = single.iter().find(|(k, _)| k == n) {
                assert!(row == r, "{table}: frame {n} differs from one receiver's");
                both += 1;
            }
        }
        assert!(both >= 8, "{table}: {both} frames in common");
        if got.len() == 16 && single.len() == 16 {
            assert!(got == single, "{table}");
        }
    }
    // The master names its parts relative to itself, and carries the run's summary.
    let names: Vec<VarLenUnicode> = read(&m, "/entry/remora/parts");
    assert_eq!(names[1].as_str(), "run_r1.h5");
    assert!(text(&m, "/entry/remora/summary").contains("\"master\""));
    assert_eq!(text(&m, "/entry/definition"), "NXmx");
    std::fs::remove_dir_all(&d1).ok();
    std::fs::remove_dir_all(&d2).ok();
}

#[test]
fn a_roi_fanout_master_joins_the_regions_of_every_receiver() {
    let _one = one_at_a_time();
    let (d1, d2) = (dir("roi-one"), dir("roi-two"));
    let one = config(FANOUT, &d1);
    let two = config(
        &format!(
            "{FANOUT}[emulator]\nfanout = \"roi\"\n\
             [[receivers]]\nroi = {{ x = 0, y = 0, width = 1024, height = 256 }}\n\
             [[receivers]]\nroi = {{ x = 0, y = 256, width = 1024, height = 256 }}\n"
        ),
        &d2,
    );
    acquire(&one);
    acquire(&two);
    let a = hdf5::File::open(d1.join("run.h5")).unwrap();
    let m = hdf5::File::open(d2.join("run.h5")).unwrap();
    let parts: Vec<hdf5::File> = (0..2)
        .map(|i| hdf5::File::open(d2.join(format!("run_r{i}.h5"))).unwrap())
        .collect();
    let shape = a.dataset("/entry/data/data").unwrap().shape();
    let (ny, nx) = (shape[1], shape[2]);
    let frames: Vec<u64> = read(&m, "/entry/data/frame_number");
    let mut union: Vec<u64> = parts
        .iter()
        .flat_map(|p| read::<u64>(p, "/entry/data/frame_number"))
        .collect();
    union.sort_unstable();
    union.dedup();
    assert!(!frames.is_empty());
    assert_eq!(frames, union, "the frames any receiver kept, in order");
    let md = read::<f32>(&m, "/entry/data/data");
    assert_eq!(md.len(), frames.len() * ny * nx);
    let af: Vec<u64> = read(&a, "/entry/data/frame_number");
    let ad = read::<f32>(&a, "/entry/data/data");
    let pf: Vec<Vec<u64>> = parts
        .iter()
        .map(|p| read(p, "/entry/data/frame_number"))
        .collect();
    let pd: Vec<Vec<f32>> = parts.iter().map(|p| read(p, "/entry/data/data")).collect();
    // Assembled rows 0..257 come from raw rows 0..256 (the chip border's double row 255 is
    // split over image rows 255 and 256): receiver 0's; rows 257.. receiver 1's.
    let split = 257;
    let mut compared = 0;
    for (k, fr) in frames.iter().enumerate() {
        let single = af.iter().position(|x| x == fr);
        for i in 0..2 {
            let own = pf[i].iter().position(|x| x == fr);
            let rows = if i == 0 { 0..split } else { split..ny };
            for y in rows {
                for x in 0..nx {
                    let got = md[(k * ny + y) * nx + x];
                    let Some(j) = own else {
                        assert!(got.is_nan(), "frame {fr} ({y}, {x}): not kept there");
                        continue;
                    };
                    let mine = pd[i][(j * ny + y) * nx + x];
                    assert_eq!(got.to_bits(), mine.to_bits(), "frame {fr} ({y}, {x})");
                    if let Some(s) = single {
                        let want = ad[(s * ny + y) * nx + x];
                        assert_eq!(got.to_bits(), want.to_bits(), "frame {fr} ({y}, {x})");
                    }
                }
            }
            if own.is_some() && single.is_some() {
                compared += 1;
            }
        }
    }
    assert!(
        compared >= 8,
        "{compared} regions compared with one receiver's run"
    );
    std::fs::remove_dir_all(&d1).ok();
    std::fs::remove_dir_all(&d2).ok();
}

#[test]
fn a_confined_run_writes_its_master_beneath_the_data_directory() {
    let _one = one_at_a_time();
    let d = dir("confined");
    let mut cfg = config(
        &format!(
            "{SYNTHETIC}[output]\nfile = \"run.h5\"\n\
             [emulator]\nfanout = \"time\"\n[[receivers]]\n[[receivers]]\n"
        ),
        &d,
    );
    cfg.access.files = remora_daq::access::Files::beneath(Some(&d), None).unwrap();
    let (s, _) = acquire(&cfg);
    assert_eq!(s.master.as_deref(), d.join("run.h5").to_str());
    let m = hdf5::File::open(d.join("run.h5")).unwrap();
    let mut want: Vec<u64> = (0..2)
        .flat_map(|i| {
            let p = hdf5::File::open(d.join(format!("run_r{i}.h5"))).unwrap();
            read::<u64>(&p, "/entry/frames/frame_number")
        })
        .collect();
    want.sort_unstable();
    assert!(!want.is_empty());
    assert_eq!(read::<u64>(&m, "/entry/frames/frame_number"), want);
    std::fs::remove_dir_all(&d).ok();
}
