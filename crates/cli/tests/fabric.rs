//! Two processes: `remora fabric serve` as a child, this test process as the requester. Every
//! transport and operation, every byte checked; access violations; captures decoded by tshark
//! and checked with remora's own ICRC code; the benchmark's JSON.
mod serve_common;

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_fabric::{connect, Qp, QpOptions, QpType, RegionInfo, Status, Transport, WcOpcode};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

use serve_common::Served;

const EXE: &str = env!("CARGO_BIN_EXE_remora");

fn serve(extra: &[&str]) -> Served {
    let mut args = vec![
        "fabric",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--region-size",
        "8M",
    ];
    args.extend_from_slice(extra);
    serve_common::serve(&args)
}

struct Client {
    qp: Qp,
    region: Arc<Region>,
    remote: RegionInfo,
}

fn client(s: &Served, transport: Transport) -> Client {
    client_with(s, transport, &[0])
}

/// A client whose private data asks the responder for a role (see `remora fabric serve`).
fn client_with(s: &Served, transport: Transport, private: &[u8]) -> Client {
    let pd = Arc::new(Pd::new());
    let region = pd
        .register(
            Buffer::anonymous(16 << 20).unwrap(),
            Access::ALL,
            Mode::OnDemand,
        )
        .unwrap();
    let data: Vec<u8> = (0..region.len())
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2])
        .collect();
    region.write_at(0, &data).unwrap();
    let opts = QpOptions {
        transport,
        qp_type: QpType::Rc,
        ..QpOptions::default()
    };
    // Role 0: the responder only serves one-sided requests.
    let (qp, peer) = connect(s.addr, pd, opts, private).expect("connect");
    Client {
        qp,
        region,
        remote: RegionInfo::decode(&peer).unwrap(),
    }
}

fn bytes(r: &Region, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    r.read_at(off, &mut v).unwrap();
    v
}

fn done(qp: &Qp) -> remora_fabric::Completion {
    qp.wait(Duration::from_secs(20))
        .unwrap()
        .unwrap_or_else(|| panic!("no completion; {:?}", qp.stats()))
}

#[test]
fn every_transport_writes_and_reads_every_byte_across_processes() {
    let s = serve(&[]);
    for t in [Transport::Udp, Transport::Shm, Transport::Tcp] {
        let c = client(&s, t);
        // WRITE 8 MiB as 1 MiB messages (some with immediates), then READ it all back into
        // the second half of our region: every byte made the round trip through the server.
        for i in 0..8u64 {
            let imm = (i % 2 == 0).then_some(i as u32);
            let off = (i << 20) as usize;
            c.qp.post_write(
                i,
                &c.region,
                off,
                1 << 20,
                c.remote.addr + off as u64,
                c.remote.rkey,
                imm,
            )
            .unwrap();
        }
        for i in 0..8u64 {
            let d = done(&c.qp);
            assert_eq!(
                (d.wr_id, d.status, d.opcode),
                (i, Status::Success, WcOpcode::Write),
                "{t}"
            );
        }
        c.qp.post_read(
            100,
            &c.region,
            8 << 20,
            8 << 20,
            c.remote.addr,
            c.remote.rkey,
        )
        .unwrap();
        let d = done(&c.qp);
        assert_eq!((d.status, d.byte_len), (Status::Success, 8 << 20), "{t}");
        assert!(
            bytes(&c.region, 0, 8 << 20) == bytes(&c.region, 8 << 20, 8 << 20),
            "{t}: bytes differ"
        );
    }
}

#[test]
fn sends_land_in_the_servers_receive_buffers_across_processes() {
    let s = serve(&[]);
    let size = 100_000usize;
    for t in [Transport::Udp, Transport::Shm, Transport::Tcp] {
        // Role 2 (sink): the server keeps receive buffers of `size` bytes posted, slot i at
        // offset i * size of its region.
        let mut private = vec![2u8];
        private.extend_from_slice(&[0u8; 20]);
        private.extend_from_slice(&(size as u32).to_le_bytes());
        let c = client_with(&s, t, &private);
        for i in 0..3u64 {
            c.qp.post_send(i, &c.region, i as usize * 7777, size, Some(i as u32))
                .unwrap();
            assert_eq!(done(&c.qp).status, Status::Success, "{t} SEND {i}");
        }
        // Read the three slots back and compare with what was sent.
        c.qp.post_read(
            9,
            &c.region,
            8 << 20,
            3 * size,
            c.remote.addr,
            c.remote.rkey,
        )
        .unwrap();
        assert_eq!(done(&c.qp).status, Status::Success);
        for i in 0..3usize {
            assert!(
                bytes(&c.region, (8 << 20) + i * size, size) == bytes(&c.region, i * 7777, size),
                "{t}: SEND {i} bytes differ"
            );
        }
    }
}

