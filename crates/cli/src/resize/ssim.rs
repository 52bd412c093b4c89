//! The quality check of `remora bench resize`: JPEG decode and encode around
//! `remora_resize::fidelity`'s reference resize and luma SSIM.

use remora_resize::{fidelity, Sampling};

/// Packed RGB pixels.
pub struct Rgb {
    /// Width.
    pub w: usize,
    /// Height.
    pub h: usize,
    /// `w·h·3` bytes.
    pub px: Vec<u8>,
}

/// Decodes a JPEG to RGB.
pub fn decode(jpeg: &[u8]) -> anyhow::Result<Rgb> {
    let img = turbojpeg::decompress(jpeg, turbojpeg::PixelFormat::RGB)?;
    let (w, h) = (img.width, img.height);
    let px = if img.pitch == w * 3 {
        img.pixels
    } else {
        img.pixels
            .chunks(img.pitch)
            .flat_map(|r| r[..w * 3].iter().copied())
            .collect()
    };
    Ok(Rgb { w, h, px })
}

/// Encodes RGB as a JPEG at `quality` with the given chroma subsampling (`None`: gray).
pub fn encode(img: &Rgb, quality: u8, sampling: Option<Sampling>) -> anyhow::Result<Vec<u8>> {
    use turbojpeg::Subsamp;
    let image = turbojpeg::Image {
        pixels: img.px.as_slice(),
        width: img.w,
        pitch: img.w * 3,
        height: img.h,
        format: turbojpeg::PixelFormat::RGB,
    };
    let sub = match sampling {
        None => Subsamp::Gray,
        Some(Sampling::S444) => Subsamp::None,
        Some(Sampling::S422) => Subsamp::Sub2x1,
        Some(Sampling::S420) => Subsamp::Sub2x2,
        Some(Sampling::S440) => Subsamp::Sub1x2,
        Some(Sampling::S411) => Subsamp::Sub4x1,
    };
    Ok(turbojpeg::compress(image, i32::from(quality), sub)?.to_vec())
}

/// The reference resize of `img` to `tw`×`th`.
pub fn reference(img: &Rgb, tw: usize, th: usize) -> Rgb {
    Rgb {
        w: tw,
        h: th,
        px: fidelity::reference(&img.px, img.w, img.h, tw, th),
    }
}

/// BT.601 luma.
pub fn luma(img: &Rgb) -> Vec<f64> {
    fidelity::luma(&img.px)
}

pub use fidelity::ssim;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_planes_have_ssim_one_and_a_flat_image_resizes_flat() {
        let img = Rgb {
            w: 40,
            h: 30,
            px: vec![100; 40 * 30 * 3],
        };
        let r = reference(&img, 10, 7);
        assert!(r.px.iter().all(|&v| v == 100));
        let y = luma(&r);
        assert!((ssim(&y, &y, 10, 7) - 1.0).abs() < 1e-12);
    }
}
