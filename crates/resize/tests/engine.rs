//! The engine end to end: orientation, metadata, limits, hostile input, quality estimation.

use remora_resize::testing::{decode_rgb, encode_rgb, gradient_jpeg};
use remora_resize::{
    exif_with_orientation, insert_app1, jpeg_orientation, jpeg_quality, resize, resize_jpeg, Error,
    Filter, Format, Job, Sampling,
};
use std::time::Instant;

/// 64×32 white image with an 8×8 red block in the stored top-left corner.
fn marked_jpeg() -> Vec<u8> {
    let (w, h) = (64, 32);
    let mut px = vec![255u8; w * h * 3];
    for y in 0..8 {
        for x in 0..8 {
            let i = (y * w + x) * 3;
            px[i + 1] = 0;
            px[i + 2] = 0;
        }
    }
    encode_rgb(&px, w, h, 95, turbojpeg::Subsamp::None)
}

fn is_red(px: &[u8], w: usize, x: usize, y: usize) -> bool {
    let i = (y * w + x) * 3;
    px[i] > 180 && px[i + 1] < 90 && px[i + 2] < 90
}

#[test]
fn auto_orient_applies_exif_orientations_1_to_8() {
    // Where the stored top-left corner is displayed: 1 TL, 2 TR, 3 BR, 4 BL, 5 TL, 6 TR, 7 BR, 8 BL.
    let corner = ["TL", "TR", "BR", "BL", "TL", "TR", "BR", "BL"];
    for o in 1..=8u16 {
        let jpeg = insert_app1(marked_jpeg(), &exif_with_orientation(o));
        assert_eq!(jpeg_orientation(&jpeg).unwrap(), o);
        let mut job = Job::parse("32x32").unwrap();
        job.auto_orient = true;
        let out = resize_jpeg(&jpeg, &job).unwrap();
        let want = if o >= 5 { (16, 32) } else { (32, 16) };
        assert_eq!((out.width, out.height), want, "orientation {o}");
        assert_eq!(jpeg_orientation(&out.data).unwrap(), 1, "tag reset for {o}");
        let (w, h, px) = decode_rgb(&out.data);
        let at = |name: &str| match name {
            "TL" => (1, 1),
            "TR" => (w - 2, 1),
            "BR" => (w - 2, h - 2),
            _ => (1, h - 2),
        };
        for name in ["TL", "TR", "BR", "BL"] {
            let (x, y) = at(name);
            assert_eq!(
                is_red(&px, w, x, y),
                name == corner[o as usize - 1],
                "orientation {o} corner {name}"
            );
        }
        // Without auto-orient the pixels and the tag stay as stored.
        let plain = resize_jpeg(&jpeg, &Job::parse("32x32").unwrap()).unwrap();
        assert_eq!((plain.width, plain.height), (32, 16));
        assert_eq!(jpeg_orientation(&plain.data).unwrap(), o);
    }
}

