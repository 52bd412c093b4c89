//! The master file of a run with several receivers: one NeXus file that joins the receivers'
//! files (`<stem>_r<i>.h5`) with HDF5 virtual datasets, so that a reader (h5py, silx, pyFAI)
//! opens one file and reads one dataset for the whole run. It holds no frame data of its own:
//! the virtual datasets name the receivers' files by their file names, relative to the master's
//! folder, so the folder can move as a whole.
//!
//! | path | what |
//! | --- | --- |
//! | `/entry` header | copied from receiver 0's file: `definition` (NXmx), times, `instrument`, `sample`, `source` |
//! | `/entry/remora` | the configuration, geometry, PONI, calibration and pipeline settings (copied), the run's `summary` (JSON, every receiver), `fanout`, `parts` (the receivers' file names) and `receivers/r<i>` (external links to each receiver's `/entry`) |
//! | time fan-out: `/entry/frames/*` | every frame's row (`frame_number`, `kind`, `spots`, `kept`, `lost_modules`) from every receiver, in frame order |
//! | time fan-out: `/entry/azint/I`, `frame_number` | the kept frames' profiles in frame order, with the `radial_axis` (NXdata, `@signal` I) |
//! | `/entry/data/data`, `frame_number` | time fan-out: the kept frames' images in frame order; RoI fan-out: the frames any receiver kept, each receiver's region of the assembled image from its own file (NaN where that receiver rejected the frame, and in gaps) |
//!
//! Not joined: the CSR of kept frames (`/entry/sparse`: its offsets are per file), and with RoI
//! fan-out the per-frame tables and profiles, which describe one region each (read them from
//! `/entry/remora/receivers/r<i>`).
use std::ffi::CString;
use std::path::{Path, PathBuf};

use hdf5::types::VarLenUnicode;
use hdf5::{Group, H5Type, Hyperslab, Selection, SliceOrIndex};

use super::h5::{attr, group, string, text};
use crate::access::Input;
use crate::config::{Config, Fanout};
use crate::geometry::{AssemblyMap, Layout};
use crate::manager::summary::Summary;
use crate::model::{MODULE_COLS, MODULE_PIXELS};
use crate::{DaqError, Result};

/// One receiver's file, open for reading.
struct Part {
    /// Its file name, which the master's virtual datasets name (same folder as the master).
    name: String,
    file: hdf5::File,
    /// Holds the descriptor HDF5 opened the file through.
    _input: Input,
}

/// How every run ends once its receivers have closed their files: with several receivers and
/// an output file, the summary names the master file, which is then written (holding that
/// summary).
pub fn finish_run(cfg: &Config, summary: &mut Summary) -> Result<()> {
    let Some(path) = cfg.master_output() else {
        return Ok(());
    };
    summary.master = Some(path.display().to_string());
    let json = serde_json::to_string(summary).unwrap_or_default();
    write(cfg, &json)?;
    Ok(())
}

/// Writes the run's master file when the run has several receivers and an output file
/// ([`Config::master_output`]), after every receiver has closed its file; `summary_json` is the
/// run's summary. Returns the master's path.
pub fn write(cfg: &Config, summary_json: &str) -> Result<Option<PathBuf>> {
    let Some(master) = cfg.master_output() else {
        return Ok(None);
    };
    if !super::filter::register() {
        return Err(DaqError::Acquisition(
            "the HDF5 library refused the bitshuffle filter".into(),
        ));
    }
    let mut parts = Vec::with_capacity(cfg.receivers.len());
    for i in 0..cfg.receivers.len() {
        let path = cfg.output_of(i).expect("an output file is configured");
        let input = cfg.access.files.open_output("output.file", &path)?;
        let file = hdf5::File::open(input.fd_path()).map_err(h5err(&path))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        parts.push(Part {
            name,
            file,
            _input: input,
        });
    }
    // Beneath the data directory when confined: created there, then handed to HDF5 by its
    // descriptor's name, as the receivers' files are.
    let out = cfg.access.files.create("output.file", &master)?;
    let f = hdf5::File::create(out.path()).map_err(h5err(&master))?;
    write_inner(cfg, &f, &parts, summary_json).map_err(h5err(&master))?;
    f.close().map_err(h5err(&master))?;
    Ok(Some(master))
}

