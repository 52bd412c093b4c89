//! A JPEG header walk: frame size and sampling (SOFn), quantisation tables (DQT) and the
//! metadata segments (APPn, COM), read up to the first scan without decoding anything; and
//! [`count_scans`], a walk over the rest of the file that counts its scans without decoding.

use crate::error::{Error, Result};

/// Zig-zag position → natural (row-major) position, as libjpeg's `jpeg_natural_order`.
const NATURAL_ORDER: [usize; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
];

/// One frame component: id and sampling factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Component {
    pub h: u8,
    pub v: u8,
}

/// A metadata segment (APPn or COM) kept as its marker and payload (after the length).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Segment<'a> {
    pub marker: u8,
    pub data: &'a [u8],
}

impl Segment<'_> {
    pub fn is_exif(&self) -> bool {
        self.marker == 0xE1 && self.data.starts_with(b"Exif\0")
    }
    pub fn is_xmp(&self) -> bool {
        self.marker == 0xE1 && self.data.starts_with(b"http://ns.adobe.com/")
    }
    pub fn is_icc(&self) -> bool {
        self.marker == 0xE2 && self.data.starts_with(b"ICC_PROFILE\0")
    }
    pub fn is_iptc(&self) -> bool {
        self.marker == 0xED && self.data.starts_with(b"Photoshop 3.0\0")
    }
    pub fn is_comment(&self) -> bool {
        self.marker == 0xFE
    }
}

/// What the header says.
#[derive(Debug, Clone)]
pub(crate) struct JpegHeader<'a> {
    pub width: u32,
    pub height: u32,
    pub precision: u8,
    /// SOF marker (0xC0 baseline, 0xC2 progressive, 0xC3 lossless, …).
    pub sof: u8,
    pub components: Vec<Component>,
    /// Quantisation tables 0–3 in natural order.
    pub qtables: [Option<[u16; 64]>; 4],
    pub segments: Vec<Segment<'a>>,
    /// Adobe APP14 transform flag, when present.
    pub adobe_transform: Option<u8>,
    /// Offset of the first scan's SOS marker (its 0xFF).
    pub scan_at: usize,
}

impl JpegHeader<'_> {
    /// Whether the frame is progressive (SOF2, SOF6, SOF10, SOF14).
    pub fn progressive(&self) -> bool {
        matches!(self.sof, 0xC2 | 0xC6 | 0xCA | 0xCE)
    }

    /// The components' (h, v) sampling factors.
    pub fn factors(&self) -> Vec<(u8, u8)> {
        self.components.iter().map(|c| (c.h, c.v)).collect()
    }
}

/// The number of scans (SOS markers) of `data` from its first one at `scan_at` to EOI or the
/// end of the data, walking over each scan's entropy-coded bytes (stuffed `FF 00` and RSTn
/// markers are part of them) and the segments between scans. Counting stops past `limit`
/// (the result is then `limit + 1`): a scan bomb is refused without reading all of it.
pub(crate) fn count_scans(data: &[u8], scan_at: usize, limit: u32) -> u32 {
    let mut n = 0u32;
    let mut pos = scan_at;
    while pos < data.len() {
        if data[pos] != 0xFF {
            // Not at a marker (garbage between segments): libjpeg skips to the next one.
            match data[pos..].iter().position(|&b| b == 0xFF) {
                Some(i) => pos += i,
                None => break,
            }
        }
        while pos < data.len() && data[pos] == 0xFF {
            pos += 1;
        }
        let Some(&marker) = data.get(pos) else {
            break;
        };
        pos += 1;
        match marker {
            0xD9 => break,
            0x00 | 0x01 | 0xD0..=0xD8 => continue,
            _ => {}
        }
        let Some(b) = data.get(pos..pos + 2) else {
            break;
        };
        pos += usize::from(u16::from_be_bytes([b[0], b[1]])).max(2);
        if marker != 0xDA {
            continue;
        }
        n += 1;
        if n > limit {
            break;
        }
        // The entropy-coded data: up to a 0xFF that starts a marker other than RSTn.
        loop {
            match data
                .get(pos..)
                .and_then(|d| d.iter().position(|&b| b == 0xFF))
            {
                Some(i) => pos += i,
                None => return n,
            }
            match data.get(pos + 1) {
                Some(0x00 | 0xD0..=0xD7) => pos += 2,
                Some(0xFF) => pos += 1,
                _ => break,
            }
        }
    }
    n
}

