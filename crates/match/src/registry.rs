//! The engines by name and `auto`'s fallback list, as `remora-daq`'s engine registry: the one
//! module that names `gpu/`, so that [`Kernel`] looks its engine up here and the GPU engine is a
//! leaf behind [`MatchEngine`].
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

/// One engine the registry knows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// Its name (the engine's own, and its kernel's).
    pub name: &'static str,
    /// The kernel that stands for it.
    pub kernel: Kernel,
    /// Its constructor.
    pub open: Open,
}

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

/// Every engine of this build, in `auto`'s fallback order.
pub(crate) const ENGINES: Registry<'static> = Registry(&[
    Entry {
        name: "gpu-wgpu",
        kernel: Kernel::Gpu,
        open: GPU,
    },
    Entry {
        name: "avx512",
        kernel: Kernel::Avx512,
        open: |_| cpu(Kernel::Avx512),
    },
    Entry {
        name: "avx2",
        kernel: Kernel::Avx2,
        open: |_| cpu(Kernel::Avx2),
    },
    Entry {
        name: "portable",
        kernel: Kernel::Portable,
        open: |_| cpu(Kernel::Portable),
    },
]);

/// Engines in fallback order (tests build their own, with engines that cannot open).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Registry<'a>(pub &'a [Entry]);

/// What `auto` took.
#[derive(Debug, Clone)]
pub(crate) struct Selection {
    /// The kernel that stands for it.
    pub kernel: Kernel,
    /// The engine.
    pub engine: Engine,
}

