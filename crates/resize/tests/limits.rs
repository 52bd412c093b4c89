//! The engine's limits beyond pixels and bytes (issue 27): the job memory estimate, the JPEG
//! output side, the JPEG scan count and the job's timeout, each refused before the work it
//! guards, with an error that names the limit.
use std::time::{Duration, Instant};

use remora_resize::testing::{gradient_jpeg, progressive_jpeg, scan_bomb};
use remora_resize::{resize, Error, Format, Job, Limits};

#[test]
fn a_job_over_its_memory_limit_is_refused_before_decoding_and_names_the_stage() {
    let jpeg = gradient_jpeg(200, 150, 85);
    // 50,000,000 × 1 RGB as PNG: the pixels and the PNG encoder's rows, over its memory limit.
    let mut job = Job::parse("50000000x1!").unwrap();
    job.format = Some(Format::Png);
    let t = Instant::now();
    match resize(&jpeg, &job) {
        Err(Error::OverBudget { stage, need, limit }) => {
            assert_eq!((stage, limit), ("encode", Limits::DEFAULT_JOB_MEMORY));
            assert!(need > limit, "{need}");
        }
        other => panic!("not refused: {other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    // The message says how much and what the limit is.
    let e = resize(&jpeg, &job).unwrap_err().to_string();
    assert!(e.contains("512 MiB") && e.contains("encode"), "{e}");
    // An ordinary job is far under it, and a tight limit refuses it too.
    let mut small = Job::parse("100x100").unwrap();
    assert!(resize(&jpeg, &small).is_ok());
    small.limits.max_job_memory = 64 << 10;
    assert!(matches!(
        resize(&jpeg, &small),
        Err(Error::OverBudget { .. })
    ));
}

#[test]
fn a_jpeg_output_side_past_libjpegs_limit_is_refused_at_once() {
    let jpeg = gradient_jpeg(200, 150, 85);
    let t = Instant::now();
    match resize(&jpeg, &Job::parse("50000000x1!").unwrap()) {
        Err(Error::TooLarge { what, value, limit }) => {
            assert_eq!(
                (what, value, limit),
                ("JPEG output side", 50_000_000, 65_500)
            )
        }
        other => panic!("not refused: {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_millis(100));
}

#[test]
fn a_long_thin_resize_within_the_limit_is_served() {
    // Gray 200×150 to 2,000,000×1 PNG: tiled tables, a few MiB.
    let px: Vec<u8> = (0..200 * 150).map(|i| (i % 200) as u8).collect();
    let image = turbojpeg::Image {
        pixels: &px[..],
        width: 200,
        pitch: 200,
        height: 150,
        format: turbojpeg::PixelFormat::GRAY,
    };
    let gray = turbojpeg::compress(image, 90, turbojpeg::Subsamp::Gray)
        .unwrap()
        .to_vec();
    let mut job = Job::parse("2000000x1!").unwrap();
    job.format = Some(Format::Png);
    let out = resize(&gray, &job).unwrap();
    assert_eq!((out.width, out.height), (2_000_000, 1));
}

#[test]
fn a_scan_bomb_is_refused_from_its_scan_count_and_ordinary_progressive_files_pass() {
    let bomb = scan_bomb(2000, 2000, 5000);
    let t = Instant::now();
    match resize(&bomb, &Job::parse("100x100").unwrap()) {
        Err(Error::TooLarge { what, value, limit }) => {
            assert_eq!(what, "JPEG scans");
            assert!(value > 5000, "{value}");
            assert_eq!(limit, 100);
        }
        other => panic!("not refused: {other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // Under the limit the same construction decodes (the extra scans are harmless).
    assert!(resize(&scan_bomb(256, 256, 50), &Job::parse("64x64").unwrap()).is_ok());
    assert!(resize(&progressive_jpeg(320, 240), &Job::parse("64x64").unwrap()).is_ok());
    // Lowered, the limit refuses an ordinary progressive file (about 10 scans).
    let mut job = Job::parse("64x64").unwrap();
    job.limits.max_scans = 2;
    assert!(matches!(
        resize(&progressive_jpeg(320, 240), &job),
        Err(Error::TooLarge {
            what: "JPEG scans",
            ..
        })
    ));
}

#[test]
fn a_job_past_its_timeout_stops_with_the_stage_it_was_in() {
    let jpeg = gradient_jpeg(640, 480, 85);
    let mut job = Job::parse("320x240").unwrap();
    job.timeout = Some(Duration::ZERO);
    match resize(&jpeg, &job) {
        Err(Error::TimedOut { stage, limit }) => {
            assert_eq!((stage, limit), ("decode", Duration::ZERO))
        }
        other => panic!("not stopped: {other:?}"),
    }
    job.timeout = Some(Duration::from_secs(60));
    assert!(resize(&jpeg, &job).is_ok());
}
