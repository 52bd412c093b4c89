//! The `cpu-simd` engine: the kernels of `kernels.rs` run in chunks on a sized thread pool,
//! each compiled twice (baseline and AVX2) and picked at run time; CSR compression in `csr`.
mod csr;

use rayon::prelude::*;
use remora_accel::simd::Level;
use remora_accel::{BackendInfo, CpuPool};

use super::kernels::{self, ConvChunk, Sink};
use super::{process_stepwise, ConvOut, ConvStats, Engine, FrameOut, FramePlan};
use crate::azint::{AzMatrix, Profile};
use crate::calib::ConvTables;
use crate::geometry::{AssemblyMap, Run};
use crate::sparse::SparseFrame;
use crate::Result;

/// Fixed partition of the integration's pixel ranges (see `integrate`).
const INTEGRATE_GROUPS: usize = 16;

/// Bins per task of the integration's final reduction.
const REDUCE_BINS: usize = 64;

/// Thread pool plus vectorised kernels.
#[derive(Debug, Clone)]
pub struct CpuEngine {
    pool: CpuPool,
    level: Level,
}

impl CpuEngine {
    /// An engine with `threads` workers (0 = one per core), dispatching to the best SIMD level.
    pub fn new(threads: usize) -> Result<Self> {
        Ok(Self {
            pool: CpuPool::new(threads)?,
            level: remora_accel::simd::level(),
        })
    }

    /// The same engine restricted to the baseline SIMD level (for comparisons).
    pub fn baseline(mut self) -> Self {
        self.level = Level::Baseline;
        self
    }

    fn convert_into<S: Sink>(
        &self,
        raw: &[u16],
        t: &ConvTables,
        out: &mut [S],
        energy: f32,
        th: f32,
    ) -> ConvStats {
        let c = self.pool.chunk_len(raw.len(), 1024);
        let level = self.level;
        self.pool.install(|| {
            out.par_chunks_mut(c)
                .enumerate()
                .map(|(i, o)| {
                    let lo = i * c;
                    let hi = lo + o.len();
                    let chunk = ConvChunk {
                        raw: &raw[lo..hi],
                        ped: [
                            &t.pedestal[0][lo..hi],
                            &t.pedestal[1][lo..hi],
                            &t.pedestal[2][lo..hi],
                        ],
                        gain: [&t.gain[0][lo..hi], &t.gain[1][lo..hi], &t.gain[2][lo..hi]],
                    };
                    dispatch::convert(level, &chunk, o, energy, th)
                })
                .reduce(ConvStats::default, |mut a, b| {
                    a.add(b);
                    a
                })
        })
    }
}