impl<'a> Registry<'a> {
    /// The names, in fallback order.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|e| e.name).collect()
    }

    /// The entry called `name`, or an error listing the known names.
    pub fn find(&self, name: &str) -> Result<&'a Entry, Error> {
        self.0
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| Error::UnknownEngine {
                name: name.into(),
                known: self.names().join(", "),
            })
    }

    /// Opens the engine called `name`, or says why not.
    pub fn open(&self, name: &str, purpose: Purpose) -> Result<Engine, Error> {
        let engine = (self.find(name)?.open)(purpose)?;
        debug_assert_eq!(
            engine.name(),
            name,
            "an engine registered under another name"
        );
        Ok(engine)
    }

    /// Every engine with, for each, the engine or why this machine cannot run it.
    pub fn list(&self) -> Vec<(&'a Entry, Result<Engine, Error>)> {
        self.0
            .iter()
            .map(|e| (e, (e.open)(Purpose::Named)))
            .collect()
    }

    /// The first engine along the list that opens for `auto`; when none does, the last one's
    /// reason.
    pub fn auto(&self) -> Result<Selection, Error> {
        let mut why = None;
        for e in self.0 {
            match (e.open)(Purpose::Auto) {
                Ok(engine) => {
                    return Ok(Selection {
                        kernel: e.kernel,
                        engine,
                    })
                }
                Err(reason) => why = Some(reason),
            }
        }
        Err(why.unwrap_or_else(|| Error::UnknownEngine {
            name: "auto".into(),
            known: self.names().join(", "),
        }))
    }
}

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
            .map(|(e, _)| e.kernel)
            .collect();
        // The registry's order puts the GPU first (`auto` tries it first); listings end with it.
        v.sort_by_key(|&k| k == Kernel::Gpu);
        v
    }

    /// The concrete kernel `self` stands for, or an error when this machine lacks it.
    pub fn resolve(self) -> Result<Kernel, Error> {
        match self {
            Kernel::Auto => Ok(ENGINES.auto()?.kernel),
            k => ENGINES.open(k.name(), Purpose::Named).map(|_| k),
        }
    }

    /// The engine `self` stands for: `auto`'s choice along the fallback list, or the named
    /// one (an error when this machine lacks it).
    pub(crate) fn engine(self) -> Result<Engine, Error> {
        match self {
            Kernel::Auto => Ok(ENGINES.auto()?.engine),
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
                .map(|e| e.kernel)
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
    use crate::engine::MatchEngine;

    /// An engine that never opens.
    const DOWN: Entry = Entry {
        name: "down",
        kernel: Kernel::Gpu,
        open: |_| Err(Error::Gpu("no device here".into())),
    };

    /// An engine that opens when named but declines `auto` (as the GPU engine on lavapipe).
    const SLOW: Entry = Entry {
        name: "slow",
        kernel: Kernel::Avx512,
        open: |purpose| match purpose {
            Purpose::Named => Ok(Arc::new(Slow)),
            Purpose::Auto => Err(Error::Gpu("slower than the next engine".into())),
        },
    };

    /// The engine of [`SLOW`]: the portable kernel under another name.
    #[derive(Debug)]
    struct Slow;

    impl MatchEngine for Slow {
        fn name(&self) -> &'static str {
            "slow"
        }

        fn device(&self) -> String {
            "cpu".into()
        }

        fn search_u8(
            &self,
            query: &[u8],
            train: &[u8],
            dim: usize,
            ratio: Option<f32>,
            threads: Option<usize>,
        ) -> Result<crate::engine::Searched, Error> {
            CpuEngine(Kernel::Portable).search_u8(query, train, dim, ratio, threads)
        }
    }

    fn portable() -> Entry {
        *ENGINES.find("portable").unwrap()
    }

    #[test]
    fn the_registry_lists_every_engine_with_its_availability_or_the_reason() {
        let list = ENGINES.list();
        let names: Vec<_> = list.iter().map(|(e, _)| e.name).collect();
        assert_eq!(names, ["gpu-wgpu", "avx512", "avx2", "portable"]);
        for (e, engine) in &list {
            assert_eq!(e.name, e.kernel.name());
            match engine {
                Ok(engine) => {
                    assert_eq!(engine.name(), e.name);
                    assert!(e.kernel.is_available(), "{}", e.name);
                }
                Err(reason) => {
                    assert!(!reason.to_string().is_empty(), "{}", e.name);
                    assert!(!e.kernel.is_available(), "{}", e.name);
                }
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
        // A listing with engines that cannot open names each with its reason.
        let fake = [DOWN, SLOW, portable()];
        let list = Registry(&fake).list();
        assert_eq!(
            list[0].1.as_ref().unwrap_err().to_string(),
            "GPU engine: no device here"
        );
        assert!(list[1].1.is_ok() && list[2].1.is_ok());
    }

    #[test]
    fn auto_falls_back_along_the_list() {
        let fake = [DOWN, SLOW, portable()];
        let sel = Registry(&fake).auto().unwrap();
        assert_eq!(sel.kernel, Kernel::Portable);
        assert_eq!(sel.engine.name(), "portable");
        // Named, the engine that declines `auto` opens, and matches as the others do.
        let slow = Registry(&fake).open("slow", Purpose::Named).unwrap();
        let (q, t) = ([1u8, 1, 9, 9], [0u8, 0, 10, 10, 200, 200]);
        let opts = crate::Options {
            kernel: Kernel::Portable,
            ..crate::Options::default()
        };
        assert_eq!(
            slow.match_u8(&q, &t, 2, &opts).unwrap(),
            crate::match_u8(&q, &t, 2, &opts).unwrap()
        );
        // Nothing opens: the last engine's reason.
        let e = Registry(&fake[..2]).auto().unwrap_err();
        assert_eq!(e, Error::Gpu("slower than the next engine".into()));
        // The real list: the first that opens for `auto`, the portable kernel at worst.
        let auto = ENGINES.auto().unwrap();
        let first = ENGINES
            .0
            .iter()
            .find(|e| (e.open)(Purpose::Auto).is_ok())
            .unwrap();
        assert_eq!(auto.kernel, first.kernel);
        assert_eq!(Kernel::Auto.resolve().unwrap(), auto.kernel);
        assert_eq!(Kernel::Auto.engine().unwrap().name(), first.name);
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
        assert!(
            e.to_string()
                .contains("known: auto, gpu-wgpu, avx512, avx2, portable"),
            "{e}"
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