fn app2_icc() -> Vec<u8> {
    let mut p = b"ICC_PROFILE\0\x01\x01".to_vec();
    p.extend_from_slice(&[7u8; 200]);
    p
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn metadata_kept_stripped_and_thumbnail_keeps_only_icc() {
    let jpeg = insert_app1(gradient_jpeg(200, 100, 90), &exif_with_orientation(3));
    let jpeg = {
        // Add an ICC APP2 segment and a comment after the EXIF one.
        let icc = app2_icc();
        let mut v = jpeg[..2].to_vec();
        v.extend_from_slice(&[0xFF, 0xE2]);
        v.extend_from_slice(&((icc.len() + 2) as u16).to_be_bytes());
        v.extend_from_slice(&icc);
        v.extend_from_slice(&[0xFF, 0xFE, 0, 7]);
        v.extend_from_slice(b"hello");
        v.extend_from_slice(&jpeg[2..]);
        v
    };
    let job = Job::parse("50x50").unwrap();
    let kept = resize_jpeg(&jpeg, &job).unwrap().data;
    assert!(
        contains(&kept, b"Exif\0\0")
            && contains(&kept, b"ICC_PROFILE\0")
            && contains(&kept, b"hello")
    );
    assert_eq!(jpeg_orientation(&kept).unwrap(), 3);

    let mut strip = job.clone();
    strip.strip = true;
    let stripped = resize_jpeg(&jpeg, &strip).unwrap().data;
    assert!(!contains(&stripped, b"Exif\0\0") && !contains(&stripped, b"ICC_PROFILE\0"));
    assert!(!contains(&stripped, b"hello"));

    let mut thumb = job.clone();
    thumb.thumbnail = true;
    let t = resize_jpeg(&jpeg, &thumb).unwrap();
    assert!(!contains(&t.data, b"Exif\0\0") && contains(&t.data, b"ICC_PROFILE\0"));
    assert!(!contains(&t.data, b"hello"));
    assert_eq!(t.filter, Some(Filter::LanczosSharp));
    // The copied ICC segment is intact (byte for byte).
    assert!(contains(&t.data, &app2_icc()));
}

#[test]
fn truncated_jpegs_are_errors_not_panics() {
    let jpeg = gradient_jpeg(320, 240, 85);
    for k in 0..16 {
        let cut = &jpeg[..jpeg.len() * k / 16];
        let r = resize_jpeg(cut, &Job::parse("100x100").unwrap());
        assert!(r.is_err(), "cut at {k}/16 ({} bytes) accepted", cut.len());
    }
    // The whole file works.
    assert!(resize_jpeg(&jpeg, &Job::parse("100x100").unwrap()).is_ok());
}

#[test]
fn garbage_and_corrupt_data_never_panic() {
    let job = Job::parse("64x64").unwrap();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for n in [0usize, 1, 2, 3, 10, 100, 5000] {
        let junk: Vec<u8> = (0..n).map(|_| next() as u8).collect();
        assert!(resize(&junk, &job).is_err());
        let mut soi = vec![0xFF, 0xD8, 0xFF];
        soi.extend_from_slice(&junk);
        assert!(resize_jpeg(&soi, &job).is_err());
    }
    // Bytes flipped inside a valid JPEG: an error or an image, never a panic.
    let jpeg = gradient_jpeg(160, 120, 80);
    for _ in 0..200 {
        let mut bad = jpeg.clone();
        for _ in 0..4 {
            let i = (next() as usize) % bad.len();
            bad[i] = next() as u8;
        }
        let _ = resize_jpeg(&bad, &job);
    }
    assert!(matches!(
        resize(b"GIF89a....", &job),
        Err(Error::UnknownFormat)
    ));
}

/// SOI, DQT, SOF0 with `w`×`h`, DHT-less SOS: enough header for any reader to size the image.
fn crafted_header(w: u16, h: u16) -> Vec<u8> {
    let mut v = vec![0xFF, 0xD8];
    v.extend_from_slice(&[0xFF, 0xDB, 0, 67, 0]);
    v.extend_from_slice(&[1u8; 64]);
    v.extend_from_slice(&[0xFF, 0xC0, 0, 17, 8]);
    v.extend_from_slice(&h.to_be_bytes());
    v.extend_from_slice(&w.to_be_bytes());
    v.extend_from_slice(&[3, 1, 0x22, 0, 2, 0x11, 0, 3, 0x11, 0]);
    v.extend_from_slice(&[0xFF, 0xDA, 0, 12, 3, 1, 0, 2, 0, 3, 0, 0, 63, 0]);
    v.extend_from_slice(&[0u8; 64]);
    v.extend_from_slice(&[0xFF, 0xD9]);
    v
}

#[test]
fn decompression_bomb_header_is_refused_before_decoding() {
    let bomb = crafted_header(50_000, 50_000);
    let t = Instant::now();
    let r = resize_jpeg(&bomb, &Job::parse("500x500").unwrap());
    let took = t.elapsed();
    match r {
        Err(Error::TooLarge { what, value, .. }) => {
            assert_eq!(what, "input pixels");
            assert_eq!(value, 2_500_000_000);
        }
        other => panic!("bomb not refused: {other:?}"),
    }
    assert!(took.as_millis() < 50, "took {took:?}");
    // Output limit: a small input asked to grow past the output limit.
    let mut job = Job::parse("100000x100000").unwrap();
    job.limits.max_output_pixels = 1_000_000;
    assert!(matches!(
        resize_jpeg(&gradient_jpeg(64, 64, 80), &job),
        Err(Error::TooLarge {
            what: "output pixels",
            ..
        })
    ));
    let mut job = Job::parse("10x10").unwrap();
    job.limits.max_input_bytes = 100;
    assert!(matches!(
        resize_jpeg(&gradient_jpeg(64, 64, 80), &job),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn cmyk_and_12_bit_jpegs_are_refused_clearly() {
    let mut cmyk = crafted_header(64, 64);
    // Four components: patch the SOF0 length and count, add a component.
    let sof = cmyk.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    cmyk[sof + 3] = 20;
    cmyk[sof + 9] = 4;
    cmyk.splice(sof + 19..sof + 19, [4u8, 0x11, 0]);
    match resize_jpeg(&cmyk, &Job::parse("10x10").unwrap()) {
        Err(Error::Unsupported(m)) => assert!(m.contains("CMYK"), "{m}"),
        other => panic!("CMYK not refused: {other:?}"),
    }
    let mut twelve = crafted_header(64, 64);
    twelve[sof + 4] = 12;
    assert!(matches!(
        resize_jpeg(&twelve, &Job::parse("10x10").unwrap()),
        Err(Error::Unsupported(_))
    ));
}

#[test]
fn quality_estimate_finds_the_encoding_quality() {
    for q in [50, 75, 85, 92, 100] {
        let jpeg = gradient_jpeg(64, 64, q);
        let est = i32::from(jpeg_quality(&jpeg).unwrap());
        assert!((est - q).abs() <= 1, "encoded at {q}, estimated {est}");
        // And the engine writes that quality when none is given.
        let out = resize_jpeg(&jpeg, &Job::parse("32x32").unwrap()).unwrap();
        assert_eq!(out.quality, Some(est as u8));
        assert_eq!(jpeg_quality(&out.data).unwrap(), est as u8);
    }
}

#[test]
fn defaults_follow_imagemagick() {
    let jpeg = gradient_jpeg(400, 300, 85);
    // Shrinking: Lanczos; the input's 4:2:0 is kept even when asked for quality 95.
    let mut job = Job::parse("100x100").unwrap();
    job.quality = Some(95);
    let out = resize_jpeg(&jpeg, &job).unwrap();
    assert_eq!(out.filter, Some(Filter::Lanczos3));
    assert_eq!(out.sampling, Some(Sampling::S420));
    // A 4:4:4 input stays 4:4:4; an explicit factor wins.
    let j444 = encode_rgb(&decode_rgb(&jpeg).2, 400, 300, 85, turbojpeg::Subsamp::None);
    assert_eq!(
        resize_jpeg(&j444, &job).unwrap().sampling,
        Some(Sampling::S444)
    );
    job.sampling = Some("2x1,1x1,1x1".parse().unwrap());
    assert_eq!(
        resize_jpeg(&j444, &job).unwrap().sampling,
        Some(Sampling::S422)
    );
    // Enlarging: Mitchell. Same size: no resample.
    let up = resize_jpeg(&jpeg, &Job::parse("800x800").unwrap()).unwrap();
    assert_eq!(
        (up.width, up.height, up.filter),
        (800, 600, Some(Filter::Mitchell))
    );
    let same = resize_jpeg(&jpeg, &Job::parse("400x300").unwrap()).unwrap();
    assert_eq!(same.filter, None);
    // The DCT shrink leaves at least 3x after 1/2, 8x after 1/4 or 1/8: 800x600 → 20x15
    // decodes at 1/4 (200x150; 1/8 would leave 100x75 < 8x); 400x300 → 50x38 at 1/2 (200x150).
    let big = gradient_jpeg(800, 600, 85);
    let small = resize_jpeg(&big, &Job::parse("20x20").unwrap()).unwrap();
    assert_eq!(
        (small.width, small.height, small.decode_shrink),
        (20, 15, 4)
    );
    let small = resize_jpeg(&big, &Job::parse("40x40").unwrap()).unwrap();
    assert_eq!(small.decode_shrink, 2);
    let small = resize_jpeg(&jpeg, &Job::parse("50x50").unwrap()).unwrap();
    assert_eq!(
        (small.width, small.height, small.decode_shrink),
        (50, 38, 2)
    );
}

#[test]
fn every_filter_and_option_runs() {
    let jpeg = gradient_jpeg(300, 200, 85);
    for f in [
        "point",
        "box",
        "triangle",
        "bilinear",
        "catrom",
        "catmull-rom",
        "mitchell",
        "gaussian",
        "lanczos",
        "Lanczos3",
        "lanczossharp",
        "nearest",
    ] {
        let mut job = Job::parse("77x77!").unwrap();
        job.filter = Some(f.parse().unwrap());
        job.progressive = true;
        let out = resize_jpeg(&jpeg, &job).unwrap();
        let (w, h, _) = decode_rgb(&out.data);
        assert_eq!((w, h), (77, 77), "{f}");
    }
    assert!("sinc2".parse::<Filter>().is_err());
    assert!("3:1:1".parse::<Sampling>().is_err());
}

#[test]
fn png_in_and_out() {
    let jpeg = gradient_jpeg(120, 90, 90);
    let mut job = Job::parse("60x60").unwrap();
    job.format = Some(Format::Png);
    let png = resize_jpeg(&jpeg, &job).unwrap();
    assert_eq!((png.format, png.width, png.height), (Format::Png, 60, 45));
    // PNG back to JPEG, and a truncated PNG is an error.
    let mut job = Job::parse("30x30").unwrap();
    job.format = Some(Format::Jpeg);
    let back = resize(&png.data, &job).unwrap();
    assert_eq!((back.width, back.height, back.quality), (30, 23, Some(92)));
    assert_eq!(decode_rgb(&back.data).0, 30);
    for k in 1..8 {
        assert!(
            resize(&png.data[..png.data.len() * k / 8], &job).is_err(),
            "png cut {k}/8"
        );
    }
}

#[test]
fn gray_jpeg_stays_gray() {
    let px: Vec<u8> = (0..100 * 80).map(|i| (i % 256) as u8).collect();
    let image = turbojpeg::Image {
        pixels: px.as_slice(),
        width: 100,
        pitch: 100,
        height: 80,
        format: turbojpeg::PixelFormat::GRAY,
    };
    let jpeg = turbojpeg::compress(image, 90, turbojpeg::Subsamp::Gray)
        .unwrap()
        .to_vec();
    let out = resize_jpeg(&jpeg, &Job::parse("50%").unwrap()).unwrap();
    assert_eq!((out.width, out.height, out.sampling), (50, 40, None));
    let h = turbojpeg::read_header(&out.data).unwrap();
    assert_eq!(h.subsamp, turbojpeg::Subsamp::Gray);
}
