//! imgproxy's URL API: `/<signature>/<options>/plain/<percent-encoded source>@<ext>` and
//! `/<signature>/<options>/<base64url source>.<ext>`, parsed into a [`Request`], its signature
//! checked, and the output size worked out into a [`Plan`] (resize, then an optional crop).
//!
//! Pure: no I/O here. Supported options (imgproxy's names, short and long):
//! `rs`/`resize:type:w:h:enlarge:extend`, `s`/`size:w:h:enlarge:extend`, `rt`/`resizing_type`
//! (`fit`, `fill`, `fill-down`, `force`, `auto`), `w`/`width`, `h`/`height`, `g`/`gravity`
//! (`ce`, `no`, `so`, `ea`, `we`, `nowe`, `noea`, `sowe`, `soea`; no offsets), `el`/`enlarge`,
//! `ex`/`extend` (false only), `dpr`, `q`/`quality` (0: the server's default), `f`/`format`/`ext`
//! (`jpg`, `jpeg`, `png`), `sm`/`strip_metadata`, `ar`/`auto_rotate`. Anything else is refused
//! with a reason rather than ignored.

use crate::Format;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How the image is fitted to the asked size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeType {
    /// Inside the box, aspect ratio kept (ImageMagick `WxH`).
    Fit,
    /// Cover the box, then crop to it around the gravity (`WxH^` and a crop).
    Fill,
    /// As `Fill`, but a source smaller than the box is cropped to the box's aspect ratio
    /// instead of to the box itself.
    FillDown,
    /// Exactly the box, aspect ratio ignored (`WxH!`).
    Force,
    /// `Fill` when the source and the box are both landscape or both portrait, else `Fit`.
    Auto,
}

/// Where a fill crop is anchored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gravity {
    /// Centre (`ce`, the default).
    Centre,
    /// Top edge, centred horizontally (`no`).
    North,
    /// Bottom edge (`so`).
    South,
    /// Right edge (`ea`).
    East,
    /// Left edge (`we`).
    West,
    /// Top left (`nowe`).
    NorthWest,
    /// Top right (`noea`).
    NorthEast,
    /// Bottom left (`sowe`).
    SouthWest,
    /// Bottom right (`soea`).
    SouthEast,
}

/// Where the source image comes from, as written in the URL (decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `local:///path`: the path after `local://`, leading `/` included.
    Local(String),
    /// `http://…` (or any other scheme): the whole URL.
    Url(String),
    /// A bare path: relative to the configured root.
    Path(String),
}

/// A parsed imgproxy URL.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Resize type.
    pub resize_type: ResizeType,
    /// Asked width, 0 = from the aspect ratio.
    pub width: u32,
    /// Asked height, 0 = from the aspect ratio.
    pub height: u32,
    /// Allow enlarging.
    pub enlarge: bool,
    /// Crop anchor for fills.
    pub gravity: Gravity,
    /// Quality, `None` = the server's default.
    pub quality: Option<u8>,
    /// Output format, `None` = the source's.
    pub format: Option<Format>,
    /// Strip metadata (default on).
    pub strip: bool,
    /// Apply the EXIF orientation (default on).
    pub auto_rotate: bool,
    /// The source.
    pub source: Source,
}

/// Why a URL was refused: a status for the answer and a reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlError {
    /// The signature does not match (403).
    BadSignature(String),
    /// The URL cannot be read (400).
    Invalid(String),
    /// A valid imgproxy option or value this server does not implement (400).
    Unsupported(String),
}

impl std::fmt::Display for UrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UrlError::BadSignature(m) | UrlError::Invalid(m) | UrlError::Unsupported(m) => {
                f.write_str(m)
            }
        }
    }
}

fn invalid(m: impl Into<String>) -> UrlError {
    UrlError::Invalid(m.into())
}

/// Checks the signature of `path` (the request's path, starting with `/`): HMAC-SHA256 with
/// `key` over `salt` followed by the path after the signature segment, URL-safe base64 without
/// padding. With no key any signature segment is accepted (`insecure`, `_`, …).
pub fn verify(path: &str, key: Option<&[u8]>, salt: Option<&[u8]>) -> Result<(), UrlError> {
    let rest = path.strip_prefix('/').unwrap_or(path);
    let (sig, signed) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => return Err(invalid("no options or source after the signature")),
    };
    let Some(key) = key else {
        return Ok(());
    };
    let given = URL_SAFE_NO_PAD
        .decode(sig)
        .or_else(|_| URL_SAFE.decode(sig))
        .map_err(|_| UrlError::BadSignature(format!("signature {sig:?} is not base64url")))?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(salt.unwrap_or_default());
    mac.update(signed.as_bytes());
    // Constant-time comparison.
    mac.verify_slice(&given)
        .map_err(|_| UrlError::BadSignature("invalid signature".into()))
}

