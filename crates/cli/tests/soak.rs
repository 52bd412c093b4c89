//! A fuzz-style soak of the servers' ports (issue 10): random and mutated input, bounded in time,
//! thrown at `remora fabric serve` (its TCP setup port and its udp RoCEv2 port) and at
//! `remora kv serve` (TCP and UDP), after which each server must still run and still serve.
//!
//! Inputs come from a seeded xorshift generator; the seed is printed, and `SOAK_SEED=N` replays
//! a run (`SOAK_SECS=S` sets the seconds per port, 2 by default; the whole file takes ~6 s).
//! The server is checked after every input: its process must run and no thread of it may have
//! panicked (its stderr is searched). When a check fails, the last inputs are written to a file
//! under `CARGO_TARGET_TMPDIR` (hex, newest last) and the test fails naming it, the seed and the
//! server's last stderr lines (and, for the fabric, its counters, printed on SIGUSR1).
//!
//! The fabric's setup phase ends with a burst of well-formed hellos (each transport) whose
//! senders close at once, more of them than the server runs setups at a time: the next real
//! client must still get in. Where the fabric's counters can be read, the forged packets must
//! have reached the queue pair's engine (right QPN, valid ICRC), not only the demultiplexer.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_fabric::{QpOptions, QpType, RegionInfo, Transport};
use remora_mem::Pd;
use remora_wire::Endpoints;

mod serve_common;
mod soak_common;
use serve_common::is_root;
use soak_common::fabric_inputs::{captured_hello, roce_packet, setup_input};
use soak_common::kv_inputs::kv_input;
use soak_common::{free_port, per_port, seed, settle, stderr_file, Journal, Rng, Server};

// ---------------------------------------------------------------------------------------------
// Fabric.

fn start_fabric(udp_port: u16, seed: u64) -> (Server, SocketAddr) {
    let stderr = stderr_file("fabric", seed);
    let mut child = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args([
            "fabric",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--region-size",
            "1M",
        ])
        .args(["--udp-port", &udp_port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).expect("server stderr file"))
        .spawn()
        .expect("spawn remora fabric serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("read the server's first line");
    let srv = Server::new(child, "remora fabric serve", stderr);
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("fabric serve said {line:?}; stderr: {}", srv.stderr_tail()));
    (srv, addr)
}

/// Sends one input on a fresh connection, reads what comes back for a moment, closes.
fn send_setup(addr: SocketAddr, input: &[u8], rng: &mut Rng) -> std::io::Result<()> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
    let _ = s.set_read_timeout(Some(Duration::from_millis(5)));
    let _ = s.write_all(input);
    if rng.chance(2) {
        let _ = s.shutdown(Shutdown::Write);
    }
    let mut buf = [0u8; 512];
    let _ = s.read(&mut buf);
    Ok(())
}

