//! `remora resize --server URL`: the same files sent to a running `remora resize serve` with
//! the service's client, many requests in flight; outputs, reporting and exit code as a local
//! batch.
use std::time::Instant;

use anyhow::{bail, Context};
use remora_resize::client::{Client, Request};
use remora_resize::Job;

use super::batch::{progress, say, Item, Plan, Summary};
use super::JobOpts;

/// The input's pixel count from its header (JPEG or PNG), for the summary line.
pub fn header_pixels(data: &[u8]) -> Option<u64> {
    if data.starts_with(b"\x89PNG\r\n\x1a\n") && data.len() >= 24 {
        let w = u32::from_be_bytes(data[16..20].try_into().ok()?);
        let h = u32::from_be_bytes(data[20..24].try_into().ok()?);
        return Some(u64::from(w) * u64::from(h));
    }
    let h = turbojpeg::read_header(data).ok()?;
    Some(h.width as u64 * h.height as u64)
}

/// Sends the plan's files to the service at `url`.
pub fn run(
    url: &str,
    plan: &Plan,
    opts: &JobOpts,
    job: &Job,
    in_flight: usize,
) -> anyhow::Result<()> {
    let refused = opts.local_only();
    if !refused.is_empty() {
        bail!(
            "{} cannot be sent to a resize service; run without --server",
            refused.join(", ")
        );
    }
    let client = Client::new(url).with_context(|| format!("--server {url}"))?;
    // Every item of a plan has the same output format (-o's or -format's, else the input's).
    let req = Request {
        geometry: opts.geometry_text(),
        quality: job.quality,
        format: plan.items.first().and_then(|i| i.format),
        filter: opts.filter.as_deref(),
        strip: job.strip,
    };
    let single = plan.out_dir.is_none();
    let bar = if single {
        None
    } else {
        progress(plan.items.len())
    };
    let t0 = Instant::now();
    let (mut failed, mut pixels) = (0usize, 0u64);
    let mut fail = |line: String| {
        failed += 1;
        say(&bar, &format!("remora resize: {line}"));
    };
    // Chunks bound the memory held (inputs and outputs of one chunk at a time).
    for chunk in plan.items.chunks(in_flight.max(1) * 4) {
        let mut sent: Vec<(&Item, u64)> = Vec::with_capacity(chunk.len());
        let mut images = Vec::with_capacity(chunk.len());
        for item in chunk {
            match std::fs::read(&item.input) {
                Ok(d) => {
                    sent.push((item, header_pixels(&d).unwrap_or(0)));
                    images.push(d);
                }
                Err(e) => fail(format!("reading {}: {e}", item.input.display())),
            }
        }
        let results = client.resize_many(images, &req, in_flight);
        for ((item, px), r) in sent.into_iter().zip(results) {
            match r {
                Ok(out) => match std::fs::write(&item.output, out) {
                    Ok(()) => pixels += px,
                    Err(e) => fail(format!("writing {}: {e}", item.output.display())),
                },
                Err(e) => fail(format!("{}: {e}", item.input.display())),
            }
        }
        if let Some(b) = &bar {
            b.inc(chunk.len() as u64);
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let s = Summary {
        files: plan.items.len(),
        failed,
        input_pixels: pixels,
        seconds: t0.elapsed().as_secs_f64(),
        // The service does not say which engine it used.
        engines: Vec::new(),
    };
    if let Some(dir) = &plan.out_dir {
        println!("{}; wrote {} (server {url})", s.line(), dir.display());
    }
    if s.failed > 0 {
        if single {
            bail!("1 file failed");
        }
        bail!("{} of {} files failed", s.failed, s.files);
    }
    Ok(())
}