/// Decodes a signing key or salt written in hex, as imgproxy's `IMGPROXY_KEY`: an even number
/// of the digits `0-9`, `a-f`, `A-F` and nothing else (no sign, no space, no `0x`), not empty.
/// The error says what is wrong, for any input (non-ASCII included).
///
/// ```
/// use remora_resize::service::imgproxy::decode_hex;
/// assert_eq!(decode_hex("736563726574").unwrap(), b"secret");
/// assert!(decode_hex("").is_err());
/// assert!(decode_hex("+1+1").is_err());
/// assert!(decode_hex("aéb").is_err());
/// assert!(decode_hex("abc").is_err());
/// ```
pub fn decode_hex(s: &str) -> Result<Vec<u8>, String> {
    if s.is_empty() {
        return Err("empty: an even number of hex digits expected".into());
    }
    if let Some((i, c)) = s.char_indices().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(format!(
            "{c:?} at byte {i} is not a hex digit (0-9, a-f, A-F expected)"
        ));
    }
    if !s.len().is_multiple_of(2) {
        return Err(format!(
            "{} hex digits: an even number expected (two per byte)",
            s.len()
        ));
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    };
    Ok(s.as_bytes()
        .chunks_exact(2)
        .map(|p| digit(p[0]) << 4 | digit(p[1]))
        .collect())
}

/// The signature of `path` (everything after the signature segment, starting with `/`).
pub fn sign(path: &str, key: &[u8], salt: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(salt);
    mac.update(path.as_bytes());
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

fn parse_bool(v: &str) -> Result<bool, UrlError> {
    match v {
        "1" | "t" | "true" => Ok(true),
        "0" | "f" | "false" | "" => Ok(false),
        _ => Err(invalid(format!(
            "{v:?} is not a boolean (1, t, true, 0, f, false)"
        ))),
    }
}

fn parse_size(v: &str, what: &str) -> Result<u32, UrlError> {
    if v.is_empty() {
        return Ok(0);
    }
    v.parse::<u32>()
        .map_err(|_| invalid(format!("{what} {v:?} is not a whole number of pixels")))
}

fn parse_type(v: &str) -> Result<ResizeType, UrlError> {
    Ok(match v {
        "fit" => ResizeType::Fit,
        "fill" => ResizeType::Fill,
        "fill-down" => ResizeType::FillDown,
        "force" => ResizeType::Force,
        "auto" => ResizeType::Auto,
        _ => return Err(invalid(format!("unknown resizing type {v:?}"))),
    })
}

fn parse_gravity(args: &[&str]) -> Result<Gravity, UrlError> {
    let g = match args.first().copied().unwrap_or("") {
        "ce" | "" => Gravity::Centre,
        "no" => Gravity::North,
        "so" => Gravity::South,
        "ea" => Gravity::East,
        "we" => Gravity::West,
        "nowe" => Gravity::NorthWest,
        "noea" => Gravity::NorthEast,
        "sowe" => Gravity::SouthWest,
        "soea" => Gravity::SouthEast,
        g @ ("sm" | "fp") => {
            return Err(UrlError::Unsupported(format!(
                "gravity {g:?} is not supported (ce, no, so, ea, we, nowe, noea, sowe, soea)"
            )))
        }
        g => return Err(invalid(format!("unknown gravity {g:?}"))),
    };
    if args[1..].iter().any(|o| !o.is_empty() && *o != "0") {
        return Err(UrlError::Unsupported(
            "gravity offsets are not supported".into(),
        ));
    }
    Ok(g)
}

fn parse_format(v: &str) -> Result<Option<Format>, UrlError> {
    match v.to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "jpg" | "jpeg" => Ok(Some(Format::Jpeg)),
        "png" => Ok(Some(Format::Png)),
        f => Err(UrlError::Unsupported(format!(
            "output format {f:?} is not supported (jpg, png)"
        ))),
    }
}

fn percent_decode(s: &str) -> Result<String, UrlError> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| invalid("the source is not UTF-8 once percent-decoded"))
}

fn classify(source: String) -> Source {
    if let Some(p) = source.strip_prefix("local://") {
        Source::Local(p.to_string())
    } else if source.contains("://") {
        Source::Url(source)
    } else {
        Source::Path(source)
    }
}

