//! The HTTP service end to end, over real sockets on 127.0.0.1: POST and imgproxy GETs,
//! signatures, sources (root, traversal, allow-list), concurrency, backpressure, limits, hostile
//! images, metrics.
#![cfg(feature = "http")]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use remora_resize::client::{Client, ClientError, Request};
use remora_resize::service::{imgproxy, ServeOptions, Server};
use remora_resize::testing::{decode_rgb, gradient_jpeg};
use remora_resize::{Format, Geometry, Limits};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn opts() -> ServeOptions {
    ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        queue: 64,
        ..ServeOptions::default()
    }
}

fn base(s: &Server) -> String {
    format!("http://{}", s.local_addr())
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn size(&self) -> (u32, u32) {
        (
            self.header("x-remora-width").unwrap().parse().unwrap(),
            self.header("x-remora-height").unwrap().parse().unwrap(),
        )
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent()
}

fn answer(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
    let r = r.expect("request");
    let status = r.status().as_u16();
    let headers = r
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = r
        .into_body()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()
        .unwrap();
    Answer {
        status,
        headers,
        body,
    }
}

fn get(url: &str) -> Answer {
    answer(agent().get(url).call())
}

fn post(url: &str, body: &[u8]) -> Answer {
    answer(agent().post(url).send(body))
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "remora-resize-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A source root with `photos/a.jpg` (800×600) and `b.jpg` (300×400), and a secret next to it.
fn root_with_images() -> (TempDir, PathBuf) {
    let t = TempDir::new("root");
    let root = t.0.join("root");
    std::fs::create_dir_all(root.join("photos")).unwrap();
    std::fs::write(root.join("photos/a.jpg"), gradient_jpeg(800, 600, 90)).unwrap();
    std::fs::write(root.join("b.jpg"), gradient_jpeg(300, 400, 90)).unwrap();
    std::fs::write(t.0.join("secret.jpg"), gradient_jpeg(64, 64, 90)).unwrap();
    (t, root)
}

fn crafted_header(w: u16, h: u16) -> Vec<u8> {
    let mut v = vec![0xFF, 0xD8];
    v.extend_from_slice(&[0xFF, 0xDB, 0, 67, 0]);
    v.extend_from_slice(&[1u8; 64]);
    v.extend_from_slice(&[0xFF, 0xC0, 0, 17, 8]);
    v.extend_from_slice(&h.to_be_bytes());
    v.extend_from_slice(&w.to_be_bytes());
    v.extend_from_slice(&[3, 1, 0x22, 0, 2, 0x11, 0, 3, 0x11, 0]);
    v.extend_from_slice(&[0xFF, 0xDA, 0, 12, 3, 1, 0, 2, 0, 3, 0, 0, 63, 0]);
    v.extend_from_slice(&[0u8; 64]);
    v.extend_from_slice(&[0xFF, 0xD9]);
    v
}

fn metric(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[test]
fn health_answers_running() {
    let s = Server::spawn(opts()).unwrap();
    let a = get(&format!("{}/health", base(&s)));
    assert_eq!(a.status, 200);
    assert_eq!(a.text(), "remora resize: running");
    s.shutdown();
}

#[test]
fn post_round_trip_gives_imagemagick_dimensions() {
    let s = Server::spawn(opts()).unwrap();
    let jpeg = gradient_jpeg(800, 600, 85);
    for geometry in [
        "500x500",
        "100x100^",
        "50%",
        "300x300!",
        "2000x2000>",
        "10000@",
    ] {
        let enc = geometry
            .replace('%', "%25")
            .replace('^', "%5E")
            .replace('!', "%21")
            .replace('>', "%3E")
            .replace('@', "%40");
        let a = post(
            &format!("{}/resize?geometry={enc}&quality=85", base(&s)),
            &jpeg,
        );
        assert_eq!(a.status, 200, "{geometry}: {}", a.text());
        assert_eq!(a.header("content-type"), Some("image/jpeg"));
        let want = Geometry::parse(geometry).unwrap().apply(800, 600);
        assert_eq!(a.size(), want, "{geometry}");
        let (w, h, _) = decode_rgb(&a.body);
        assert_eq!((w as u32, h as u32), want, "{geometry}");
    }
    // PNG out, with a filter and strip.
    let a = post(
        &format!(
            "{}/resize?geometry=64x64&format=png&filter=mitchell&strip=1",
            base(&s)
        ),
        &jpeg,
    );
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.header("content-type"), Some("image/png"));
    assert!(a.body.starts_with(b"\x89PNG"));
    assert_eq!(a.size(), (64, 48));
    // Bad parameters are 400 with a reason.
    for q in [
        "geometry=500y",
        "quality=85",
        "geometry=10x10&quality=0",
        "geometry=10x10&bogus=1",
    ] {
        let a = post(&format!("{}/resize?{q}", base(&s)), &jpeg);
        assert_eq!(a.status, 400, "{q}: {}", a.text());
        assert!(!a.text().is_empty());
    }
    s.shutdown();
}

#[test]
fn imgproxy_plain_and_base64_sources_from_root() {
    let (_t, root) = root_with_images();
    let s = Server::spawn(ServeOptions {
        root: Some(root),
        ..opts()
    })
    .unwrap();
    let b = base(&s);
    // Fit (default) 400×400 of 800×600, plain local:// source.
    let a = get(&format!(
        "{b}/insecure/rs:fit:400:400/plain/local:///photos/a.jpg"
    ));
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.size(), (400, 300));
    assert_eq!(decode_rgb(&a.body).0, 400);
    // The same, base64url source split by a slash, `.png` extension.
    let enc = URL_SAFE_NO_PAD.encode("local:///photos/a.jpg");
    let (x, y) = enc.split_at(8);
    let a = get(&format!("{b}/_/w:200/{x}/{y}.png"));
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.header("content-type"), Some("image/png"));
    assert_eq!(a.size(), (200, 150));
    // A bare relative path; fill crops to the box; force ignores the ratio; no enlarging.
    let cases = [
        ("rs:fill:200:200/g:nowe", "b.jpg", (200, 200)),
        ("rt:fill/w:300/h:100/q:70", "photos/a.jpg", (300, 100)),
        ("rs:force:120:50", "photos/a.jpg", (120, 50)),
        ("s:1000:1000", "b.jpg", (300, 400)),
        ("s:1000:1000:1", "b.jpg", (750, 1000)),
        ("rs:fill:1000:100", "b.jpg", (300, 100)),
        ("rs:fill-down:600:300", "b.jpg", (300, 150)),
        ("rs:auto:100:200", "photos/a.jpg", (100, 75)),
    ];
    for (options, src, want) in cases {
        let a = get(&format!("{b}/insecure/{options}/plain/{src}@jpg"));
        assert_eq!(a.status, 200, "{options}: {}", a.text());
        assert_eq!(a.size(), want, "{options}");
        let (w, h, _) = decode_rgb(&a.body);
        assert_eq!((w as u32, h as u32), want, "{options}");
    }
    // Unknown options, unsupported formats and missing files are refused with a reason.
    assert_eq!(get(&format!("{b}/_/blur:3/plain/b.jpg")).status, 400);
    assert_eq!(get(&format!("{b}/_/w:10/plain/b.jpg@webp")).status, 400);
    let a = get(&format!("{b}/_/w:10/plain/nothere.jpg"));
    assert_eq!(a.status, 404, "{}", a.text());
    s.shutdown();
}

