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

/// The RGB gradient of [`gradient_jpeg`] as a progressive JPEG at quality 85 (4:2:0).
pub fn progressive_jpeg(w: usize, h: usize) -> Vec<u8> {
    let (_, _, px) = decode_rgb(&gradient_jpeg(w, h, 95));
    let mut c = turbojpeg::Compressor::new().expect("compressor");
    c.set_quality(85).expect("quality");
    c.set_subsamp(turbojpeg::Subsamp::Sub2x2).expect("subsamp");
    c.set_progressive(true).expect("progressive");
    let image = turbojpeg::Image {
        pixels: &px[..],
        width: w,
        pitch: w * 3,
        height: h,
        format: turbojpeg::PixelFormat::RGB,
    };
    c.compress_to_vec(image).expect("encode")
}

/// A progressive-JPEG scan bomb: a valid `w`×`h` gray progressive JPEG (a smooth gradient at
/// quality 20) with `extra` more AC scans appended before its EOI. Each extra scan is a few
/// bytes (a Huffman table whose only code is a 14-bit end-of-band run, so a handful of codes
/// skip every block), yet a decoder visits every block of the image once per scan: 20,000
/// scans over 7000×7000 pixels cost libjpeg-turbo minutes of CPU for a 1 MB file.
pub fn scan_bomb(w: usize, h: usize, extra: usize) -> Vec<u8> {
    let px: Vec<u8> = (0..w * h)
        .map(|i| (((i % w) * 255 / w.max(1) + (i / w) * 255 / h.max(1)) / 2) as u8)
        .collect();
    let mut c = turbojpeg::Compressor::new().expect("compressor");
    c.set_quality(20).expect("quality");
    c.set_subsamp(turbojpeg::Subsamp::Gray).expect("subsamp");
    c.set_progressive(true).expect("progressive");
    let image = turbojpeg::Image {
        pixels: &px[..],
        width: w,
        pitch: w,
        height: h,
        format: turbojpeg::PixelFormat::GRAY,
    };
    let mut jpeg = c.compress_to_vec(image).expect("encode");
    assert_eq!(jpeg[jpeg.len() - 2..], [0xFF, 0xD9]);
    jpeg.truncate(jpeg.len() - 2);
    // AC table 3: one code of length 1 ("0") for symbol 0xE0, an EOB run of 2^14 + 14 bits.
    let mut dht = vec![0xFF, 0xC4, 0x00, 0x14, 0x13, 1];
    dht.extend_from_slice(&[0; 15]);
    dht.push(0xE0);
    jpeg.extend_from_slice(&dht);
    // One scan: component 1 with AC table 3, bands 1–63, Ah = Al = 0; runs over every block.
    let blocks = w.div_ceil(8) * h.div_ceil(8);
    let runs = blocks.div_ceil(32_767).max(1);
    let mut bits = BitWriter::default();
    let mut left = blocks;
    for i in 0..runs {
        let run = (left / (runs - i)).clamp(16_384, 32_767);
        left = left.saturating_sub(run);
        bits.put(0, 1);
        bits.put((run - 16_384) as u32, 14);
    }
    let mut scan = vec![0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x03, 0x01, 0x3F, 0x00];
    scan.extend_from_slice(&bits.finish());
    for _ in 0..extra {
        jpeg.extend_from_slice(&scan);
    }
    jpeg.extend_from_slice(&[0xFF, 0xD9]);
    jpeg
}

/// Bits into bytes, most significant first, 0xFF stuffed with 0x00, padded with ones.
#[derive(Default)]
struct BitWriter {
    out: Vec<u8>,
    acc: u32,
    n: u32,
}

impl BitWriter {
    fn put(&mut self, v: u32, len: u32) {
        for i in (0..len).rev() {
            self.acc = (self.acc << 1) | ((v >> i) & 1);
            self.n += 1;
            if self.n == 8 {
                self.byte();
            }
        }
    }

    fn byte(&mut self) {
        let b = self.acc as u8;
        self.out.push(b);
        if b == 0xFF {
            self.out.push(0);
        }
        self.acc = 0;
        self.n = 0;
    }

    fn finish(mut self) -> Vec<u8> {
        if self.n > 0 {
            while self.n < 8 {
                self.acc = (self.acc << 1) | 1;
                self.n += 1;
            }
            self.byte();
        }
        self.out
    }
}
