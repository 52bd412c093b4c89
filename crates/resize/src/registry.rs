//! The resampling engines by name and `auto`'s fallback list, as `remora-daq`'s engine
//! registry: the one module that names `gpu/`, so that [`ResampleEngine`] looks its engine up
//! here and the GPU engine is a leaf behind [`Resampler`]. The registry itself (find, open,
//! list, `auto`) is `remora-accel`'s generic one, with this crate's engines and errors.
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

/// One engine the registry knows: its name (the engine's own) and its constructor.
pub(crate) type Entry = remora_accel::registry::Entry<Arc<dyn Resampler>, Error>;

/// Engines in fallback order (`remora-accel`'s generic registry).
pub(crate) type Registry<'a> = remora_accel::registry::Registry<'a, Arc<dyn Resampler>, Error>;

/// The GPU engine's constructor: the one line that names `gpu/`.
#[cfg(feature = "gpu")]
const GPU: Open = crate::gpu::open;

#[cfg(not(feature = "gpu"))]
const GPU: Open = |_| {
    Err(Error::Gpu(
        "this build of remora-resize has no GPU engine (its `gpu` feature is off)".into(),
    ))
};

/// The error for a name the registry lacks, listing the known ones (none known: `auto` found
/// nothing registered).
fn unknown(name: &str, known: &[&'static str]) -> Error {
    if known.is_empty() {
        return Error::BadOption("no resampling engine registered".into());
    }
    Error::BadOption(format!(
        "unknown resampling engine {name:?} (known: {})",
        known.join(", ")
    ))
}

/// Every engine of this build, in `auto`'s fallback order.
pub(crate) const ENGINES: Registry<'static> = Registry::new(
    &[
        Entry {
            name: GPU_ENGINE,
            meta: (),
            open: GPU,
        },
        Entry {
            name: CPU_ENGINE,
            meta: (),
            open: |_| Ok(Arc::new(CpuResampler)),
        },
    ],
    unknown,
);

impl ResampleEngine {
    /// The engine this choice runs on this machine: [`ResampleEngine::Gpu`] fails with
    /// [`Error::Gpu`] when no device opens; [`ResampleEngine::Auto`] is the GPU's only on a
    /// hardware GPU.
    pub fn resampler(self) -> Result<Arc<dyn Resampler>> {
        match self {
            ResampleEngine::Cpu => ENGINES.open(CPU_ENGINE, Purpose::Named),
            ResampleEngine::Gpu => ENGINES.open(GPU_ENGINE, Purpose::Named),
            ResampleEngine::Auto => Ok(ENGINES.auto()?.1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This crate's list (the registry's fallback and reasons are `remora-accel`'s tests): the
    /// GPU's engine, then the CPU's, which always opens.
    #[test]
    fn engines_are_listed_gpu_first_then_the_cpu() {
        assert_eq!(ENGINES.names(), [GPU_ENGINE, CPU_ENGINE]);
        let list = ENGINES.list();
        if let (_, Err(reason)) = &list[0] {
            assert!(matches!(reason, Error::Gpu(m) if !m.is_empty()), "{reason}");
        }
        #[cfg(not(feature = "gpu"))]
        assert!(matches!(&list[0].1, Err(Error::Gpu(m)) if m.contains("`gpu` feature")));
        for (e, engine) in list.iter().filter(|(_, engine)| engine.is_ok()) {
            assert_eq!(engine.as_ref().unwrap().name(), e.name);
        }
        assert!(list[1].1.is_ok());
        // `resamplers` is the same listing, the CPU's first.
        let (have, missing) = crate::resample::resamplers();
        assert_eq!(have[0].name(), CPU_ENGINE);
        assert_eq!(have.len() + missing.len(), list.len());
        // `auto`: the GPU engine when it opens for `auto`, else the CPU's.
        let gpu = (ENGINES.find(GPU_ENGINE).unwrap().open)(Purpose::Auto).is_ok();
        let want = if gpu { GPU_ENGINE } else { CPU_ENGINE };
        assert_eq!(ResampleEngine::Auto.resampler().unwrap().name(), want);
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
        // Nothing registered: `auto` says so.
        let e = Registry::new(&[], unknown).auto().unwrap_err();
        assert_eq!(e.to_string(), "bad option: no resampling engine registered");
    }
}
