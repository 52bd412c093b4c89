//! Distance kernels for u8 descriptors, chosen at run time.
//!
//! Each kernel scans a micro-row of `mr` queries against tiles of `nr` train points and keeps
//! the two smallest values of a per-pair key in a [`Top2`] per query. The key is the squared
//! distance up to a per-query constant (added back with [`PreparedU8::offset`]), computed exactly
//! in `i32`, so every kernel yields the same integers and the same neighbours:
//! - [`Kernel::Portable`]: `Σ (q − t)²` per pair, plain Rust the compiler vectorises.
//! - [`Kernel::Avx2`]: `‖t‖² − 2 q·t` with `vpmaddwd` on zero-extended i16, 6 queries × 16
//!   train points per register block (an outer-product micro-kernel: train points in lanes,
//!   query pairs broadcast), train points pre-packed once.
//! - [`Kernel::Avx512`]: the same with AVX-512 VNNI `vpdpbusd` (u8 × i8 → i32, 64 products per
//!   instruction): queries stay u8, train values are stored as `t − 128` and the constant
//!   `128 · Σq` goes into the per-query constant; 8 queries × 32 train points per block.
//!
//! Which engine a [`Kernel`] stands for, and `auto`'s fallback, are the registry's
//! (`registry.rs`): this module is the CPU kernels only. `unsafe` stays in `avx2.rs` and
//! `avx512.rs`; the wrappers here only call them after the feature check.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod portable;

use crate::top2::Top2;

pub(crate) use portable::dist_f32;

/// Which code computes u8 distances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Kernel {
    /// The fastest engine this machine runs: the GPU when `REMORA_GPU`'s policy opens a real
    /// one (not a CPU-type device such as lavapipe), else the fastest CPU kernel (AVX-512 VNNI,
    /// then AVX2, then portable). f32 descriptors always take the CPU kernel.
    #[default]
    Auto,
    /// Plain Rust, any CPU.
    Portable,
    /// x86-64 AVX2.
    Avx2,
    /// x86-64 AVX-512 F + BW + VNNI.
    Avx512,
    /// The GPU engine (`gpu-wgpu`, u8 descriptors only) on the device `REMORA_GPU` allows
    /// (`any` admits lavapipe); see `GpuMatcher`. No device is an
    /// [`Error::Gpu`](crate::Error::Gpu).
    Gpu,
}

impl Kernel {
    /// The name results and the command line use: `auto`, `portable`, `avx2`, `avx512`,
    /// `gpu-wgpu`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Auto => "auto",
            Kernel::Portable => "portable",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512 => "avx512",
            Kernel::Gpu => "gpu-wgpu",
        }
    }

    /// Whether this CPU has what the kernel needs: `Portable` always, `Avx2` and `Avx512`
    /// their instruction sets; `Auto` and `Gpu` are not CPU kernels.
    pub(crate) fn cpu_supports(self) -> bool {
        match self {
            Kernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx2 | Kernel::Avx512 => false,
            Kernel::Auto | Kernel::Gpu => false,
        }
    }
}

/// Queries and train points laid out for one kernel.
pub(crate) enum PreparedU8<'a> {
    Portable(portable::Prepared<'a>),
    #[cfg(target_arch = "x86_64")]
    Avx2(avx2::Prepared),
    #[cfg(target_arch = "x86_64")]
    Avx512(avx512::Prepared),
}

impl<'a> PreparedU8<'a> {
    /// Lays out `query` and `train` (validated: `dim` in 1..=MAX_DIM, lengths multiples of it)
    /// for `kernel`, which must be concrete and available.
    pub fn new(kernel: Kernel, query: &'a [u8], train: &'a [u8], dim: usize) -> Self {
        match kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 if kernel.cpu_supports() => {
                PreparedU8::Avx2(avx2::Prepared::new(query, train, dim))
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 if kernel.cpu_supports() => {
                PreparedU8::Avx512(avx512::Prepared::new(query, train, dim))
            }
            _ => PreparedU8::Portable(portable::Prepared::new(query, train, dim)),
        }
    }

    /// Queries per micro-row.
    pub fn mr(&self) -> usize {
        match self {
            PreparedU8::Portable(_) => portable::MR,
            #[cfg(target_arch = "x86_64")]
            PreparedU8::Avx2(_) => avx2::MR,
            #[cfg(target_arch = "x86_64")]
            PreparedU8::Avx512(_) => avx512::MR,
        }
    }

    /// Number of train tiles.
    pub fn tiles(&self) -> usize {
        match self {
            PreparedU8::Portable(p) => p.tiles(),
            #[cfg(target_arch = "x86_64")]
            PreparedU8::Avx2(p) => p.tiles(),
            #[cfg(target_arch = "x86_64")]
            PreparedU8::Avx512(p) => p.tiles(),
        }
    }

    /// Train tiles per cache block (about 256 KiB of packed train data).
    pub fn tiles_per_block(&self) -> usize {
        match self {
            PreparedU8::Portable(p) => p.tiles_per_block(),
            #[cfg(target_arch = "x86_64")]
            PreparedU8::Avx2(p) => p.tiles_per_block(),
            #[cfg(target_arch = "x86_64")]
            PreparedU8::Avx512(p) => p.tiles_per_block(),
        }
    }

    /// Offers every train point of `tiles` to the `mr()` queries starting at `row0`
    /// (a multiple of `mr()`), whose state is `tops` (length `mr()`).
    pub fn scan(&self, row0: usize, tiles: std::ops::Range<usize>, tops: &mut [Top2<i32>]) {
        match self {
            PreparedU8::Portable(p) => p.scan(row0, tiles, tops),
            // SAFETY: `new` built these variants only after `cpu_supports` confirmed the CPU
            // features the kernels are compiled for; `scan` checks its own bounds.
            #[cfg(target_arch = "x86_64")]
            PreparedU8::Avx2(p) => unsafe { p.scan(row0, tiles, tops) },
            #[cfg(target_arch = "x86_64")]
            PreparedU8::Avx512(p) => unsafe { p.scan(row0, tiles, tops) },
        }
    }

    /// The constant that turns query `q`'s keys into squared distances.
    pub fn offset(&self, q: usize) -> i32 {
        match self {
            PreparedU8::Portable(_) => 0,
            #[cfg(target_arch = "x86_64")]
            PreparedU8::Avx2(p) => p.offset(q),
            #[cfg(target_arch = "x86_64")]
            PreparedU8::Avx512(p) => p.offset(q),
        }
    }
}

/// The value of an unused `Top2` slot; no key reaches it (keys stay below 2³⁰).
pub(crate) const KEY_MAX: i32 = i32::MAX;

/// One 64-byte cache line of packed train data; `Vec<Line>` is cache-line aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Line(pub [u8; 64]);

/// Key of a padding train point (index past the end; filtered out by index as well).
pub(crate) const PAD_NORM: i32 = 1 << 29;

/// Squared norms of the train points, padded with [`PAD_NORM`] to `len`.
pub(crate) fn train_norms(train: &[u8], dim: usize, len: usize) -> Vec<i32> {
    let mut v: Vec<i32> = train
        .chunks_exact(dim)
        .map(|t| t.iter().map(|&x| x as i32 * x as i32).sum())
        .collect();
    v.resize(len.max(v.len()), PAD_NORM);
    v
}
