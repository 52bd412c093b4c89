//! EXIF orientations 1–8 applied to interleaved 8-bit pixels.

use crate::budget::Stop;
use crate::error::Result;

/// Interleaved 8-bit pixels, `channels` bytes per pixel, rows packed without padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pixels {
    pub data: Vec<u8>,
    pub width: u32,
    pub height: u32,
    pub channels: u8,
}

/// Whether an orientation swaps width and height (5–8).
pub(crate) fn swaps_axes(orientation: u16) -> bool {
    (5..=8).contains(&orientation)
}

/// The image as it should be displayed for an EXIF `orientation` (1 = as stored):
/// 2 mirror, 3 rotate 180°, 4 flip, 5 transpose, 6 rotate 90° clockwise, 7 transverse,
/// 8 rotate 90° counter-clockwise. Checks `stop` as it goes.
pub(crate) fn apply(p: Pixels, orientation: u16, stop: &Stop<'_>) -> Result<Pixels> {
    if !(2..=8).contains(&orientation) {
        return Ok(p);
    }
    let (w, h, c) = (p.width as usize, p.height as usize, usize::from(p.channels));
    let (dw, dh) = if swaps_axes(orientation) {
        (h, w)
    } else {
        (w, h)
    };
    let mut out = vec![0u8; p.data.len()];
    let every = crate::budget::rows_per_check(dw * c);
    for y in 0..dh {
        if y % every == 0 {
            stop.check("orient")?;
        }
        for x in 0..dw {
            // Source pixel (sx, sy) of display pixel (x, y).
            let (sx, sy) = match orientation {
                2 => (w - 1 - x, y),
                3 => (w - 1 - x, h - 1 - y),
                4 => (x, h - 1 - y),
                5 => (y, x),
                6 => (y, h - 1 - x),
                7 => (w - 1 - y, h - 1 - x),
                _ => (w - 1 - y, x), // 8
            };
            let s = (sy * w + sx) * c;
            let d = (y * dw + x) * c;
            out[d..d + c].copy_from_slice(&p.data[s..s + c]);
        }
    }
    Ok(Pixels {
        data: out,
        width: dw as u32,
        height: dh as u32,
        channels: p.channels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3×2 gray image with distinct values; where the top-left (value 1) lands.
    #[test]
    fn corner_positions_for_every_orientation() {
        let p = Pixels {
            data: vec![1, 2, 3, 4, 5, 6],
            width: 3,
            height: 2,
            channels: 1,
        };
        let expect: [(u16, [u8; 6]); 8] = [
            (1, [1, 2, 3, 4, 5, 6]),
            (2, [3, 2, 1, 6, 5, 4]),
            (3, [6, 5, 4, 3, 2, 1]),
            (4, [4, 5, 6, 1, 2, 3]),
            (5, [1, 4, 2, 5, 3, 6]),
            (6, [4, 1, 5, 2, 6, 3]),
            (7, [6, 3, 5, 2, 4, 1]),
            (8, [3, 6, 2, 5, 1, 4]),
        ];
        for (o, want) in expect {
            let q = apply(p.clone(), o, &Stop::never()).unwrap();
            assert_eq!(q.data, want, "orientation {o}");
            assert_eq!(
                (q.width, q.height),
                if swaps_axes(o) { (2, 3) } else { (3, 2) }
            );
        }
    }
}
