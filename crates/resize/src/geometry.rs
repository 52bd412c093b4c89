//! ImageMagick geometry strings (`-resize`, `-thumbnail`) and the output size they give.
//!
//! The rules are ImageMagick 6's `ParseMetaGeometry` and `GetGeometry` (`magick/geometry.c`,
//! read at tag 6.9.11-60, the version Debian 12 ships as `/usr/bin/convert`), step by step:
//!
//! 1. `%`: each side becomes `floor(S·side/100 + 0.5)` (`SX%xSY%` per axis; a missing `SY` is
//!    `SX`, a missing `SX` is 100).
//! 2. `W:H`: the largest part of the image with that aspect ratio.
//! 3. `!`, or a size equal to the current one: the given sides as they are (a missing side keeps
//!    the image's). Otherwise the aspect ratio is kept with `s = min(W/w, H/h)` (`max` with `^`;
//!    a lone `W` or `xH` gives `s` from that side) and each side is `max(1, floor(s·side + 0.5))`.
//! 4. `>` (shrink only) / `<` (enlarge only): each axis is clamped back to the image's.
//! 5. `A@`: `s = sqrt(A / (w·h))`, used only when it gives a smaller side than step 3 did; the
//!    sides are then truncated (6.9.11; later 6.9.12 releases round instead).
//!
//! Numbers may be fractional (`100.5x50`; sizes round half up as in `GetGeometry`). Offsets
//! (`+X+Y`) are accepted and kept but do not change the size. Unlike ImageMagick, which silently
//! stops at the first character it does not know, [`Geometry::parse`] refuses anything it cannot
//! read, and a result is never smaller than 1×1 (ImageMagick would fail to resize to 0 pixels).

use std::fmt;
use std::str::FromStr;

/// Why a geometry string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// The string is empty (or only whitespace).
    #[error("empty geometry")]
    Empty,
    /// A character that has no meaning in a geometry.
    #[error("unexpected character {0:?} in geometry {1:?}")]
    UnexpectedChar(char, String),
    /// A number could not be read, is negative, not finite, or too large.
    #[error("bad number in geometry {0:?}")]
    BadNumber(String),
    /// Neither a width, a height, a percentage nor an area was given.
    #[error("geometry {0:?} gives no size")]
    NoSize(String),
}

/// Largest side or area value accepted (ImageMagick masks sizes to 31 bits).
const MAX_VALUE: f64 = 2_147_483_647.0;

/// A parsed ImageMagick geometry: `W`, `xH`, `WxH` with the flags `^ ! > < % @`, `W:H`, offsets.
#[derive(Debug, Clone, PartialEq)]
pub struct Geometry {
    /// The first number (width, percent of width, area or aspect-ratio width) as written.
    pub width: Option<f64>,
    /// The second number (height, percent of height or aspect-ratio height) as written.
    pub height: Option<f64>,
    /// `+X+Y` offsets as written (they do not change the size).
    pub offset: Option<(i64, i64)>,
    /// `%`: the numbers are percentages of the image's sides.
    pub percent: bool,
    /// `!`: take the sides as given, ignoring the aspect ratio.
    pub exact: bool,
    /// `^`: fill the box (the smaller side fits) instead of fitting inside it.
    pub fill: bool,
    /// `>`: only shrink (per axis).
    pub shrink_only: bool,
    /// `<`: only enlarge (per axis).
    pub enlarge_only: bool,
    /// `@`: the first number is a maximum area in pixels.
    pub area: bool,
    /// `W:H`: an aspect ratio to crop to (`:` separator).
    pub aspect_ratio: bool,
}

