//! The peers `remora bench resize` runs beside remora, as a user would run them:
//! `vipsthumbnail` (one process over all files) and ImageMagick's `convert` (one process per
//! image, with and without `-define jpeg:size`).
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{bail, Context};

pub(super) const CONVERT: &str = "/usr/bin/convert";

/// Empties `p` (made anew): where each tool writes its outputs, before each run.
pub(super) fn fresh_dir(p: &Path) -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(p);
    std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))
}

/// A program on PATH.
pub(super) fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// One vipsthumbnail process over all files.
pub(super) fn run_vips(
    vips: &Path,
    files: &[PathBuf],
    out: &Path,
    geometry: &str,
    quality: u8,
    threads: usize,
) -> anyhow::Result<f64> {
    fresh_dir(out)?;
    let t0 = Instant::now();
    let status = Command::new(vips)
        .env("VIPS_CONCURRENCY", threads.to_string())
        .args(["-s", geometry, "-o"])
        .arg(format!("{}/%s.jpg[Q={quality}]", out.display()))
        .args(files)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("running {}", vips.display()))?;
    let s = t0.elapsed().as_secs_f64();
    if !status.success() {
        bail!("{} exited with {status}", vips.display());
    }
    Ok(s)
}

/// `threads` `convert` processes at a time, one per image.
pub(super) fn run_convert(
    files: &[PathBuf],
    out: &Path,
    geometry: &str,
    quality: u8,
    threads: usize,
    size: Option<&str>,
) -> anyhow::Result<f64> {
    fresh_dir(out)?;
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(f) = files.get(i) else { break };
                let mut c = Command::new(CONVERT);
                c.env("MAGICK_THREAD_LIMIT", "1");
                if let Some(sz) = size {
                    c.args(["-define", &format!("jpeg:size={sz}")]);
                }
                let ok = c
                    .arg(f)
                    .args(["-resize", geometry, "-quality", &quality.to_string()])
                    .arg(out.join(f.file_name().unwrap_or_default()))
                    .stdin(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if !ok {
                    failed.store(true, Ordering::Relaxed);
                }
            });
        }
    });
    let s = t0.elapsed().as_secs_f64();
    if failed.into_inner() {
        bail!("{CONVERT} failed on some files");
    }
    Ok(s)
}

/// `-define jpeg:size=` for a `WxH` geometry: twice the box, as for 500x500 → 1000x1000.
pub(super) fn jpeg_size(geometry: &str) -> Option<String> {
    let g = remora_resize::Geometry::parse(geometry).ok()?;
    if g.percent || g.area || g.aspect_ratio {
        return None;
    }
    let (w, h) = (g.width?, g.height.or(g.width)?);
    Some(format!("{}x{}", (2.0 * w).round(), (2.0 * h).round()))
}
