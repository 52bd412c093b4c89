//! The engines by name and `auto`'s fallback list, as `remora-daq`'s engine registry: the one
//! module that names `gpu/`, so that [`Kernel`] looks its engine up here and the GPU engine is a
//! leaf behind [`MatchEngine`]. The registry itself (find, open, list, `auto`) is
//! `remora-accel`'s generic one, with this crate's engines, kernels and errors.
//!
//! The registry lists every engine in fallback order, each with a constructor that gives the
//! engine or the reason this machine cannot run it: `gpu-wgpu` (feature `gpu`, on the device
//! `REMORA_GPU`'s policy opens), then the CPU kernels fastest first: `avx512`, `avx2` and
//! `portable`, which always opens. [`Kernel::Auto`] takes the first that opens for `auto`, where
//! the GPU engine declines a CPU-type device such as lavapipe (slower than the CPU kernels); a
//! named kernel opens its own engine or is an error saying why, never a crash.

use std::str::FromStr;
use std::sync::Arc;

use crate::engine::{Engine, Open, Purpose};
use crate::search::CpuEngine;
use crate::{Error, Kernel};

/// One engine the registry knows: its name (the engine's own, and its kernel's), the kernel
/// that stands for it (`meta`) and its constructor.
pub(crate) type Entry = remora_accel::registry::Entry<Engine, Error, Kernel>;

/// Engines in fallback order, with their kernels (`remora-accel`'s generic registry).
pub(crate) type Registry<'a> = remora_accel::registry::Registry<'a, Engine, Error, Kernel>;

/// The GPU engine's constructor: the one line that names `gpu/`.
#[cfg(feature = "gpu")]
const GPU: Open = crate::gpu::open;

#[cfg(not(feature = "gpu"))]
const GPU: Open = |_| {
    Err(Error::Gpu(
        "remora-match was built without its `gpu` feature".into(),
    ))
};

/// A CPU kernel's engine, when this CPU has what it needs.
fn cpu(kernel: Kernel) -> Result<Engine, Error> {
    if kernel.cpu_supports() {
        Ok(Arc::new(CpuEngine(kernel)))
    } else {
        Err(Error::KernelUnavailable(kernel))
    }
}

/// The error for a name the registry lacks, listing the known ones.
fn unknown(name: &str, known: &[&'static str]) -> Error {
    Error::UnknownEngine {
        name: name.into(),
        known: known.join(", "),
    }
}

/// Every engine of this build, in `auto`'s fallback order.
pub(crate) const ENGINES: Registry<'static> = Registry::new(
    &[
        Entry {
            name: "gpu-wgpu",
            meta: Kernel::Gpu,
            open: GPU,
        },
        Entry {
            name: "avx512",
            meta: Kernel::Avx512,
            open: |_| cpu(Kernel::Avx512),
        },
        Entry {
            name: "avx2",
            meta: Kernel::Avx2,
            open: |_| cpu(Kernel::Avx2),
        },
        Entry {
            name: "portable",
            meta: Kernel::Portable,
            open: |_| cpu(Kernel::Portable),
        },
    ],
    unknown,
);

impl Kernel {
    /// Whether this kernel runs here (`Auto` and `Portable` always do; `Gpu` when a device
    /// opens under `REMORA_GPU`'s policy).
    pub fn is_available(self) -> bool {
        match self {
            Kernel::Auto => true,
            k => ENGINES.open(k.name(), Purpose::Named).is_ok(),
        }
    }

    /// The CPU kernels this machine runs, fastest first (never `Auto` or `Gpu`).
    pub fn available() -> Vec<Kernel> {
        [Kernel::Avx512, Kernel::Avx2, Kernel::Portable]
            .into_iter()
            .filter(|k| k.is_available())
            .collect()
    }

    /// Every engine this machine runs: [`available`](Self::available), then `Gpu` when a
    /// device opens under `REMORA_GPU`'s policy (a CPU-type one included when it allows it).
    pub fn engines() -> Vec<Kernel> {
        let mut v: Vec<Kernel> = ENGINES
            .list()
            .into_iter()
            .filter(|(_, engine)| engine.is_ok())
            .map(|(e, _)| e.meta)
            .collect();
        // The registry's order puts the GPU first (`auto` tries it first); listings end with it.
        v.sort_by_key(|&k| k == Kernel::Gpu);
        v
    }

    /// The concrete kernel `self` stands for, or an error when this machine lacks it.
    pub fn resolve(self) -> Result<Kernel, Error> {
        match self {
            Kernel::Auto => Ok(ENGINES.auto()?.0.meta),
            k => ENGINES.open(k.name(), Purpose::Named).map(|_| k),
        }
    }