impl Geometry {
    /// Parses an ImageMagick geometry string.
    ///
    /// ```
    /// use remora_resize::Geometry;
    /// let g = Geometry::parse("500x500>").unwrap();
    /// assert_eq!(g.apply(4032, 3024), (500, 375));
    /// assert_eq!(g.apply(400, 300), (400, 300));
    /// assert!(Geometry::parse("500y").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Geometry, GeometryError> {
        let mut g = Geometry {
            width: None,
            height: None,
            offset: None,
            percent: false,
            exact: false,
            fill: false,
            shrink_only: false,
            enlarge_only: false,
            area: false,
            aspect_ratio: false,
        };
        // Pass 1 (GetGeometry): drop whitespace, collect the flag characters wherever they are.
        let mut rest = String::with_capacity(s.len());
        for c in s.chars() {
            match c {
                c if c.is_whitespace() => {}
                '%' => g.percent = true,
                '!' => g.exact = true,
                '<' => g.enlarge_only = true,
                '>' => g.shrink_only = true,
                '^' => g.fill = true,
                '@' => g.area = true,
                '(' | ')' => {}
                '0'..='9' | '.' | '+' | '-' | 'e' | 'E' | 'x' | 'X' | ':' => rest.push(c),
                '×' => rest.push('x'),
                c => return Err(GeometryError::UnexpectedChar(c, s.to_string())),
            }
        }
        if rest.is_empty() && !(g.percent || g.area) {
            return Err(GeometryError::Empty);
        }
        let bad = || GeometryError::BadNumber(s.to_string());
        let mut p = rest.as_str();
        // Width: a number followed by a separator or the end.
        if !p.starts_with(['+', '-', 'x', 'X', ':']) && !p.is_empty() {
            let (v, tail) = number(p).ok_or_else(bad)?;
            if !(tail.is_empty() || tail.starts_with(['x', 'X', ':', '+', '-'])) {
                return Err(bad());
            }
            g.width = Some(size(v).ok_or_else(bad)?);
            p = tail;
        }
        if let Some(tail) = p.strip_prefix(['x', 'X', ':']) {
            g.aspect_ratio = p.starts_with(':');
            p = tail;
            if !p.is_empty() && !p.starts_with(['+', '-']) {
                let (v, tail) = number(p).ok_or_else(bad)?;
                g.height = Some(size(v).ok_or_else(bad)?);
                p = tail;
            }
        }
        if !p.is_empty() {
            let (x, tail) = offset(p).ok_or_else(bad)?;
            let (y, tail) = if tail.is_empty() {
                (0, tail)
            } else {
                offset(tail).ok_or_else(bad)?
            };
            if !tail.is_empty() {
                return Err(bad());
            }
            g.offset = Some((x, y));
        }
        if g.width.is_none() && g.height.is_none() && !g.percent {
            return Err(GeometryError::NoSize(s.to_string()));
        }
        if g.area && g.width.is_none() {
            return Err(GeometryError::NoSize(s.to_string()));
        }
        if g.aspect_ratio && (g.width.is_none() || g.height.is_none()) {
            return Err(GeometryError::BadNumber(s.to_string()));
        }
        Ok(g)
    }

    /// The output size ImageMagick's `-resize` gives for an input of `w`×`h` (both at least 1),
    /// at least 1×1.
    pub fn apply(&self, w: u32, h: u32) -> (u32, u32) {
        let (width, height) = self.apply_unclamped(w, h);
        let clamp = |v: u64| v.clamp(1, u64::from(u32::MAX)) as u32;
        (clamp(width), clamp(height))
    }

    /// ImageMagick's size as it computes it, which can be 0 on a side (a small percentage or
    /// area of a small image), where ImageMagick then refuses to resize ("negative or zero image
    /// size"); [`apply`](Self::apply) gives 1 there.
    pub fn apply_unclamped(&self, w: u32, h: u32) -> (u64, u64) {
        let (w0, h0) = (u64::from(w.max(1)), u64::from(h.max(1)));
        // GetGeometry rounds the sizes it reads; unread sides keep the image's.
        let mut width = self.width.map_or(w0, round_size);
        let mut height = self.height.map_or(h0, round_size);
        let (mut fw, mut fh) = (w0, h0);
        let mut has_w = self.width.is_some();
        let mut has_h = self.height.is_some();
        if self.percent {
            let sx = self.width.unwrap_or(100.0);
            let sy = self.height.unwrap_or(sx);
            width = (sx * fw as f64 / 100.0 + 0.5).floor() as u64;
            height = (sy * fh as f64 / 100.0 + 0.5).floor() as u64;
            fw = width;
            fh = height;
        }
        if self.aspect_ratio {
            let ratio = self.width.unwrap_or(1.0) / self.height.unwrap_or(1.0);
            let image_ratio = fw as f64 / fh.max(1) as f64;
            if ratio >= image_ratio {
                width = fw;
                height = ((1.0 / ratio) * fh as f64 * image_ratio + 0.5).floor() as u64;
            } else {
                width = ((1.0 / image_ratio) * fw as f64 * ratio + 0.5).floor() as u64;
                height = fh;
            }
            fw = width;
            fh = height;
            // ParseGeometry reads `W:H` as one number (rho = W/H): it sets no height.
            has_h = false;
            has_w = true;
        }
        if self.exact || (width == fw && height == fh) {
            if !has_w {
                width = fw;
            }
            if !has_h {
                height = fh;
            }
        } else {
            let s = if fw == 0 || fh == 0 {
                1.0
            } else if has_w && has_h {
                let (sx, sy) = (width as f64 / fw as f64, height as f64 / fh as f64);
                if self.fill {
                    sx.max(sy)
                } else {
                    sx.min(sy)
                }
            } else if has_w {
                let s = width as f64 / fw as f64;
                let alt = width as f64 / fh as f64;
                if self.fill && s < alt {
                    alt
                } else {
                    s
                }
            } else {
                let s = height as f64 / fh as f64;
                let alt = height as f64 / fw as f64;
                if self.fill && s < alt {
                    alt
                } else {
                    s
                }
            };
            width = ((s * fw as f64 + 0.5).floor() as u64).max(1);
            height = ((s * fh as f64 + 0.5).floor() as u64).max(1);
        }
        if self.shrink_only {
            width = width.min(fw);
            height = height.min(fh);
        }
        if self.enlarge_only {
            width = width.max(fw);
            height = height.max(fh);
        }
        if self.area {
            let area = self.width.unwrap_or(0.0) + f64::EPSILON.sqrt();
            let distance = ((fw as f64) * (fh as f64)).sqrt();
            let k = reciprocal(distance * reciprocal(area.sqrt()));
            let (sx, sy) = (fw as f64 * k, fh as f64 * k);
            if sx < width as f64 || sy < height as f64 {
                width = sx as u64;
                height = sy as u64;
            }
        }
        (width, height)
    }
}