impl Engine for CpuEngine {
    /// The stages one by one, all inside one call into the pool: the caller hands the frame
    /// over and waits once, and each stage's split runs from a worker, where it needs no
    /// hand-off (from outside, every stage was a wake-up of the pool and a wait for it).
    fn process_frame(
        &self,
        raw: &[u16],
        tables: &ConvTables,
        plan: &FramePlan<'_>,
        energy: &mut [f32],
        image: &mut [f32],
    ) -> Result<FrameOut> {
        self.pool
            .install(|| process_stepwise(self, raw, tables, plan, energy, image))
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "cpu-simd",
            threads: self.pool.threads(),
            simd: self.level.name(),
        }
    }

    fn convert(
        &self,
        raw: &[u16],
        tables: &ConvTables,
        out: ConvOut<'_>,
        threshold: f32,
    ) -> Result<ConvStats> {
        super::check_convert(raw, tables, out.len())?;
        super::check_energy(&out)?;
        Ok(match out {
            ConvOut::Energy(o) => self.convert_into(raw, tables, o, 1.0, threshold),
            ConvOut::Photons { out, energy_kev } => {
                self.convert_into(raw, tables, out, energy_kev, threshold)
            }
        })
    }

    fn track_pedestal(
        &self,
        raw: &[u16],
        tables: &mut ConvTables,
        counts: &mut [u16],
        window: u16,
    ) -> Result<()> {
        super::check_pedestal(raw, tables, counts, window)?;
        tables.revision += 1;
        let c = self.pool.chunk_len(raw.len(), 1024);
        let level = self.level;
        self.pool.install(|| {
            tables.pedestal[0]
                .par_chunks_mut(c)
                .zip(counts.par_chunks_mut(c))
                .enumerate()
                .for_each(|(i, (p, n))| {
                    let lo = i * c;
                    dispatch::track(level, &raw[lo..lo + p.len()], p, n, window);
                })
        });
        Ok(())
    }

    fn copy_frame(&self, src: &[u16], dst: &mut [u16]) -> Result<()> {
        super::check_copy(src, dst)?;
        let c = self.pool.chunk_len(src.len(), 1 << 16);
        self.pool.install(|| {
            dst.par_chunks_mut(c)
                .zip(src.par_chunks(c))
                .for_each(|(d, s)| d.copy_from_slice(s))
        });
        Ok(())
    }

    fn count_above(&self, data: &[f32], threshold: f32) -> u64 {
        let c = self.pool.chunk_len(data.len(), 1024);
        let level = self.level;
        self.pool.install(|| {
            data.par_chunks(c)
                .map(|d| dispatch::count(level, d, threshold))
                .sum()
        })
    }

    fn assemble(&self, raw: &[f32], map: &AssemblyMap, out: &mut [f32]) -> Result<()> {
        super::check_assemble(raw, map, out)?;
        let level = self.level;
        let cols = map.cols;
        self.pool.install(|| {
            out.par_chunks_mut(cols)
                .enumerate()
                .with_min_len(16)
                .for_each(|(r, o)| {
                    let runs = map
                        .runs
                        .get(map.row_runs[r] as usize..map.row_runs[r + 1] as usize);
                    dispatch::assemble(level, runs.unwrap_or(&[]), r * cols, raw, o)
                })
        });
        Ok(())
    }

    fn compress(
        &self,
        frame: &[f32],
        rows: usize,
        cols: usize,
        threshold: f32,
    ) -> Result<SparseFrame> {
        super::check_compress(frame, rows, cols)?;
        csr::compress(&self.pool, self.level, frame, rows, cols, threshold)
    }

    fn integrate(&self, m: &AzMatrix, image: &[f32]) -> Result<Profile> {
        m.check_image(image)?;
        let level = self.level;
        let pm = &m.by_pixel;
        let bins = m.bins;
        // Pixel ranges fall into a fixed number of groups, each summed in order into its own
        // accumulator, then reduced in group order: the profile is bit-for-bit the same whatever
        // the thread count or the scheduling (a work-stealing fold would split differently on
        // every call and change the last bits).
        let windows = pm.chunks.len().saturating_sub(1);
        let per_group = windows.div_ceil(INTEGRATE_GROUPS).max(1);
        let accs: Vec<kernels::BinAcc> = self.pool.install(|| {
            (0..windows.div_ceil(per_group))
                .into_par_iter()
                .map(|g| {
                    let mut acc = kernels::BinAcc::new(bins);
                    let end = ((g + 1) * per_group).min(windows);
                    for w in pm.chunks[g * per_group..=end].windows(2) {
                        let (e0, p0) = (w[0].0 as usize, w[0].1 as usize);
                        let e1 = w[1].0 as usize;
                        dispatch::integrate_pixels(level, pm, e0..e1, p0, image, &mut acc);
                    }
                    acc
                })
                .collect()
        });
        // Every bin adds its lanes group by group with compensation. Bins are independent: ranges
        // of them go to the pool (on many cores a serial pass over every group's bins was a
        // tenth of the integration), and within a range the loop over bins overlaps the
        // additions' latency. Each bin adds in the same order whatever the split.
        let mut sums = vec![(0.0f64, 0.0f64, 0.0f64); bins];
        self.pool.install(|| {
            sums.par_chunks_mut(REDUCE_BINS)
                .enumerate()
                .for_each(|(ci, out)| {
                    let b0 = ci * REDUCE_BINS;
                    let mut sum = [(0.0f64, 0.0f64); REDUCE_BINS];
                    let mut bad = [(0.0f64, 0.0f64); REDUCE_BINS];
                    for a in &accs {
                        let lanes = &a.lanes[b0..b0 + out.len()];
                        for ((s, d), (l, x)) in sum
                            .iter_mut()
                            .zip(&mut bad)
                            .zip(lanes.iter().zip(&a.bad[b0..]))
                        {
                            for &v in l {
                                kernels::kahan(&mut s.0, &mut s.1, v);
                            }
                            d.0 += x.0;
                            d.1 += x.1;
                        }
                    }
                    for (k, o) in out.iter_mut().enumerate() {
                        let b = b0 + k;
                        *o = (
                            sum[k].0,
                            m.norm_total[b] - bad[k].0,
                            m.count_total[b] - bad[k].1,
                        );
                    }
                })
        });
        Ok(Profile::from_sums(m, sums, self.info()))
    }
}

