//! Output sizes of every geometry form against ImageMagick's own (`/usr/bin/convert`, Debian's
//! `imagemagick` package). One `convert` run per input size: the canvas is made once and cloned
//! for each geometry (`-filter point` keeps the resizes cheap; the size comes from the same
//! `ParseRegionGeometry` whatever the filter).

use remora_resize::Geometry;
use std::path::Path;
use std::process::Command;

const CONVERT: &str = "/usr/bin/convert";

const SIZES: &[(u32, u32)] = &[
    (1, 1),
    (7, 3),
    (640, 480),
    (1000, 1),
    (4032, 3024),
    (3024, 4032),
    (333, 777),
];

const GEOMETRIES: &[&str] = &[
    "500",
    "x500",
    "500x500",
    "100x100",
    "1x1",
    "500x300^",
    "500x500^",
    "500x200!",
    "500!",
    "x300!",
    "500x500>",
    "500x500<",
    "2000x2000>",
    "2000x2000<",
    "50%",
    "12.5%",
    "150%",
    "50x25%",
    "x20%",
    "10000@",
    "250000@",
    "1000000@",
    "16:9",
    "3:4",
    "100.5x50.4",
    "500x500^>",
    "50%>",
    "640x480",
    "x1",
    "1",
];

/// Outputs past this many pixels are left out (e.g. `1000x1` filled to `500x500^` is 250 Mpx).
const MAX_OUTPUT_PIXELS: u64 = 20_000_000;
/// Debian's ImageMagick policy refuses sides past 16K pixels.
const MAX_SIDE: u64 = 16_000;

#[test]
fn every_geometry_form_matches_imagemagick() {
    if !Path::new(CONVERT).exists() {
        eprintln!("SKIP: {CONVERT} missing (Debian package imagemagick)");
        return;
    }
    let mut checked = 0;
    let mut zero_sided = 0;
    let mut mismatches = Vec::new();
    for &(w, h) in SIZES {
        let cases: Vec<(&str, (u64, u64))> = GEOMETRIES
            .iter()
            .map(|g| (*g, Geometry::parse(g).unwrap().apply_unclamped(w, h)))
            .filter(|(_, (ow, oh))| {
                // A zero side is an error in ImageMagick (remora's `apply` gives 1 there).
                zero_sided += usize::from(*ow == 0 || *oh == 0);
                *ow > 0 && *oh > 0 && ow * oh <= MAX_OUTPUT_PIXELS && *ow.max(oh) <= MAX_SIDE
            })
            .collect();
        let mut cmd = Command::new(CONVERT);
        cmd.args(["-size", &format!("{w}x{h}"), "xc:white", "-filter", "point"]);
        for (g, _) in &cases {
            cmd.args(["(", "-clone", "0", "-resize", g, ")"]);
        }
        cmd.args(["-delete", "0", "-format", "%w %h\\n", "info:"]);
        let out = cmd.output().expect("run convert");
        assert!(
            out.status.success(),
            "convert failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let got: Vec<(u64, u64)> = text
            .lines()
            .map(|l| {
                let mut it = l.split(' ').map(|v| v.parse::<u64>().unwrap());
                (it.next().unwrap(), it.next().unwrap())
            })
            .collect();
        assert_eq!(got.len(), cases.len(), "convert printed {text}");
        for ((g, ours), theirs) in cases.iter().zip(got) {
            checked += 1;
            if *ours != theirs {
                mismatches.push(format!(
                    "{w}x{h} -resize {g}: remora {ours:?}, ImageMagick {theirs:?}"
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {checked} differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(checked > 150, "only {checked} cases checked");
    assert!(
        zero_sided < 20,
        "{zero_sided} cases with a zero side left out"
    );
}
