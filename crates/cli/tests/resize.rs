//! `remora resize` as a user runs it, on small JPEGs made here: output sizes as the library's
//! ImageMagick geometry says, batches that go on past a bad file, PNG output, metadata, quality,
//! both option spellings, errors; and `remora resize serve` with `remora resize --server`.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use remora_resize::testing::{decode_rgb, gradient_jpeg};
use remora_resize::{exif_with_orientation, insert_app1, jpeg_orientation, jpeg_quality, Geometry};

const EXE: &str = env!("CARGO_BIN_EXE_remora");

/// A folder of its own, removed at the end of the test.
struct Tmp(PathBuf);
impl Tmp {
    fn new(name: &str) -> Tmp {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "remora-resize-test-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn write(&self, name: &str, data: &[u8]) -> String {
        std::fs::write(self.path(name), data).unwrap();
        name.to_string()
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `remora resize ARGS` in the test's folder.
fn remora(t: &Tmp, args: &[&str]) -> Output {
    Command::new(EXE)
        .arg("resize")
        .args(args)
        .current_dir(&t.0)
        .stdin(Stdio::null())
        .output()
        .expect("run remora")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "remora failed: {}\n{}",
        o.status,
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// Fails with exit code 1, a message naming `what`, and no panic.
#[track_caller]
fn fails_naming(o: &Output, what: &str) -> String {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "exit code; stderr {err}");
    assert!(err.contains(what), "{what:?} not in {err:?}");
    assert!(!err.contains("panicked"), "panic: {err}");
    err
}

fn jpeg_size(path: &Path) -> (usize, usize) {
    let (w, h, _) = decode_rgb(&std::fs::read(path).unwrap());
    (w, h)
}

fn has_exif(jpeg: &[u8]) -> bool {
    jpeg.windows(6).any(|w| w == b"Exif\0\0")
}

#[test]
fn output_sizes_are_imagemagicks_for_every_geometry_form() {
    let t = Tmp::new("geometry");
    let input = t.write("in.jpg", &gradient_jpeg(320, 240, 85));
    for g in [
        "100x100",
        "64",
        "x50",
        "100x100^",
        "100x30!",
        "1000x1000>",
        "10x10<",
        "500x500<",
        "50%",
        "30%x60%",
        "2000@",
        "16:9",
    ] {
        let o = remora(&t, &[&input, "-resize", g, "-o", "out.jpg"]);
        ok(&o);
        let want = Geometry::parse(g).unwrap().apply(320, 240);
        let (w, h) = jpeg_size(&t.path("out.jpg"));
        assert_eq!((w as u32, h as u32), want, "-resize {g}");
    }
}

#[test]
fn single_and_double_dash_spellings_give_the_same_file() {
    let t = Tmp::new("spelling");
    let input = t.write("in.jpg", &gradient_jpeg(200, 150, 90));
    ok(&remora(
        &t,
        &[
            &input, "-resize", "80x80", "-quality", "70", "-strip", "-o", "a.jpg",
        ],
    ));
    ok(&remora(
        &t,
        &[
            &input,
            "--resize",
            "80x80",
            "--quality",
            "70",
            "--strip",
            "-o",
            "b.jpg",
        ],
    ));
    ok(&remora(
        &t,
        &[
            &input,
            "--resize=80x80",
            "-quality",
            "70",
            "--strip",
            "--output",
            "c.jpg",
        ],
    ));
    let a = std::fs::read(t.path("a.jpg")).unwrap();
    assert_eq!(a, std::fs::read(t.path("b.jpg")).unwrap());
    assert_eq!(a, std::fs::read(t.path("c.jpg")).unwrap());
    assert_eq!(jpeg_size(&t.path("a.jpg")), (80, 60));
}

#[test]
fn a_batch_reports_a_corrupt_file_writes_the_others_and_exits_1() {
    let t = Tmp::new("batch");
    std::fs::create_dir(t.path("in")).unwrap();
    for (i, name) in ["a.jpg", "b.jpg", "c.jpeg"].iter().enumerate() {
        let jpeg = gradient_jpeg(120 + 10 * i, 90, 80);
        std::fs::write(t.path("in").join(name), jpeg).unwrap();
    }
    let mut truncated = gradient_jpeg(100, 100, 80);
    truncated.truncate(40);
    std::fs::write(t.path("in/bad.jpg"), truncated).unwrap();
    // A folder stands for its images; a file given alone works too.
    let extra = t.write("extra.jpg", &gradient_jpeg(64, 64, 80));
    let o = remora(&t, &["in", &extra, "-resize", "50%", "-d", "out"]);
    let err = fails_naming(&o, "bad.jpg");
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("remora resize:"))
            .count(),
        1,
        "{err}"
    );
    let out = text(&o.stdout);
    assert!(out.contains("5 files, 1 failed"), "{out}");
    assert!(out.contains("images/s"), "{out}");
    for (name, w) in [
        ("a.jpg", 60),
        ("b.jpg", 65),
        ("c.jpeg", 70),
        ("extra.jpg", 32),
    ] {
        assert_eq!(jpeg_size(&t.path("out").join(name)).0, w, "{name}");
    }
    assert!(!t.path("out/bad.jpg").exists());
}

