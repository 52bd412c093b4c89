//! The HTTP service end to end, over real sockets on 127.0.0.1: POST and imgproxy GETs,
//! signatures, sources (root, traversal, allow-list), the client, start and stop, the GPU
//! engine. Concurrency, backpressure, hostile images and metrics: `service_load.rs`.
#![cfg(feature = "http")]

mod service_common;
use service_common::*;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use remora_resize::client::{Client, Request};
use remora_resize::service::{imgproxy, ServeOptions, Server};
use remora_resize::testing::{decode_rgb, gradient_jpeg};
use remora_resize::{Format, Geometry, Limits};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
        engine: remora_resize::ResampleEngine::Gpu,
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
