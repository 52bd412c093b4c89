//! The resampling engines by name and `auto`'s fallback list, as `remora-daq`'s engine
//! registry: the one module that names `gpu/`, so that [`ResampleEngine`] looks its engine up
//! here and the GPU engine is a leaf behind [`Resampler`].
//!
//! The registry lists every engine in fallback order, each with a constructor that gives the
//! engine or the reason this machine cannot run it: `gpu-wgpu` (feature `gpu`, on the device
//! `gpu::device()` picks), then `cpu-fir`, which always opens. [`ResampleEngine::Auto`] takes
//! the first that opens for `auto`, where the GPU engine declines a CPU-type device such as
//! lavapipe (slower than the CPU engine); a named engine opens or is an error saying why.

use std::sync::Arc;

use crate::cpu::{CpuResampler, CPU_ENGINE};
use crate::error::{Error, Result};
use crate::options::ResampleEngine;
use crate::resampler::{Open, Purpose, Resampler, GPU_ENGINE};

/// One engine the registry knows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// Its name (the engine's own).
    pub name: &'static str,
    /// Its constructor.
    pub open: Open,
}

/// The GPU engine's constructor: the one line that names `gpu/`.
#[cfg(feature = "gpu")]
const GPU: Open = crate::gpu::open;

#[cfg(not(feature = "gpu"))]
const GPU: Open = |_| {
    Err(Error::Gpu(
        "this build of remora-resize has no GPU engine (its `gpu` feature is off)".into(),
    ))
};

/// Every engine of this build, in `auto`'s fallback order.
pub(crate) const ENGINES: Registry<'static> = Registry(&[
    Entry {
        name: GPU_ENGINE,
        open: GPU,
    },
    Entry {
        name: CPU_ENGINE,
        open: |_| Ok(Arc::new(CpuResampler)),
    },
]);

/// Engines in fallback order (tests build their own, with engines that cannot open).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Registry<'a>(pub &'a [Entry]);

impl<'a> Registry<'a> {
    /// The names, in fallback order.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|e| e.name).collect()
    }

    /// The entry called `name`, or an error listing the known names.
    pub fn find(&self, name: &str) -> Result<&'a Entry> {
        self.0.iter().find(|e| e.name == name).ok_or_else(|| {
            Error::BadOption(format!(
                "unknown resampling engine {name:?} (known: {})",
                self.names().join(", ")
            ))
        })
    }

    /// Opens the engine called `name`, or says why not.
    pub fn open(&self, name: &str, purpose: Purpose) -> Result<Arc<dyn Resampler>> {
        let engine = (self.find(name)?.open)(purpose)?;
        debug_assert_eq!(
            engine.name(),
            name,
            "an engine registered under another name"
        );
        Ok(engine)
    }

    /// Every engine with, for each, the engine or why this machine cannot run it.
    pub fn list(&self) -> Vec<(&'a Entry, Result<Arc<dyn Resampler>>)> {
        self.0
            .iter()
            .map(|e| (e, (e.open)(Purpose::Named)))
            .collect()
    }

    /// The first engine along the list that opens for `auto`; when none does, the last one's
    /// reason.
    pub fn auto(&self) -> Result<Arc<dyn Resampler>> {
        let mut why = None;
        for e in self.0 {
            match (e.open)(Purpose::Auto) {
                Ok(engine) => return Ok(engine),
                Err(reason) => why = Some(reason),
            }
        }
        Err(why.unwrap_or_else(|| Error::BadOption("no resampling engine registered".into())))
    }
}