#[test]
fn png_output_by_extension_and_by_format() {
    let t = Tmp::new("png");
    let input = t.write("in.jpg", &gradient_jpeg(300, 200, 85));
    ok(&remora(
        &t,
        &[&input, "-resize", "150x150", "-o", "out.png"],
    ));
    let png = std::fs::read(t.path("out.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 150);
    assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 100);
    // -format png in a batch: the extension changes; PNG input back to JPEG.
    ok(&remora(
        &t,
        &[&input, "-resize", "30x30", "-format", "png", "-d", "p"],
    ));
    assert!(std::fs::read(t.path("p/in.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));
    ok(&remora(
        &t,
        &["out.png", "-resize", "50%", "-o", "back.jpg"],
    ));
    assert_eq!(jpeg_size(&t.path("back.jpg")), (75, 50));
    // Neither .jpg nor .png nor -format: refused.
    let o = remora(&t, &[&input, "-resize", "10", "-o", "out.gif"]);
    fails_naming(&o, "out.gif");
}

#[test]
fn strip_drops_exif_and_auto_orient_turns_the_pixels() {
    let t = Tmp::new("meta");
    let jpeg = insert_app1(gradient_jpeg(320, 240, 85), &exif_with_orientation(6));
    let input = t.write("in.jpg", &jpeg);
    ok(&remora(
        &t,
        &[&input, "-resize", "100x100", "-o", "kept.jpg"],
    ));
    let kept = std::fs::read(t.path("kept.jpg")).unwrap();
    assert!(has_exif(&kept));
    assert_eq!(jpeg_orientation(&kept).unwrap(), 6);
    assert_eq!(jpeg_size(&t.path("kept.jpg")), (100, 75));
    ok(&remora(
        &t,
        &[&input, "-resize", "100x100", "-strip", "-o", "stripped.jpg"],
    ));
    assert!(!has_exif(&std::fs::read(t.path("stripped.jpg")).unwrap()));
    ok(&remora(
        &t,
        &[
            &input,
            "-auto-orient",
            "-resize",
            "100x100",
            "-o",
            "turned.jpg",
        ],
    ));
    let turned = std::fs::read(t.path("turned.jpg")).unwrap();
    assert_eq!(jpeg_size(&t.path("turned.jpg")), (75, 100));
    assert_eq!(jpeg_orientation(&turned).unwrap(), 1);
}

#[test]
fn quality_is_the_inputs_unless_given() {
    let t = Tmp::new("quality");
    let input = t.write("in.jpg", &gradient_jpeg(256, 256, 85));
    ok(&remora(&t, &[&input, "-resize", "64x64", "-o", "same.jpg"]));
    let same = std::fs::read(t.path("same.jpg")).unwrap();
    assert_eq!(jpeg_quality(&same).unwrap(), 85);
    ok(&remora(
        &t,
        &[
            &input, "-resize", "64x64", "-quality", "60", "-o", "q60.jpg",
        ],
    ));
    let q60 = std::fs::read(t.path("q60.jpg")).unwrap();
    assert_eq!(jpeg_quality(&q60).unwrap(), 60);
    for bad in ["0", "101", "high"] {
        let o = remora(
            &t,
            &[&input, "-resize", "64", "-quality", bad, "-o", "x.jpg"],
        );
        fails_naming(&o, "-quality");
    }
}

#[test]
fn bad_options_and_missing_inputs_are_clear_errors() {
    let t = Tmp::new("errors");
    let input = t.write("in.jpg", &gradient_jpeg(64, 64, 85));
    let o = remora(&t, &[&input, "-resize", "100y50", "-o", "x.jpg"]);
    fails_naming(&o, "geometry \"100y50\"");
    let o = remora(
        &t,
        &[&input, "-resize", "10", "-filter", "fancy", "-o", "x.jpg"],
    );
    fails_naming(&o, "fancy");
    let o = remora(
        &t,
        &[
            &input,
            "-resize",
            "10",
            "-sampling-factor",
            "3x3",
            "-o",
            "x.jpg",
        ],
    );
    fails_naming(&o, "3x3");
    let o = remora(&t, &["nowhere.jpg", "-resize", "10", "-o", "x.jpg"]);
    fails_naming(&o, "nowhere.jpg");
    let o = remora(&t, &[&input, &input, "-resize", "10", "-o", "x.jpg"]);
    fails_naming(&o, "-d DIR");
    let o = remora(&t, &[&input, "-resize", "10"]);
    fails_naming(&o, "-o OUT");
    let o = remora(&t, &[&input, "-resize", "10", "-o", &input]);
    fails_naming(&o, "overwrite");
    assert!(!t.path("x.jpg").exists());
}

/// `remora resize serve` on a free port; killed when dropped.
struct Service {
    child: Child,
    url: String,
}
impl Service {
    fn start() -> Service {
        let mut child = Command::new(EXE)
            .args([
                "resize",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--workers",
                "2",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start remora resize serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        Service { child, url }
    }
}
impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn server_round_trip_gives_the_local_sizes_and_reports_bad_files() {
    let s = Service::start();
    let t = Tmp::new("server");
    std::fs::create_dir(t.path("in")).unwrap();
    for (name, w, h) in [
        ("a.jpg", 320, 240),
        ("b.jpg", 100, 300),
        ("c.jpg", 640, 480),
    ] {
        std::fs::write(t.path("in").join(name), gradient_jpeg(w, h, 85)).unwrap();
    }
    std::fs::write(t.path("in/bad.jpg"), b"not an image").unwrap();
    let o = remora(
        &t,
        &[
            "in", "-resize", "100x100", "-quality", "70", "-d", "out", "--server", &s.url,
        ],
    );
    fails_naming(&o, "bad.jpg");
    assert!(text(&o.stdout).contains("4 files, 1 failed"));
    for (name, w, h) in [
        ("a.jpg", 320, 240),
        ("b.jpg", 100, 300),
        ("c.jpg", 640, 480),
    ] {
        let p = t.path("out").join(name);
        let want = Geometry::parse("100x100").unwrap().apply(w, h);
        let (ow, oh) = jpeg_size(&p);
        assert_eq!((ow as u32, oh as u32), want, "{name}");
        assert_eq!(jpeg_quality(&std::fs::read(&p).unwrap()).unwrap(), 70);
    }
    // One file to PNG through the server.
    ok(&remora(
        &t,
        &[
            "in/a.jpg", "-resize", "50%", "-o", "a.png", "--server", &s.url,
        ],
    ));
    let png = std::fs::read(t.path("a.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    // What the client cannot send is refused, not silently dropped.
    let o = remora(
        &t,
        &[
            "in/a.jpg",
            "-thumbnail",
            "50",
            "-o",
            "t.jpg",
            "--server",
            &s.url,
        ],
    );
    fails_naming(&o, "-thumbnail");
}
