//! Real photographs (Debian's `opencv-doc` samples) fitted to 500×500 at quality 85: sizes equal
//! ImageMagick's, and quality as good as a slow reference resize.
//!
//! Reference: Lanczos3 (ImageMagick's support scaling: 3·scale taps each side when shrinking,
//! pixel centres at `(i + 0.5)·scale − 0.5`, normalised weights) of the full-size decode, in f64,
//! separable, rounded to 8 bits, then encoded at the same quality and chroma sampling with
//! libjpeg-turbo. SSIM is on luma (BT.601) over 8×8 windows at a stride of 4 with the usual
//! constants (K1 = 0.01, K2 = 0.03, L = 255), averaged. remora's output must be within 0.005 of
//! the reference-encoded image's SSIM to the unencoded reference.

use remora_resize::fidelity::{luma, reference, ssim};
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
