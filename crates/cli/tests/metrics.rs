//! `/metrics` on every service: each server started with its metrics on a free loopback port,
//! given a little work (a set and gets, a transfer, page fetches, an acquisition), then scraped
//! over HTTP; the values that work moves are checked. And `--log-format json`: log lines that
//! parse as JSON.
mod daq_serve_common;
mod kv_common;
mod metrics_common;
mod serve_common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics_common::{free_addr, samples, scrape, scrape_until, value};

#[test]
fn kv_serve_metrics_count_a_set_and_gets_under_memcached_exporters_names() {
    let maddr = free_addr().to_string();
    let srv = kv_common::remora(&["--metrics", &maddr]);
    let maddr = maddr.parse().unwrap();
    let before = samples(&scrape(maddr, None).body);
    assert_eq!(value(&before, "memcached_current_items"), 0.0);
    let mut s = kv_common::connect(srv.port);
    let script = b"set k 0 0 3\r\nabc\r\nget k\r\nget nope\r\n";
    s.write_all(script).unwrap();
    let out = kv_common::read_until(&mut s, b"END\r\nEND\r\n", Duration::from_secs(5));
    assert!(out.ends_with(b"END\r\nEND\r\n"), "{out:?}");
    let get_hit = "memcached_commands_total{command=\"get\",status=\"hit\"}";
    let r = scrape(maddr, None);
    assert!(
        r.content_type.starts_with("text/plain; version=0.0.4"),
        "{}",
        r.content_type
    );
    // The server counts its written bytes once the write call returns, which can be after the
    // client has read the reply: wait for that count too.
    let written = "memcached_written_bytes_total";
    let m = scrape_until(maddr, None, |m| {
        m.get(get_hit) == Some(&1.0) && m.get(written).is_some_and(|&v| v >= out.len() as f64)
    });
    assert_eq!(value(&m, "memcached_up"), 1.0);
    assert_eq!(value(&m, get_hit), 1.0);
    let miss = "memcached_commands_total{command=\"get\",status=\"miss\"}";
    assert_eq!(value(&m, miss), 1.0);
    let set = "memcached_commands_total{command=\"set\",status=\"hit\"}";
    assert_eq!(value(&m, set), 1.0);
    assert_eq!(value(&m, "memcached_current_items"), 1.0);
    assert_eq!(value(&m, "memcached_items_total"), 1.0);
    assert!(value(&m, "memcached_current_connections") >= 1.0);
    assert!(value(&m, "memcached_connections_total") >= 1.0);
    assert!(value(&m, "memcached_read_bytes_total") >= script.len() as f64);
    assert!(value(&m, written) >= out.len() as f64);
    assert!(value(&m, "memcached_current_bytes") > 0.0);
    assert_eq!(value(&m, "memcached_limit_bytes"), (64u64 << 20) as f64);
    assert_eq!(value(&m, "memcached_max_connections"), 1024.0);
    assert!(
        m.keys()
            .any(|k| k.starts_with("memcached_version{version=\"1.6.18")),
        "{m:?}"
    );
}

