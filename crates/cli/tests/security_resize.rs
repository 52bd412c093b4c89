//! Issue 27's findings about `remora resize` and `remora resize serve`, one regression test (or
//! two) per finding, each against a real server process. With
//! `REMORA_TEST_EXE=/path/to/old/remora` they run against another build (the build before the
//! fixes fails every one of them).
//!
//! - 4: a long, thin output (1 × 50,000,000 pixels) cost 40× the memory of a square one of the
//!   same pixels (per-column resampling tables): now bounded by `--max-job-memory`, refused
//!   before anything is allocated or served in tiles.
//! - 5: a progressive JPEG of 20,000 scans burnt two minutes of CPU per request: refused at
//!   once (more than 100 scans) while other requests are served.
//! - 6: bodies were read whole before the queue was looked at: now a slot first (503 before
//!   any byte of the body), then the body against `--max-bytes` within `--body-timeout`.
//! - 9: `--root` files were canonicalized then opened (a `RENAME_EXCHANGE` race served a file
//!   from a root-only directory); no connection cap, no header timeout.
//! - 10: `--key 'aéb'` panicked, `--key '+1+1'` was read as bytes 01 01, `--key ''` accepted.
//! - and a shutdown in the middle of a long job ends within 2.5 s.
mod resize_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_resize::testing::{gradient_jpeg, scan_bomb};
use resize_common::{constant_png, is_root, request, run, Server, Tmp};

const MB: u64 = 1 << 20;

fn gray_jpeg(w: usize, h: usize) -> Vec<u8> {
    let px: Vec<u8> = (0..w * h).map(|i| (i % w * 255 / w) as u8).collect();
    let image = turbojpeg::Image {
        pixels: &px[..],
        width: w,
        pitch: w,
        height: h,
        format: turbojpeg::PixelFormat::GRAY,
    };
    turbojpeg::compress(image, 85, turbojpeg::Subsamp::Gray)
        .unwrap()
        .to_vec()
}

// --- finding 4: long, thin outputs ---

#[test]
fn finding4_a_1x50m_output_is_refused_or_served_within_the_job_memory_limit() {
    let t = Tmp::new("f4-serve");
    t.write("a.jpg", &gradient_jpeg(200, 150, 85));
    let root = t.0.to_str().unwrap();
    let mut s = Server::start(&["--root", root, "--workers", "1"]);
    let base = s.vm_hwm();
    // The finding's URL: 13 KB in, 50 Mpx out as PNG (RGB: over the 512 MiB a job).
    let t0 = Instant::now();
    let a = s.get("/insecure/rs:force:50000000:1:1/plain/local:///a.jpg@png");
    assert_eq!(a.status, 422, "{}", a.text());
    assert!(a.text().contains("memory"), "{}", a.text());
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // A 1 × 4,000,000 PNG posted and fitted into 100×100 (the finding's was 1 × 50,000,000:
    // 3 GB; this one cost the build before the fix 250 MB, and keeps the test quick on a debug
    // build): box-averaged, then resampled, in a few MiB.
    let tall = constant_png(1, 4_000_000, 90);
    assert!(tall.len() < 1 << 20, "{} bytes", tall.len());
    let b = s.post("/resize?geometry=100x100", &tall);
    assert_eq!(b.status, 200, "{}", b.text());
    assert_eq!(
        (b.header("x-remora-width"), b.header("x-remora-height")),
        (Some("1".into()), Some("100".into()))
    );
    let peak = s.vm_hwm();
    eprintln!(
        "finding 4 (service): VmHWM {} MiB (idle {} MiB)",
        peak / MB,
        base / MB
    );
    assert!(peak < 120 * MB, "server peak {} MiB", peak / MB);
    assert!(s.alive());
    let c = s.get("/insecure/rs:fit:50:50/plain/local:///a.jpg");
    assert_eq!(c.status, 200, "{}", c.text());
}

