//! The work done on a resize worker: a POSTed image with an ImageMagick geometry, or an
//! imgproxy request's source with its [`Plan`].
//!
//! imgproxy's `fill` is a resize to cover the box (the engine, with an exact `WxH!` geometry
//! worked out by [`plan`]) followed by a crop around the gravity. The engine has no crop, so a
//! fill asks it for a lossless PNG at the cover size, decodes that, crops, and encodes the
//! requested format here (JPEG: libjpeg-turbo at the quality, 4:4:4 at ≥ 90 else 4:2:0, as the
//! engine does; metadata is not copied on this path — imgproxy strips it by default anyway).

use super::imgproxy::{crop_origin, plan, Gravity, Plan, Request};
use super::Failure;
use crate::orient::Pixels;
use crate::{png_io, Error, Format, Job, Limits};

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
            what: "output pixels",
            ..
        } => Failure::new(422, "too_large", msg),
        Error::TooLarge { .. } => Failure::new(413, "too_large", msg),
        Error::BadOption(_) | Error::Geometry(_) => Failure::bad_request(msg),
        Error::Encode(_) | Error::Resample(_) | Error::Gpu(_) => Failure::internal(msg),
    }
}

/// `POST /resize`: the engine as it is.
pub(crate) fn post(input: &[u8], job: &Job) -> Result<Done, Failure> {
    crate::resize(input, job)
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

/// An imgproxy request on a loaded source.
pub(crate) fn imgproxy(
    input: &[u8],
    req: &Request,
    limits: Limits,
    default_quality: u8,
    engine: crate::Engine,
) -> Result<Done, Failure> {
    let (in_format, w, h) = displayed_size(input, req.auto_rotate).map_err(engine_failure)?;
    let Plan { resize, crop } = plan(req, w, h);
    let mut job = Job::parse(&format!("{}x{}!", resize.0, resize.1)).map_err(engine_failure)?;
    job.limits = limits;
    job.engine = engine;
    job.strip = req.strip;
    job.auto_orient = req.auto_rotate;
    let quality = req.quality.unwrap_or(default_quality);
    job.quality = Some(quality);
    let format = req.format.unwrap_or(in_format);
    job.format = Some(format);
    let Some((cw, ch, gravity)) = crop else {
        return post(input, &job);
    };
    job.format = Some(Format::Png);
    job.strip = true;
    let covered = crate::resize(input, &job).map_err(engine_failure)?;
    let pixels = png_io::decode(&covered.data).map_err(engine_failure)?;
    let pixels = crop_pixels(&pixels, cw, ch, gravity);
    let data = match format {
        Format::Png => png_io::encode(&pixels),
        Format::Jpeg => encode_jpeg(&pixels, quality),
    }
    .map_err(engine_failure)?;
    Ok(Done {
        data,
        format,
        width: pixels.width,
        height: pixels.height,
    })
}

/// The `cw`×`ch` part of `p` anchored at `g` (clamped to the image).
fn crop_pixels(p: &Pixels, cw: u32, ch: u32, g: Gravity) -> Pixels {
    let (cw, ch) = (cw.min(p.width), ch.min(p.height));
    let (x, y) = crop_origin(p.width, p.height, cw, ch, g);
    let c = usize::from(p.channels);
    let stride = p.width as usize * c;
    let row = cw as usize * c;
    let mut data = Vec::with_capacity(row * ch as usize);
    for r in y as usize..(y + ch) as usize {
        let start = r * stride + x as usize * c;
        data.extend_from_slice(&p.data[start..start + row]);
    }
    Pixels {
        data,
        width: cw,
        height: ch,
        channels: p.channels,
    }
}

fn encode_jpeg(p: &Pixels, quality: u8) -> crate::Result<Vec<u8>> {
    let err = |e: turbojpeg::Error| Error::Encode(e.to_string());
    let c = usize::from(p.channels);
    // Alpha is dropped for JPEG.
    let (data, gray) = match c {
        1 => (std::borrow::Cow::Borrowed(p.data.as_slice()), true),
        3 => (std::borrow::Cow::Borrowed(p.data.as_slice()), false),
        _ => (
            std::borrow::Cow::Owned(
                p.data
                    .chunks_exact(c)
                    .flat_map(|px| px[..c - 1].iter().copied())
                    .collect(),
            ),
            c == 2,
        ),
    };
    let (format, channels, subsamp) = if gray {
        (turbojpeg::PixelFormat::GRAY, 1, turbojpeg::Subsamp::Gray)
    } else if quality >= 90 {
        (turbojpeg::PixelFormat::RGB, 3, turbojpeg::Subsamp::None)
    } else {
        (turbojpeg::PixelFormat::RGB, 3, turbojpeg::Subsamp::Sub2x2)
    };
    let mut enc = turbojpeg::Compressor::new().map_err(err)?;
    enc.set_quality(i32::from(quality.clamp(1, 100)))
        .map_err(err)?;
    enc.set_subsamp(subsamp).map_err(err)?;
    enc.set_optimize(true).map_err(err)?;
    let w = p.width as usize;
    let image = turbojpeg::Image {
        pixels: &data[..],
        width: w,
        pitch: w * channels,
        height: p.height as usize,
        format,
    };
    enc.compress_to_vec(image).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crop_takes_the_anchored_window() {
        // 4×2 gray, values = x + 10·y.
        let p = Pixels {
            data: vec![0, 1, 2, 3, 10, 11, 12, 13],
            width: 4,
            height: 2,
            channels: 1,
        };
        assert_eq!(
            crop_pixels(&p, 2, 2, Gravity::Centre).data,
            vec![1, 2, 11, 12]
        );
        assert_eq!(crop_pixels(&p, 2, 1, Gravity::SouthEast).data, vec![12, 13]);
        assert_eq!(crop_pixels(&p, 1, 1, Gravity::NorthWest).data, vec![0]);
    }
}
