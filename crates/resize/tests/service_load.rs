//! The HTTP service under load and attack, over real sockets on 127.0.0.1: concurrent
//! clients, backpressure (503 and the client's retries), decompression bombs, malformed and
//! truncated images, and the metrics that count them.
#![cfg(feature = "http")]

mod service_common;
use service_common::*;

use remora_resize::client::{Client, ClientError, Request};
use remora_resize::service::{ServeOptions, Server};
use remora_resize::testing::{decode_rgb, gradient_jpeg};
use remora_resize::{Geometry, Limits};
use std::time::{Duration, Instant};

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