/// Parses a request path (as sent, still percent-encoded; the signature is checked apart).
pub fn parse(path: &str) -> Result<Request, UrlError> {
    let rest = path.strip_prefix('/').unwrap_or(path);
    let mut segs = rest.split('/');
    segs.next(); // the signature
    let segs: Vec<&str> = segs.collect();
    let mut req = Request {
        resize_type: ResizeType::Fit,
        width: 0,
        height: 0,
        enlarge: false,
        gravity: Gravity::Centre,
        quality: None,
        format: None,
        strip: true,
        auto_rotate: true,
        source: Source::Path(String::new()),
    };
    let mut dpr = 1.0f64;
    let mut i = 0;
    let mut source = None;
    while i < segs.len() {
        let seg = segs[i];
        if seg == "plain" {
            let raw = segs[i + 1..].join("/");
            let (src, ext) = match raw.rfind('@') {
                Some(at) => (&raw[..at], Some(&raw[at + 1..])),
                None => (raw.as_str(), None),
            };
            if let Some(ext) = ext {
                if let Some(f) = parse_format(ext)? {
                    req.format = Some(f);
                }
            }
            source = Some(percent_decode(src)?);
            break;
        }
        if !seg.contains(':') {
            // A base64url source, possibly split by `/`, with an optional `.ext`.
            let raw: String = segs[i..].concat();
            let (enc, ext) = match raw.rfind('.') {
                Some(dot) => (&raw[..dot], Some(&raw[dot + 1..])),
                None => (raw.as_str(), None),
            };
            if let Some(ext) = ext {
                if let Some(f) = parse_format(ext)? {
                    req.format = Some(f);
                }
            }
            let bytes = URL_SAFE_NO_PAD
                .decode(enc.trim_end_matches('='))
                .map_err(|_| invalid(format!("source {enc:?} is not base64url")))?;
            source = Some(
                String::from_utf8(bytes).map_err(|_| invalid("the decoded source is not UTF-8"))?,
            );
            break;
        }
        let mut parts = seg.split(':');
        let name = parts.next().unwrap_or("");
        let args: Vec<&str> = parts.collect();
        let arg = |n: usize| args.get(n).copied().unwrap_or("");
        match name {
            "rs" | "resize" | "s" | "size" => {
                let off = usize::from(matches!(name, "rs" | "resize"));
                if off == 1 && !arg(0).is_empty() {
                    req.resize_type = parse_type(arg(0))?;
                }
                if args.len() > off {
                    req.width = parse_size(arg(off), "width")?;
                }
                if args.len() > off + 1 {
                    req.height = parse_size(arg(off + 1), "height")?;
                }
                if args.len() > off + 2 {
                    req.enlarge = parse_bool(arg(off + 2))?;
                }
                if args.len() > off + 3 && parse_bool(arg(off + 3))? {
                    return Err(UrlError::Unsupported("extend is not supported".into()));
                }
            }
            "rt" | "resizing_type" => req.resize_type = parse_type(arg(0))?,
            "w" | "width" => req.width = parse_size(arg(0), "width")?,
            "h" | "height" => req.height = parse_size(arg(0), "height")?,
            "g" | "gravity" => req.gravity = parse_gravity(&args)?,
            "el" | "enlarge" => req.enlarge = parse_bool(arg(0))?,
            "ex" | "extend" => {
                if parse_bool(arg(0))? {
                    return Err(UrlError::Unsupported("extend is not supported".into()));
                }
            }
            "dpr" => {
                dpr = arg(0)
                    .parse::<f64>()
                    .ok()
                    .filter(|d| d.is_finite() && *d > 0.0 && *d <= 8.0)
                    .ok_or_else(|| invalid(format!("dpr {:?}: a number in (0, 8]", arg(0))))?;
            }
            "q" | "quality" => {
                let q: u8 = arg(0)
                    .parse()
                    .ok()
                    .filter(|q| *q <= 100)
                    .ok_or_else(|| invalid(format!("quality {:?}: 0 to 100", arg(0))))?;
                req.quality = (q > 0).then_some(q);
            }
            "f" | "format" | "ext" => req.format = parse_format(arg(0))?,
            "sm" | "strip_metadata" => req.strip = parse_bool(arg(0))?,
            "ar" | "auto_rotate" => req.auto_rotate = parse_bool(arg(0))?,
            _ => {
                return Err(UrlError::Unsupported(format!(
                    "option {name:?} is not supported"
                )))
            }
        }
        i += 1;
    }
    let source = source.ok_or_else(|| invalid("no source in the URL"))?;
    if source.is_empty() {
        return Err(invalid("empty source"));
    }
    req.source = classify(source);
    if dpr != 1.0 {
        let scale = |v: u32| (f64::from(v) * dpr + 0.5).floor() as u32;
        req.width = scale(req.width);
        req.height = scale(req.height);
    }
    Ok(req)
}