/// Picks the AVX2 copy of a kernel when the CPU has it.
mod dispatch {
    use super::*;
    use crate::azint::PixelMajor;
    use std::ops::Range;

    macro_rules! dispatch {
        ($level:expr, $avx:ident, $base:path, ($($a:expr),*)) => {{
            #[cfg(target_arch = "x86_64")]
            if $level == Level::Avx2 {
                // SAFETY: `Level::Avx2` comes from runtime detection (`simd::level`), so the
                // CPU executing this supports every instruction the AVX2 copy may use.
                return unsafe { avx2::$avx($($a),*) };
            }
            let _ = $level;
            $base($($a),*)
        }};
    }

    pub(super) fn convert<S: Sink>(
        l: Level,
        c: &ConvChunk<'_>,
        o: &mut [S],
        e: f32,
        t: f32,
    ) -> ConvStats {
        dispatch!(l, convert, kernels::convert, (c, o, e, t))
    }
    pub(super) fn track(l: Level, r: &[u16], p: &mut [f32], n: &mut [u16], w: u16) {
        dispatch!(l, track, kernels::track_pedestal, (r, p, n, w))
    }
    pub(super) fn count(l: Level, d: &[f32], t: f32) -> u64 {
        dispatch!(l, count, kernels::count_above, (d, t))
    }
    pub(super) fn assemble(l: Level, runs: &[Run], at: usize, r: &[f32], o: &mut [f32]) {
        dispatch!(l, assemble, kernels::assemble_row, (runs, at, r, o))
    }
    pub(super) fn integrate_pixels(
        l: Level,
        pm: &PixelMajor,
        records: Range<usize>,
        first: usize,
        img: &[f32],
        acc: &mut kernels::BinAcc,
    ) {
        dispatch!(
            l,
            integrate_pixels,
            kernels::integrate_pixels,
            (pm, records, first, img, acc)
        )
    }

    #[cfg(target_arch = "x86_64")]
    mod avx2 {
        use super::super::kernels::{self, ConvChunk, Sink};
        use super::super::ConvStats;
        use crate::azint::PixelMajor;
        use crate::geometry::Run;
        use std::ops::Range;

        #[target_feature(enable = "avx2")]
        pub(super) fn convert<S: Sink>(
            c: &ConvChunk<'_>,
            o: &mut [S],
            e: f32,
            t: f32,
        ) -> ConvStats {
            kernels::convert(c, o, e, t)
        }
        #[target_feature(enable = "avx2")]
        pub(super) fn track(r: &[u16], p: &mut [f32], n: &mut [u16], w: u16) {
            kernels::track_pedestal(r, p, n, w)
        }
        #[target_feature(enable = "avx2")]
        pub(super) fn count(d: &[f32], t: f32) -> u64 {
            kernels::count_above(d, t)
        }
        #[target_feature(enable = "avx2")]
        pub(super) fn assemble(runs: &[Run], at: usize, r: &[f32], o: &mut [f32]) {
            kernels::assemble_row(runs, at, r, o)
        }
        #[target_feature(enable = "avx2")]
        pub(super) fn integrate_pixels(
            pm: &PixelMajor,
            records: Range<usize>,
            first: usize,
            img: &[f32],
            acc: &mut kernels::BinAcc,
        ) {
            kernels::integrate_pixels(pm, records, first, img, acc)
        }
    }
}