fn h5err(path: &Path) -> impl Fn(hdf5::Error) -> DaqError + '_ {
    move |e| DaqError::Acquisition(format!("master file {}: HDF5: {e}", path.display()))
}

fn write_inner(cfg: &Config, f: &hdf5::File, parts: &[Part], summary: &str) -> hdf5::Result<()> {
    attr(f, "default", "entry")?;
    let entry = group(f, "entry", "NXentry")?;
    let src = parts[0].file.group("entry")?;
    for name in [
        "definition",
        "title",
        "start_time",
        "end_time_estimated",
        "end_time",
        "instrument",
        "sample",
        "source",
    ] {
        if src.link_exists(name) {
            copy(&src, name, &entry)?;
        }
    }
    let r = group(&entry, "remora", "NXcollection")?;
    let src_r = src.group("remora")?;
    for name in ["config", "geometry", "poni", "calibration", "pipeline"] {
        if src_r.link_exists(name) {
            copy(&src_r, name, &r)?;
        }
    }
    string(&r, "summary", summary)?;
    let fanout = match cfg.emulator.fanout {
        Fanout::Time => "time",
        Fanout::Roi => "roi",
    };
    string(&r, "fanout", fanout)?;
    let names: Vec<VarLenUnicode> = parts.iter().map(|p| text(&p.name)).collect();
    r.new_dataset_builder()
        .with_data(&names[..])
        .create("parts")?;
    let links = group(&r, "receivers", "NXcollection")?;
    for (i, p) in parts.iter().enumerate() {
        links.link_external(&p.name, "/entry", &format!("r{i}"))?;
    }
    match cfg.emulator.fanout {
        Fanout::Time => join_in_time(&entry, parts),
        Fanout::Roi => join_in_space(cfg, &entry, parts),
    }
}

/// Copies object `name` of `from` (with everything below it) to `to`.
fn copy(from: &Group, name: &str, to: &Group) -> hdf5::Result<()> {
    let c = CString::new(name).map_err(|_| hdf5::Error::from("NUL in a name"))?;
    // SAFETY: both locations are open objects, the names are NUL-terminated and outlive the
    // call; default property lists. The call holds hdf5-metno's lock.
    let r = hdf5::sync::sync(|| unsafe {
        hdf5_sys::h5o::H5Ocopy(
            from.id(),
            c.as_ptr(),
            to.id(),
            c.as_ptr(),
            hdf5_sys::h5p::H5P_DEFAULT,
            hdf5_sys::h5p::H5P_DEFAULT,
        )
    });
    if r < 0 {
        return Err(format!("copying {name} from receiver 0's file").into());
    }
    Ok(())
}

/// One part's `(part row, master row)` pairs.
type RowMap = Vec<(usize, usize)>;

/// Where one part's rows go: `(part row, master row)` pairs, in part-row order, and the part of
/// each row's image it contributes (`None`: the whole row).
struct Source<'a> {
    part: &'a Part,
    rows: RowMap,
    rect: Option<Rect>,
}

/// A rectangle of an image: rows `y0..y1`, columns `x0..x1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rect {
    y0: usize,
    y1: usize,
    x0: usize,
    x1: usize,
}

/// Runs of rows that one hyperslab pair maps: consecutive part rows to master rows a fixed step
/// apart (`(first part row, first master row, step, count)`). Time fan-out to N receivers with
/// every frame kept is one run per receiver (step N).
fn runs(rows: &[(usize, usize)]) -> Vec<(usize, usize, usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let (p0, m0) = rows[i];
        let mut n = 1;
        let mut step = 1;
        if let Some(&(p1, m1)) = rows.get(i + 1) {
            if p1 == p0 + 1 && m1 > m0 {
                step = m1 - m0;
                while let Some(&(p, m)) = rows.get(i + n) {
                    if p == p0 + n && m == m0 + n * step {
                        n += 1;
                    } else {
                        break;
                    }
                }
            }
        }
        out.push((p0, m0, if n == 1 { 1 } else { step }, n));
        i += n;
    }
    out
}