/// ImageMagick's `PerceptibleReciprocal`: 1/x, guarded near zero.
fn reciprocal(x: f64) -> f64 {
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    if sign * x >= 1.0e-12 {
        1.0 / x
    } else {
        sign / 1.0e-12
    }
}

/// `GetGeometry`'s integer size: `floor(v + 0.5) & 0x7fffffff`.
fn round_size(v: f64) -> u64 {
    ((v + 0.5).floor() as u64) & 0x7fff_ffff
}

fn size(v: f64) -> Option<f64> {
    (v.is_finite() && (0.0..=MAX_VALUE).contains(&v)).then_some(v)
}

/// Reads a leading unsigned decimal number (`12`, `12.5`, `1e3`); returns it and the rest.
fn number(s: &str) -> Option<(f64, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        i += 1;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let digits = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > digits {
            i = j;
        }
    }
    let v: f64 = s[..i].parse().ok()?;
    Some((v, &s[i..]))
}

/// Reads `+N`, `-N` (signs may repeat, as ImageMagick allows).
fn offset(s: &str) -> Option<(i64, &str)> {
    let mut neg = false;
    let mut p = s;
    if !p.starts_with(['+', '-']) {
        return None;
    }
    while let Some(c) = p.chars().next().filter(|c| *c == '+' || *c == '-') {
        neg ^= c == '-';
        p = &p[1..];
    }
    let (v, tail) = number(p)?;
    if !v.is_finite() || v > MAX_VALUE {
        return None;
    }
    let v = v.round() as i64;
    Some((if neg { -v } else { v }, tail))
}