#[test]
fn signature_is_checked_when_a_key_is_set() {
    let (_t, root) = root_with_images();
    let (key, salt) = (b"secret".to_vec(), b"hello".to_vec());
    let s = Server::spawn(ServeOptions {
        root: Some(root),
        key: Some(key.clone()),
        salt: Some(salt.clone()),
        ..opts()
    })
    .unwrap();
    let path = "/rs:fit:100:100/plain/local:///b.jpg@jpg";
    let sig = imgproxy::sign(path, &key, &salt);
    let a = get(&format!("{}/{sig}{path}", base(&s)));
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.size(), (75, 100));
    for bad in ["insecure", "_", &imgproxy::sign(path, &key, b"pepper")] {
        let a = get(&format!("{}/{bad}{path}", base(&s)));
        assert_eq!(a.status, 403, "{bad}: {}", a.text());
    }
    // A valid signature for another path does not carry over.
    let a = get(&format!(
        "{}/{sig}/rs:fit:200:200/plain/local:///b.jpg@jpg",
        base(&s)
    ));
    assert_eq!(a.status, 403);
    s.shutdown();
}

#[test]
fn path_traversal_attempts_are_refused() {
    let (t, root) = root_with_images();
    #[cfg(unix)]
    std::os::unix::fs::symlink(t.0.join("secret.jpg"), root.join("link.jpg")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&t.0, root.join("up")).unwrap();
    let s = Server::spawn(ServeOptions {
        root: Some(root.clone()),
        ..opts()
    })
    .unwrap();
    let b = base(&s);
    let secret = t.0.join("secret.jpg");
    let abs = secret.to_str().unwrap();
    let attempts = [
        "plain/local:///../secret.jpg".to_string(),
        "plain/../secret.jpg".to_string(),
        "plain/photos/../../secret.jpg".to_string(),
        "plain/%2e%2e/secret.jpg".to_string(),
        "plain/local:///%2E%2E%2Fsecret.jpg".to_string(),
        "plain/photos%2F..%2F..%2Fsecret.jpg".to_string(),
        format!("plain/local://{abs}").replace("local:///", "local:////"),
        format!("plain/{}", abs.replace('/', "%2F")),
        format!("plain/local:///{}", "%2Fetc%2Fpasswd"),
        format!("{}.jpg", URL_SAFE_NO_PAD.encode("local:///../secret.jpg")),
        format!("{}.jpg", URL_SAFE_NO_PAD.encode(abs)),
        "plain/link.jpg".to_string(),
        "plain/up/secret.jpg".to_string(),
        "plain/file:///etc/passwd".to_string(),
    ];
    for at in &attempts {
        let a = get(&format!("{b}/_/w:10/{at}"));
        assert_eq!(a.status, 403, "{at}: {}", a.text());
        assert!(!a.text().trim().is_empty(), "{at}: a reason");
        assert!(!a.body.starts_with(&[0xFF, 0xD8]), "{at} served an image");
    }
    // And the legitimate neighbour still works.
    assert_eq!(get(&format!("{b}/_/w:10/plain/photos/a.jpg")).status, 200);
    // No root configured: no local sources at all.
    let s2 = Server::spawn(opts()).unwrap();
    assert_eq!(
        get(&format!("{}/_/w:10/plain/b.jpg", base(&s2))).status,
        403
    );
}

