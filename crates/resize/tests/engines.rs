//! Every resampling engine against the CPU's: the engines come from the registry
//! (`resample::resamplers`), so a new one is checked without editing these tests. The GPU
//! engine runs on whatever Vulkan device the machine has (lavapipe in CI: `make test` sets
//! `REMORA_GPU=any`, and these tests then fail, not skip, when no adapter appears).
#![cfg(feature = "gpu")]
use std::sync::Arc;

use rayon::prelude::*;
use remora_resize::gpu::{use_device, Gpu, GpuResampler, GPU_ENGINE};
use remora_resize::resample::{resamplers, CpuResampler, Resampler, CPU_ENGINE};
use remora_resize::{Error, Filter, Format, Job, ResampleEngine};

const FILTERS: [Filter; 8] = Filter::ALL;

/// The tests' device ([`Gpu::for_tests`]), given to the engine so that `ResampleEngine::Gpu` uses it
/// even where `REMORA_GPU` is unset.
fn gpu() -> Option<Arc<Gpu>> {
    let g = Gpu::for_tests()?;
    use_device(g.clone());
    Some(g)
}

/// Noise with every alpha from 0 to 255 (fully transparent and opaque pixels included), so
/// premultiplication and rounding are exercised, not just smooth gradients.
fn noise(w: u32, h: u32, c: u8, seed: u32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..w as usize * h as usize * usize::from(c))
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            // Smooth areas next to sharp edges: half the rows a gradient, half noise.
            if (i / (w as usize * usize::from(c))).is_multiple_of(2) {
                (i * 7 % 256) as u8
            } else {
                (s >> 24) as u8
            }
        })
        .collect()
}

/// The largest difference between two images, with its index.
#[track_caller]
fn max_diff(a: &[u8], b: &[u8]) -> (u8, usize) {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(i, (&x, &y))| (x.abs_diff(y), i))
        .max()
        .unwrap_or((0, 0))
}

/// The engines to compare: the registry's, which must hold the GPU's when a device opened.
fn engines() -> Vec<Arc<dyn Resampler>> {
    let have_gpu = gpu().is_some();
    let (engines, missing) = resamplers();
    assert_eq!(engines[0].name(), CPU_ENGINE);
    if have_gpu {
        assert!(
            engines.iter().any(|e| e.name() == GPU_ENGINE),
            "a device opened but the registry lists no GPU engine: {missing:?}"
        );
    }
    engines
}

/// Sizes: shrink, enlarge, both at once, one axis only, 1×1, one row or column, primes, and
/// rows of whole u32 words for every channel count (the vertical pass' word-at-a-time path).
const CASES: [((u32, u32), (u32, u32)); 14] = [
    ((64, 48), (21, 17)),
    ((30, 22), (44, 9)),
    ((97, 61), (40, 25)),
    ((13, 11), (29, 31)),
    ((37, 41), (53, 17)),
    ((97, 61), (97, 30)),
    ((97, 61), (41, 61)),
    ((1, 1), (3, 2)),
    ((5, 4), (1, 1)),
    ((1, 50), (1, 7)),
    ((61, 1), (17, 1)),
    ((1, 19), (5, 23)),
    ((101, 7), (37, 5)),
    ((211, 3), (2, 131)),
];

#[test]
fn every_engine_is_within_one_grey_level_of_the_cpu_for_every_filter_channel_count_and_size() {
    let engines = engines();
    let mut worst = 0;
    for c in 1..=4u8 {
        for (k, &(size, to)) in CASES.iter().enumerate() {
            let src = noise(size.0, size.1, c, k as u32);
            for f in FILTERS {
                let want = CpuResampler.resample(&src, size, c, to, f).unwrap();
                assert_eq!(want.len(), to.0 as usize * to.1 as usize * usize::from(c));
                for e in &engines[1..] {
                    let got = e.resample(&src, size, c, to, f).unwrap();
                    let (d, at) = max_diff(&got, &want);
                    assert!(
                        d <= 1,
                        "{}: {c} channels, {size:?} -> {to:?}, {f}: sample {at} is {} not {}",
                        e.name(),
                        got[at],
                        want[at]
                    );
                    worst = worst.max(d);
                }
            }
        }
    }
    eprintln!("largest difference from the CPU engine: {worst} grey level(s)");
}

#[test]
fn an_unchanged_size_is_a_copy_on_every_engine() {
    for e in engines() {
        for c in 1..=4u8 {
            let src = noise(23, 17, c, 9);
            for f in [Filter::Point, Filter::Lanczos3] {
                assert_eq!(e.resample(&src, (23, 17), c, (23, 17), f).unwrap(), src);
            }
        }
    }
}

#[test]
fn bad_input_is_an_error_on_every_engine_not_a_panic() {
    for e in engines() {
        let src = noise(4, 4, 3, 1);
        for (size, c, to) in [
            ((4, 4), 5, (2, 2)),
            ((4, 5), 3, (2, 2)),
            ((4, 4), 3, (0, 2)),
        ] {
            let r = e.resample(&src, size, c, to, Filter::Box);
            assert!(matches!(r, Err(Error::BadOption(_))), "{}: {r:?}", e.name());
        }
    }
}

