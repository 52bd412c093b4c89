//! Detector geometry: where each module sits in the assembled image, and the assembly map.
//!
//! Chip-border pixels are double width (corners quadruple), so an assembled module is
//! 1030 × 514 virtual pixels: each raw border pixel feeds two virtual pixels (four at corners)
//! with half (a quarter) of its intensity. Modules are placed at installation-specific positions
//! (a [`Layout`], JSON on disk); everything between modules is a gap, masked in the image.
//!
//! The result is plain data: an [`AssemblyMap`] of one `u32` per image pixel (source raw index
//! and weight code) that engines apply with a gather.
use serde::{Deserialize, Serialize};

use crate::model::{Detector, CHIP_SIZE, MODULE_COLS, MODULE_PIXELS, MODULE_ROWS};
use crate::{DaqError, Result};

/// Columns of an assembled module (1024 + 2 × 3 chip borders).
pub const ASM_MODULE_COLS: usize = MODULE_COLS + 2 * (MODULE_COLS / CHIP_SIZE - 1);
/// Rows of an assembled module (512 + 2 × 1 chip border).
pub const ASM_MODULE_ROWS: usize = MODULE_ROWS + 2 * (MODULE_ROWS / CHIP_SIZE - 1);

/// Where one module sits: top-left corner in the assembled image (virtual pixels), and whether
/// it is mounted mirrored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// First image row of the module.
    pub row: usize,
    /// First image column of the module.
    pub col: usize,
    /// Module rows run bottom to top.
    #[serde(default)]
    pub flip_rows: bool,
    /// Module columns run right to left.
    #[serde(default)]
    pub flip_cols: bool,
}

/// The assembled image size and one placement per module (in raw frame order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Image rows.
    pub rows: usize,
    /// Image columns.
    pub cols: usize,
    /// One per module.
    pub modules: Vec<Placement>,
}

impl Layout {
    /// Modules on a grid of `columns` modules per row, separated by gaps of `gap_rows` and
    /// `gap_cols` pixels, filled row by row.
    pub fn grid(modules: usize, columns: usize, gap_rows: usize, gap_cols: usize) -> Result<Self> {
        Detector::new(modules)?;
        if columns == 0 {
            return Err(DaqError::Config("a grid needs at least one column".into()));
        }
        let grid_rows = modules.div_ceil(columns);
        let cols_used = columns.min(modules);
        let placements = (0..modules)
            .map(|m| Placement {
                row: (m / columns) * (ASM_MODULE_ROWS + gap_rows),
                col: (m % columns) * (ASM_MODULE_COLS + gap_cols),
                flip_rows: false,
                flip_cols: false,
            })
            .collect();
        Ok(Self {
            rows: grid_rows * ASM_MODULE_ROWS + (grid_rows - 1) * gap_rows,
            cols: cols_used * ASM_MODULE_COLS + (cols_used - 1) * gap_cols,
            modules: placements,
        })
    }

    /// The usual layout for `modules` modules: two columns (one for a single module), gaps of
    /// 37 rows and 10 columns, which gives 2167 × 2070 for a 4M as in the thesis (Table 4.1).
    pub fn standard(modules: usize) -> Result<Self> {
        Self::grid(modules, if modules == 1 { 1 } else { 2 }, 37, 10)
    }

    /// Parses a JSON layout and checks it.
    pub fn from_json(text: &str) -> Result<Self> {
        let l: Layout = serde_json::from_str(text).map_err(|e| DaqError::Parse {
            what: "geometry layout",
            msg: e.to_string(),
        })?;
        l.validate()?;
        Ok(l)
    }

    /// The layout as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks that every module lies inside the image and that modules do not overlap.
    pub fn validate(&self) -> Result<()> {
        Detector::new(self.modules.len())?;
        if self.rows.saturating_mul(self.cols) > 1 << 28 {
            return Err(DaqError::Config(format!(
                "image {}x{} is too large",
                self.rows, self.cols
            )));
        }
        for (i, p) in self.modules.iter().enumerate() {
            if p.row + ASM_MODULE_ROWS > self.rows || p.col + ASM_MODULE_COLS > self.cols {
                return Err(DaqError::Config(format!(
                    "module {i} at ({}, {}) does not fit in a {}x{} image",
                    p.row, p.col, self.rows, self.cols
                )));
            }
            for (j, q) in self.modules.iter().enumerate().take(i) {
                let apart = p.row >= q.row + ASM_MODULE_ROWS
                    || q.row >= p.row + ASM_MODULE_ROWS
                    || p.col >= q.col + ASM_MODULE_COLS
                    || q.col >= p.col + ASM_MODULE_COLS;
                if !apart {
                    return Err(DaqError::Config(format!("modules {j} and {i} overlap")));
                }
            }
        }
        Ok(())
    }