/// A tiny HTTP/1.1 server answering every GET with `body` (one connection at a time).
fn serve_bytes(body: Vec<u8>) -> (String, std::sync::Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            h.fetch_add(1, Ordering::SeqCst);
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = c.write_all(head.as_bytes());
            let _ = c.write_all(&body);
        }
    });
    (format!("http://{addr}"), hits)
}

#[test]
fn http_sources_only_under_an_allowed_prefix() {
    let (origin, hits) = serve_bytes(gradient_jpeg(640, 480, 90));
    let s = Server::spawn(ServeOptions {
        allow: vec![format!("{origin}/images/")],
        ..opts()
    })
    .unwrap();
    let b = base(&s);
    let ok = format!("{origin}/images/cat.jpg");
    let a = get(&format!("{b}/_/w:320/plain/{ok}"));
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.size(), (320, 240));
    let a = get(&format!("{b}/_/w:320/{}", URL_SAFE_NO_PAD.encode(&ok)));
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // Outside the prefix, dot segments out of it, other hosts: refused without a fetch.
    for refused in [
        format!("{origin}/private/cat.jpg"),
        format!("{origin}/images/../private/cat.jpg"),
        format!("{origin}/images/%2e%2e/private/cat.jpg"),
        "http://example.invalid/images/cat.jpg".to_string(),
    ] {
        let a = get(&format!("{b}/_/w:320/{}", URL_SAFE_NO_PAD.encode(&refused)));
        assert_eq!(a.status, 403, "{refused}: {}", a.text());
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // A server with no allow-list fetches nothing.
    let s2 = Server::spawn(opts()).unwrap();
    let a = get(&format!("{}/_/w:320/plain/{ok}", base(&s2)));
    assert_eq!(a.status, 403);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[test]
fn source_over_the_byte_limit_is_refused_while_reading() {
    let (origin, _) = serve_bytes(gradient_jpeg(1200, 900, 95));
    let (_t, root) = root_with_images();
    let s = Server::spawn(ServeOptions {
        root: Some(root),
        allow: vec![format!("{origin}/")],
        limits: Limits {
            max_input_bytes: 20_000,
            ..Limits::default()
        },
        ..opts()
    })
    .unwrap();
    let a = get(&format!("{}/_/w:10/plain/{origin}/big.jpg", base(&s)));
    assert_eq!(a.status, 413, "{}", a.text());
    let a = get(&format!("{}/_/w:10/plain/photos/a.jpg", base(&s)));
    assert_eq!(a.status, 413, "{}", a.text());
}

#[test]
fn concurrent_clients_all_succeed() {
    let s = Server::spawn(ServeOptions {
        workers: 2,
        queue: 128,
        ..opts()
    })
    .unwrap();
    let client = Client::new(&base(&s)).unwrap();
    let jpeg = gradient_jpeg(320, 240, 85);
    std::thread::scope(|sc| {
        for t in 0..16 {
            let (client, jpeg) = (&client, &jpeg);
            sc.spawn(move || {
                for i in 0..4 {
                    let side = 20 + t * 4 + i;
                    let g = format!("{side}x{side}");
                    let req = Request {
                        geometry: &g,
                        quality: Some(80),
                        ..Request::default()
                    };
                    let out = client.resize(jpeg, &req).unwrap();
                    let (w, h, _) = decode_rgb(&out);
                    let want = Geometry::parse(&g).unwrap().apply(320, 240);
                    assert_eq!((w as u32, h as u32), want);
                }
            });
        }
    });
    let m = get(&format!("{}/metrics", base(&s))).text();
    assert_eq!(
        metric(&m, "remora_resize_requests_total{status=\"200\"}"),
        64
    );
}

#[test]
fn resize_many_keeps_the_order() {
    let s = Server::spawn(opts()).unwrap();
    let client = Client::new(&base(&s)).unwrap();
    let images: Vec<Vec<u8>> = (0..12)
        .map(|i| gradient_jpeg(100 + 20 * i, 80, 85))
        .collect();
    let mut with_bad = images.clone();
    with_bad[5] = b"not an image".to_vec();
    let req = Request {
        geometry: "50%",
        ..Request::default()
    };
    let out = client.resize_many(with_bad, &req, 4);
    assert_eq!(out.len(), 12);
    for (i, r) in out.iter().enumerate() {
        if i == 5 {
            match r {
                Err(ClientError::Status { status, message }) => {
                    assert_eq!(*status, 415);
                    assert!(message.contains("not a JPEG or PNG"), "{message}");
                }
                other => panic!("{other:?}"),
            }
            continue;
        }
        let (w, _, _) = decode_rgb(r.as_ref().unwrap());
        assert_eq!(w, (100 + 20 * i) / 2, "image {i}");
    }
    assert!(matches!(Client::new("ftp://x"), Err(ClientError::Url(_))));
    let dead = Client::new("http://127.0.0.1:1").unwrap();
    assert!(matches!(
        dead.resize(&images[0], &req),
        Err(ClientError::Connection(_))
    ));
}

/// Lets the paused workers go on when dropped, so that a failed assertion inside a
/// `thread::scope` does not leave the scope waiting forever for requests the workers hold.
struct Unpause<'a>(&'a Server);