fn slab(start: usize, step: usize, count: usize) -> SliceOrIndex {
    SliceOrIndex::SliceCount {
        start,
        step,
        count,
        block: 1,
    }
}

/// A virtual dataset `name` of `total` rows of shape `tail`, each source's rows placed where it
/// says; rows or parts of rows no source covers read as `fill`.
fn virtual_rows<T: H5Type + Copy + Into<hdf5::types::OwnedDynValue>>(
    g: &Group,
    name: &str,
    path: &str,
    total: usize,
    tail: &[usize],
    sources: &[Source<'_>],
    fill: T,
) -> hdf5::Result<hdf5::Dataset> {
    let mut shape = vec![total];
    shape.extend_from_slice(tail);
    let mut b = g.new_dataset::<T>().shape(&shape[..]).fill_value(fill);
    let mut mapped = 0;
    for s in sources {
        let src = s.part.file.dataset(path)?;
        let src_shape = src.shape();
        if src_shape.get(1..) != Some(tail) {
            return Err(format!(
                "{}: {path} is {src_shape:?}, the master's rows are {tail:?}",
                s.part.name
            )
            .into());
        }
        // Beyond the first axis: the whole row, or the source's rectangle of an image.
        let rest: Vec<SliceOrIndex> = match (s.rect, tail) {
            (Some(r), [_, _]) => vec![slab(r.y0, 1, r.y1 - r.y0), slab(r.x0, 1, r.x1 - r.x0)],
            _ => tail.iter().map(|&n| slab(0, 1, n)).collect(),
        };
        for (p0, m0, step, n) in runs(&s.rows) {
            let mut vs = vec![slab(m0, step, n)];
            vs.extend(rest.iter().cloned());
            let mut ss = vec![slab(p0, 1, n)];
            ss.extend(rest.iter().cloned());
            b = b.virtual_map(
                &s.part.name,
                path,
                &src_shape[..],
                Selection::from(Hyperslab::from(ss)),
                &shape[..],
                Selection::from(Hyperslab::from(vs)),
            );
            mapped += 1;
        }
    }
    if mapped == 0 {
        // Nothing to join (no kept frame anywhere): an ordinary, empty dataset.
        return g.new_dataset::<T>().shape(&shape[..]).create(name);
    }
    b.create(name)
}

/// A column (or rows) read whole from a part's file.
fn column(p: &Part, path: &str) -> hdf5::Result<Vec<u64>> {
    p.file.dataset(path)?.read_raw::<u64>()
}

/// Orders every part's rows of a table by their frame numbers (`frames` = `path` of each part):
/// the master's row count and each part's `(part row, master row)` pairs.
fn merge(parts: &[Part], path: &str) -> hdf5::Result<(usize, Vec<RowMap>)> {
    let mut all = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        for (row, frame) in column(p, path)?.into_iter().enumerate() {
            all.push((frame, i, row));
        }
    }
    all.sort_unstable();
    let mut rows = vec![Vec::new(); parts.len()];
    for (m, &(_, i, row)) in all.iter().enumerate() {
        rows[i].push((row, m));
    }
    for r in &mut rows {
        r.sort_unstable();
    }
    Ok((all.len(), rows))
}

fn sources<'a>(parts: &'a [Part], rows: Vec<RowMap>) -> Vec<Source<'a>> {
    parts
        .iter()
        .zip(rows)
        .map(|(part, rows)| Source {
            part,
            rows,
            rect: None,
        })
        .collect()
}