#[test]
fn finding4_cli_long_thin_resizes_are_bounded_or_refused_naming_the_limit() {
    let t = Tmp::new("f4-cli");
    let gray = t.write("gray.jpg", &gray_jpeg(200, 150));
    let rgb = t.write("rgb.jpg", &gradient_jpeg(200, 150, 85));
    let (gray, rgb) = (gray.to_str().unwrap(), rgb.to_str().unwrap());
    let out = |n: &str| t.path(n).to_str().unwrap().to_string();
    let limit = Duration::from_secs(60);
    // JPEG cannot hold a 50,000,000-pixel side: said before any pixel is decoded.
    let (code, _, err, rss) = run(
        &[
            "resize",
            gray,
            "-resize",
            "50000000x1!",
            "-o",
            &out("a.jpg"),
        ],
        limit,
    );
    eprintln!("finding 4 (cli, jpeg out): peak {} MiB", rss / MB);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("JPEG output side") && err.contains("65500"),
        "{err}"
    );
    assert!(rss < 100 * MB, "peak {} MiB", rss / MB);
    // RGB to PNG: over the job memory limit, refused naming it.
    let (code, _, err, rss) = run(
        &["resize", rgb, "-resize", "50000000x1!", "-o", &out("b.png")],
        limit,
    );
    eprintln!("finding 4 (cli, rgb png): peak {} MiB", rss / MB);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--max-job-memory") && err.contains("512 MiB"),
        "{err}"
    );
    assert!(rss < 100 * MB, "peak {} MiB", rss / MB);
    // Gray to PNG fits, done in tiles: 5,000,000×1 (the build before the fix held 600 MB of
    // tables for it; 50,000,000×1 takes 160 MiB here, but too long on a debug build).
    let (code, _, err, rss) = run(
        &["resize", gray, "-resize", "5000000x1!", "-o", &out("c.png")],
        limit,
    );
    eprintln!("finding 4 (cli, gray png): peak {} MiB", rss / MB);
    assert_eq!(code, Some(0), "{err}");
    let png = std::fs::read(out("c.png")).unwrap();
    assert_eq!(
        &png[16..24],
        &[0, 0x4C, 0x4B, 0x40, 0, 0, 0, 1],
        "5000000×1"
    );
    assert!(rss < 150 * MB, "peak {} MiB", rss / MB);
}

// --- finding 5: progressive-JPEG scan bombs ---

