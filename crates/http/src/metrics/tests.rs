//! Both text formats from one registry, content negotiation, and the server on loopback.
use super::*;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

fn sample_registry(n: Arc<AtomicU64>) -> Registry {
    registry(move |m| {
        m.counter("t_requests_total", "Requests.", n.load(Relaxed))
            .counter_with("t_cmds_total", "Commands.", &[("cmd", "get")], 2u64)
            .counter_with("t_cmds_total", "Commands.", &[("cmd", "set")], 3u64)
            .gauge("t_ratio", "A ratio.", 0.5)
            .gauge("t_below", "Below zero.", -2i64)
            .info("t_build_info", "Build.", &[("version", "1.2\"3")])
            .histogram_with(
                "t_seconds",
                "Durations.",
                &[],
                &[(0.1, 1), (1.0, 2), (f64::INFINITY, 1)],
                2.5,
            );
    })
}

#[test]
fn the_prometheus_text_names_counters_and_infos_as_exposed() {
    let n = Arc::new(AtomicU64::new(7));
    let reg = sample_registry(n.clone());
    let (ct, t) = render(&reg, None).unwrap();
    assert_eq!(ct, PROMETHEUS_TEXT);
    for line in [
        "# TYPE t_requests_total counter\n",
        "t_requests_total 7\n",
        "t_cmds_total{cmd=\"get\"} 2\n",
        "t_cmds_total{cmd=\"set\"} 3\n",
        "# TYPE t_ratio gauge\n",
        "t_ratio 0.5\n",
        "t_below -2\n",
        "t_build_info{version=\"1.2\\\"3\"} 1\n",
        "t_seconds_bucket{le=\"1\"} 3\n",
        "t_seconds_bucket{le=\"+Inf\"} 4\n",
        "t_seconds_count 4\n",
    ] {
        assert!(t.contains(line), "{line:?} missing from\n{t}");
    }
    assert!(!t.contains("# EOF"), "{t}");
    // Read at scrape time.
    n.store(9, Relaxed);
    assert!(render(&reg, None)
        .unwrap()
        .1
        .contains("t_requests_total 9\n"));
}

#[test]
fn openmetrics_is_served_when_the_scraper_prefers_it() {
    let reg = sample_registry(Arc::new(AtomicU64::new(1)));
    // What Prometheus 2 sends.
    let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (ct, t) = render(&reg, Some(prom)).unwrap();
    assert_eq!(ct, OPENMETRICS);
    assert!(
        t.contains("# TYPE t_requests counter\nt_requests_total 1\n"),
        "{t}"
    );
    assert!(t.contains("# TYPE t_build info\n"), "{t}");
    assert!(t.ends_with("# EOF\n"), "{t}");
    assert!(!wants_openmetrics("text/plain"));
    assert!(!wants_openmetrics("*/*"));
    assert!(!wants_openmetrics(
        "application/openmetrics-text;q=0.2, text/plain"
    ));
    assert!(!wants_openmetrics("application/openmetrics-text;q=0"));
}

#[test]
fn http_stats_use_the_prefix() {
    let stats = Arc::new(crate::Stats::default());
    let s = stats.clone();
    let reg = registry(move |m| {
        m.http("svc", &s);
    });
    let t = render(&reg, None).unwrap().1;
    for name in [
        "svc_connections_open 0\n",
        "svc_connections_accepted_total 0\n",
        "svc_connections_refused_total 0\n",
        "svc_connections_timed_out_total 0\n",
    ] {
        assert!(t.contains(name), "{name:?} missing from\n{t}");
    }
}

fn get(addr: std::net::SocketAddr, path: &str, accept: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\naccept: {accept}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

use std::time::Duration;

#[test]
fn serve_metrics_answers_on_its_own_thread_and_stops_when_dropped() {
    let n = Arc::new(AtomicU64::new(5));
    let reg = Arc::new(sample_registry(n));
    let srv = serve_metrics("127.0.0.1:0".parse().unwrap(), reg.clone()).unwrap();
    let addr = srv.local_addr();
    let r = get(addr, "/metrics", "*/*");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("content-type: text/plain; version=0.0.4"), "{r}");
    assert!(r.contains("t_requests_total 5\n"), "{r}");
    let r = get(addr, "/metrics", "application/openmetrics-text");
    assert!(
        r.contains("content-type: application/openmetrics-text"),
        "{r}"
    );
    assert!(get(addr, "/other", "*/*").starts_with("HTTP/1.1 404"));
    assert_eq!(srv.stats().accepted(), 3);
    // The address in use is an error at once.
    assert!(serve_metrics(addr, reg).is_err());
    drop(srv);
    assert!(std::net::TcpStream::connect(addr).is_err());
}