#[test]
fn fabric_serve_metrics_count_a_connection_and_its_transfer() {
    use remora_fabric::{connect, QpOptions, QpType, RegionInfo, Status, Transport};
    use remora_mem::{Access, Buffer, Mode, Pd};
    let maddr = free_addr();
    let m_arg = maddr.to_string();
    let args = [
        "fabric",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--region-size",
        "1M",
    ];
    let s = serve_common::serve(&[&args[..], &["--metrics", &m_arg]].concat());
    let m = samples(&scrape(maddr, None).body);
    assert_eq!(
        value(&m, "remora_fabric_connections_established_total"),
        0.0
    );
    assert_eq!(value(&m, "remora_fabric_connections_live"), 0.0);

    let pd = Arc::new(Pd::new());
    let region = pd
        .register(
            Buffer::anonymous(1 << 20).unwrap(),
            Access::ALL,
            Mode::OnDemand,
        )
        .unwrap();
    let opts = QpOptions {
        transport: Transport::Tcp,
        qp_type: QpType::Rc,
        ..QpOptions::default()
    };
    let (qp, peer) = connect(s.addr, pd, opts, &[0]).expect("connect");
    let remote = RegionInfo::decode(&peer).unwrap();
    qp.post_write(1, &region, 0, 64 << 10, remote.addr, remote.rkey, None)
        .unwrap();
    qp.post_read(2, &region, 64 << 10, 64 << 10, remote.addr, remote.rkey)
        .unwrap();
    for _ in 0..2 {
        let c = qp
            .wait(Duration::from_secs(20))
            .unwrap()
            .expect("a completion");
        assert_eq!(c.status, Status::Success);
    }
    let live = "remora_fabric_connections_live";
    let m = scrape_until(maddr, None, |m| m.get(live) == Some(&1.0));
    assert_eq!(value(&m, live), 1.0);
    assert_eq!(value(&m, "remora_fabric_connections_accepted_total"), 1.0);
    assert_eq!(
        value(&m, "remora_fabric_connections_established_total"),
        1.0
    );
    assert_eq!(value(&m, "remora_fabric_connections_refused_total"), 0.0);
    assert!(
        value(&m, "remora_fabric_packets_received_total") >= 2.0,
        "{m:?}"
    );
    assert_eq!(value(&m, "remora_fabric_access_errors_total"), 0.0);
    drop(qp);
    // The connection's counters stay in the totals once it ends.
    let m = scrape_until(maddr, None, |m| m.get(live) == Some(&0.0));
    assert_eq!(value(&m, live), 0.0);
    assert!(
        value(&m, "remora_fabric_packets_received_total") >= 2.0,
        "{m:?}"
    );
}

#[test]
fn lazy_serve_metrics_count_the_reads_a_tcp_client_asks_for() {
    use remora_lazy::{PageFetcher, TcpFetcher};
    let maddr = free_addr();
    let m_arg = maddr.to_string();
    let s = serve_common::serve(&[
        "lazy",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--synthetic",
        "1048576",
        "--metrics",
        &m_arg,
    ]);
    let m = samples(&scrape(maddr, None).body);
    assert_eq!(value(&m, "remora_lazy_source_reads_total"), 0.0);
    assert_eq!(value(&m, "remora_lazy_source_bytes"), 1048576.0);
    let info = "remora_lazy_serve_info{transport=\"tcp\",source=\"memory\"}";
    assert_eq!(value(&m, info), 1.0);
    let f = TcpFetcher::connect(s.addr, Duration::from_secs(5)).unwrap();
    let mut buf = vec![0u8; 4096];
    for i in 0..4 {
        let deadline = Instant::now() + Duration::from_secs(10);
        f.fetch(i * 4096, &mut buf, deadline).unwrap();
    }
    let reads = "remora_lazy_source_reads_total";
    let m = scrape_until(maddr, None, |m| m.get(reads) >= Some(&4.0));
    assert!(value(&m, reads) >= 4.0, "{m:?}");
    assert!(value(&m, "remora_lazy_source_read_bytes_total") >= 4.0 * 4096.0);
    assert_eq!(value(&m, "remora_lazy_source_read_errors_total"), 0.0);
}