    /// The detector this layout describes.
    pub fn detector(&self) -> Detector {
        // validate() guarantees 1..=64 modules for parsed layouts; grid() checks too.
        Detector::new(self.modules.len()).unwrap_or(Detector::jungfrau_4m())
    }

    /// The assembly map for this layout with `raw_mask` (one byte per raw pixel, non-zero =
    /// masked) folded into the image mask.
    pub fn assembly_map(&self, raw_mask: Option<&[u8]>) -> Result<AssemblyMap> {
        self.validate()?;
        let det = self.detector();
        if let Some(m) = raw_mask {
            DaqError::check_len("raw mask", det.pixels(), m.len())?;
        }
        let xs = axis_map(MODULE_COLS);
        let ys = axis_map(MODULE_ROWS);
        let mut src = vec![AssemblyMap::GAP; self.rows * self.cols];
        let mut mask = vec![1u8; self.rows * self.cols];
        for (m, p) in self.modules.iter().enumerate() {
            for (vy, &(ry, hy)) in ys.iter().enumerate() {
                let ry = if p.flip_rows {
                    MODULE_ROWS - 1 - ry
                } else {
                    ry
                };
                for (vx, &(rx, hx)) in xs.iter().enumerate() {
                    let rx = if p.flip_cols {
                        MODULE_COLS - 1 - rx
                    } else {
                        rx
                    };
                    let raw = m * MODULE_PIXELS + ry * MODULE_COLS + rx;
                    let code = u32::from(hy) + u32::from(hx);
                    let at = (p.row + vy) * self.cols + p.col + vx;
                    src[at] = (raw as u32) | (code << 30);
                    mask[at] = raw_mask.map_or(0, |rm| u8::from(rm[raw] != 0));
                }
            }
        }
        let (runs, row_runs) = runs_of(&src, self.rows, self.cols);
        Ok(AssemblyMap {
            rows: self.rows,
            cols: self.cols,
            raw_pixels: det.pixels(),
            src,
            mask,
            runs,
            row_runs,
        })
    }
}

/// Splits the per-pixel table into runs of consecutive raw pixels with one weight, never
/// crossing an image row; `row_runs[r]..row_runs[r + 1]` are row `r`'s runs.
fn runs_of(src: &[u32], rows: usize, cols: usize) -> (Vec<Run>, Vec<u32>) {
    let mut runs: Vec<Run> = Vec::new();
    let mut row_runs = Vec::with_capacity(rows + 1);
    for r in 0..rows {
        row_runs.push(runs.len() as u32);
        let mut open: Option<Run> = None;
        for c in 0..cols {
            let at = r * cols + c;
            let e = src[at];
            let (s, code) = if e == AssemblyMap::GAP {
                (AssemblyMap::GAP, 3)
            } else {
                (e & 0x3fff_ffff, e >> 30)
            };
            match &mut open {
                Some(run)
                    if run.code == code as u8
                        && (s == AssemblyMap::GAP || s == run.src + run.len) =>
                {
                    run.len += 1
                }
                _ => {
                    runs.extend(open.take());
                    open = Some(Run {
                        dst: at as u32,
                        src: s,
                        len: 1,
                        code: code as u8,
                    });
                }
            }
        }
        runs.extend(open);
    }
    row_runs.push(runs.len() as u32);
    (runs, row_runs)
}

/// A stretch of one image row fed by consecutive raw pixels with one weight (or a gap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// First image pixel.
    pub dst: u32,
    /// First raw pixel, or [`AssemblyMap::GAP`].
    pub src: u32,
    /// Pixels.
    pub len: u32,
    /// Weight code (0 → 1, 1 → ½, 2 → ¼, 3 → gap).
    pub code: u8,
}

impl Run {
    /// The weight of the run's pixels.
    #[inline(always)]
    pub fn weight(&self) -> f32 {
        match self.code {
            0 => 1.0,
            1 => 0.5,
            _ => 0.25,
        }
    }
}

/// For each virtual pixel along one module axis: the raw pixel and whether it is half of a
/// double-width border pixel.
fn axis_map(raw_len: usize) -> Vec<(usize, bool)> {
    let chips = raw_len / CHIP_SIZE;
    let mut v = Vec::with_capacity(raw_len + 2 * (chips - 1));
    for x in 0..raw_len {
        let (c, l) = (x / CHIP_SIZE, x % CHIP_SIZE);
        let border = (l == CHIP_SIZE - 1 && c + 1 < chips) || (l == 0 && c > 0);
        if border {
            v.push((x, true));
            v.push((x, true));
        } else {
            v.push((x, false));
        }
    }
    v
}

