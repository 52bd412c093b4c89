//! `remora bench resize`'s SSIM check: every tool's output of each shrunk image against the
//! f64 Lanczos3 reference of its full-size decode, and the summaries the report gives of it.
use std::path::{Path, PathBuf};

use anyhow::Context;
use rayon::prelude::*;
use remora_resize::Job;
use serde_json::{json, Value};

use super::{BenchArgs, Inputs, PeerTimes};
use crate::resize::ssim::{self, Rgb};

/// SSIM (luma) of each output against the f64 Lanczos3 reference of the full-size decode
/// (shrinks only).
#[derive(Default, Clone)]
pub(super) struct Quality {
    /// The input's file name.
    pub(super) name: String,
    /// remora's output.
    pub(super) ours: f64,
    /// The reference itself encoded at the same quality and remora's chroma sampling.
    pub(super) reference: f64,
    /// vipsthumbnail's and ImageMagick's outputs (NaN when missing or of another size).
    pub(super) vips: f64,
    pub(super) imagemagick: f64,
}

fn ssim_of(path: Option<PathBuf>, truth: &[f64], w: usize, h: usize) -> f64 {
    let Some(img) = path
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|d| ssim::decode(&d).ok())
    else {
        return f64::NAN;
    };
    if (img.w, img.h) != (w, h) {
        return f64::NAN;
    }
    ssim::ssim(&ssim::luma(&img), truth, w, h)
}

fn quality_of(
    input: &Path,
    job: &Job,
    vips_out: Option<PathBuf>,
    im_out: Option<PathBuf>,
) -> anyhow::Result<Option<Quality>> {
    let data = std::fs::read(input)?;
    let out = remora_resize::resize_jpeg(&data, job)?;
    let full: Rgb = ssim::decode(&data)?;
    let (tw, th) = (out.width as usize, out.height as usize);
    if tw >= full.w || th >= full.h {
        // Not a shrink: remora (as ImageMagick) enlarges with Mitchell, not the Lanczos3 of the
        // reference, so the comparison would say nothing.
        return Ok(None);
    }
    let truth = ssim::reference(&full, tw, th);
    let truth_y = ssim::luma(&truth);
    let ours = ssim::decode(&out.data)?;
    let ref_jpeg = ssim::encode(&truth, out.quality.unwrap_or(85), out.sampling)?;
    let reference = ssim::decode(&ref_jpeg)?;
    Ok(Some(Quality {
        name: input
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned(),
        ours: ssim::ssim(&ssim::luma(&ours), &truth_y, tw, th),
        reference: ssim::ssim(&ssim::luma(&reference), &truth_y, tw, th),
        vips: ssim_of(vips_out, &truth_y, tw, th),
        imagemagick: ssim_of(im_out, &truth_y, tw, th),
    }))
}

/// The file whose value is lowest, with that value.
pub(super) fn worst(qs: &[Quality], value: impl Fn(&Quality) -> f64) -> Value {
    qs.iter()
        .filter(|q| value(q).is_finite())
        .min_by(|a, b| value(a).total_cmp(&value(b)))
        .map_or(Value::Null, |q| json!([q.name, value(q)]))
}

/// The minimum of the finite values, `None` when there is none.
pub(super) fn min_of(v: impl Iterator<Item = f64>) -> Option<f64> {
    v.filter(|x| x.is_finite()).reduce(f64::min)
}

/// The SSIM of every shrunk image's outputs (none with `--no-ssim`), on `threads` cores.
pub(super) fn qualities(
    a: &BenchArgs,
    inp: &Inputs,
    peers: &PeerTimes,
) -> anyhow::Result<Vec<Quality>> {
    if a.no_ssim {
        return Ok(Vec::new());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(inp.threads)
        .build()?;
    let out_of = |tool: &str, ok: bool, f: &Path| -> Option<PathBuf> {
        ok.then(|| inp.dir(tool).join(f.file_name().unwrap_or_default()))
    };
    Ok(pool
        .install(|| {
            inp.files
                .par_iter()
                .map(|f| {
                    quality_of(
                        f,
                        &inp.job,
                        out_of("vips", peers.vips.is_some(), f).map(|p| p.with_extension("jpg")),
                        out_of("im", peers.im.is_some(), f),
                    )
                    .with_context(|| format!("SSIM of {}", f.display()))
                })
                .collect::<anyhow::Result<Vec<_>>>()
        })?
        .into_iter()
        .flatten()
        .collect())
}