impl Drop for Unpause<'_> {
    fn drop(&mut self) {
        self.0.pause_workers(false);
    }
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn backpressure_503_with_retry_after_and_the_client_retries() {
    let s = Server::spawn(ServeOptions {
        workers: 1,
        queue: 1,
        ..opts()
    })
    .unwrap();
    let b = base(&s);
    let jpeg = gradient_jpeg(320, 240, 85);
    s.pause_workers(true);
    let url = format!("{b}/resize?geometry=100x100");
    std::thread::scope(|sc| {
        let _unpause = Unpause(&s);
        // One job held by the worker, one waiting in the queue.
        let first = sc.spawn(|| post(&url, &jpeg));
        wait_until("the worker holds a job", || s.jobs() == (1, 0));
        let second = sc.spawn(|| post(&url, &jpeg));
        wait_until("a job waits", || s.jobs() == (2, 1));
        // Full: refused at once with Retry-After.
        let a = post(&url, &jpeg);
        assert_eq!(a.status, 503, "{}", a.text());
        assert_eq!(a.header("retry-after"), Some("1"));
        // The client gets a 503 too, waits the second, and succeeds once the workers go on.
        let (client, jpeg) = (Client::new(&b).unwrap(), &jpeg);
        let retried = sc.spawn(move || {
            let req = Request {
                geometry: "100x100",
                ..Request::default()
            };
            client.resize(jpeg, &req)
        });
        // The direct request's 503 and at least one of the client's (it retries every second
        // and may be refused again before the poll sees the count at 2).
        wait_until("the client was refused", || {
            let m = get(&format!("{b}/metrics")).text();
            metric(&m, "remora_resize_requests_total{status=\"503\"}") >= 2
        });
        s.pause_workers(false);
        assert_eq!(first.join().unwrap().status, 200);
        assert_eq!(second.join().unwrap().status, 200);
        let out = retried.join().unwrap().unwrap();
        assert_eq!(decode_rgb(&out).0, 100);
    });
    let m = get(&format!("{b}/metrics")).text();
    assert_eq!(
        metric(&m, "remora_resize_requests_total{status=\"200\"}"),
        3
    );
    let overloaded = metric(&m, "remora_resize_errors_total{kind=\"overloaded\"}");
    assert!(overloaded >= 2, "overloaded {overloaded}");
    assert_eq!(
        metric(&m, "remora_resize_requests_total{status=\"503\"}"),
        overloaded
    );
    // With no retries the client reports the 503. First let the worker finish: it answers a
    // job before it counts the job done, so right after the last answer it may still count one
    // pending, which the "held" wait below would take for the next request's; the next two
    // requests could then both arrive before the worker takes one, and the second be refused.
    wait_until("the worker is idle", || s.jobs() == (0, 0));
    s.pause_workers(true);
    std::thread::scope(|sc| {
        let _unpause = Unpause(&s);
        let a = sc.spawn(|| post(&url, &gradient_jpeg(32, 32, 80)));
        wait_until("held", || s.jobs() == (1, 0));
        let c = sc.spawn(|| post(&url, &gradient_jpeg(32, 32, 80)));
        wait_until("queued", || s.jobs() == (2, 1));
        let client = Client::new(&b).unwrap().retries(0);
        let r = client.resize(
            &gradient_jpeg(32, 32, 80),
            &Request {
                geometry: "10",
                ..Request::default()
            },
        );
        assert!(
            matches!(r, Err(ClientError::Status { status: 503, .. })),
            "{r:?}"
        );
        s.pause_workers(false);
        assert_eq!(a.join().unwrap().status, 200);
        assert_eq!(c.join().unwrap().status, 200);
    });
}

