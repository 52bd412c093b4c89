//! PNG in and out through the `png` crate (8-bit; 16-bit input is reduced, palettes expanded).

use crate::error::{Error, Result};
use crate::orient::Pixels;
use std::io::Cursor;

fn decode_error(e: png::DecodingError) -> Error {
    match e {
        png::DecodingError::IoError(_) => Error::Truncated("PNG data"),
        e => Error::Decode(e.to_string()),
    }
}

/// Width and height from the IHDR chunk, without decoding.
pub(crate) fn dimensions(data: &[u8]) -> Result<(u32, u32)> {
    // Signature (8), IHDR length (4) and type (4), then width and height.
    let b = data.get(16..24).ok_or(Error::Truncated("PNG header"))?;
    if &data[12..16] != b"IHDR" {
        return Err(Error::Malformed("PNG without IHDR first".into()));
    }
    let w = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let h = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    if w == 0 || h == 0 {
        return Err(Error::Malformed(format!("PNG size {w}x{h}")));
    }
    Ok((w, h))
}

/// Decodes to 8-bit gray, gray+alpha, RGB or RGBA.
pub(crate) fn decode(data: &[u8]) -> Result<Pixels> {
    let mut d = png::Decoder::new_with_limits(Cursor::new(data), png::Limits { bytes: usize::MAX });
    d.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut r = d.read_info().map_err(decode_error)?;
    let size = r
        .output_buffer_size()
        .ok_or_else(|| Error::Unsupported("PNG too large".into()))?;
    let mut buf = vec![0u8; size];
    let info = r.next_frame(&mut buf).map_err(decode_error)?;
    let channels = match info.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => return Err(Error::Unsupported("unexpanded PNG palette".into())),
    };
    let row = info.width as usize * channels;
    let data = if info.line_size == row {
        buf.truncate(row * info.height as usize);
        buf
    } else {
        buf.chunks(info.line_size)
            .flat_map(|l| l[..row].iter().copied())
            .collect()
    };
    Ok(Pixels {
        data,
        width: info.width,
        height: info.height,
        channels: channels as u8,
    })
}

/// Encodes 8-bit pixels as PNG.
pub(crate) fn encode(p: &Pixels) -> Result<Vec<u8>> {
    let err = |e: png::EncodingError| Error::Encode(e.to_string());
    let mut out = Vec::new();
    let mut e = png::Encoder::new(&mut out, p.width, p.height);
    e.set_color(match p.channels {
        1 => png::ColorType::Grayscale,
        2 => png::ColorType::GrayscaleAlpha,
        3 => png::ColorType::Rgb,
        _ => png::ColorType::Rgba,
    });
    e.set_depth(png::BitDepth::Eight);
    let mut w = e.write_header().map_err(err)?;
    w.write_image_data(&p.data).map_err(err)?;
    w.finish().map_err(err)?;
    Ok(out)
}