impl FromStr for Geometry {
    type Err = GeometryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Geometry::parse(s)
    }
}

impl fmt::Display for Geometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(w) = self.width {
            write!(f, "{w}")?;
        }
        if let Some(h) = self.height {
            write!(f, "{}{h}", if self.aspect_ratio { ':' } else { 'x' })?;
        }
        if let Some((x, y)) = self.offset {
            write!(f, "{x:+}{y:+}")?;
        }
        for (on, c) in [
            (self.percent, '%'),
            (self.area, '@'),
            (self.fill, '^'),
            (self.exact, '!'),
            (self.shrink_only, '>'),
            (self.enlarge_only, '<'),
        ] {
            if on {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dims(g: &str, w: u32, h: u32) -> (u32, u32) {
        Geometry::parse(g).unwrap().apply(w, h)
    }

    #[test]
    fn fit_keeps_aspect_ratio_and_rounds_half_up() {
        assert_eq!(dims("500x500", 4032, 3024), (500, 375));
        assert_eq!(dims("500x500", 3024, 4032), (375, 500));
        assert_eq!(dims("100", 333, 777), (100, 233));
        assert_eq!(dims("x100", 333, 777), (43, 100));
    }

    #[test]
    fn flags_fill_exact_shrink_enlarge() {
        assert_eq!(dims("500x500^", 4032, 3024), (667, 500));
        assert_eq!(dims("500x200!", 4032, 3024), (500, 200));
        assert_eq!(dims("500!", 4032, 3024), (500, 3024));
        assert_eq!(dims("5000x5000>", 640, 480), (640, 480));
        assert_eq!(dims("100x100<", 640, 480), (640, 480));
        assert_eq!(dims("1000x1000<", 640, 480), (1000, 750));
    }

    #[test]
    fn percent_and_area() {
        assert_eq!(dims("50%", 641, 481), (321, 241));
        assert_eq!(dims("50x25%", 640, 480), (320, 120));
        assert_eq!(dims("10000@", 640, 480), (115, 86));
        // ImageMagick enlarges to the area too (the step-3 size is larger still).
        assert_eq!(dims("1000000@", 640, 480), (1154, 866));
    }

    #[test]
    fn bad_strings_are_refused() {
        for s in [
            "", "  ", "abc", "100y", "100x100x", "1..2", "@", "--", "100x+",
        ] {
            assert!(Geometry::parse(s).is_err(), "{s:?} accepted");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in ["100x200^", "50%", "10000@", "16:9", "100x100+5-3>", "x20<"] {
            let g = Geometry::parse(s).unwrap();
            assert_eq!(Geometry::parse(&g.to_string()).unwrap(), g, "{s}");
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "[0-9x%!<>^@+\\-.:eE ]{0,12}") {
            if let Ok(g) = Geometry::parse(&s) {
                let (w, h) = g.apply(640, 480);
                prop_assert!(w >= 1 && h >= 1);
            }
        }

        #[test]
        fn fit_stays_inside_the_box(w in 1u32..5000, h in 1u32..5000, bw in 1u32..2000, bh in 1u32..2000) {
            let (ow, oh) = Geometry::parse(&format!("{bw}x{bh}")).unwrap().apply(w, h);
            prop_assert!(ow <= bw || ow == 1);
            prop_assert!(oh <= bh || oh == 1);
            prop_assert!(ow == bw || oh == bh || ow == 1 || oh == 1);
        }
    }
}