/// Time fan-out: every receiver has whole frames, a share of the run's; the master's rows are
/// theirs in frame order.
fn join_in_time(entry: &Group, parts: &[Part]) -> hdf5::Result<()> {
    let frames = group(entry, "frames", "NXcollection")?;
    let (n, rows) = merge(parts, "/entry/frames/frame_number")?;
    let src = sources(parts, rows);
    virtual_rows::<u64>(
        &frames,
        "frame_number",
        "/entry/frames/frame_number",
        n,
        &[],
        &src,
        0,
    )?;
    let kind = virtual_rows::<u8>(&frames, "kind", "/entry/frames/kind", n, &[], &src, 0)?;
    attr(
        &kind,
        "description",
        "0 dark, 1 rejected by the veto, 2 kept, 3 not processed",
    )?;
    virtual_rows::<u64>(&frames, "spots", "/entry/frames/spots", n, &[], &src, 0)?;
    virtual_rows::<u8>(&frames, "kept", "/entry/frames/kept", n, &[], &src, 0)?;
    let lost = virtual_rows::<u64>(
        &frames,
        "lost_modules",
        "/entry/frames/lost_modules",
        n,
        &[],
        &src,
        0,
    )?;
    attr(
        &lost,
        "description",
        "bit m set: module m did not arrive whole and was masked",
    )?;

    let first = &parts[0].file;
    if first.link_exists("/entry/azint") {
        let g = group(entry, "azint", "NXdata")?;
        attr(&g, "signal", "I")?;
        g.new_attr_builder()
            .with_data(&[text("."), text("radial_axis")][..])
            .create("axes")?;
        copy(&first.group("/entry/azint")?, "radial_axis", &g)?;
        let bins = first.dataset("/entry/azint/I")?.shape()[1];
        let (n, rows) = merge(parts, "/entry/azint/frame_number")?;
        let src = sources(parts, rows);
        virtual_rows::<f64>(&g, "I", "/entry/azint/I", n, &[bins], &src, f64::NAN)?;
        virtual_rows::<u64>(
            &g,
            "frame_number",
            "/entry/azint/frame_number",
            n,
            &[],
            &src,
            0,
        )?;
        attr(entry, "default", "azint")?;
    }
    if first.link_exists("/entry/data/frame_number") {
        let g = group(entry, "data", "NXdata")?;
        attr(&g, "signal", "data")?;
        let shape = first.dataset("/entry/data/data")?.shape();
        let (n, rows) = merge(parts, "/entry/data/frame_number")?;
        let src = sources(parts, rows);
        virtual_rows::<f32>(
            &g,
            "data",
            "/entry/data/data",
            n,
            &shape[1..],
            &src,
            f32::NAN,
        )?;
        virtual_rows::<u64>(
            &g,
            "frame_number",
            "/entry/data/frame_number",
            n,
            &[],
            &src,
            0,
        )?;
    }
    Ok(())
}

/// RoI fan-out: every receiver has every frame, its own region of each module. The images are
/// joined in space: each receiver's pixels of the assembled image come from its file.
fn join_in_space(cfg: &Config, entry: &Group, parts: &[Part]) -> hdf5::Result<()> {
    let first = &parts[0].file;
    if !first.link_exists("/entry/data/frame_number") {
        return Ok(());
    }
    let geometry: VarLenUnicode = first.dataset("/entry/remora/geometry")?.read_scalar()?;
    let layout = Layout::from_json(geometry.as_str()).map_err(|e| e.to_string())?;
    let map = layout.assembly_map(None).map_err(|e| e.to_string())?;
    let owners = owners(cfg, &map);
    // The frames any receiver kept, in frame order; each receiver's kept frames among them.
    let kept: Vec<Vec<u64>> = parts
        .iter()
        .map(|p| column(p, "/entry/data/frame_number"))
        .collect::<hdf5::Result<_>>()?;
    let mut union: Vec<u64> = kept.iter().flatten().copied().collect();
    union.sort_unstable();
    union.dedup();
    let mut src = Vec::new();
    for (i, (part, frames)) in parts.iter().zip(&kept).enumerate() {
        let rows: Vec<(usize, usize)> = frames
            .iter()
            .enumerate()
            .map(|(row, f)| (row, union.binary_search(f).expect("in the union")))
            .collect();
        for rect in rectangles(&owners, map.rows, map.cols, i as u8) {
            src.push(Source {
                part,
                rows: rows.clone(),
                rect: Some(rect),
            });
        }
    }
    let g = group(entry, "data", "NXdata")?;
    attr(&g, "signal", "data")?;
    let n = union.len();
    let tail = [map.rows, map.cols];
    virtual_rows::<f32>(&g, "data", "/entry/data/data", n, &tail, &src, f32::NAN)?;
    g.new_dataset_builder()
        .with_data(&union[..])
        .create("frame_number")?;
    attr(entry, "default", "data")?;
    Ok(())
}