#[test]
fn tiles_forced_by_a_small_binding_give_the_pixels_of_one_pass() {
    let Some(gpu) = gpu() else { return };
    let whole = GpuResampler::new(gpu);
    for (c, size, to, limit) in [
        // Bands of rows only (a whole row of every buffer fits).
        (3u8, (211, 173), (67, 59), 211 * 3 * 24),
        // Rows and columns (one output row of source lines is too wide).
        (4, (211, 173), (67, 59), 2048),
        // Enlarging: many bands, each reading a few source rows.
        (2, (31, 29), (97, 89), 700),
        // One axis each.
        (1, (211, 173), (211, 40), 2048),
        (3, (211, 173), (50, 173), 2048),
    ] {
        let banded = whole.clone().with_binding_limit(limit);
        let src = noise(size.0, size.1, c, limit as u32);
        for f in FILTERS {
            assert_eq!(whole.tiles(size, c, to, f).unwrap(), 1);
            let n = banded.tiles(size, c, to, f).unwrap();
            assert!(n > 2, "{c} channels {size:?} -> {to:?} {f}: {n} tiles");
            let one = whole.resample(&src, size, c, to, f).unwrap();
            let split = banded.resample(&src, size, c, to, f).unwrap();
            assert!(
                one == split,
                "{c} channels {size:?} -> {to:?} {f}, limit {limit}: tiles differ at {:?}",
                max_diff(&one, &split)
            );
            let cpu = CpuResampler.resample(&src, size, c, to, f).unwrap();
            assert!(max_diff(&split, &cpu).0 <= 1, "{c} channels {f}");
        }
    }
    // A binding too small for any one output pixel's source window is an error, not a panic.
    let tiny = whole.with_binding_limit(16);
    let e = tiny
        .resample(&noise(50, 50, 4, 0), (50, 50), 4, (7, 7), Filter::Lanczos3)
        .unwrap_err();
    assert!(matches!(e, Error::Gpu(_)), "{e}");
}

#[test]
fn the_gpu_engine_can_be_shared_between_threads() {
    let Some(gpu) = gpu() else { return };
    let engine = GpuResampler::new(gpu);
    let jobs: Vec<(Vec<u8>, u8)> = (0..8u8)
        .map(|k| {
            (
                noise(64 + u32::from(k), 48, k % 4 + 1, u32::from(k)),
                k % 4 + 1,
            )
        })
        .collect();
    let run = |(src, c): &(Vec<u8>, u8)| {
        let w = src.len() as u32 / 48 / u32::from(*c);
        engine
            .resample(src, (w, 48), *c, (w / 3, 16), Filter::Lanczos3)
            .unwrap()
    };
    let one_by_one: Vec<Vec<u8>> = jobs.iter().map(run).collect();
    let together: Vec<Vec<u8>> = jobs.par_iter().map(run).collect();
    assert_eq!(one_by_one, together);
}

#[test]
fn engine_choice_gpu_takes_the_device_and_auto_never_a_cpu_type_one() {
    let Some(gpu) = gpu() else { return };
    assert_eq!(ResampleEngine::Cpu.resampler().unwrap().name(), CPU_ENGINE);
    assert_eq!(ResampleEngine::Gpu.resampler().unwrap().name(), GPU_ENGINE);
    let auto = ResampleEngine::Auto.resampler().unwrap().name();
    if gpu.info().kind == "cpu" {
        assert_eq!(auto, CPU_ENGINE, "{}", gpu.info());
    } else {
        assert_eq!(auto, GPU_ENGINE, "{}", gpu.info());
    }
    assert_eq!(
        "GPU".parse::<ResampleEngine>().unwrap(),
        ResampleEngine::Gpu
    );
    assert!("cuda".parse::<ResampleEngine>().is_err());
    assert_eq!(Job::parse("10x10").unwrap().engine, ResampleEngine::Cpu);
}

const PHOTO: &str = "/usr/share/doc/opencv-doc/examples/data/aloeL.jpg";
const PNG: &str = "/usr/share/doc/opencv-doc/examples/data/graf1.png";

/// Decodes a PNG to its 8-bit samples.
fn png_pixels(data: &[u8]) -> Vec<u8> {
    let mut r = png::Decoder::new(std::io::Cursor::new(data))
        .read_info()
        .unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let n = r.next_frame(&mut buf).unwrap().buffer_size();
    buf.truncate(n);
    buf
}

#[test]
fn a_real_jpeg_and_png_resized_end_to_end_on_the_gpu_engine() {
    if gpu().is_none() {
        return;
    }
    let jpeg = std::fs::read(PHOTO).unwrap_or_else(|_| {
        eprintln!("{PHOTO} missing (Debian opencv-doc): a synthetic JPEG instead");
        remora_resize::testing::gradient_jpeg(1282, 1110, 90)
    });
    let png = std::fs::read(PNG).ok();
    // Shrinking a photograph (decoded at 1/2 in the DCT domain, then resampled), and a PNG.
    for (input, geometry) in [(Some(jpeg), "300x300"), (png, "333x333")] {
        let Some(input) = input else {
            eprintln!("{PNG} missing (Debian opencv-doc): PNG case skipped");
            continue;
        };
        let mut job = Job::parse(geometry).unwrap();
        job.format = Some(Format::Png); // lossless, so the resampled pixels are compared
        let cpu = remora_resize::resize(&input, &job).unwrap();
        job.engine = ResampleEngine::Gpu;
        let gpu = remora_resize::resize(&input, &job).unwrap();
        assert_eq!(
            (cpu.engine, gpu.engine),
            (Some(CPU_ENGINE), Some(GPU_ENGINE))
        );
        assert_eq!((gpu.width, gpu.height), (cpu.width, cpu.height));
        let (d, _) = max_diff(&png_pixels(&gpu.data), &png_pixels(&cpu.data));
        assert!(d <= 1, "{geometry}: {d} grey levels from the CPU engine");
        // And in the input's own format.
        job.format = None;
        let out = remora_resize::resize(&input, &job).unwrap();
        assert_eq!(out.engine, Some(GPU_ENGINE));
        assert_eq!((out.width, out.height), (cpu.width, cpu.height));
    }
}