/// Plain data for assembling a converted raw frame into the detector image: per image pixel
/// the raw source index (bits 0–29) and a weight code (bits 30–31: 0 → 1, 1 → ½, 2 → ¼), or
/// [`AssemblyMap::GAP`].
#[derive(Debug, Clone)]
pub struct AssemblyMap {
    /// Image rows.
    pub rows: usize,
    /// Image columns.
    pub cols: usize,
    /// Pixels of the raw frame it reads.
    pub raw_pixels: usize,
    /// One entry per image pixel.
    pub src: Vec<u32>,
    /// Image mask (non-zero = gap or masked raw pixel), for the integrator.
    pub mask: Vec<u8>,
    /// The same table as runs (what the fast engine copies).
    pub runs: Vec<Run>,
    /// Per image row, the index of its first run (rows + 1 entries).
    pub row_runs: Vec<u32>,
}

impl AssemblyMap {
    /// Entry of an image pixel that no raw pixel feeds.
    pub const GAP: u32 = u32::MAX;

    /// Image pixels.
    pub fn pixels(&self) -> usize {
        self.rows * self.cols
    }

    /// The value of image pixel entry `e` given the raw frame (NaN for gaps).
    #[inline(always)]
    pub fn gather(e: u32, raw: &[f32]) -> f32 {
        if e == Self::GAP {
            return f32::NAN;
        }
        let w = match e >> 30 {
            0 => 1.0,
            1 => 0.5,
            _ => 0.25,
        };
        raw.get((e & 0x3fff_ffff) as usize)
            .map_or(f32::NAN, |v| v * w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_is_1030_by_514() {
        assert_eq!(ASM_MODULE_COLS, 1030);
        assert_eq!(ASM_MODULE_ROWS, 514);
        assert_eq!(axis_map(1024).len(), 1030);
        assert_eq!(axis_map(512).len(), 514);
    }

    #[test]
    fn four_m_has_thesis_size() {
        let l = Layout::standard(8).unwrap();
        assert_eq!((l.rows, l.cols), (2167, 2070));
        l.validate().unwrap();
    }

    #[test]
    fn assembly_conserves_intensity() {
        let l = Layout::standard(2).unwrap();
        let map = l.assembly_map(None).unwrap();
        let raw: Vec<f32> = (0..l.detector().pixels())
            .map(|i| (i % 97) as f32)
            .collect();
        let total: f64 = raw.iter().map(|&v| v as f64).sum();
        let img: Vec<f32> = map
            .src
            .iter()
            .map(|&e| AssemblyMap::gather(e, &raw))
            .collect();
        let asm: f64 = img
            .iter()
            .filter(|v| v.is_finite())
            .map(|&v| v as f64)
            .sum();
        assert_eq!(total, asm);
        let gaps = img.iter().filter(|v| v.is_nan()).count();
        assert_eq!(gaps, map.mask.iter().filter(|&&m| m != 0).count());
        // A corner pixel of chip (0,0) feeds four image pixels with a quarter each.
        let corner = 255 * 1024 + 255;
        let feeds = map
            .src
            .iter()
            .filter(|&&e| e != AssemblyMap::GAP && (e & 0x3fff_ffff) as usize == corner)
            .count();
        assert_eq!(feeds, 4);
        // The runs describe the same table.
        let mut from_runs = vec![0u32; map.pixels()];
        for r in &map.runs {
            for k in 0..r.len {
                from_runs[(r.dst + k) as usize] = if r.src == AssemblyMap::GAP {
                    AssemblyMap::GAP
                } else {
                    (r.src + k) | (u32::from(r.code) << 30)
                };
            }
        }
        assert_eq!(from_runs, map.src);
        assert!(map.runs.len() < map.rows * 60);
    }

    #[test]
    fn mirrored_modules_map_raw_pixels_from_the_other_side() {
        let mut l = Layout::standard(1).unwrap();
        l.modules[0].flip_cols = true;
        l.modules[0].flip_rows = true;
        let map = l.assembly_map(None).unwrap();
        // Image pixel (0, 0) shows the last raw pixel; (513, 1029) the first.
        assert_eq!(map.src[0] & 0x3fff_ffff, (MODULE_PIXELS - 1) as u32);
        assert_eq!(map.src[map.pixels() - 1] & 0x3fff_ffff, 0);
        let raw: Vec<f32> = (0..MODULE_PIXELS).map(|i| i as f32).collect();
        let img: Vec<f32> = map
            .src
            .iter()
            .map(|&e| AssemblyMap::gather(e, &raw))
            .collect();
        assert_eq!(img[1], (MODULE_PIXELS - 2) as f32);
    }

    #[test]
    fn bad_layouts_are_errors() {
        let mut l = Layout::standard(2).unwrap();
        l.modules[1] = l.modules[0];
        assert!(l.validate().is_err());
        l.modules[1].col = l.cols;
        assert!(l.validate().is_err());
        assert!(Layout::from_json("{\"rows\": 3}").is_err());
        let l = Layout::standard(2).unwrap();
        assert_eq!(Layout::from_json(&l.to_json()).unwrap(), l);
        assert!(l.assembly_map(Some(&[0u8; 3])).is_err());
    }
}
