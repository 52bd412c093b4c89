//! Any bytes through the whole decode → resample → encode path, with the geometry and options
//! taken from the input's first bytes, under tight limits: every input must give an image or an
//! `Error`, never a panic, an abort or an allocation beyond the limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use remora_resize::{resize, Filter, Format, Job, Limits};

const GEOMETRIES: [&str; 10] = [
    "64x64", "x40", "50%", "31x17!", "40x40^", "100x100>", "200x200<", "1000@", "3:2", "7",
];
const FILTERS: [Filter; 4] = [
    Filter::Lanczos3,
    Filter::Mitchell,
    Filter::Box,
    Filter::LanczosSharp,
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, image)) = data.split_first() else {
        return;
    };
    let Ok(mut job) = Job::parse(GEOMETRIES[usize::from(sel) % GEOMETRIES.len()]) else {
        return;
    };
    job.filter = Some(FILTERS[usize::from(sel >> 4) % FILTERS.len()]);
    job.thumbnail = sel & 0x08 != 0;
    job.auto_orient = sel & 0x04 != 0;
    job.strip = sel & 0x02 != 0;
    if sel & 0x01 != 0 {
        job.format = Some(Format::Png);
    }
    job.limits = Limits {
        max_input_bytes: 1 << 20,
        max_pixels: 4 << 20,
        max_output_pixels: 1 << 20,
        max_job_memory: 64 << 20,
        max_scans: 100,
    };
    let _ = resize(image, &job);
});