/// No receiver's pixel (a gap, or a pixel no region covers).
const NOBODY: u8 = u8::MAX;

/// Per assembled-image pixel, the receiver whose region of interest holds its raw pixel.
fn owners(cfg: &Config, map: &AssemblyMap) -> Vec<u8> {
    let rois: Vec<_> = (0..cfg.receivers.len()).map(|i| cfg.roi_of(i)).collect();
    map.src
        .iter()
        .map(|&e| {
            if e == AssemblyMap::GAP {
                return NOBODY;
            }
            let within = (e & 0x3fff_ffff) as usize % MODULE_PIXELS;
            let (y, x) = (within / MODULE_COLS, within % MODULE_COLS);
            rois.iter()
                .position(|r| {
                    (r.x..r.x + r.width).contains(&x) && (r.y..r.y + r.height).contains(&y)
                })
                .map_or(NOBODY, |i| i as u8)
        })
        .collect()
}

/// The pixels `owners` gives to `who`, as rectangles: each row's runs, merged with the same
/// runs of the rows below.
fn rectangles(owners: &[u8], rows: usize, cols: usize, who: u8) -> Vec<Rect> {
    let mut done = Vec::new();
    let mut open: Vec<Rect> = Vec::new();
    for y in 0..rows {
        let row = &owners[y * cols..(y + 1) * cols];
        let mut spans = Vec::new();
        let mut x = 0;
        while x < cols {
            if row[x] != who {
                x += 1;
                continue;
            }
            let x0 = x;
            while x < cols && row[x] == who {
                x += 1;
            }
            spans.push((x0, x));
        }
        let mut next = Vec::with_capacity(spans.len());
        for r in open.drain(..) {
            if let Some(k) = spans.iter().position(|&s| s == (r.x0, r.x1)) {
                spans.swap_remove(k);
                next.push(Rect { y1: y + 1, ..r });
            } else {
                done.push(r);
            }
        }
        next.extend(spans.into_iter().map(|(x0, x1)| Rect {
            y0: y,
            y1: y + 1,
            x0,
            x1,
        }));
        open = next;
    }
    done.extend(open);
    done.sort_by_key(|r| (r.y0, r.x0));
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_dealt_round_robin_are_one_strided_run() {
        // Receiver 1 of 2, every frame kept: master rows 1, 3, 5, 7.
        let rows: Vec<_> = (0..4).map(|j| (j, 2 * j + 1)).collect();
        assert_eq!(runs(&rows), vec![(0, 1, 2, 4)]);
        // A rejected frame breaks the stride: 0, 2, 6, 8.
        assert_eq!(
            runs(&[(0, 0), (1, 2), (2, 6), (3, 8)]),
            vec![(0, 0, 2, 2), (2, 6, 2, 2)]
        );
        assert_eq!(runs(&[(0, 5)]), vec![(0, 5, 1, 1)]);
        assert_eq!(runs(&[]), vec![]);
    }

    #[test]
    fn rectangles_cover_exactly_the_owned_pixels() {
        // 4 x 6: receiver 0 owns an L shape, receiver 1 a block, the rest nobody's.
        #[rustfmt::skip]
        let owners = [
            0, 0, 0, 1, 1, NOBODY,
            0, 0, 0, 1, 1, NOBODY,
            0, NOBODY, 0, 1, 1, NOBODY,
            0, 0, 0, 0, 0, 0,
        ];
        for who in [0u8, 1] {
            let rects = rectangles(&owners, 4, 6, who);
            let mut covered = [NOBODY; 24];
            for r in &rects {
                for y in r.y0..r.y1 {
                    for x in r.x0..r.x1 {
                        assert_eq!(covered[y * 6 + x], NOBODY, "rectangles overlap");
                        covered[y * 6 + x] = who;
                    }
                }
            }
            for (i, &o) in owners.iter().enumerate() {
                assert_eq!(covered[i] == who, o == who, "pixel {i} of {who}");
            }
        }
        assert_eq!(
            rectangles(&owners, 4, 6, 1),
            vec![Rect {
                y0: 0,
                y1: 3,
                x0: 3,
                x1: 5
            }]
        );
    }
}
