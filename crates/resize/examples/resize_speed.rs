//! Throughput: every JPEG of a directory fitted to 500×500 at quality 85 on all cores.
//!
//! `cargo run --release -p remora-resize --example resize_speed -- DIR [ROUNDS]`
//! prints images/s and input Mpx/s (files are read into memory first; encode included).

use rayon::prelude::*;
use remora_resize::{resize_jpeg, Job};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .unwrap_or_else(|| "/usr/share/doc/opencv-doc/examples/data".into());
    let rounds: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(5);
    let mut files: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .expect("read dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"))
        })
        .map(|p| std::fs::read(p).expect("read"))
        .collect();
    files.retain(|f| remora_resize::jpeg_quality(f).is_ok());
    let mut job = Job::parse("500x500").unwrap();
    job.quality = Some(85);
    let pixels: u64 = files
        .iter()
        .map(|f| {
            let o = resize_jpeg(f, &job).expect("resize");
            u64::from(o.input_width) * u64::from(o.input_height)
        })
        .sum();
    let t = Instant::now();
    for _ in 0..rounds {
        files.par_iter().for_each(|f| {
            let out = resize_jpeg(f, &job).expect("resize");
            std::hint::black_box(out);
        });
    }
    let s = t.elapsed().as_secs_f64();
    let n = (files.len() * rounds) as f64;
    println!(
        "{} images x {rounds} rounds on {} threads: {:.1} images/s, {:.1} input Mpx/s",
        files.len(),
        rayon::current_num_threads(),
        n / s,
        (pixels * rounds as u64) as f64 / 1e6 / s
    );
}
