//! The NeXus/HDF5 writer: what it writes reads back through the HDF5 library (with the
//! bitshuffle/LZ4 filter this process registered), errors name the file, and the threaded
//! writer drops rather than blocks.
use std::path::PathBuf;

use remora_daq::sparse::SparseFrame;
use remora_daq::writer::{FrameKind, FrameRecord, RunInfo, Writer, WriterThread};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("remora-writer-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn info(bins: usize) -> RunInfo {
    RunInfo {
        config_toml: "[detector]\nmodules = 1\n".into(),
        title: "test".into(),
        detector_modules: 1,
        layout_json: "{}".into(),
        pixel_size_m: 75e-6,
        photon_energy_kev: 12.4,
        calibration: "synthetic".into(),
        pipeline: vec![("veto_pixel_kev".into(), "50".into())],
        raw_shape: (4, 8),
        radial: Some((
            (0..bins).map(|b| b as f64 * 0.1).collect(),
            "q_nm^-1".into(),
        )),
        start_time: "2026-11-24T00:00:00Z".into(),
        ..RunInfo::default()
    }
}

fn kept(frame: u64, seed: u32) -> FrameRecord {
    let row_ptr = vec![0, 2, 2, 3, 3 + seed % 3];
    let n = row_ptr[4] as usize;
    FrameRecord {
        frame,
        kind: FrameKind::Kept,
        spots: 10 + u64::from(seed),
        lost_modules: u64::from(seed % 2),
        sparse: Some(SparseFrame {
            rows: 4,
            cols: 8,
            threshold: 6.0,
            row_ptr,
            col: (0..n as u16).collect(),
            values: (0..n).map(|i| i as f32 + seed as f32).collect(),
        }),
        profile: Some(
            (0..5)
                .map(|b| f64::from(seed) * 10.0 + f64::from(b))
                .collect(),
        ),
        image: None,
    }
}

#[test]
fn what_is_written_reads_back_through_the_library() {
    let path = tmp("roundtrip.h5");
    let mut w = Writer::create(&path, &info(5)).unwrap();
    let plain = |frame, kind| FrameRecord {
        frame,
        kind,
        spots: 0,
        lost_modules: 0,
        sparse: None,
        profile: None,
        image: None,
    };
    w.write(&plain(0, FrameKind::Dark)).unwrap();
    w.write(&kept(1, 1)).unwrap();
    w.write(&plain(2, FrameKind::Rejected)).unwrap();
    w.write(&kept(3, 2)).unwrap();
    let st = w.finish("{\"ok\":true}").unwrap();
    assert_eq!((st.frames, st.kept, st.dropped), (4, 2, 0));

    let f = hdf5::File::open(&path).unwrap();
    let frames: Vec<u64> = f
        .dataset("entry/frames/frame_number")
        .unwrap()
        .read_raw()
        .unwrap();
    assert_eq!(frames, [0, 1, 2, 3]);
    let kind: Vec<u8> = f.dataset("entry/frames/kind").unwrap().read_raw().unwrap();
    assert_eq!(kind, [0, 2, 1, 2]);
    let lost: Vec<u64> = f
        .dataset("entry/frames/lost_modules")
        .unwrap()
        .read_raw()
        .unwrap();
    assert_eq!(lost, [0, 1, 0, 0]);
    let off: Vec<u64> = f
        .dataset("entry/sparse/entry_offset")
        .unwrap()
        .read_raw()
        .unwrap();
    assert_eq!(off, [0, 4, 9]);
    let vals: Vec<f32> = f.dataset("entry/sparse/value").unwrap().read_raw().unwrap();
    assert_eq!(vals, [1.0, 2.0, 3.0, 4.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let rows = f.dataset("entry/sparse/row_ptr").unwrap();
    assert_eq!(rows.shape(), [2, 5]);
    let i = f.dataset("entry/azint/I").unwrap();
    assert_eq!(i.shape(), [2, 5]);
    let iv: Vec<f64> = i.read_raw().unwrap();
    assert_eq!(iv[5..], [20.0, 21.0, 22.0, 23.0, 24.0]);
    // The chunks are bitshuffle/LZ4 (filter 32008), as other readers expect.
    let filters = i.filters();
    assert!(filters.iter().any(|fl| fl.id() == 32008), "{filters:?}");
    let def: hdf5::types::VarLenUnicode = f
        .dataset("entry/definition")
        .unwrap()
        .read_scalar()
        .unwrap();
    assert_eq!(def.as_str(), "NXmx");
    let summary: hdf5::types::VarLenUnicode = f
        .dataset("entry/remora/summary")
        .unwrap()
        .read_scalar()
        .unwrap();
    assert_eq!(summary.as_str(), "{\"ok\":true}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn an_unwritable_path_is_an_error_naming_it() {
    let e = Writer::create(std::path::Path::new("/nonexistent/dir/x.h5"), &info(3))
        .err()
        .expect("no such folder")
        .to_string();
    assert!(e.contains("/nonexistent/dir/x.h5"), "{e}");
}

#[test]
fn the_writer_thread_drops_and_counts_instead_of_blocking() {
    let path = tmp("drops.h5");
    let w = WriterThread::spawn(&path, info(5), 1).unwrap();
    let mut refused = 0;
    for n in 0..2000 {
        if !w.push(kept(n, (n % 7) as u32)) {
            refused += 1;
        }
    }
    assert_eq!(w.dropped(), refused);
    let st = w.finish("{}").unwrap();
    assert_eq!(st.dropped, refused);
    assert_eq!(st.frames + refused, 2000);
    assert!(refused > 0, "a queue of 1 took 2000 records without a drop");
    std::fs::remove_file(&path).ok();
}

/// Issue 27, finding 7: a queue of many records holds at most its byte bound, however large
/// each record's CSR is (a low `pipeline.sparse_kev` keeps every pixel).
#[test]
fn issue27_the_writer_queue_is_bounded_in_bytes_too() {
    let path = tmp("bytes.h5");
    // Room for three records of 3 MiB, in a queue of 1000.
    let w = WriterThread::spawn_bounded(&path, info(5), 1000, 9 << 20).unwrap();
    let big = |frame: u64| {
        let mut r = kept(frame, 0);
        let s = r.sparse.as_mut().unwrap();
        s.col = vec![0; 512 << 10];
        s.values = vec![1.0; 512 << 10];
        s.row_ptr = vec![0, 0, 0, 0, 512 << 10];
        r
    };
    let mut refused = 0;
    for n in 0..50 {
        if !w.push(big(n)) {
            refused += 1;
        }
    }
    let st = w.finish("{}").unwrap();
    assert_eq!(st.dropped, refused);
    assert_eq!(st.frames + refused, 50);
    assert!(
        refused > 0,
        "a 9 MiB queue took 50 records of 3 MiB without a drop"
    );
    std::fs::remove_file(&path).ok();
}