/// Reads the header of a JPEG up to its first SOS.
pub(crate) fn parse(data: &[u8]) -> Result<JpegHeader<'_>> {
    if !data.starts_with(&[0xFF, 0xD8]) {
        return Err(Error::UnknownFormat);
    }
    let mut h = JpegHeader {
        width: 0,
        height: 0,
        precision: 0,
        sof: 0,
        components: Vec::new(),
        qtables: [None; 4],
        segments: Vec::new(),
        adobe_transform: None,
        scan_at: 0,
    };
    let mut pos = 2;
    loop {
        let at = pos;
        // Markers may be preceded by any number of 0xFF fill bytes.
        if pos >= data.len() {
            return Err(Error::Truncated("no scan after the header"));
        }
        if data[pos] != 0xFF {
            return Err(Error::Malformed(format!("expected a marker at byte {pos}")));
        }
        while pos < data.len() && data[pos] == 0xFF {
            pos += 1;
        }
        let Some(&marker) = data.get(pos) else {
            return Err(Error::Truncated("marker"));
        };
        pos += 1;
        match marker {
            0x01 | 0xD0..=0xD7 => continue, // no length
            0xD8 | 0xD9 | 0x00 => {
                return Err(Error::Malformed(format!(
                    "unexpected marker 0x{marker:02X} in header"
                )))
            }
            _ => {}
        }
        let len = match data.get(pos..pos + 2) {
            Some(b) => usize::from(u16::from_be_bytes([b[0], b[1]])),
            None => return Err(Error::Truncated("segment length")),
        };
        if len < 2 {
            return Err(Error::Malformed(format!(
                "segment 0x{marker:02X} length {len}"
            )));
        }
        let Some(body) = data.get(pos + 2..pos + len) else {
            return Err(Error::Truncated("segment"));
        };
        pos += len;
        match marker {
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => sof(&mut h, marker, body)?,
            0xDB => dqt(&mut h, body)?,
            0xE0..=0xEF | 0xFE => {
                if marker == 0xEE && body.starts_with(b"Adobe") && body.len() >= 12 {
                    h.adobe_transform = Some(body[11]);
                }
                h.segments.push(Segment { marker, data: body });
            }
            0xDA => {
                if h.components.is_empty() {
                    return Err(Error::Malformed("scan before frame header".into()));
                }
                h.scan_at = at;
                return Ok(h);
            }
            _ => {}
        }
    }
}

fn sof(h: &mut JpegHeader<'_>, marker: u8, b: &[u8]) -> Result<()> {
    if !h.components.is_empty() {
        return Err(Error::Malformed("two frame headers".into()));
    }
    if b.len() < 6 {
        return Err(Error::Malformed("short frame header".into()));
    }
    h.sof = marker;
    h.precision = b[0];
    h.height = u32::from(u16::from_be_bytes([b[1], b[2]]));
    h.width = u32::from(u16::from_be_bytes([b[3], b[4]]));
    let n = usize::from(b[5]);
    if n == 0 || b.len() < 6 + 3 * n {
        return Err(Error::Malformed("frame header component count".into()));
    }
    if h.width == 0 || h.height == 0 {
        return Err(Error::Malformed(format!(
            "frame size {}x{} (DNL heights are not supported)",
            h.width, h.height
        )));
    }
    for c in b[6..6 + 3 * n].chunks_exact(3) {
        let (hs, vs) = (c[1] >> 4, c[1] & 15);
        if !(1..=4).contains(&hs) || !(1..=4).contains(&vs) {
            return Err(Error::Malformed(format!("sampling factor {hs}x{vs}")));
        }
        h.components.push(Component { h: hs, v: vs });
    }
    Ok(())
}

fn dqt(h: &mut JpegHeader<'_>, mut b: &[u8]) -> Result<()> {
    while !b.is_empty() {
        let (pq, tq) = (b[0] >> 4, usize::from(b[0] & 15));
        let size = if pq == 0 { 64 } else { 128 };
        if tq > 3 || pq > 1 || b.len() < 1 + size {
            return Err(Error::Malformed("quantisation table".into()));
        }
        let mut t = [0u16; 64];
        for (k, &nat) in NATURAL_ORDER.iter().enumerate() {
            t[nat] = if pq == 0 {
                u16::from(b[1 + k])
            } else {
                u16::from_be_bytes([b[1 + 2 * k], b[2 + 2 * k]])
            };
        }
        h.qtables[tq] = Some(t);
        b = &b[1 + size..];
    }
    Ok(())
}

