//! The separable resample, by fast_image_resize (SIMD convolution on 8-bit pixels).

use crate::error::{Error, Result};
use crate::options::Filter;
use crate::orient::Pixels;
use fast_image_resize as fir;

/// ImageMagick's LanczosSharp blur (`resize.c`): the Lanczos window narrowed slightly.
const LANCZOS_SHARP_BLUR: f64 = 0.981_250_564_426_935_6;

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let a = x * std::f64::consts::PI;
        a.sin() / a
    }
}

fn lanczos_sharp(x: f64) -> f64 {
    let x = x / LANCZOS_SHARP_BLUR;
    if x.abs() < 3.0 {
        sinc(x) * sinc(x / 3.0)
    } else {
        0.0
    }
}

/// fast_image_resize's algorithm for one of ImageMagick's filters.
pub(crate) fn algorithm(filter: Filter) -> Result<fir::ResizeAlg> {
    use fir::{FilterType as F, ResizeAlg as A};
    Ok(match filter {
        Filter::Point => A::Nearest,
        Filter::Box => A::Convolution(F::Box),
        Filter::Triangle => A::Convolution(F::Bilinear),
        Filter::CatmullRom => A::Convolution(F::CatmullRom),
        Filter::Mitchell => A::Convolution(F::Mitchell),
        Filter::Gaussian => A::Convolution(F::Gaussian),
        Filter::Lanczos3 => A::Convolution(F::Lanczos3),
        Filter::LanczosSharp => {
            let f = fir::Filter::new("lanczossharp", lanczos_sharp, 3.0 * LANCZOS_SHARP_BLUR)
                .map_err(|e| Error::Resample(e.to_string()))?;
            A::Convolution(F::Custom(f))
        }
    })
}

/// Resizes to `w`×`h`; a copy when the size is unchanged. Alpha (2 or 4 channels) is
/// premultiplied during the resample.
pub(crate) fn resize(src: Pixels, w: u32, h: u32, filter: Option<Filter>) -> Result<Pixels> {
    let (w, h) = (w.max(1), h.max(1));
    if (src.width, src.height) == (w, h) {
        return Ok(src);
    }
    let pixel_type = match src.channels {
        1 => fir::PixelType::U8,
        2 => fir::PixelType::U8x2,
        3 => fir::PixelType::U8x3,
        _ => fir::PixelType::U8x4,
    };
    let channels = src.channels;
    let err = |e: String| Error::Resample(e);
    let src_image = fir::images::Image::from_vec_u8(src.width, src.height, src.data, pixel_type)
        .map_err(|e| err(e.to_string()))?;
    let mut dst = fir::images::Image::new(w, h, pixel_type);
    let options =
        fir::ResizeOptions::new().resize_alg(algorithm(filter.unwrap_or(Filter::Lanczos3))?);
    fir::Resizer::new()
        .resize(&src_image, &mut dst, &options)
        .map_err(|e| err(e.to_string()))?;
    Ok(Pixels {
        data: dst.into_vec(),
        width: w,
        height: h,
        channels,
    })
}