#[test]
fn daq_serve_metrics_need_the_token_and_report_a_finished_run() {
    use daq_serve_common::{call, config, request, serve, Tmp};
    let t = Tmp::new("metrics");
    let d = serve(&t.0, &[]);
    let token = d.token.clone().expect("a token");
    let q = Duration::from_secs(10);
    assert_eq!(
        request(d.addr, "GET", "/metrics", None, "", q).unwrap().0,
        401
    );
    let r = scrape(d.addr, Some("0123456789abcdef0123456789abcdef"));
    assert_eq!(r.status, 401);
    let m = samples(&scrape(d.addr, Some(&token)).body);
    assert_eq!(value(&m, "remora_daq_state{state=\"idle\"}"), 1.0);
    assert_eq!(value(&m, "remora_daq_runs_total"), 0.0);
    assert_eq!(call(&d, "PUT", "/config", &config("", "")).0, 200);
    assert_eq!(call(&d, "POST", "/start", "").0, 202);
    let (code, st) = call(&d, "GET", "/wait?timeout=60", "");
    assert_eq!(code, 200, "{st}");
    // The token in the query works as well (what a browser can send).
    let (code, text) = request(
        d.addr,
        "GET",
        &format!("/metrics?token={token}"),
        None,
        "",
        q,
    )
    .unwrap();
    assert_eq!(code, 200, "{text}");
    let m = samples(&text);
    assert_eq!(
        value(&m, "remora_daq_state{state=\"configured\"}"),
        1.0,
        "{st}"
    );
    assert_eq!(value(&m, "remora_daq_state{state=\"running\"}"), 0.0);
    assert_eq!(value(&m, "remora_daq_runs_total"), 1.0);
    assert_eq!(value(&m, "remora_daq_run_kind{kind=\"acquisition\"}"), 1.0);
    assert_eq!(value(&m, "remora_daq_run_frames_expected"), 8.0);
    assert_eq!(value(&m, "remora_daq_run_frames_sent"), 8.0);
    assert_eq!(value(&m, "remora_daq_run_frames_received"), 8.0);
    let c = value(&m, "remora_daq_run_frames_complete");
    assert_eq!(c + value(&m, "remora_daq_run_frames_partial"), 8.0);
    let sorted = ["kept", "rejected", "dark"]
        .map(|k| value(&m, &format!("remora_daq_run_frames_{k}")))
        .iter()
        .sum::<f64>();
    assert_eq!(sorted, 8.0, "{m:?}");
    assert_eq!(value(&m, "remora_daq_run_frames_lost"), 0.0);
    assert_eq!(value(&m, "remora_daq_run_progress_ratio"), 1.0);
    assert!(value(&m, "remora_daq_run_frames_per_second") > 0.0);
    assert!(value(&m, "remora_daq_http_connections_accepted_total") >= 5.0);
    assert!(
        m.keys()
            .any(|k| k.starts_with("remora_daq_engine_info{engine=\"")),
        "{m:?}"
    );
    let (_, doc) = request(d.addr, "GET", "/openapi.json", None, "", q).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert!(doc["paths"]["/metrics"]["get"].is_object(), "{doc}");
}

#[test]
fn a_metrics_address_in_use_stops_the_server_with_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args([
            "fabric",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            &addr,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("--metrics {addr}")), "{err}");
}

/// The first line `remora ARGS` writes to stderr (run in `cwd`, killed after).
fn first_log_line(args: &[&str], cwd: &std::path::Path) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .env_remove("REMORA_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = c.kill();
    let _ = c.wait();
    line
}

#[test]
fn log_format_json_writes_each_event_as_a_json_object() {
    let dir = std::env::temp_dir().join(format!("remora-logjson-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // daq serve warns at start when there is no ./data directory: the flag after the
    // subcommand.
    let line = first_log_line(
        &[
            "daq",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        &dir,
    );
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert_eq!(v["level"], "WARN", "{v}");
    assert!(v["message"].as_str().unwrap().contains("--data-dir"), "{v}");
    assert!(v["timestamp"].is_string() && v["target"].is_string(), "{v}");
    // kv serve reads it among memcached's flags.
    let port = kv_common::free_port().to_string();
    let mut args = vec![
        "-v",
        "kv",
        "serve",
        "-p",
        &port,
        "-U",
        "0",
        "-l",
        "127.0.0.1",
    ];
    if kv_common::is_root() {
        args.extend(["-u", "root"]);
    }
    args.extend(["--log-format", "json"]);
    let line = first_log_line(&args, &dir);
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert_eq!(v["level"], "INFO", "{v}");
    // Text stays the default.
    args.truncate(args.len() - 2);
    let line = first_log_line(&args, &dir);
    assert!(
        serde_json::from_str::<serde_json::Value>(&line).is_err(),
        "{line:?}"
    );
    assert!(line.contains("INFO"), "{line:?}");
    std::fs::remove_dir_all(&dir).ok();
}