/// What to do to a source of a given size: resize to `resize`, then crop to `crop` (if any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Size after the resample.
    pub resize: (u32, u32),
    /// Crop of the resampled image: width, height and the anchor.
    pub crop: Option<(u32, u32, Gravity)>,
}

fn round(v: f64) -> u32 {
    ((v + 0.5).floor() as u32).max(1)
}

/// The plan for a source of `w`×`h` (as displayed, i.e. after auto-rotation).
pub fn plan(req: &Request, w: u32, h: u32) -> Plan {
    let (fw, fh) = (f64::from(w), f64::from(h));
    let (tw, th) = (req.width, req.height);
    let keep = Plan {
        resize: (w, h),
        crop: None,
    };
    if tw == 0 && th == 0 {
        return keep;
    }
    let (sx, sy) = (f64::from(tw) / fw, f64::from(th) / fh);
    let both = tw > 0 && th > 0;
    let kind = match req.resize_type {
        ResizeType::Auto if both && (w >= h) == (tw >= th) => ResizeType::Fill,
        ResizeType::Auto => ResizeType::Fit,
        ResizeType::Fill | ResizeType::FillDown if !both => ResizeType::Fit,
        t => t,
    };
    let clamp = |s: f64| if req.enlarge { s } else { s.min(1.0) };
    match kind {
        ResizeType::Force => {
            let sx = clamp(if tw == 0 { sy } else { sx });
            let sy = clamp(if th == 0 { sx } else { sy });
            Plan {
                resize: (round(fw * sx), round(fh * sy)),
                crop: None,
            }
        }
        ResizeType::Fill | ResizeType::FillDown => {
            let s = sx.max(sy);
            let (resize, crop) = if s > 1.0 && !req.enlarge {
                if kind == ResizeType::FillDown {
                    // The largest part of the source with the box's aspect ratio.
                    let f = (fw / f64::from(tw)).min(fh / f64::from(th));
                    (
                        (w, h),
                        (
                            round(f64::from(tw) * f).min(w),
                            round(f64::from(th) * f).min(h),
                        ),
                    )
                } else {
                    ((w, h), (tw.min(w), th.min(h)))
                }
            } else {
                let r = (round(fw * s).max(tw), round(fh * s).max(th));
                (r, (tw, th))
            };
            Plan {
                resize,
                crop: (crop != resize).then_some((crop.0, crop.1, req.gravity)),
            }
        }
        _ => {
            let s = clamp(if tw == 0 {
                sy
            } else if th == 0 {
                sx
            } else {
                sx.min(sy)
            });
            Plan {
                resize: (round(fw * s), round(fh * s)),
                crop: None,
            }
        }
    }
}