#[test]
fn decompression_bomb_and_oversized_bodies_are_refused() {
    let s = Server::spawn(ServeOptions {
        limits: Limits {
            max_input_bytes: 100_000,
            ..Limits::default()
        },
        ..opts()
    })
    .unwrap();
    let b = base(&s);
    let bomb = crafted_header(50_000, 50_000);
    // Refused from the header: a decode would need 7.5 GB for these pixels.
    let a = post(&format!("{b}/resize?geometry=500x500"), &bomb);
    assert_eq!(a.status, 413, "{}", a.text());
    assert!(a.text().contains("input pixels"), "{}", a.text());
    // Asking for an output over the limit.
    let a = post(
        &format!("{b}/resize?geometry=100000x100000"),
        &gradient_jpeg(64, 64, 80),
    );
    assert_eq!(a.status, 422, "{}", a.text());
    assert!(a.text().contains("output pixels"), "{}", a.text());
    // A body over the byte limit.
    let big = vec![0xFFu8; 200_000];
    let a = post(&format!("{b}/resize?geometry=10x10"), &big);
    assert_eq!(a.status, 413, "{}", a.text());
    // Still serving.
    let a = post(
        &format!("{b}/resize?geometry=10x10"),
        &gradient_jpeg(64, 64, 80),
    );
    assert_eq!(a.status, 200);
}

