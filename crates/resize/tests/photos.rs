//! Real photographs (Debian's `opencv-doc` samples) fitted to 500×500 at quality 85: sizes equal
//! ImageMagick's, and quality as good as a slow reference resize.
//!
//! Reference: Lanczos3 (ImageMagick's support scaling: 3·scale taps each side when shrinking,
//! pixel centres at `(i + 0.5)·scale − 0.5`, normalised weights) of the full-size decode, in f64,
//! separable, rounded to 8 bits, then encoded at the same quality and chroma sampling with
//! libjpeg-turbo. SSIM is on luma (BT.601) over 8×8 windows at a stride of 4 with the usual
//! constants (K1 = 0.01, K2 = 0.03, L = 255), averaged. remora's output must be within 0.005 of
//! the reference-encoded image's SSIM to the unencoded reference.

use remora_resize::testing::{decode_rgb, encode_rgb};
use remora_resize::{resize_jpeg, Job};
use std::path::{Path, PathBuf};
use std::process::Command;

const DIR: &str = "/usr/share/doc/opencv-doc/examples/data";

fn photos() -> Option<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(DIR)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("jpg")))
        .collect();
    v.sort();
    (!v.is_empty()).then_some(v)
}

fn job_for(geometry: &str) -> Job {
    let mut j = Job::parse(geometry).unwrap();
    j.quality = Some(85);
    j
}