impl ResampleEngine {
    /// The engine this choice runs on this machine: [`ResampleEngine::Gpu`] fails with
    /// [`Error::Gpu`] when no device opens; [`ResampleEngine::Auto`] is the GPU's only on a
    /// hardware GPU.
    pub fn resampler(self) -> Result<Arc<dyn Resampler>> {
        match self {
            ResampleEngine::Cpu => ENGINES.open(CPU_ENGINE, Purpose::Named),
            ResampleEngine::Gpu => ENGINES.open(GPU_ENGINE, Purpose::Named),
            ResampleEngine::Auto => ENGINES.auto(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Filter;

    /// An engine that never opens.
    const DOWN: Entry = Entry {
        name: "down",
        open: |_| Err(Error::Gpu("no device here".into())),
    };

    /// An engine that opens when named but declines `auto` (as the GPU engine on lavapipe).
    const SLOW: Entry = Entry {
        name: "slow",
        open: |purpose| match purpose {
            Purpose::Named => Ok(Arc::new(Slow)),
            Purpose::Auto => Err(Error::Gpu("slower than the next engine".into())),
        },
    };

    /// The engine of [`SLOW`]: the CPU engine under another name.
    #[derive(Debug)]
    struct Slow;

    impl Resampler for Slow {
        fn name(&self) -> &'static str {
            "slow"
        }

        fn resize_checked(
            &self,
            src: &[u8],
            size: (u32, u32),
            channels: u8,
            to: (u32, u32),
            filter: Filter,
        ) -> Result<Vec<u8>> {
            CpuResampler.resize_checked(src, size, channels, to, filter)
        }
    }

    fn cpu() -> Entry {
        *ENGINES.find(CPU_ENGINE).unwrap()
    }

    #[test]
    fn the_registry_lists_every_engine_with_its_availability_or_the_reason() {
        let list = ENGINES.list();
        let names: Vec<_> = list.iter().map(|(e, _)| e.name).collect();
        assert_eq!(names, [GPU_ENGINE, CPU_ENGINE]);
        for (e, engine) in &list {
            match engine {
                Ok(engine) => assert_eq!(engine.name(), e.name),
                Err(reason) => {
                    assert!(matches!(reason, Error::Gpu(_)), "{}: {reason}", e.name);
                    assert!(!reason.to_string().is_empty(), "{}", e.name);
                }
            }
        }
        assert!(list[1].1.is_ok());
        #[cfg(not(feature = "gpu"))]
        assert!(matches!(&list[0].1, Err(Error::Gpu(m)) if m.contains("`gpu` feature")));
        // `resamplers` is the same listing, the CPU's first.
        let (have, missing) = crate::resample::resamplers();
        assert_eq!(have[0].name(), CPU_ENGINE);
        assert_eq!(have.len() + missing.len(), list.len());
        // A listing with engines that cannot open names each with its reason.
        let fake = [DOWN, SLOW, cpu()];
        let list = Registry(&fake).list();
        assert_eq!(
            list[0].1.as_ref().unwrap_err().to_string(),
            "GPU engine: no device here"
        );
        assert!(list[1].1.is_ok() && list[2].1.is_ok());
    }

    #[test]
    fn auto_falls_back_along_the_list() {
        let fake = [DOWN, SLOW, cpu()];
        assert_eq!(Registry(&fake).auto().unwrap().name(), CPU_ENGINE);
        // Named, the engine that declines `auto` opens, and resamples as the CPU does.
        let slow = Registry(&fake).open("slow", Purpose::Named).unwrap();
        let src: Vec<u8> = (0..12 * 9 * 3).map(|i| (i * 7 % 256) as u8).collect();
        assert_eq!(
            slow.resample(&src, (12, 9), 3, (5, 4), Filter::Lanczos3)
                .unwrap(),
            CpuResampler
                .resample(&src, (12, 9), 3, (5, 4), Filter::Lanczos3)
                .unwrap()
        );
        // Nothing opens: the last engine's reason.
        let e = Registry(&fake[..2]).auto().unwrap_err();
        assert_eq!(e.to_string(), "GPU engine: slower than the next engine");
        // The real list: the first that opens for `auto`, the CPU at worst.
        let first = ENGINES
            .0
            .iter()
            .find(|e| (e.open)(Purpose::Auto).is_ok())
            .unwrap();
        assert_eq!(ResampleEngine::Auto.resampler().unwrap().name(), first.name);
        assert_eq!(ResampleEngine::Cpu.resampler().unwrap().name(), CPU_ENGINE);
    }

    #[test]
    fn unknown_names_are_an_error_listing_the_known_ones() {
        let e = ENGINES.open("cuda", Purpose::Named).unwrap_err();
        assert!(matches!(e, Error::BadOption(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "bad option: unknown resampling engine \"cuda\" (known: gpu-wgpu, cpu-fir)"
        );
        let e = "cuda".parse::<ResampleEngine>().unwrap_err();
        assert!(e.to_string().contains("(cpu, gpu or auto)"), "{e}");
    }
}