#[test]
fn malformed_and_truncated_images_are_4xx_and_the_workers_survive() {
    let s = Server::spawn(ServeOptions {
        workers: 1,
        ..opts()
    })
    .unwrap();
    let b = base(&s);
    let url = format!("{b}/resize?geometry=100x100");
    let good = gradient_jpeg(400, 300, 85);
    let mut flipped = good.clone();
    for i in (good.len() / 2..good.len() - 2).step_by(7) {
        flipped[i] ^= 0x5A;
    }
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("text", b"hello, not an image".to_vec()),
        ("SOI only", vec![0xFF, 0xD8, 0xFF]),
        ("header cut", good[..good.len().min(200)].to_vec()),
        ("half", good[..good.len() / 2].to_vec()),
        ("no EOI", good[..good.len() - 2].to_vec()),
        ("corrupt scan", flipped),
        ("zero size", crafted_header(0, 0)),
        ("PNG signature only", b"\x89PNG\r\n\x1a\n".to_vec()),
    ];
    for (what, data) in &bad {
        let a = post(&url, data);
        // A damaged scan may still decode (libjpeg-turbo pads); anything else is a 4xx.
        assert!(
            (400..500).contains(&a.status) || a.status == 200,
            "{what}: {} {}",
            a.status,
            a.text()
        );
        if a.status != 200 {
            assert!(!a.text().trim().is_empty(), "{what}: a reason");
        }
        let ok = post(&url, &good);
        assert_eq!(ok.status, 200, "after {what}");
    }
    assert_eq!(post(&url, b"junk").status, 415);
    assert_eq!(post(&url, &good[..200]).status, 422);
}

#[test]
fn metrics_count_requests_errors_and_bytes() {
    let s = Server::spawn(opts()).unwrap();
    let b = base(&s);
    let jpeg = gradient_jpeg(200, 100, 85);
    let mut out_bytes = 0;
    for _ in 0..3 {
        let a = post(&format!("{b}/resize?geometry=50x50"), &jpeg);
        assert_eq!(a.status, 200);
        out_bytes += a.body.len() as u64;
    }
    assert_eq!(
        post(&format!("{b}/resize?geometry=50x50"), &jpeg[..300]).status,
        422
    );
    assert_eq!(post(&format!("{b}/resize?geometry=5y"), &jpeg).status, 400);
    assert_eq!(get(&format!("{b}/insecure/w:10/plain/a.jpg")).status, 403);
    let a = get(&format!("{b}/metrics"));
    assert_eq!(a.status, 200);
    assert!(a.header("content-type").unwrap().starts_with("text/plain"));
    let m = a.text();
    let v = |k: &str| metric(&m, k);
    assert_eq!(v("remora_resize_requests_total{status=\"200\"}"), 3);
    assert_eq!(v("remora_resize_requests_total{status=\"422\"}"), 1);
    assert_eq!(v("remora_resize_requests_total{status=\"400\"}"), 1);
    assert_eq!(v("remora_resize_requests_total{status=\"403\"}"), 1);
    assert_eq!(v("remora_resize_errors_total{kind=\"bad_image\"}"), 1);
    assert_eq!(v("remora_resize_errors_total{kind=\"bad_request\"}"), 1);
    assert_eq!(v("remora_resize_errors_total{kind=\"forbidden\"}"), 1);
    assert_eq!(v("remora_resize_request_duration_seconds_count"), 6);
    assert_eq!(
        v("remora_resize_request_duration_seconds_bucket{le=\"+Inf\"}"),
        6
    );
    assert_eq!(v("remora_resize_requests_in_progress"), 0);
    assert_eq!(v("remora_resize_queue_depth"), 0);
    assert_eq!(v("remora_resize_workers"), 2);
    // Input counts bodies that reached a worker: 3 good, 1 truncated (not the bad geometry).
    assert_eq!(
        v("remora_resize_input_bytes_total"),
        3 * jpeg.len() as u64 + 300
    );
    assert_eq!(v("remora_resize_output_bytes_total"), out_bytes);
    for name in [
        "# TYPE remora_resize_requests_total counter",
        "# TYPE remora_resize_request_duration_seconds histogram",
        "# TYPE remora_resize_requests_in_progress gauge",
    ] {
        assert!(m.contains(name), "{name}");
    }
}

