//! The bounds, against a real listener on loopback with std clients.
use super::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdStream};
use std::time::Instant;

struct Running {
    addr: SocketAddr,
    stats: Arc<Stats>,
    _rt: tokio::runtime::Runtime,
}

fn start(limits: Limits) -> Running {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = Arc::new(Stats::default());
    let app = Router::new().route("/", axum::routing::get(|| async { "hello" }));
    rt.spawn(serve(listener, app, limits, stats.clone()));
    Running {
        addr,
        stats,
        _rt: rt,
    }
}

fn get(addr: SocketAddr) -> String {
    let mut s = StdStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn a_request_within_the_bounds_is_served() {
    let r = start(Limits::default());
    let reply = get(r.addr);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.ends_with("hello"), "{reply}");
    assert_eq!(r.stats.accepted(), 1);
    assert_eq!(r.stats.refused(), 0);
}

#[test]
fn a_connection_over_the_cap_is_answered_503_and_the_others_served_after() {
    let r = start(Limits {
        max_connections: 3,
        header_timeout: Duration::from_secs(10),
    });
    let idle: Vec<StdStream> = (0..3)
        .map(|_| StdStream::connect(r.addr).unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.stats.open() < 3 {
        assert!(
            Instant::now() < deadline,
            "the idle connections never opened"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let reply = get(r.addr);
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("connection: close"), "{reply}");
    assert!(reply.contains("the cap is 3"), "{reply}");
    assert_eq!(r.stats.refused(), 1);
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.stats.open() > 0 {
        assert!(
            Instant::now() < deadline,
            "closed connections still counted open"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(get(r.addr).starts_with("HTTP/1.1 200"));
}

#[test]
fn a_trickling_head_is_cut_at_the_header_timeout() {
    let r = start(Limits {
        max_connections: 16,
        header_timeout: Duration::from_millis(300),
    });
    let mut s = StdStream::connect(r.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t0 = Instant::now();
    // One byte every 50 ms: each read makes progress, the head never ends in time.
    for b in b"GET / HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
        if s.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(300 + 3000),
        "the trickling connection lasted {took:?}"
    );
    assert_eq!(r.stats.timed_out(), 1);
    assert!(get(r.addr).starts_with("HTTP/1.1 200"));
}

#[test]
fn an_idle_kept_alive_connection_is_closed_at_the_header_timeout() {
    let r = start(Limits {
        max_connections: 16,
        header_timeout: Duration::from_millis(200),
    });
    let mut s = StdStream::connect(r.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let t0 = Instant::now();
    let mut buf = Vec::new();
    // Keep-alive: the server answers and then waits for the next head, which never comes.
    let _ = s.read_to_end(&mut buf);
    let took = t0.elapsed();
    let reply = String::from_utf8_lossy(&buf);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(took < Duration::from_secs(3), "held open {took:?}");
}
