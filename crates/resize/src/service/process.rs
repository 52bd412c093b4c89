//! The work done on a resize worker: a POSTed image with an ImageMagick geometry, or an
//! imgproxy request's source with its [`Plan`].
//!
//! imgproxy's `fill` is a resize to cover the box (the engine, with an exact `WxH!` geometry
//! worked out by [`plan`]) followed by a crop around the gravity, done by the engine between
//! the orientation and the encode (one pipeline, one memory estimate, one deadline).

use super::imgproxy::{plan, Gravity, Plan, Request};
use super::Failure;
use crate::budget::Stop;
use crate::engine::Crop;
use crate::{png_io, Error, Format, Job, Limits};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A finished image.
#[derive(Debug)]
pub(crate) struct Done {
    pub data: Vec<u8>,
    pub format: Format,
    pub width: u32,
    pub height: u32,
}

impl From<crate::Output> for Done {
    fn from(o: crate::Output) -> Done {
        Done {
            data: o.data,
            format: o.format,
            width: o.width,
            height: o.height,
        }
    }
}

/// The HTTP answer for an engine error.
pub(crate) fn engine_failure(e: Error) -> Failure {
    let msg = e.to_string();
    match e {
        Error::UnknownFormat => Failure::new(415, "unsupported", msg),
        Error::Unsupported(_) => Failure::new(422, "unsupported", msg),
        Error::Truncated(_) | Error::Malformed(_) | Error::Decode(_) => {
            Failure::new(422, "bad_image", msg)
        }
        Error::TooLarge {
            what: "output pixels" | "JPEG output side",
            ..
        } => Failure::new(422, "too_large", msg),
        Error::TooLarge {
            what: "JPEG scans", ..
        } => Failure::new(422, "bad_image", msg),
        Error::TooLarge { .. } => Failure::new(413, "too_large", msg),
        Error::OverBudget { .. } => Failure::new(422, "too_large", msg),
        Error::TimedOut { .. } => Failure::new(503, "timeout", msg),
        Error::Cancelled => Failure::new(503, "shutting_down", msg),
        Error::BadOption(_) | Error::Geometry(_) => Failure::bad_request(msg),
        Error::Encode(_) | Error::Resample(_) | Error::Gpu(_) => Failure::internal(msg),
    }
}

/// `POST /resize`: the engine as it is, stopped at the job's timeout or when `cancel` is set.
pub(crate) fn post(input: &[u8], job: &Job, cancel: &AtomicBool) -> Result<Done, Failure> {
    let stop = Stop::new(job.timeout, Some(cancel));
    crate::engine::run(input, job, None, &stop)
        .map(Done::from)
        .map_err(engine_failure)
}

/// Width and height as displayed (after the EXIF orientation when `auto_rotate`).
fn displayed_size(input: &[u8], auto_rotate: bool) -> Result<(Format, u32, u32), Error> {
    match Format::detect(input) {
        Some(Format::Jpeg) => {
            let h = crate::markers::parse(input)?;
            let o = if auto_rotate {
                crate::jpeg_orientation(input)?
            } else {
                1
            };
            Ok(if crate::orient::swaps_axes(o) {
                (Format::Jpeg, h.height, h.width)
            } else {
                (Format::Jpeg, h.width, h.height)
            })
        }
        Some(Format::Png) => {
            let (w, h) = png_io::dimensions(input)?;
            Ok((Format::Png, w, h))
        }
        None => Err(Error::UnknownFormat),
    }
}

/// How a fill's crop is anchored: halves of the slack on each axis, as
/// [`crop_origin`](super::imgproxy::crop_origin) places it.
fn anchor(g: Gravity) -> (u8, u8) {
    let x = match g {
        Gravity::West | Gravity::NorthWest | Gravity::SouthWest => 0,
        Gravity::East | Gravity::NorthEast | Gravity::SouthEast => 2,
        _ => 1,
    };
    let y = match g {
        Gravity::North | Gravity::NorthWest | Gravity::NorthEast => 0,
        Gravity::South | Gravity::SouthWest | Gravity::SouthEast => 2,
        _ => 1,
    };
    (x, y)
}

/// An imgproxy request's settings from the server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub limits: Limits,
    pub default_quality: u8,
    pub engine: crate::ResampleEngine,
    pub timeout: Option<Duration>,
}

/// An imgproxy request on a loaded source.
pub(crate) fn imgproxy(
    input: &[u8],
    req: &Request,
    s: Settings,
    cancel: &AtomicBool,
) -> Result<Done, Failure> {
    let (in_format, w, h) = displayed_size(input, req.auto_rotate).map_err(engine_failure)?;
    let Plan { resize, crop } = plan(req, w, h);
    let mut job = Job::parse(&format!("{}x{}!", resize.0, resize.1)).map_err(engine_failure)?;
    job.limits = s.limits;
    job.engine = s.engine;
    job.timeout = s.timeout;
    job.strip = req.strip;
    job.auto_orient = req.auto_rotate;
    job.quality = Some(req.quality.unwrap_or(s.default_quality));
    job.format = Some(req.format.unwrap_or(in_format));
    let crop = crop.map(|(cw, ch, g)| Crop {
        width: cw,
        height: ch,
        anchor: anchor(g),
    });
    let stop = Stop::new(job.timeout, Some(cancel));
    crate::engine::run(input, &job, crop, &stop)
        .map(Done::from)
        .map_err(engine_failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::imgproxy::crop_origin;

    #[test]
    fn anchors_place_the_crop_where_crop_origin_does() {
        use Gravity::*;
        for g in [
            Centre, North, South, East, West, NorthWest, NorthEast, SouthWest, SouthEast,
        ] {
            let (ax, ay) = anchor(g);
            for (w, h, cw, ch) in [(600, 300, 300, 300), (7, 9, 2, 4), (5, 5, 5, 5)] {
                let want = crop_origin(w, h, cw, ch, g);
                let got = ((w - cw) * u32::from(ax) / 2, (h - ch) * u32::from(ay) / 2);
                assert_eq!(got, want, "{g:?} {w}x{h} → {cw}x{ch}");
            }
        }
    }
}
