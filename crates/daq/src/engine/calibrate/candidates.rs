//! The engines auto may use on this machine, each with the device it runs on, and the ones it
//! passes over with the reason (a CPU-type Vulkan device, an engine that cannot be made).
use std::sync::Arc;

use super::{EngineChoice, EngineFigure, How, Source};
use crate::engine::{Engine, EngineKind, Registry};
use crate::{DaqError, Result};

/// An engine auto may use, with the device it runs on.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its kind.
    pub kind: EngineKind,
    /// The engine.
    pub engine: Arc<dyn Engine>,
    /// Its device (`NAME (DRIVER)` for a GPU, threads and SIMD level for the CPU).
    pub device: String,
}

/// The engines auto may use, and those it passed over with the reason.
#[derive(Debug, Clone)]
pub struct Candidates {
    /// Usable, in the registry's order.
    pub usable: Vec<Candidate>,
    /// Passed over.
    pub passed: Vec<(EngineKind, String)>,
}

impl Candidates {
    /// `gpu-wgpu` on a real GPU and `cpu-simd`; `cpu-scalar` only when neither can be created.
    pub fn find(threads: usize) -> Result<Candidates> {
        let mut c = Candidates {
            usable: Vec::new(),
            passed: Vec::new(),
        };
        for kind in [EngineKind::Gpu, EngineKind::CpuSimd] {
            match Registry::create(kind, threads) {
                Ok(e) if e.info().simd == "wgsl-cpu" => c.passed.push((
                    kind,
                    format!(
                        "the Vulkan device{} is a CPU (software) device, slower than the CPU \
                         engines; ask for gpu-wgpu to use it",
                        gpu_device()
                            .map(|(name, _)| format!(" {name}"))
                            .unwrap_or_default()
                    ),
                )),
                Ok(engine) => c.usable.push(Candidate {
                    kind,
                    device: device_of(kind, engine.as_ref()),
                    engine,
                }),
                Err(e) => c.passed.push((kind, plain(kind, e))),
            }
        }
        if c.usable.is_empty() {
            let kind = EngineKind::CpuScalar;
            let engine = Registry::create(kind, threads)?;
            c.usable.push(Candidate {
                kind,
                device: device_of(kind, engine.as_ref()),
                engine,
            });
        }
        Ok(c)
    }

    /// The figures of the engines passed over.
    fn passed_figures(&self) -> Vec<EngineFigure> {
        self.passed
            .iter()
            .map(|(k, why)| EngineFigure {
                engine: k.name().into(),
                ms_per_frame: None,
                from: Source::NotMeasured,
                why: Some(why.clone()),
            })
            .collect()
    }

    /// The choice when nothing is measured: `cpu-simd` when usable, else the first usable.
    pub fn unmeasured(&self, how: How, why: &str) -> (Arc<dyn Engine>, EngineChoice) {
        let c = self
            .usable
            .iter()
            .find(|c| c.kind == EngineKind::CpuSimd)
            .unwrap_or(&self.usable[0]);
        let mut engines: Vec<EngineFigure> = self
            .usable
            .iter()
            .map(|u| EngineFigure {
                engine: u.kind.name().into(),
                ms_per_frame: None,
                from: Source::NotMeasured,
                why: Some(why.into()),
            })
            .collect();
        engines.extend(self.passed_figures());
        let mut reason = why.to_string();
        for (k, w) in &self.passed {
            reason += &format!("; {} not measured: {w}", k.name());
        }
        let choice = EngineChoice {
            engine: c.kind.name().into(),
            how,
            reason,
            engines,
            note: None,
            cache: None,
            calibration_seconds: 0.0,
        };
        (c.engine.clone(), choice)
    }
}

/// Why an engine could not be created, without the error type's prefix or the engine's name
/// (the figure names it).
fn plain(kind: EngineKind, e: DaqError) -> String {
    let m = match e {
        DaqError::Config(m) => m,
        other => other.to_string(),
    };
    match m
        .strip_prefix(kind.name())
        .and_then(|r| r.strip_prefix(": "))
    {
        Some(rest) => rest.to_string(),
        None => m,
    }
}

/// The GPU the `gpu-wgpu` engine runs on: its name and its driver.
fn gpu_device() -> Option<(String, String)> {
    #[cfg(feature = "gpu")]
    {
        remora_accel::gpu::Gpu::shared().ok().map(|g| {
            let i = g.info();
            (i.name.clone(), i.driver.clone())
        })
    }
    #[cfg(not(feature = "gpu"))]
    None
}

fn device_of(kind: EngineKind, e: &dyn Engine) -> String {
    let i = e.info();
    match kind {
        EngineKind::Gpu => gpu_device()
            .map(|(name, driver)| format!("{name} ({driver})"))
            .unwrap_or_else(|| "unknown GPU".into()),
        _ => format!("{} threads, {}", i.threads, i.simd),
    }
}

/// The CPU model, from `/proc/cpuinfo` (the architecture where it says none).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Model"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}