    /// The engine `self` stands for: `auto`'s choice along the fallback list, or the named
    /// one (an error when this machine lacks it).
    pub(crate) fn engine(self) -> Result<Engine, Error> {
        match self {
            Kernel::Auto => Ok(ENGINES.auto()?.1),
            k => ENGINES.open(k.name(), Purpose::Named),
        }
    }

    /// The concrete CPU kernel for f32 descriptors: `Auto` is the fastest CPU kernel, and `Gpu`
    /// an [`Error::Gpu`] (the GPU engine matches u8 descriptors only).
    pub fn resolve_cpu(self) -> Result<Kernel, Error> {
        match self {
            Kernel::Auto => Ok(Kernel::available()[0]),
            Kernel::Gpu => Err(Error::Gpu(
                "the GPU engine matches u8 descriptors only; f32 descriptors need a CPU kernel \
                 (auto, portable, avx2, avx512)"
                    .into(),
            )),
            k => k.resolve(),
        }
    }

    /// Where the kernel `self` resolves to runs, for reports: `cpu`, or the GPU as
    /// `GpuInfo` prints it (name, kind, API, driver).
    pub fn device(self) -> Result<String, Error> {
        Ok(self.engine()?.device())
    }
}

impl FromStr for Kernel {
    type Err = Error;

    /// `auto`, or an engine's name in the registry (`gpu` is short for `gpu-wgpu`); any other
    /// name is an [`Error::UnknownEngine`] listing the known ones.
    fn from_str(name: &str) -> Result<Kernel, Error> {
        match name {
            "auto" => Ok(Kernel::Auto),
            "gpu" => Ok(Kernel::Gpu),
            _ => ENGINES
                .find(name)
                .map(|e| e.meta)
                .map_err(|_| Error::UnknownEngine {
                    name: name.into(),
                    known: format!(
                        "auto, {} (gpu is short for gpu-wgpu)",
                        ENGINES.names().join(", ")
                    ),
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This crate's list (the registry's fallback and reasons are `remora-accel`'s tests).
    #[test]
    fn engines_are_listed_gpu_first_then_the_cpu_kernels_fastest_first() {
        assert_eq!(ENGINES.names(), ["gpu-wgpu", "avx512", "avx2", "portable"]);
        let list = ENGINES.list();
        for (e, engine) in &list {
            // Each entry's kernel is the engine of its name, available exactly when it opens.
            assert_eq!(e.name, e.meta.name());
            assert_eq!(e.meta.is_available(), engine.is_ok(), "{}", e.name);
            match engine {
                Ok(engine) => assert_eq!(engine.name(), e.name),
                Err(reason) => assert!(!reason.to_string().is_empty(), "{}", e.name),
            }
        }
        assert_eq!(list[3].1.as_ref().unwrap().device(), "cpu");
        if !Kernel::Avx2.cpu_supports() {
            assert_eq!(
                list[2].1.as_ref().unwrap_err(),
                &Error::KernelUnavailable(Kernel::Avx2)
            );
        }
        #[cfg(not(feature = "gpu"))]
        assert!(matches!(&list[0].1, Err(Error::Gpu(m)) if m.contains("`gpu` feature")));
        // `auto`: the GPU engine when it opens for `auto`, else the fastest CPU kernel.
        let gpu = (ENGINES.find("gpu-wgpu").unwrap().open)(Purpose::Auto).is_ok();
        let want = if gpu {
            Kernel::Gpu
        } else {
            Kernel::available()[0]
        };
        let (auto, engine) = ENGINES.auto().unwrap();
        assert_eq!((auto.meta, engine.name()), (want, want.name()));
        assert_eq!(Kernel::Auto.resolve().unwrap(), want);
        assert_eq!(Kernel::Auto.engine().unwrap().name(), want.name());
    }

    #[test]
    fn unknown_names_are_an_error_listing_the_known_ones() {
        let e = ENGINES.open("cuda", Purpose::Named).unwrap_err();
        assert!(matches!(&e, Error::UnknownEngine { name, .. } if name == "cuda"));
        assert_eq!(
            e.to_string(),
            "unknown engine \"cuda\" (known: gpu-wgpu, avx512, avx2, portable)"
        );
        let e = "cuda".parse::<Kernel>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown engine \"cuda\" (known: auto, gpu-wgpu, avx512, avx2, portable (gpu is short \
             for gpu-wgpu))"
        );
        for k in [
            Kernel::Auto,
            Kernel::Portable,
            Kernel::Avx2,
            Kernel::Avx512,
            Kernel::Gpu,
        ] {
            assert_eq!(k.name().parse::<Kernel>().unwrap(), k);
        }
        assert_eq!("gpu".parse::<Kernel>().unwrap(), Kernel::Gpu);
    }
}
