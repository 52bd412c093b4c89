//! The engines the engine tests run: every one the registry makes here, and variants.
#![allow(dead_code)]
use std::sync::Arc;

use remora_daq::engine::{CpuEngine, Engine, Registry};

/// The GPU engines: one as the registry makes it, and one cut into small bands (every split
/// path). When `REMORA_GPU` is set (as `make test` does) a missing device fails the test
/// instead of skipping it.
pub fn gpu_engines() -> Vec<Arc<dyn Engine>> {
    use remora_daq::engine::GpuEngine;
    let Some(g) = remora_accel::gpu::Gpu::for_tests() else {
        return Vec::new();
    };
    // Bands of 64 rows (tables), 192 K pixels (frames and images), and matrix chunks of a few
    // bins.
    let small = GpuEngine::on(g.clone()).with_max_binding(64 * 1024 * 12);
    vec![Arc::new(GpuEngine::on(g)), Arc::new(small)]
}

/// Every engine the registry can make on this machine (the GPU's included when a device is
/// allowed), plus variants: the SIMD engine on its baseline kernels and on one thread, and the
/// GPU engine in small bands.
pub fn engines() -> Vec<Arc<dyn Engine>> {
    let (made, skipped) = Registry::available(2);
    if std::env::var_os("REMORA_GPU").is_some_and(|v| v != "off") {
        assert!(skipped.is_empty(), "REMORA_GPU is set: {skipped:?}");
    }
    let mut v: Vec<Arc<dyn Engine>> = made;
    v.push(Arc::new(CpuEngine::new(2).unwrap().baseline()));
    v.push(Arc::new(CpuEngine::new(1).unwrap()));
    v.extend(gpu_engines().into_iter().skip(1));
    // The CPU engine first: the reference the others are compared with.
    v.sort_by_key(|e| e.info().name == "gpu-wgpu");
    v
}