#[test]
fn photo_sizes_match_imagemagick() {
    let Some(files) = photos() else {
        eprintln!("SKIP: no JPEGs in {DIR} (Debian package opencv-doc)");
        return;
    };
    if !Path::new("/usr/bin/convert").exists() {
        eprintln!("SKIP: /usr/bin/convert missing (Debian package imagemagick)");
        return;
    }
    // A subset, one ImageMagick run per geometry (both decode at full size; remora's test build
    // is unoptimised).
    let subset: Vec<&PathBuf> = files.iter().step_by(5).collect();
    for geometry in ["500x500", "300x200^", "33%"] {
        let out = Command::new("/usr/bin/convert")
            .args(subset.iter().map(|p| p.as_os_str()))
            .args(["-resize", geometry, "-format", "%w %h\\n", "info:"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let theirs: Vec<&str> = text.lines().collect();
        assert_eq!(theirs.len(), subset.len());
        for (path, t) in subset.iter().zip(theirs) {
            let r = resize_jpeg(&std::fs::read(path).unwrap(), &job_for(geometry)).unwrap();
            assert_eq!(
                format!("{} {}", r.width, r.height),
                t,
                "{} -resize {geometry}",
                path.display()
            );
            assert_eq!(decode_rgb(&r.data).0, r.width as usize);
        }
    }
}

/// One axis of a separable Lanczos3 resample in f64 (`n` channels interleaved).
fn lanczos_axis(
    src: &[f64],
    len: usize,
    count: usize,
    stride_item: usize,
    stride_line: usize,
    out_len: usize,
    n: usize,
) -> Vec<f64> {
    // src: `count` lines of `len` items; item i of line l at l*stride_line + i*stride_item.
    let scale = len as f64 / out_len as f64;
    let support = 3.0 * scale.max(1.0);
    let fscale = scale.max(1.0);
    let lanczos = |x: f64| {
        if x.abs() >= 3.0 {
            0.0
        } else if x == 0.0 {
            1.0
        } else {
            let a = std::f64::consts::PI * x;
            3.0 * a.sin() * (a / 3.0).sin() / (a * a)
        }
    };
    let mut out = vec![0.0; count * out_len * n];
    for o in 0..out_len {
        let centre = (o as f64 + 0.5) * scale - 0.5;
        let lo = ((centre - support).ceil().max(0.0)) as usize;
        let hi = ((centre + support).floor() as usize).min(len - 1);
        let weights: Vec<f64> = (lo..=hi)
            .map(|i| lanczos((i as f64 - centre) / fscale))
            .collect();
        let total: f64 = weights.iter().sum();
        for l in 0..count {
            for c in 0..n {
                let mut acc = 0.0;
                for (k, i) in (lo..=hi).enumerate() {
                    acc += weights[k] * src[l * stride_line + i * stride_item + c];
                }
                out[(l * out_len + o) * n + c] = acc / total;
            }
        }
    }
    out
}

/// Reference resize of packed RGB to `tw`×`th`.
fn reference(px: &[u8], w: usize, h: usize, tw: usize, th: usize) -> Vec<u8> {
    let src: Vec<f64> = px.iter().map(|&v| f64::from(v)).collect();
    // Horizontal: h lines of w pixels → h×tw (row-major).
    let horiz = lanczos_axis(&src, w, h, 3, w * 3, tw, 3);
    // Vertical: tw columns of h pixels → stored column-major as tw lines of th.
    let vert = lanczos_axis(&horiz, h, tw, tw * 3, 3, th, 3);
    let mut out = vec![0u8; tw * th * 3];
    for x in 0..tw {
        for y in 0..th {
            for c in 0..3 {
                out[(y * tw + x) * 3 + c] =
                    vert[(x * th + y) * 3 + c].round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    out
}

fn luma(px: &[u8]) -> Vec<f64> {
    px.chunks_exact(3)
        .map(|p| 0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2]))
        .collect()
}

/// Mean SSIM of two luma planes over 8×8 windows at a stride of 4.
fn ssim(a: &[f64], b: &[f64], w: usize, h: usize) -> f64 {
    let (c1, c2) = ((0.01f64 * 255.0).powi(2), (0.03f64 * 255.0).powi(2));
    let (mut total, mut count) = (0.0, 0);
    let mut y = 0;
    while y + 8 <= h {
        let mut x = 0;
        while x + 8 <= w {
            let (mut sa, mut sb, mut saa, mut sbb, mut sab) = (0.0, 0.0, 0.0, 0.0, 0.0);
            for j in y..y + 8 {
                for i in x..x + 8 {
                    let (p, q) = (a[j * w + i], b[j * w + i]);
                    sa += p;
                    sb += q;
                    saa += p * p;
                    sbb += q * q;
                    sab += p * q;
                }
            }
            let n = 64.0;
            let (ma, mb) = (sa / n, sb / n);
            let va = saa / n - ma * ma;
            let vb = sbb / n - mb * mb;
            let cov = sab / n - ma * mb;
            total += ((2.0 * ma * mb + c1) * (2.0 * cov + c2))
                / ((ma * ma + mb * mb + c1) * (va + vb + c2));
            count += 1;
            x += 4;
        }
        y += 4;
    }
    total / count as f64
}

#[test]
fn photo_quality_matches_a_lanczos_reference() {
    let Some(files) = photos() else {
        eprintln!("SKIP: no JPEGs in {DIR} (Debian package opencv-doc)");
        return;
    };
    let mut tested = 0;
    let mut dct_shrunk = 0;
    let mut report = Vec::new();
    let mut failures = Vec::new();
    // Every tenth photo at 500x500 (most are 640x480, so no DCT shrink there), and the large
    // ones (≥ 800 px wide) at 160x160 and 80x80, which decodes them at 1/2
    // in the DCT domain with 2x to 8x left for the final resample. Only
    // shrinks: when enlarging, remora (as ImageMagick) uses Mitchell, not the Lanczos reference.
    // A subset keeps the f64 reference (an unoptimised test build) to a few seconds.
    let mut cases: Vec<(&PathBuf, &str)> =
        files.iter().step_by(10).map(|p| (p, "500x500")).collect();
    for p in &files {
        let (w, _, _) = decode_rgb(&std::fs::read(p).unwrap());
        if w >= 800 {
            cases.push((p, "160x160"));
            cases.push((p, "80x80"));
        }
    }
    for (path, geometry) in cases {
        let data = std::fs::read(path).unwrap();
        let out = resize_jpeg(&data, &job_for(geometry)).unwrap();
        let (w, h, px) = decode_rgb(&data);
        let (tw, th) = (out.width as usize, out.height as usize);
        if tw >= w || th >= h {
            continue; // not a shrink
        }
        dct_shrunk += usize::from(out.decode_shrink > 1);
        let truth = reference(&px, w, h, tw, th);
        let subsamp = match out.sampling {
            Some(remora_resize::Sampling::S444) => turbojpeg::Subsamp::None,
            Some(remora_resize::Sampling::S422) => turbojpeg::Subsamp::Sub2x1,
            Some(remora_resize::Sampling::S440) => turbojpeg::Subsamp::Sub1x2,
            Some(remora_resize::Sampling::S411) => turbojpeg::Subsamp::Sub4x1,
            _ => turbojpeg::Subsamp::Sub2x2,
        };
        let ref_jpeg = encode_rgb(&truth, tw, th, 85, subsamp);
        let truth_y = luma(&truth);
        let ref_ssim = ssim(&luma(&decode_rgb(&ref_jpeg).2), &truth_y, tw, th);
        let ours = ssim(&luma(&decode_rgb(&out.data).2), &truth_y, tw, th);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        report.push(format!(
            "{name}: {w}x{h}→{tw}x{th} shrink 1/{} remora {ours:.4} reference {ref_ssim:.4}",
            out.decode_shrink
        ));
        if ours < ref_ssim - 0.005 {
            failures.push(report.last().unwrap().clone());
        }
        tested += 1;
    }
    eprintln!("{}", report.join("\n"));
    assert!(tested >= 10, "only {tested} photos needed resizing");
    assert!(
        dct_shrunk >= 3,
        "only {dct_shrunk} decoded with a DCT shrink"
    );
    assert!(
        failures.is_empty(),
        "below the reference by more than 0.005:\n{}",
        failures.join("\n")
    );
}
