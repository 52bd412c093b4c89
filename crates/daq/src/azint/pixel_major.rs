//! The integration matrix in pixel order, the layout the CPU engine streams.
//!
//! A CPU scatters pixel-major fastest: the image and these arrays are read once, in order, and
//! only the per-bin accumulators (a few tens of KiB) are written at random. What limits it is
//! the work per entry, so the layout keeps it small:
//! - a pixel's entries come in *records* of two neighbouring bins (`bin`, `bin + 1`), one image
//!   value and one bin word for both; with bbox splitting most pixels cover two bins, so a
//!   record is a pixel (a pixel wider than two bins takes several, a pixel in one bin pads the
//!   second fraction with 0);
//! - without splitting every pixel is whole in one bin: there are no fractions to stream
//!   (`coef` is empty), a record is a pixel and its coefficient 1;
//! - the normalised fractions (`ncoef`) are read only for invalid pixels, so they stay out of
//!   the stream.

/// The matrix pixel by pixel (see the module doc). Records of pixel 0 come first, then pixel
/// 1, …; the bin word carries [`PixelMajor::LAST`] on a pixel's last record, and a pixel with no
/// entry (masked, out of range) has one record with bin [`PixelMajor::NONE`]. `chunks` are
/// pixel-aligned split points (record, pixel) for threads.
#[derive(Debug, Clone, Default)]
pub struct PixelMajor {
    /// First bin of each record, with the last-record flag.
    pub bin: Vec<u32>,
    /// Fractions of the pixel in bins `bin` and `bin + 1`; empty when every pixel lies whole in
    /// one bin (no splitting).
    pub coef: Vec<[f32; 2]>,
    /// Fractions × normalisation: two per record like `coef`, or one per record when `coef` is
    /// empty.
    pub ncoef: Vec<f32>,
    /// Split points (first record, first pixel), ending with (records, pixels).
    pub chunks: Vec<(u32, u32)>,
}

impl PixelMajor {
    /// Flag on a pixel's last record.
    pub const LAST: u32 = 1 << 31;
    /// Bin of a placeholder record.
    pub const NONE: u32 = Self::LAST - 1;
    const CHUNKS: usize = 256;

    /// From the CSR entries (bin, pixel, fraction) in pixel order.
    pub(super) fn new(entries: &[(u32, u32, f32)], pixels: usize, norm: &[f32]) -> Self {
        let whole =
            entries.windows(2).all(|w| w[0].1 != w[1].1) && entries.iter().all(|e| e.2 == 1.0);
        let mut m = Self::default();
        let per = pixels.div_ceil(Self::CHUNKS).max(1);
        let mut k = 0;
        let mut own: Vec<(u32, f32)> = Vec::new();
        for (p, &norm_p) in norm.iter().enumerate().take(pixels) {
            if p % per == 0 {
                m.chunks.push((m.bin.len() as u32, p as u32));
            }
            own.clear();
            while k < entries.len() && entries[k].1 as usize == p {
                own.push((entries[k].0, entries[k].2));
                k += 1;
            }
            if whole {
                let (b, n) = own
                    .first()
                    .map_or((Self::NONE, 0.0), |&(b, c)| (b, c * norm_p));
                m.bin.push(b | Self::LAST);
                m.ncoef.push(n);
                continue;
            }
            if own.is_empty() {
                m.push(Self::NONE | Self::LAST, [0.0; 2], norm_p);
                continue;
            }
            // A pixel's bins are distinct; in bin order they pair up as (b, b + 1).
            own.sort_unstable_by_key(|e| e.0);
            let mut i = 0;
            while i < own.len() {
                let (b, c0) = own[i];
                let c1 = own.get(i + 1).filter(|e| e.0 == b + 1).map(|e| e.1);
                i += 1 + usize::from(c1.is_some());
                let last = if i == own.len() { Self::LAST } else { 0 };
                m.push(b | last, [c0, c1.unwrap_or(0.0)], norm_p);
            }
        }
        m.chunks.push((m.bin.len() as u32, pixels as u32));
        m
    }

    fn push(&mut self, bin: u32, coef: [f32; 2], norm: f32) {
        self.bin.push(bin);
        self.coef.push(coef);
        self.ncoef.extend([coef[0] * norm, coef[1] * norm]);
    }

    /// Whether every pixel lies whole in one bin (records are pixels, coefficients 1).
    pub fn whole_pixels(&self) -> bool {
        self.coef.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;

    /// (pixel, bin, coef bits, ncoef bits) of one entry.
    type Entry = (u32, u32, u32, u32);

    /// Every entry, from the CSR and from the pixel-major layout.
    fn entries(m: &AzMatrix) -> (Vec<Entry>, Vec<Entry>) {
        let mut csr = Vec::new();
        for b in 0..m.bins {
            for k in m.indptr[b] as usize..m.indptr[b + 1] as usize {
                let (c, n) = (m.coef[k].to_bits(), m.ncoef[k].to_bits());
                csr.push((m.indices[k], b as u32, c, n));
            }
        }
        let pm = &m.by_pixel;
        let mut by_pixel = Vec::new();
        let mut p = 0u32;
        for (r, &e) in pm.bin.iter().enumerate() {
            let b = e & !PixelMajor::LAST;
            if b != PixelMajor::NONE {
                if pm.whole_pixels() {
                    by_pixel.push((p, b, 1f32.to_bits(), pm.ncoef[r].to_bits()));
                } else {
                    for j in 0..2 {
                        let (c, n) = (pm.coef[r][j], pm.ncoef[2 * r + j]);
                        if j == 0 || c != 0.0 {
                            by_pixel.push((p, b + j as u32, c.to_bits(), n.to_bits()));
                        }
                    }
                }
            }
            p += e >> 31;
        }
        assert_eq!(p as usize, m.shape.0 * m.shape.1);
        csr.sort_unstable();
        by_pixel.sort_unstable();
        (csr, by_pixel)
    }

    #[test]
    fn pixel_major_holds_the_csr_entries() {
        let poni = crate::poni::Poni {
            dist: 0.1,
            poni1: 0.005,
            poni2: 0.006,
            rot1: 0.01,
            rot2: 0.0,
            rot3: 0.0,
            wavelength: Some(1e-10),
            pixel1: 1e-4,
            pixel2: 1e-4,
        };
        // 1000 bins over 80 × 90 pixels: many pixels span three or more bins.
        for (split, bins) in [(Split::No, 50), (Split::BBox, 50), (Split::BBox, 1000)] {
            let cfg = AzConfig {
                split,
                bins,
                ..Default::default()
            };
            let mut mask = vec![0u8; 80 * 90];
            mask[17] = 1;
            let m = AzMatrix::build(&poni, (80, 90), Some(&mask), &cfg).unwrap();
            assert_eq!(m.by_pixel.whole_pixels(), split == Split::No);
            let (csr, by_pixel) = entries(&m);
            assert_eq!(csr, by_pixel, "{split:?} {bins}");
        }
    }
}