/// The server's counter line, which it prints on SIGUSR1 (empty if none comes within 2 s).
fn server_counters(srv: &mut Server) -> String {
    let before = std::fs::read_to_string(&srv.stderr)
        .unwrap_or_default()
        .len();
    // SAFETY: kill(2) on the pid of our own child, which has not been reaped (it runs).
    unsafe {
        libc::kill(srv.child.id() as i32, libc::SIGUSR1);
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        let s = std::fs::read_to_string(&srv.stderr).unwrap_or_default();
        if let Some(line) = s
            .get(before..)
            .and_then(|new| new.lines().find(|l| l.contains("connections: accepted")))
        {
            srv.seen = s.len() as u64;
            return line.to_string();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    String::new()
}

/// The number after `name` in a counter line.
fn counter(line: &str, name: &str) -> Option<u64> {
    let rest = &line[line.find(name)? + name.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Runs a fabric benchmark against the server; panics with its output when it fails.
fn fabric_serves(srv: &Server, addr: SocketAddr, test: &str, transport: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(["fabric", "bench", test, "--transport", transport])
        .args(["--size", "4096", "--iters", "50", "--warmup", "5", "--json"])
        .args(["--connect", &addr.to_string()])
        .stdin(Stdio::null())
        .output()
        .expect("run remora fabric bench");
    assert!(
        out.status.success(),
        "after the soak, `fabric bench {test} --transport {transport}` failed: {}\n\
         server stderr ends:\n{}",
        String::from_utf8_lossy(&out.stderr),
        srv.stderr_tail()
    );
}

#[test]
fn fabric_setup_and_udp_ports_survive_random_and_mutated_frames() {
    let seed = seed();
    eprintln!("fabric soak seed: {seed} (SOAK_SEED={seed} replays it)");
    let mut rng = Rng::new(seed);
    let udp_port = free_port(&mut rng);
    let (mut srv, addr) = start_fabric(udp_port, seed);
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sink_port = sink.local_addr().unwrap().port();
    let templates = [
        captured_hello(Transport::Udp),
        captured_hello(Transport::Tcp),
        captured_hello(Transport::Shm),
    ];

    // The setup port.
    let mut j = Journal::new(seed, "fabric-setup");
    let t0 = Instant::now();
    let mut refused = 0;
    while t0.elapsed() < per_port() {
        let (kind, input) = setup_input(&mut rng, &templates, sink_port);
        j.record(&kind, &input);
        if let Err(e) = send_setup(addr, &input, &mut rng) {
            refused += 1;
            j.fail_if(
                refused > 10,
                &mut srv,
                &format!("connecting failed 10 times: {e}"),
            );
        }
        j.check_alive(&mut srv);
        // Paced: the soak is about what arrives, not how many connections (that is the
        // connection-count test's job).
        std::thread::sleep(Duration::from_millis(1));
    }
    // Abandoned setups: well-formed hellos whose senders close at once, more of them than the
    // server runs setups at a time; the next real client must still get in.
    for t in &templates {
        for _ in 0..80 {
            let mut h = t.clone();
            h[20..22].copy_from_slice(&sink_port.to_le_bytes());
            h[44..48].copy_from_slice(&0u32.to_le_bytes());
            j.record("abandoned hello", &h);
            if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                let _ = s.write_all(&h);
            }
            j.check_alive(&mut srv);
        }
    }
    settle(&j, &mut srv);
    eprintln!("fabric setup port: {} inputs", j.sent);

    // The udp port: random datagrams, then packets for a real queue pair's number.
    let pd = Arc::new(Pd::new());
    let opts = QpOptions {
        transport: Transport::Udp,
        qp_type: QpType::Rc,
        ..QpOptions::default()
    };
    let (qp, private) = match remora_fabric::connect(addr, pd, opts, &[0]) {
        Ok(x) => x,
        Err(e) => {
            let counters = server_counters(&mut srv);
            let why = format!("a real udp queue pair failed to connect: {e}; {counters}");
            j.fail_if(true, &mut srv, &why);
            unreachable!()
        }
    };
    let region = RegionInfo::decode(&private).expect("the server's region");
    let qpn = qp.remote_qpn();
    let server_udp: SocketAddr = ([127, 0, 0, 1], udp_port).into();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let ep = Endpoints::new(tx.local_addr().unwrap(), server_udp);
    let mut j = Journal::new(seed, "fabric-udp");
    let t0 = Instant::now();
    while t0.elapsed() < per_port() {
        let (kind, d) = if rng.chance(4) {
            let n = rng.below(1500);
            ("random datagram".to_string(), rng.bytes(n))
        } else {
            roce_packet(&mut rng, qpn, &region, &ep, 4096)
        };
        j.record(&kind, &d);
        let _ = tx.send_to(&d, server_udp);
        j.check_alive(&mut srv);
        if j.sent % 64 == 0 {
            // Let the server breathe: the soak is about content, not a flood.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    settle(&j, &mut srv);
    eprintln!("fabric udp port: {} datagrams", j.sent);
    let counters = server_counters(&mut srv);
    eprintln!("fabric counters after the udp soak: {counters}");
    // Where the counters can be read: the forged packets must have reached the queue pair's
    // engine (right QPN and ICRC), or the soak only tested the demultiplexer.
    if let Some(rx) = counter(&counters, "packets rx ") {
        assert!(rx > 0, "no forged packet reached the engine: {counters}");
    }
    drop(qp);

    // Still serving: fresh queue pairs, real transfers.
    fabric_serves(&srv, addr, "write-lat", "udp");
    fabric_serves(&srv, addr, "read-lat", "udp");
    fabric_serves(&srv, addr, "write-lat", "tcp");
    j.check_alive(&mut srv);
}

// ---------------------------------------------------------------------------------------------
// Kv.

fn start_kv(port: u16, seed: u64) -> Server {
    let stderr = stderr_file("kv", seed);
    let p = port.to_string();
    let mut args = vec![
        "kv",
        "serve",
        "-p",
        &p,
        "-U",
        &p,
        "-l",
        "127.0.0.1",
        "-t",
        "2",
    ];
    args.extend(["-m", "64"]);
    if is_root() {
        args.extend(["-u", "root"]);
    }
    let child = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("server stderr file"))
        .spawn()
        .expect("spawn remora kv serve");
    let srv = Server::new(child, "remora kv serve", stderr);
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "kv serve did not listen on {port}: {}",
            srv.stderr_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    srv
}

fn kv_set_get(srv: &Server, port: u16, value: &str) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to kv after the soak");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let cmd = format!(
        "set soak 0 0 {}\r\n{value}\r\nget soak\r\nquit\r\n",
        value.len()
    );
    s.write_all(cmd.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let want = format!(
        "STORED\r\nVALUE soak 0 {}\r\n{value}\r\nEND\r\n",
        value.len()
    );
    assert_eq!(
        String::from_utf8_lossy(&out),
        want,
        "kv no longer serves after the soak; server stderr ends:\n{}",
        srv.stderr_tail()
    );
}

fn kv_udp_get(srv: &Server, port: u16, value: &str) {
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut req = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0];
    req.extend_from_slice(b"get soak\r\n");
    let mut buf = [0u8; 2048];
    // UDP may drop: a few tries.
    for _ in 0..5 {
        u.send_to(&req, ("127.0.0.1", port)).unwrap();
        if let Ok((n, _)) = u.recv_from(&mut buf) {
            let want = format!("VALUE soak 0 {}\r\n{value}\r\nEND\r\n", value.len());
            assert_eq!(&buf[..2], &[0x12, 0x34], "request id not echoed");
            assert_eq!(String::from_utf8_lossy(&buf[8..n]), want);
            return;
        }
    }
    panic!(
        "kv UDP no longer answers after the soak; server stderr ends:\n{}",
        srv.stderr_tail()
    );
}

#[test]
fn kv_ports_survive_random_and_mutated_commands() {
    let seed = seed();
    eprintln!("kv soak seed: {seed} (SOAK_SEED={seed} replays it)");
    let mut rng = Rng::new(seed ^ 0x6b76);
    let port = free_port(&mut rng);
    let mut srv = start_kv(port, seed);

    // TCP: a few inputs per connection, so that a bad one is followed by good ones.
    let mut j = Journal::new(seed, "kv-tcp");
    let t0 = Instant::now();
    while t0.elapsed() < per_port() {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            j.check_alive(&mut srv);
            continue;
        };
        let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
        let _ = s.set_read_timeout(Some(Duration::from_millis(2)));
        for _ in 0..1 + rng.below(4) {
            let (kind, input) = kv_input(&mut rng);
            j.record(&kind, &input);
            let _ = s.write_all(&input);
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
        }
        drop(s);
        j.check_alive(&mut srv);
    }
    settle(&j, &mut srv);
    eprintln!("kv tcp port: {} inputs", j.sent);

    // UDP: the 8-byte frame header (request id, sequence, datagram count, reserved), hostile
    // or not, before commands.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut j = Journal::new(seed, "kv-udp");
    let t0 = Instant::now();
    while t0.elapsed() < per_port() {
        let (kind, body) = kv_input(&mut rng);
        let mut d = if rng.chance(4) {
            rng.bytes(8)
        } else {
            vec![rng.next() as u8, rng.next() as u8, 0, 0, 0, 1, 0, 0]
        };
        d.extend_from_slice(&body[..body.len().min(1400)]);
        if rng.chance(4) {
            rng.mutate(&mut d);
        }
        j.record(&kind, &d);
        let _ = u.send_to(&d, ("127.0.0.1", port));
        j.check_alive(&mut srv);
        if j.sent % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    settle(&j, &mut srv);
    eprintln!("kv udp port: {} datagrams", j.sent);

    kv_set_get(&srv, port, "still-here");
    kv_udp_get(&srv, port, "still-here");
    j.check_alive(&mut srv);
}
