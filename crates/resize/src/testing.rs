//! Helpers for tests and examples: synthetic images encoded with libjpeg-turbo.

/// An RGB gradient with a few edges, `w`×`h`, encoded as a JPEG at `quality` (4:2:0).
pub fn gradient_jpeg(w: usize, h: usize, quality: i32) -> Vec<u8> {
    let mut px = vec![0u8; w * h * 3];
    for y in 0..h {
        for x in 0..w {
            let i = (y * w + x) * 3;
            px[i] = (x * 255 / w.max(1)) as u8;
            px[i + 1] = (y * 255 / h.max(1)) as u8;
            px[i + 2] = if (x / 8 + y / 8) % 2 == 0 { 200 } else { 40 };
        }
    }
    encode_rgb(&px, w, h, quality, turbojpeg::Subsamp::Sub2x2)
}

/// Encodes packed RGB pixels as a JPEG.
pub fn encode_rgb(
    px: &[u8],
    w: usize,
    h: usize,
    quality: i32,
    subsamp: turbojpeg::Subsamp,
) -> Vec<u8> {
    let image = turbojpeg::Image {
        pixels: px,
        width: w,
        pitch: w * 3,
        height: h,
        format: turbojpeg::PixelFormat::RGB,
    };
    turbojpeg::compress(image, quality, subsamp)
        .expect("encode")
        .to_vec()
}

/// Decodes a JPEG to packed RGB (width, height, pixels).
pub fn decode_rgb(jpeg: &[u8]) -> (usize, usize, Vec<u8>) {
    let img = turbojpeg::decompress(jpeg, turbojpeg::PixelFormat::RGB).expect("decode");
    assert_eq!(img.pitch, img.width * 3);
    (img.width, img.height, img.pixels)
}