#[test]
fn metrics_on_a_separate_bind() {
    let s = Server::spawn(ServeOptions {
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..opts()
    })
    .unwrap();
    let m = s.metrics_addr().expect("metrics address");
    assert_ne!(m, s.local_addr());
    let a = get(&format!("http://{m}/metrics"));
    assert_eq!(a.status, 200);
    assert!(a.text().contains("remora_resize_workers 2"));
    // Not on the main port then (it is read as an imgproxy path).
    assert_ne!(get(&format!("{}/metrics", base(&s))).status, 200);
    s.shutdown();
}

#[test]
fn shutdown_releases_the_port() {
    let s = Server::spawn(opts()).unwrap();
    let addr = s.local_addr();
    s.shutdown();
    assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
}

#[test]
fn spawn_refuses_a_missing_root() {
    let err = Server::spawn(ServeOptions {
        root: Some(Path::new("/nonexistent/remora/root").into()),
        ..opts()
    });
    assert!(err.is_err());
}

#[test]
fn client_sends_format_quality_filter_and_strip() {
    // The client sends `format`; PNG in, JPEG out.
    let s = Server::spawn(opts()).unwrap();
    let client = Client::new(&base(&s)).unwrap();
    let png = client
        .resize(
            &gradient_jpeg(64, 64, 85),
            &Request {
                geometry: "32x32",
                format: Some(Format::Png),
                ..Request::default()
            },
        )
        .unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let jpeg = client
        .resize(
            &png,
            &Request {
                geometry: "16x16",
                format: Some(Format::Jpeg),
                quality: Some(90),
                filter: Some("lanczos"),
                strip: true,
            },
        )
        .unwrap();
    assert_eq!(decode_rgb(&jpeg).0, 16);
}

/// `engine: Gpu`: the service resamples on the device `REMORA_GPU` allows (lavapipe in `make
/// test`) and answers what the CPU service answers; with no device allowed it does not start.
#[test]
fn a_gpu_service_answers_like_the_cpu_one_and_refuses_to_start_without_a_device() {
    let gpu = ServeOptions {
        engine: remora_resize::Engine::Gpu,
        ..opts()
    };
    if std::env::var_os("REMORA_GPU").is_none_or(|v| v == "off") {
        // Without a device policy that allows one, a real GPU may still be there: only check
        // that a refusal says why.
        if let Err(e) = Server::spawn(gpu) {
            assert!(e.to_string().contains("engine gpu"), "{e}");
        }
        return;
    }
    let (g, c) = (Server::spawn(gpu).unwrap(), Server::spawn(opts()).unwrap());
    let jpeg = gradient_jpeg(640, 480, 90);
    for q in [
        "geometry=300x200%21&format=png",
        "geometry=50%25&format=png",
    ] {
        let a = post(&format!("{}/resize?{q}", base(&g)), &jpeg);
        let b = post(&format!("{}/resize?{q}", base(&c)), &jpeg);
        assert_eq!((a.status, b.status), (200, 200), "{q}: {}", a.text());
        assert_eq!(a.size(), b.size(), "{q}");
        let (pa, pb) = (
            png::Decoder::new(std::io::Cursor::new(a.body)),
            png::Decoder::new(std::io::Cursor::new(b.body)),
        );
        let (mut ra, mut rb) = (pa.read_info().unwrap(), pb.read_info().unwrap());
        let mut xa = vec![0; ra.output_buffer_size().unwrap()];
        let mut xb = vec![0; rb.output_buffer_size().unwrap()];
        ra.next_frame(&mut xa).unwrap();
        rb.next_frame(&mut xb).unwrap();
        let worst = xa
            .iter()
            .zip(&xb)
            .map(|(p, q)| p.abs_diff(*q))
            .max()
            .unwrap();
        assert!(worst <= 1, "{q}: {worst} grey levels apart");
    }
}