#[test]
fn finding5_a_scan_bomb_is_refused_at_once_while_other_requests_are_served() {
    // 4000×4000 gray with 20,000 extra scans: 40 s or more of libjpeg-turbo per request.
    let bomb = Arc::new(scan_bomb(4000, 4000, 20_000));
    let photo = gradient_jpeg(800, 600, 85);
    let s = Server::start(&["--workers", "2"]);
    let addr = s.addr;
    let t0 = Instant::now();
    let bombs: Vec<_> = (0..4)
        .map(|_| {
            let bomb = bomb.clone();
            std::thread::spawn(move || {
                let r = request(
                    addr,
                    "POST",
                    "/resize?geometry=100x100",
                    &bomb,
                    Duration::from_secs(30),
                );
                (r, t0.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let normal = s.post("/resize?geometry=100x100", &photo);
    let normal_took = t0.elapsed();
    assert_eq!(normal.status, 200, "{}", normal.text());
    assert!(normal_took < Duration::from_secs(3), "{normal_took:?}");
    for b in bombs {
        let (r, took) = b.join().unwrap();
        assert_eq!(r.status, 422, "{}", r.text());
        assert!(r.text().contains("scans"), "{}", r.text());
        assert!(
            took < Duration::from_secs(3),
            "bomb answered after {took:?}"
        );
    }
    // A progressive JPEG of ordinary scans still works.
    let p = remora_resize::testing::progressive_jpeg(640, 480);
    assert_eq!(s.post("/resize?geometry=64x64", &p).status, 200);
}

// --- finding 6: bodies held before the queue ---

/// Opens a POST of a `len`-byte body and sends its head; the answer within `wait`, if any.
fn post_head(addr: std::net::SocketAddr, len: u64, wait: Duration) -> (TcpStream, Option<u16>) {
    let mut s = TcpStream::connect(addr).unwrap();
    let head =
        format!("POST /resize?geometry=10x10 HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 512];
    let status = match s.read(&mut b) {
        Ok(n) if n > 12 => std::str::from_utf8(&b[9..12])
            .ok()
            .and_then(|v| v.parse().ok()),
        _ => None,
    };
    (s, status)
}

#[test]
fn finding6_fifty_63_mib_uploads_hold_two_slots_and_the_rest_get_503_at_once() {
    let s = Server::start(&["--workers", "1", "--queue", "1"]);
    let addr = s.addr;
    let len = 63 * MB;
    let quick_503 = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..50)
        .map(|_| {
            let quick_503 = quick_503.clone();
            std::thread::spawn(move || {
                let (mut c, early) = post_head(addr, len, Duration::from_millis(500));
                if let Some(status) = early {
                    if status == 503 {
                        quick_503.fetch_add(1, Ordering::SeqCst);
                    }
                    return status;
                }
                // No answer yet: this one holds a slot; send the body.
                c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let chunk = vec![0u8; MB as usize];
                for _ in 0..63 {
                    if c.write_all(&chunk).is_err() {
                        break;
                    }
                }
                resize_common::read_reply(&mut c).map_or(0, |r| r.status)
            })
        })
        .collect();
    let statuses: Vec<u16> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let peak = s.vm_hwm();
    eprintln!("finding 6: VmHWM {} MiB; statuses {statuses:?}", peak / MB);
    assert!(
        quick_503.load(Ordering::SeqCst) >= 45,
        "503 before the body: {statuses:?}"
    );
    // The two that held a slot sent zeros: not an image.
    assert!(
        statuses.iter().all(|s| matches!(s, 503 | 415)),
        "{statuses:?}"
    );
    assert!(peak < 400 * MB, "server peak {} MiB", peak / MB);
    // Over --max-bytes: 413 from the head alone.
    let (_c, early) = post_head(addr, 65 * MB, Duration::from_secs(2));
    assert_eq!(early, Some(413));
    assert_eq!(
        s.post("/resize?geometry=10x10", &gradient_jpeg(64, 48, 80))
            .status,
        200
    );
}

#[test]
fn finding6_a_trickling_body_gives_its_slot_back_after_the_body_timeout() {
    let s = Server::start(&["--workers", "1", "--queue", "0", "--body-timeout", "1s"]);
    let t0 = Instant::now();
    let (mut c, early) = post_head(s.addr, 1000, Duration::from_millis(200));
    assert_eq!(early, None);
    c.write_all(b"\xFF\xD8").unwrap();
    // Its slot is the only one: others are refused meanwhile.
    let photo = gradient_jpeg(64, 48, 80);
    assert_eq!(s.post("/resize?geometry=10x10", &photo).status, 503);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let r = resize_common::read_reply(&mut c).expect("an answer to the trickling body");
    assert_eq!(r.status, 408, "{}", r.text());
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_eq!(s.post("/resize?geometry=10x10", &photo).status, 200);
}

// --- finding 9: connections, header timeout, the --root race ---

#[test]
fn finding9_a_connection_over_the_cap_gets_503_and_a_slow_head_is_cut() {
    let s = Server::start(&["--max-connections", "4", "--header-timeout", "2s"]);
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(s.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let over = request(s.addr, "GET", "/health", &[], Duration::from_secs(5));
    assert_eq!(over.status, 503, "{}", over.text());
    assert_eq!(over.header("connection").as_deref(), Some("close"));
    drop(idle);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(s.get("/health").status, 200);
    let metrics = s.get("/metrics").text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("remora_resize_connections_refused_total") && !l.ends_with(" 0")),
        "{metrics}"
    );
    // A head that never ends: closed after the header timeout.
    let mut slow = TcpStream::connect(s.addr).unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 256];
    let closed = loop {
        match slow.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    let took = t0.elapsed();
    assert!(
        closed && took < Duration::from_secs(4),
        "closed {closed} after {took:?}"
    );
}

/// Not a test: the attacker of the `--root` race, when re-run as `nobody`.
#[test]
fn root_race_attacker_entry() {
    let Ok(addr) = std::env::var("REMORA_TEST_RACE_SERVER") else {
        return;
    };
    assert!(!is_root(), "the attacker must not be root");
    let dir = std::path::PathBuf::from(std::env::var("REMORA_TEST_RACE_DIR").unwrap());
    let secret = std::env::var("REMORA_TEST_RACE_SECRET").unwrap();
    let (x, y) = (dir.join("x.jpg"), dir.join("y.jpg"));
    std::os::unix::fs::symlink(&secret, &y).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let (x, y) = (
            std::ffi::CString::new(x.to_str().unwrap()).unwrap(),
            std::ffi::CString::new(y.to_str().unwrap()).unwrap(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: two valid C strings; renameat2 touches nothing else.
                unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        libc::AT_FDCWD,
                        x.as_ptr(),
                        libc::AT_FDCWD,
                        y.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    );
                }
            }
        })
    };
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let (mut served, mut refused, mut leaked) = (0, 0, 0);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(6) && served + refused < 4000 {
        let r = request(
            addr,
            "GET",
            "/insecure/w:10/plain/local:///pub/x.jpg@png",
            &[],
            Duration::from_secs(10),
        );
        match (r.status, r.header("x-remora-height").as_deref()) {
            (200, Some("10")) => served += 1,
            (200, _) => leaked += 1,
            _ => refused += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    println!("race served {served} refused {refused} leaked {leaked}");
}

#[test]
fn finding9_root_files_are_opened_beneath_the_root_and_a_swapped_symlink_leaks_nothing() {
    if !is_root()
        || std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_err()
    {
        eprintln!(
            "skipped: needs root and setpriv (the server runs as root, the attacker as nobody)"
        );
        return;
    }
    let t = Tmp::new("f9-race");
    resize_common::chmod(&t.0, 0o755);
    // The secret: 37×29, in a folder only root may enter.
    let secret_dir = t.path("secret");
    std::fs::create_dir(&secret_dir).unwrap();
    resize_common::chmod(&secret_dir, 0o700);
    let secret = t.write("secret/s.jpg", &gradient_jpeg(37, 29, 90));
    // The root, with a folder nobody owns, holding a 64×64 image of nobody's.
    let root = t.path("root");
    let public = root.join("pub");
    std::fs::create_dir_all(&public).unwrap();
    resize_common::chmod(&root, 0o755);
    std::fs::write(public.join("x.jpg"), gradient_jpeg(64, 64, 90)).unwrap();
    let nobody = std::process::Command::new("id")
        .args(["-u", "nobody"])
        .output()
        .unwrap();
    let uid: u32 = String::from_utf8_lossy(&nobody.stdout)
        .trim()
        .parse()
        .unwrap();
    std::os::unix::fs::chown(&public, Some(uid), None).unwrap();
    std::os::unix::fs::chown(public.join("x.jpg"), Some(uid), None).unwrap();
    let s = Server::start(&["--root", root.to_str().unwrap(), "--workers", "2"]);
    // The secret is out of reach without the race.
    let direct = s.get(&format!(
        "/insecure/w:10/plain/local://{}",
        secret.display()
    ));
    assert_ne!(direct.status, 200);
    let (_exe_dir, exe) = resize_common::world_runnable_copy("race");
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(&exe)
        .args([
            "--exact",
            "root_race_attacker_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("REMORA_TEST_RACE_SERVER", s.addr.to_string())
        .env("REMORA_TEST_RACE_DIR", &public)
        .env("REMORA_TEST_RACE_SECRET", &secret)
        .current_dir(&t.0)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.find("race served").map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("attacker: {text}\n{}", String::from_utf8_lossy(&out.stderr)));
    eprintln!("finding 9: {line}");
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (served, refused, leaked) = (n[0], n[1], n[2]);
    assert_eq!(leaked, 0, "the secret was served: {line}");
    // The race ran: the symlink was met (refused) and the file served.
    assert!(served > 0 && refused > 0, "{line}");
}

// --- finding 10: keys ---

#[test]
fn finding10_keys_and_salts_must_be_strict_non_empty_hex() {
    for (key, salt, what) in [
        ("aéb", "00", "--key"),
        ("+1+1", "00", "--key"),
        ("", "00", "--key"),
        ("0x12", "00", "--key"),
        ("abc", "00", "--key"),
        ("00", "", "--salt"),
        ("00", " 1", "--salt"),
    ] {
        let (code, out, err, _) = run(
            &[
                "resize",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--key",
                key,
                "--salt",
                salt,
            ],
            Duration::from_secs(5),
        );
        assert_eq!(code, Some(1), "--key {key:?} --salt {salt:?}: {out}{err}");
        assert!(
            err.contains(what) && (err.contains("hex") || err.contains("empty")),
            "--key {key:?} --salt {salt:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

// --- shutdown ---

#[test]
fn sigterm_during_a_long_job_ends_the_server_within_two_and_a_half_seconds() {
    // A 3000×2000 photo enlarged to 7000×6000 PNG: several seconds of resample and deflate.
    let photo = Arc::new(gradient_jpeg(3000, 2000, 90));
    let mut s = Server::start(&["--workers", "1"]);
    let addr = s.addr;
    let client = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        let head = format!(
            "POST /resize?geometry=7000x6000!&format=png HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            photo.len()
        );
        c.write_all(head.as_bytes()).unwrap();
        c.write_all(&photo).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        resize_common::read_reply(&mut c).map(|r| r.status)
    });
    // Wait until the job runs.
    let t0 = Instant::now();
    loop {
        let m = s.get("/metrics").text();
        if m.lines().any(|l| l == "remora_resize_images_in_progress 1") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the job never started: {m}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let stopped = Instant::now();
    resize_common::sigterm(s.pid());
    loop {
        if !s.alive() {
            break;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = stopped.elapsed();
    eprintln!("shutdown: exited {took:?} after SIGTERM");
    assert!(
        took < Duration::from_millis(2500),
        "exited {took:?} after SIGTERM"
    );
    // The client got an answer (503) or the connection closed; never an image.
    if let Ok(Ok(status)) = client.join() {
        assert_ne!(status, 200);
    }
}