/// Inserts `segments` into an encoded JPEG right after its SOI and JFIF APP0 (if any).
pub(crate) fn insert_segments(jpeg: Vec<u8>, segments: &[(u8, &[u8])]) -> Vec<u8> {
    if segments.is_empty() || !jpeg.starts_with(&[0xFF, 0xD8]) {
        return jpeg;
    }
    let mut at = 2;
    if jpeg.get(2..4) == Some(&[0xFF, 0xE0]) {
        if let Some(l) = jpeg.get(4..6) {
            at = 4 + usize::from(u16::from_be_bytes([l[0], l[1]]));
        }
    }
    let at = at.min(jpeg.len());
    let extra: usize = segments.iter().map(|(_, d)| d.len() + 4).sum();
    let mut out = Vec::with_capacity(jpeg.len() + extra);
    out.extend_from_slice(&jpeg[..at]);
    for (marker, data) in segments {
        // Segments come from a parsed input, so their length fits.
        let len = (data.len() + 2) as u16;
        out.extend_from_slice(&[0xFF, *marker]);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(data);
    }
    out.extend_from_slice(&jpeg[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut data = vec![0xFF, 0xD8];
            data.extend_from_slice(&tail);
            let _ = parse(&data);
        }

        #[test]
        fn counting_scans_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..300)) {
            let n = count_scans(&tail, 0, 10);
            prop_assert!(n <= 11);
        }

        #[test]
        fn insert_keeps_the_image_after_the_segments(n in 0usize..300) {
            let jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 1, 2, 0xFF, 0xD9];
            let payload = vec![7u8; n];
            let out = insert_segments(jpeg.clone(), &[(0xE1, &payload)]);
            prop_assert_eq!(&out[..8], &jpeg[..8]);
            prop_assert_eq!(&out[8..10], &[0xFF, 0xE1]);
            prop_assert_eq!(usize::from(u16::from_be_bytes([out[10], out[11]])), n + 2);
            prop_assert_eq!(&out[out.len() - 2..], &[0xFF, 0xD9]);
        }
    }

    #[test]
    fn scans_are_counted_over_entropy_data_stuffing_and_restarts() {
        // SOS, data with a stuffed FF 00 and an RST0, DHT between scans, SOS, data, EOI.
        let jpeg = [
            0xFF, 0xDA, 0x00, 0x03, 0x01, 0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56, //
            0xFF, 0xC4, 0x00, 0x03, 0x00, //
            0xFF, 0xFF, 0xDA, 0x00, 0x02, 0x78, 0xFF, 0xD9, 0xFF, 0xDA, 0x00, 0x02,
        ];
        assert_eq!(count_scans(&jpeg, 0, 100), 2);
        assert_eq!(count_scans(&jpeg, 0, 1), 2, "stops once past the limit");
        assert_eq!(count_scans(&jpeg, 0, 0), 1);
        // A real progressive file has about ten.
        let p = crate::testing::progressive_jpeg(64, 48);
        let h = parse(&p).unwrap();
        assert!(h.progressive());
        let n = count_scans(&p, h.scan_at, 100);
        assert!((2..=20).contains(&n), "{n} scans");
        assert_eq!(
            count_scans(&crate::testing::gradient_jpeg(64, 48, 80), 0, 100),
            1
        );
    }

    #[test]
    fn reads_16_bit_tables_in_natural_order() {
        let mut table = vec![0x11];
        for k in 0..64u16 {
            table.extend_from_slice(&(k + 1).to_be_bytes());
        }
        let mut h =
            parse(b"\xFF\xD8\xFF\xC0\x00\x0B\x08\x00\x01\x00\x01\x01\x01\x11\x00\xFF\xDA\x00\x02")
                .unwrap();
        dqt(&mut h, &table).unwrap();
        let t = h.qtables[1].unwrap();
        // Zig-zag entry 2 is natural position 8 (row 1, column 0).
        assert_eq!((t[0], t[1], t[8], t[63]), (1, 2, 3, 64));
    }
}