#[test]
fn access_violations_are_refused_and_the_server_keeps_serving() {
    let s = serve(&[]);
    for t in [Transport::Udp, Transport::Tcp, Transport::Shm] {
        let c = client(&s, t);
        // Wrong key, past the end, and a READ reaching outside the region.
        c.qp.post_write(
            1,
            &c.region,
            0,
            100,
            c.remote.addr,
            c.remote.rkey ^ 0x1_0000,
            None,
        )
        .unwrap();
        assert_eq!(
            done(&c.qp).status,
            Status::RemoteAccessError,
            "{t} wrong key"
        );
        let c = client(&s, t);
        c.qp.post_write(
            2,
            &c.region,
            0,
            8192,
            c.remote.addr + c.remote.len - 4096,
            c.remote.rkey,
            None,
        )
        .unwrap();
        assert_eq!(
            done(&c.qp).status,
            Status::RemoteAccessError,
            "{t} out of bounds"
        );
        let c = client(&s, t);
        c.qp.post_read(3, &c.region, 0, 10, c.remote.addr - 4096, c.remote.rkey)
            .unwrap();
        assert_eq!(
            done(&c.qp).status,
            Status::RemoteAccessError,
            "{t} read before start"
        );
        // A well-behaved peer is still served.
        let c = client(&s, t);
        c.qp.post_write(4, &c.region, 0, 65536, c.remote.addr, c.remote.rkey, None)
            .unwrap();
        assert_eq!(done(&c.qp).status, Status::Success, "{t} after violations");
    }
}

#[test]
fn garbage_datagrams_do_not_disturb_the_server() {
    let s = serve(&["--udp-port", "0"]);
    // A peer that connects and says nothing, and one that sends junk instead of a hello,
    // must not hold up the setup of the others.
    let _silent = std::net::TcpStream::connect(s.addr).unwrap();
    let mut junk_setup = std::net::TcpStream::connect(s.addr).unwrap();
    std::io::Write::write_all(&mut junk_setup, &[0x55; 100]).unwrap();
    let t0 = Instant::now();
    let c = client(&s, Transport::Udp);
    let dev = {
        // The server's receive port is where our ACKs come from... find it from a transfer:
        // the server answers to our device, and its device is the peer of our QP.
        c.qp.post_write(1, &c.region, 0, 10, c.remote.addr, c.remote.rkey, None)
            .unwrap();
        assert!(done(&c.qp).status.is_ok());
        c.qp.udp_device().unwrap()
    };
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "setup was held up by a silent peer"
    );
    // Spray junk at our own device and at well-known 4791 from a stranger socket.
    let junk = UdpSocket::bind("127.0.0.1:0").unwrap();
    for n in 0..200u32 {
        let len = (n as usize * 37) % 1500;
        let b: Vec<u8> = (0..len).map(|i| (i as u32 ^ n) as u8).collect();
        let _ = junk.send_to(&b, dev);
        let _ = junk.send_to(&b, ("127.0.0.1", 4791));
    }
    c.qp.post_write(
        2,
        &c.region,
        0,
        1 << 20,
        c.remote.addr,
        c.remote.rkey,
        Some(1),
    )
    .unwrap();
    assert!(done(&c.qp).status.is_ok());
    assert!(c.qp.stats().icrc_errors + c.qp.stats().unknown_qp > 0);
}