/// The top-left corner of a `cw`×`ch` crop of a `w`×`h` image anchored at `g`.
pub fn crop_origin(w: u32, h: u32, cw: u32, ch: u32, g: Gravity) -> (u32, u32) {
    let (dx, dy) = (w.saturating_sub(cw), h.saturating_sub(ch));
    let x = match g {
        Gravity::West | Gravity::NorthWest | Gravity::SouthWest => 0,
        Gravity::East | Gravity::NorthEast | Gravity::SouthEast => dx,
        _ => dx / 2,
    };
    let y = match g {
        Gravity::North | Gravity::NorthWest | Gravity::NorthEast => 0,
        Gravity::South | Gravity::SouthWest | Gravity::SouthEast => dy,
        _ => dy / 2,
    };
    (x, y)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path: &str) -> Request {
        parse(path).unwrap()
    }

    #[test]
    fn plain_source_with_extension_and_options() {
        let r = req("/insecure/rs:fill:300:200:1/g:nowe/q:85/plain/local:///a%20b/c.jpg@png");
        assert_eq!(r.resize_type, ResizeType::Fill);
        assert_eq!((r.width, r.height, r.enlarge), (300, 200, true));
        assert_eq!(r.gravity, Gravity::NorthWest);
        assert_eq!(r.quality, Some(85));
        assert_eq!(r.format, Some(Format::Png));
        assert_eq!(r.source, Source::Local("/a b/c.jpg".into()));
        assert!(r.strip && r.auto_rotate);
    }

    #[test]
    fn base64_source_split_by_slashes() {
        let enc = URL_SAFE_NO_PAD.encode("http://example.com/images/curiosity.jpg");
        let (a, b) = enc.split_at(10);
        let r = req(&format!("/_/w:100/sm:0/ar:false/{a}/{b}.jpg"));
        assert_eq!(
            r.source,
            Source::Url("http://example.com/images/curiosity.jpg".into())
        );
        assert_eq!(r.format, Some(Format::Jpeg));
        assert_eq!(r.width, 100);
        assert!(!r.strip && !r.auto_rotate);
    }

    #[test]
    fn unknown_or_unsupported_options_are_refused() {
        assert!(matches!(
            parse("/_/bogus:1/plain/a.jpg"),
            Err(UrlError::Unsupported(_))
        ));
        assert!(matches!(
            parse("/_/g:sm/plain/a.jpg"),
            Err(UrlError::Unsupported(_))
        ));
        assert!(matches!(
            parse("/_/f:webp/plain/a.jpg"),
            Err(UrlError::Unsupported(_))
        ));
        assert!(matches!(
            parse("/_/rt:squash/plain/a.jpg"),
            Err(UrlError::Invalid(_))
        ));
        assert!(matches!(parse("/_/w:100"), Err(UrlError::Invalid(_))));
    }

    #[test]
    fn keys_are_strict_hex() {
        assert_eq!(
            decode_hex("00fFaA10").unwrap(),
            vec![0x00, 0xFF, 0xAA, 0x10]
        );
        for bad in [
            "", "+1+1", "-1", " 1", "1 ", "0x12", "aéb", "é1", "abc", "zz",
        ] {
            let e = decode_hex(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad:?}");
        }
    }

    #[test]
    fn signature_matches_imgproxy_docs_example() {
        // imgproxy's docs: key "secret", salt "hello", this path → this signature.
        let path =
            "/rs:fill:300:400:0/g:sm/aHR0cDovL2V4YW1w/bGUuY29tL2ltYWdl/cy9jdXJpb3NpdHku/anBn.png";
        let sig = sign(path, b"secret", b"hello");
        assert_eq!(sig, "oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH8");
        let full = format!("/{sig}{path}");
        assert!(verify(&full, Some(b"secret"), Some(b"hello")).is_ok());
        assert!(verify(&full, Some(b"secret"), Some(b"other")).is_err());
        assert!(verify(&format!("/insecure{path}"), None, None).is_ok());
    }

    #[test]
    fn plans_follow_imgproxy() {
        let r = |t, w, h, el| Request {
            resize_type: t,
            width: w,
            height: h,
            enlarge: el,
            ..req("/_/plain/a.jpg")
        };
        use ResizeType::*;
        let fit = plan(&r(Fit, 500, 500, false), 2000, 1000);
        assert_eq!(
            fit,
            Plan {
                resize: (500, 250),
                crop: None
            }
        );
        assert_eq!(plan(&r(Fit, 500, 500, false), 200, 100).resize, (200, 100));
        assert_eq!(plan(&r(Fit, 500, 500, true), 200, 100).resize, (500, 250));
        assert_eq!(plan(&r(Fit, 0, 100, false), 2000, 1000).resize, (200, 100));
        assert_eq!(
            plan(&r(Force, 300, 300, false), 2000, 1000).resize,
            (300, 300)
        );
        let fill = plan(&r(Fill, 300, 300, false), 2000, 1000);
        assert_eq!(fill.resize, (600, 300));
        assert_eq!(fill.crop, Some((300, 300, Gravity::Centre)));
        // Smaller than the box without enlarge: fill crops to the box, fill-down to its ratio.
        let small = plan(&r(Fill, 300, 300, false), 200, 400);
        assert_eq!(small.resize, (200, 400));
        assert_eq!(small.crop, Some((200, 300, Gravity::Centre)));
        assert_eq!(plan(&r(Fill, 300, 300, false), 200, 100).crop, None);
        assert_eq!(
            plan(&r(FillDown, 300, 300, false), 200, 100)
                .crop
                .map(|c| (c.0, c.1)),
            Some((100, 100))
        );
        // Auto: fill when orientations agree, fit otherwise.
        assert!(plan(&r(Auto, 300, 200, false), 2000, 1000).crop.is_some());
        assert_eq!(
            plan(&r(Auto, 200, 300, false), 2000, 1000).resize,
            (200, 100)
        );
        assert_eq!(crop_origin(600, 300, 300, 300, Gravity::Centre), (150, 0));
        assert_eq!(crop_origin(600, 300, 300, 300, Gravity::East), (300, 0));
        assert_eq!(crop_origin(300, 600, 300, 300, Gravity::South), (0, 300));
    }
}
