//! PNG in and out through the `png` crate (8-bit; 16-bit input is reduced, palettes expanded).

use crate::budget::Stop;
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

/// A reader past the chunks before the image data, expanding to 8 bits. Text and ICC chunks
/// are skipped unread (PNG outputs carry no metadata), so a compressed one cannot expand into
/// memory the estimate does not count.
fn reader(data: &[u8]) -> Result<png::Reader<Cursor<&[u8]>>> {
    let mut d = png::Decoder::new_with_limits(Cursor::new(data), png::Limits { bytes: usize::MAX });
    d.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    d.set_ignore_text_chunk(true);
    d.set_ignore_iccp_chunk(true);
    d.read_info().map_err(decode_error)
}

/// What the decode will produce, from the chunks before the image data: width, height,
/// channels (palettes expanded, `tRNS` as alpha) and whether the image is interlaced.
pub(crate) fn header(data: &[u8]) -> Result<(u32, u32, u8, bool)> {
    let (w, h) = dimensions(data)?;
    let r = reader(data)?;
    let (color, _) = r.output_color_type();
    Ok((w, h, color.samples() as u8, r.info().interlaced))
}

/// Decodes to 8-bit gray, gray+alpha, RGB or RGBA, row by row into the packed pixels (an
/// interlaced image in one call), checking `stop` as it goes.
pub(crate) fn decode(data: &[u8], stop: &Stop<'_>) -> Result<Pixels> {
    let mut r = reader(data)?;
    let (color, _) = r.output_color_type();
    let channels: u8 = match color {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => return Err(Error::Unsupported("unexpanded PNG palette".into())),
    };
    let (width, height) = (r.info().width, r.info().height);
    let row = width as usize * usize::from(channels);
    let size = row
        .checked_mul(height as usize)
        .ok_or_else(|| Error::Unsupported("PNG too large".into()))?;
    let mut out = vec![0u8; size];
    if r.info().interlaced {
        // Adam7 passes come in partial rows; the decoder puts them together.
        let mut buf = vec![
            0u8;
            r.output_buffer_size()
                .ok_or_else(|| Error::Unsupported("PNG too large".into()))?
        ];
        let info = r.next_frame(&mut buf).map_err(decode_error)?;
        for (dst, src) in out.chunks_exact_mut(row).zip(buf.chunks(info.line_size)) {
            dst.copy_from_slice(&src[..row]);
        }
    } else {
        let every = crate::budget::rows_per_check(row);
        for (y, dst) in out.chunks_exact_mut(row).enumerate() {
            if y % every == 0 {
                stop.check("decode")?;
            }
            match r.read_row(dst).map_err(decode_error)? {
                Some(_) => {}
                None => return Err(Error::Truncated("PNG rows")),
            }
        }
    }
    Ok(Pixels {
        data: out,
        width,
        height,
        channels,
    })
}

/// Encodes 8-bit pixels as PNG, streaming the rows into the compressor (no whole-image
/// compressed copy), checking `stop` as it goes.
pub(crate) fn encode(p: &Pixels, stop: &Stop<'_>) -> Result<Vec<u8>> {
    use std::io::Write;
    let err = |e: png::EncodingError| Error::Encode(e.to_string());
    let io = |e: std::io::Error| Error::Encode(e.to_string());
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
    let mut s = w.stream_writer_with_size(1 << 16).map_err(err)?;
    let row = (p.width as usize * usize::from(p.channels)).max(1);
    let every = crate::budget::rows_per_check(row);
    for (y, line) in p.data.chunks(row).enumerate() {
        if y % every == 0 {
            stop.check("encode")?;
        }
        s.write_all(line).map_err(io)?;
    }
    s.finish().map_err(err)?;
    w.finish().map_err(err)?;
    Ok(out)
}
