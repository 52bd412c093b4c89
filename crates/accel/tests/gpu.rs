//! The GPU backend on whatever Vulkan device the machine has (lavapipe in CI: `make test` sets
//! `REMORA_GPU=any` and these tests then fail, not skip, when no adapter appears).
#![cfg(feature = "gpu")]
use remora_accel::gpu::{groups, Gpu, GpuError, GpuPolicy};

const ADD: &str = r#"
struct P { n: u32, add: u32, stride: u32, pad: u32 }
@group(0) @binding(0) var<storage, read_write> v: array<u32>;
@group(0) @binding(1) var<storage, read> p: P;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    let i = (g.x + g.y * p.stride) * 64u + l;
    if (i < p.n) { v[i] = v[i] + p.add; }
}
"#;

fn gpu() -> Option<std::sync::Arc<Gpu>> {
    Gpu::for_tests()
}

#[test]
fn a_kernel_runs_and_reads_back_every_element_including_a_grid_split_over_y() {
    let Some(gpu) = gpu() else { return };
    let pipe = gpu.pipeline("test-add", ADD, "main").unwrap();
    for n in [1u32, 63, 64, 65, 100_003] {
        let data: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let v = gpu.upload("v", &data).unwrap();
        let g = groups(u64::from(n), 64);
        let p = gpu.upload("p", &[n, 7, gpu.row_stride(), 0]).unwrap();
        let bind = gpu.bind(&pipe, &[v.as_entire_binding(), p.as_entire_binding()]);
        let mut enc = gpu.encoder();
        gpu.dispatch(&mut enc, &pipe, &bind, g);
        let out = gpu.read(enc, &[(&v, 0, u64::from(n) * 4)]).unwrap();
        let got: &[u32] = bytemuck::cast_slice(&out[0]);
        assert_eq!(got.len(), n as usize);
        for (i, (&a, &b)) in got.iter().zip(&data).enumerate() {
            assert_eq!(a, b.wrapping_add(7), "element {i} of {n}");
        }
    }
    // The grid is split over y beyond the per-dimension limit.
    let (x, y) = gpu.grid(gpu.row_stride() * 2 + 1);
    assert!(x * y > gpu.row_stride() * 2 && y == 3);
}

#[test]
fn readbacks_in_flight_complete_in_any_wait_order() {
    let Some(gpu) = gpu() else { return };
    let pipe = gpu.pipeline("test-add", ADD, "main").unwrap();
    let mut flights = Vec::new();
    for k in 0..3u32 {
        let v = gpu.upload("v", &[k; 1000]).unwrap();
        let p = gpu.upload("p", &[1000, k, gpu.row_stride(), 0]).unwrap();
        let bind = gpu.bind(&pipe, &[v.as_entire_binding(), p.as_entire_binding()]);
        let mut enc = gpu.encoder();
        gpu.dispatch(&mut enc, &pipe, &bind, groups(1000, 64));
        flights.push((k, gpu.submit_read(enc, &[(&v, 0, 4000)]).unwrap(), v));
    }
    for (k, r, _keep) in flights.into_iter().rev() {
        let out = r.wait(&gpu).unwrap();
        assert!(bytemuck::cast_slice::<u8, u32>(&out[0])
            .iter()
            .all(|&x| x == 2 * k));
    }
}

#[test]
fn a_broken_shader_is_an_error_naming_the_kernel_not_a_panic() {
    let Some(gpu) = gpu() else { return };
    let e = gpu
        .pipeline(
            "test-broken",
            "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }",
            "main",
        )
        .unwrap_err();
    assert!(matches!(e, GpuError::Shader { .. }), "{e}");
    assert!(e.to_string().contains("test-broken"), "{e}");
}

#[test]
fn a_buffer_beyond_the_binding_limit_is_refused_with_the_limit() {
    let Some(gpu) = gpu() else { return };
    let too_big = gpu.info().max_binding.min(gpu.info().max_buffer) + 4;
    let e = gpu.storage("huge", too_big).unwrap_err();
    assert!(e.to_string().contains("exceed the device limit"), "{e}");
}

#[test]
fn policies_parse_and_off_says_why() {
    assert_eq!(GpuPolicy::parse("any").unwrap(), GpuPolicy::Any);
    assert_eq!(GpuPolicy::parse("").unwrap(), GpuPolicy::Hardware);
    assert!(GpuPolicy::parse("cuda")
        .unwrap_err()
        .to_string()
        .contains("gpu, any, off"));
    let e = Gpu::open(GpuPolicy::Off).unwrap_err();
    assert!(e.to_string().contains("REMORA_GPU=off"));
}

#[test]
fn the_hardware_policy_never_picks_a_cpu_type_device() {
    match Gpu::open(GpuPolicy::Hardware) {
        Ok(g) => assert_ne!(g.info().kind, "cpu", "{}", g.info()),
        Err(e) => assert!(matches!(e, GpuError::NoAdapter(_)), "{e}"),
    }
}

/// Regression: a readback dropped unread (a frame abandoned on an error) returned its staging
/// buffer to the pool with a mapping pending, and the next submission that drew it failed
/// validation ("Buffer with 'readback' label is still mapped") in another thread's work.
#[test]
fn a_readback_dropped_unread_does_not_poison_the_pool() {
    let Some(gpu) = gpu() else { return };
    let v = gpu.upload("v", &[5u32; 64]).unwrap();
    for _ in 0..4 {
        let r = gpu.submit_read(gpu.encoder(), &[(&v, 0, 256)]).unwrap();
        drop(r);
        let out = gpu.read(gpu.encoder(), &[(&v, 0, 256)]).unwrap();
        assert!(bytemuck::cast_slice::<u8, u32>(&out[0])
            .iter()
            .all(|&x| x == 5));
    }
}