#[test]
fn bench_json_has_the_documented_fields() {
    for (test, t) in [
        ("write-bw", "udp"),
        ("write-lat", "shm"),
        ("read-lat", "tcp"),
        ("send-bw", "udp"),
    ] {
        let out = Command::new(EXE)
            .args(["fabric", "bench", test, "--transport", t, "--size", "4096"])
            .args(["--iters", "200", "--warmup", "10", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{test} {t}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for k in ["test", "transport", "qp", "bytes", "iterations"] {
            assert!(v.get(k).is_some(), "{test}: missing {k}");
        }
        let keys: &[&str] = if test.ends_with("bw") {
            &["bw_peak_gbps", "bw_avg_gbps", "msg_rate_mpps"]
        } else {
            &[
                "t_min_us",
                "t_typical_us",
                "t_avg_us",
                "t_p99_us",
                "t_p999_us",
            ]
        };
        for k in keys {
            let x = v[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{test}: {k} not a number"));
            assert!(x > 0.0 && x.is_finite(), "{test}: {k} = {x}");
        }
        assert_eq!(v["test"], test);
        assert_eq!(v["transport"], t);
    }
    let bad = Command::new(EXE)
        .args(["fabric", "bench", "read-lat", "--qp", "uc"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("READ needs an RC"));
}

/// A UDP port below the kernel's ephemeral range (32768 and up), so that no socket another
/// test binds to port 0 can take it between this check and the server's bind.
fn free_udp_port() -> u16 {
    (0..12_000u32)
        .map(|n| 20_000 + ((std::process::id().wrapping_mul(131) + n) % 12_000) as u16)
        .find(|&p| UdpSocket::bind(("127.0.0.1", p)).is_ok())
        .expect("a free UDP port")
}

/// Reads a classic pcap (Linux cooked or Ethernet or raw loopback link types) and returns
/// (ip header, udp header, udp payload) of every IPv4 UDP packet.
fn udp_packets(path: &Path) -> Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    let d = std::fs::read(path).unwrap();
    assert_eq!(
        &d[..4],
        &[0xd4, 0xc3, 0xb2, 0xa1],
        "little-endian classic pcap"
    );
    let link = u32::from_le_bytes(d[20..24].try_into().unwrap());
    let l2 = match link {
        1 => 14,   // Ethernet (tshark on lo)
        113 => 16, // Linux cooked
        0 => 4,    // BSD loopback
        101 => 0,  // raw IP
        _ => panic!("link type {link}"),
    };
    let mut out = Vec::new();
    let mut p = 24;
    while p + 16 <= d.len() {
        let incl = u32::from_le_bytes(d[p + 8..p + 12].try_into().unwrap()) as usize;
        let pkt = &d[p + 16..p + 16 + incl];
        p += 16 + incl;
        let ip = &pkt[l2..];
        if ip[0] >> 4 != 4 || ip[9] != 17 {
            continue;
        }
        let ihl = (ip[0] & 0xf) as usize * 4;
        let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
        out.push((
            ip[..ihl].to_vec(),
            ip[ihl..ihl + 8].to_vec(),
            ip[ihl + 8..total].to_vec(),
        ));
    }
    out
}

#[test]
fn captured_datagrams_decode_in_tshark_and_pass_the_icrc_check() {
    let port = free_udp_port();
    let dir = std::env::temp_dir().join(format!("remora-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("fabric.pcap");
    let Some(mut cap) = capture(&pcap, "udp") else {
        return;
    };
    let port_s = port.to_string();
    let s = serve(&["--udp-port", &port_s]);
    let c = client(&s, Transport::Udp);
    // One packet per message and one message at a time, so every datagram leaves alone (no
    // GSO super-packets in the capture).
    c.qp.post_write(
        1,
        &c.region,
        0,
        1000,
        c.remote.addr,
        c.remote.rkey,
        Some(0xfeed),
    )
    .unwrap();
    assert!(done(&c.qp).status.is_ok());
    c.qp.post_read(2, &c.region, 4096, 2000, c.remote.addr, c.remote.rkey)
        .unwrap();
    assert!(done(&c.qp).status.is_ok());
    let client_port = c.qp.udp_device().unwrap().port();
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill")
        .args(["-INT", &cap.id().to_string()])
        .status();
    let _ = cap.wait();
    drop(s);

    let out = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args(["-d", &format!("udp.port=={port},infiniband")])
        .args(["-d", &format!("udp.port=={client_port},infiniband")])
        .args([
            "-Y",
            &format!("udp.dstport=={port} || udp.dstport=={client_port}"),
            "-T",
            "fields",
        ])
        .args([
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.destqp",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "_ws.col.Protocol",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect();
    let opcodes: Vec<u64> = rows
        .iter()
        .filter_map(|r| r.first().and_then(|o| o.parse().ok()))
        .collect();
    // RC WRITE Only with Immediate (0x0b), the ACK (0x11), READ Request (0x0c), READ Response
    // Only (0x10).
    for want in [0x0b, 0x11, 0x0c, 0x10] {
        assert!(
            opcodes.contains(&want),
            "opcode {want:#x} not decoded; tshark said:\n{text}"
        );
    }
    let num = |f: &str| -> u64 {
        match f.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => f.parse().ok(),
        }
        .unwrap_or_else(|| panic!("not a number: {f:?}"))
    };
    let row = |op: &str| {
        rows.iter()
            .find(|r| r[0] == op)
            .unwrap_or_else(|| panic!("opcode {op} missing"))
    };
    assert!(
        rows.iter().all(|r| r[3] == "RRoCE"),
        "decoded as RRoCE:\n{text}"
    );
    let (write, ack, rreq, rresp) = (row("11"), row("17"), row("12"), row("16"));
    // Destination QPs: requests to the server's QP, answers to ours.
    assert_eq!(num(&write[1]), c.qp.remote_qpn() as u64, "QP of the WRITE");
    assert_eq!(
        num(&rreq[1]),
        c.qp.remote_qpn() as u64,
        "QP of the READ request"
    );
    assert_eq!(num(&ack[1]), c.qp.local_qpn() as u64, "QP of the ACK");
    assert_eq!(
        num(&rresp[1]),
        c.qp.local_qpn() as u64,
        "QP of the READ response"
    );
    // PSNs: the READ request follows the one-packet WRITE; the ACK acknowledges the WRITE's
    // PSN and the READ response carries the request's.
    let psn = |r: &Vec<String>| num(&r[2]);
    assert_eq!(psn(rreq), (psn(write) + 1) & 0xFF_FFFF);
    assert_eq!(psn(ack), psn(write));
    assert_eq!(psn(rresp), psn(rreq));
    // Our own ICRC checker accepts every captured datagram (IP ID 0 from DF sockets).
    let ours = |udp: &[u8]| {
        let dst = u16::from_be_bytes([udp[2], udp[3]]);
        dst == port || dst == client_port
    };
    let pkts: Vec<_> = udp_packets(&pcap)
        .into_iter()
        .filter(|p| ours(&p.1))
        .collect();
    assert!(pkts.len() >= 4, "{} packets captured", pkts.len());
    for (ip, udp, payload) in &pkts {
        assert_eq!(&ip[4..6], &[0, 0], "IPv4 ID 0");
        let n = payload.len();
        let want = u32::from_le_bytes(payload[n - 4..].try_into().unwrap());
        let got = remora_wire::icrc::compute_raw(ip, udp, &payload[..n - 4]);
        assert_eq!(got, want, "ICRC of a captured datagram");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts a tshark capture on lo with `filter`; `None` (and the reason printed) when tshark is
/// missing or cannot capture here.
fn capture(pcap: &Path, filter: &str) -> Option<std::process::Child> {
    if Command::new("tshark").arg("-v").output().is_err() {
        eprintln!("skipped: tshark is not installed");
        return None;
    }
    let mut cap = Command::new("tshark")
        .args(["-i", "lo", "-f", filter, "-F", "pcap", "-w"])
        .arg(pcap)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(cap.stderr.take().unwrap());
    let t0 = Instant::now();
    let mut line = String::new();
    let started = loop {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 || t0.elapsed() > Duration::from_secs(20) {
            break false;
        }
        if line.contains("Capturing on") {
            break true;
        }
    };
    if started {
        // Keep reading: tshark writes its packet count to stderr when it stops, and a closed
        // pipe would kill it (SIGPIPE) before the capture file is complete.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        return Some(cap);
    }
    let _ = cap.kill();
    let _ = cap.wait();
    eprintln!("skipped: tshark cannot capture on lo here");
    None
}

/// `remora fabric serve` holds UDP 4791 from its start, and a bench's requester sends every
/// datagram there, so tshark decodes the traffic as RRoCE without being told a port. The
/// server listens on a loopback address of its own, where no other test's listener competes
/// for 4791.
#[test]
fn a_capture_of_serve_and_a_bench_shows_rroce_on_port_4791() {
    let ip = "127.0.0.97";
    let dir = std::env::temp_dir().join(format!("remora-cap4791-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("roce.pcap");
    let Some(mut cap) = capture(&pcap, &format!("udp and host {ip}")) else {
        return;
    };
    let listen = format!("{ip}:0");
    let s = serve_common::serve(&[
        "fabric",
        "serve",
        "--listen",
        &listen,
        "--region-size",
        "1M",
    ]);
    // dumpcap reports "Capturing" a little before its filter sees packets.
    std::thread::sleep(Duration::from_millis(500));
    let out = Command::new(EXE)
        .args([
            "fabric",
            "bench",
            "write-lat",
            "--transport",
            "udp",
            "--size",
            "64",
        ])
        .args(["--iters", "500", "--warmup", "2", "--json", "--connect"])
        .arg(s.addr.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["udp_dst_port"], 4791, "{v}");
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill")
        .args(["-INT", &cap.id().to_string()])
        .status();
    let _ = cap.wait();
    drop(s);
    // No `-d` option: tshark's own dissector table maps UDP 4791 to RRoCE.
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args([
            "-Y",
            &format!("ip.dst=={ip} && udp.dstport==4791"),
            "-T",
            "fields",
        ])
        .args([
            "-e",
            "udp.dstport",
            "-e",
            "_ws.col.Protocol",
            "-e",
            "infiniband.bth.opcode",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    // 502 WRITEs (2 warm-up) and the ACKs of the responder's pongs: most of them, whatever
    // the capture missed while it started.
    assert!(
        rows.len() >= 400,
        "the WRITEs reached the responder on 4791:\n{text}"
    );
    for r in &rows {
        assert_eq!(r[0], "4791", "destination port:\n{text}");
        assert_eq!(r[1], "RRoCE", "decoded as RRoCE:\n{text}");
    }
    // RC WRITE Only with Immediate (11) carries the pings.
    assert!(rows.iter().any(|r| r[2] == "11"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_progress_poll_runs_on_every_transport() {
    for extra in [
        &["--progress", "poll"][..],
        &["--progress", "poll", "--spin"][..],
    ] {
        let out = Command::new(EXE)
            .args([
                "fabric",
                "bench",
                "write-lat",
                "--size",
                "8",
                "--iters",
                "50",
            ])
            .args(["--warmup", "5", "--json"])
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["progress"], "poll");
        assert_eq!(v["spin"], extra.len() == 3);
        assert!(v["t_typical_us"].as_f64().unwrap() > 0.0);
    }
    // tcp and shm drive the same engine from the polling thread.
    for transport in ["tcp", "shm"] {
        let out = Command::new(EXE)
            .args(["fabric", "bench", "write-bw", "--transport", transport])
            .args(["--progress", "poll", "--size", "65536", "--iters", "200"])
            .args(["--warmup", "5", "--json"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{transport}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["progress"], "poll", "{transport}");
    }
}

#[test]
fn serve_refuses_bad_flags_clearly() {
    let out = Command::new(EXE)
        .args(["fabric", "serve", "--listen", "not-an-address"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid"));
    let out = Command::new(EXE)
        .args(["fabric", "bench", "write-bw", "--size", "12Q"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// The page-fault flags reach both ends: a PIO responder (the bench starts it with the same
/// flags) faults on every page of its fresh region, the requester resumes on ERRs or its own
/// 100 µs timeout, and every WRITE still completes; bad values are refused by name.
#[test]
fn bench_with_page_fault_flags_faults_and_completes() {
    let out = Command::new(EXE)
        .args([
            "fabric", "bench", "write-bw", "--size", "256K", "--iters", "50",
        ])
        .args([
            "--warmup",
            "5",
            "--page-in",
            "pio",
            "--fault-timeout",
            "100us",
        ])
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &v["counters"];
    let resumes = c["errs_received"].as_u64().unwrap() + c["fault_timeouts"].as_u64().unwrap();
    assert!(resumes > 0, "{c}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("page faults "),
        "the responder's stats: {stderr}"
    );
    for (flag, value, says) in [
        ("--fault-timeout", "0us", "fault timeout of 0"),
        ("--fault-timeout", "soon", "invalid timeout"),
        ("--page-in", "all", "invalid value 'all'"),
        ("--faults", "maybe", "invalid value 'maybe'"),
    ] {
        let bad = Command::new(EXE)
            .args(["fabric", "bench", "write-bw", flag, value])
            .output()
            .unwrap();
        assert!(!bad.status.success());
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(err.contains(says), "{flag} {value}: {err}");
    }
}
