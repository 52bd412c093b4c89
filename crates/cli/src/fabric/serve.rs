//! `remora fabric serve`: a responder for benchmarks, the demo and remote peers.
//!
//! Each connection runs on a thread of its own (setup, then the role the client asked for), so a
//! silent peer cannot hold up the others. The threads are detached and counted, never collected
//! in a list: a server that runs for months must not keep a handle (and a stack) per connection
//! it ever had. Two bounds keep a flood of connections from exhausting threads or memory: at
//! most `--max-connections` queue pairs live at once, and at most [`MAX_SETUPS`] setups run at
//! once; a connection beyond either is closed at once and counted. Counters go to stderr on exit
//! and on SIGUSR1, and to Prometheus at `--metrics ADDR` (read at each scrape).
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::Context;
use remora_fabric::{Completion, Listener, Qp, QpOptions, QpStats, RegionInfo, WcOpcode};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

use super::{Role, ServeArgs};

/// Receive buffers a sink keeps posted.
const SINK_RECVS: usize = 256;
/// Connection setups in progress at most; a setup waits up to 10 s for a silent peer.
pub const MAX_SETUPS: u64 = 64;
/// Stack of a connection thread: it holds no large buffers.
const CONN_STACK: usize = 256 << 10;

/// What the server has seen, for the counters it prints.
#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    established: AtomicU64,
    setup_failed: AtomicU64,
    refused: AtomicU64,
    setups: AtomicU64,
    /// Connections admitted and not yet ended (in setup or live): what the limit counts.
    held: AtomicU64,
    /// Live queue pairs by connection number, read when counters are printed.
    live: Mutex<HashMap<u64, Arc<Qp>>>,
    gone: Condvar,
    /// Counters of the queue pairs that have ended.
    ended: Mutex<QpStats>,
}

impl Counters {
    /// The queue pairs' counters, ended and live ones together, and how many are live.
    fn totals(&self) -> (QpStats, usize) {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let mut t = *self.ended.lock().unwrap_or_else(|e| e.into_inner());
        for qp in live.values() {
            t.merge(&qp.stats());
        }
        (t, live.len())
    }

    fn report(&self) -> String {
        let (t, live) = self.totals();
        let e = t.engine;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "[responder] connections: accepted {}, established {}, setup failed {}, refused \
             (over limits) {}, live {}; packets rx {} tx {}, ACKs sent {}, NAKs sent {}, access \
             errors {}, invalid requests {}, malformed {}, bad P_Key {}, ICRC errors {}, \
             unknown QP {}; page faults {}, page-ins {} ({} pages), fault NAKs {}, ERRs sent {}, \
             dropped behind a fault {}, waited behind a page-in wave {}; immediates from the shm \
             ring {}",
            n(&self.accepted),
            n(&self.established),
            n(&self.setup_failed),
            n(&self.refused),
            live,
            e.rx_packets,
            e.tx_packets,
            e.acks_sent,
            e.naks_sent,
            e.access_errors,
            e.invalid_requests,
            e.rx_malformed,
            e.bad_pkey,
            t.icrc_errors,
            t.unknown_qp,
            e.faults,
            e.page_ins,
            e.pages_in,
            e.fault_naks,
            e.errs_sent,
            e.held_drops,
            e.wave_holds,
            e.ring_completions
        )
    }

    fn end(&self, id: u64) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(qp) = live.remove(&id) {
            self.ended
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .merge(&qp.stats());
        }
        self.held.fetch_sub(1, Ordering::AcqRel);
        self.gone.notify_all();
    }
}

/// The counters [`Counters::report`] prints, for Prometheus.
fn metrics(c: Arc<Counters>) -> remora_http::metrics::Registry {
    remora_http::metrics::registry(move |m| {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let conns = [
            (
                "accepted",
                "Connections accepted on the setup port.",
                &c.accepted,
            ),
            (
                "established",
                "Connections set up into a queue pair.",
                &c.established,
            ),
            (
                "setup_failed",
                "Connections whose setup failed.",
                &c.setup_failed,
            ),
            (
                "refused",
                "Connections closed at once: over --max-connections or the setups in progress.",
                &c.refused,
            ),
        ];
        for (what, help, v) in conns {
            m.counter(
                &format!("remora_fabric_connections_{what}_total"),
                help,
                n(v),
            );
        }
        let (t, live) = c.totals();
        m.gauge(
            "remora_fabric_connections_live",
            "Queue pairs connected now.",
            live,
        );
        let e = t.engine;
        let counters = [
            (
                "packets_received",
                "Packets received by the queue pairs.",
                e.rx_packets,
            ),
            (
                "packets_sent",
                "Packets sent by the queue pairs.",
                e.tx_packets,
            ),
            ("acks_sent", "ACK packets sent.", e.acks_sent),
            ("naks_sent", "NAKs sent, of any kind.", e.naks_sent),
            (
                "access_errors",
                "Remote accesses refused (wrong key, bounds, rights).",
                e.access_errors,
            ),
            (
                "invalid_requests",
                "Requests refused as malformed.",
                e.invalid_requests,
            ),
            (
                "malformed_packets",
                "Packets that did not parse (dropped).",
                e.rx_malformed,
            ),
            (
                "bad_pkey",
                "Packets dropped for a P_Key outside the partition.",
                e.bad_pkey,
            ),
            (
                "icrc_errors",
                "Datagrams dropped for a bad ICRC (udp).",
                t.icrc_errors,
            ),
            (
                "unknown_qp",
                "Datagrams for unknown queue pairs (udp).",
                t.unknown_qp,
            ),
            (
                "page_faults",
                "Packets that hit a non-resident page (PART).",
                e.faults,
            ),
            (
                "page_ins",
                "Page-in requests handed to the driver (PART).",
                e.page_ins,
            ),
            (
                "pages_in",
                "Pages made resident by those requests (PART).",
                e.pages_in,
            ),
            ("fault_naks", "Fault NAKs sent (PART).", e.fault_naks),
            (
                "errs_sent",
                "Explicit retransmission requests sent after a page-in (PART).",
                e.errs_sent,
            ),
            (
                "held_drops",
                "Packets dropped behind a pending fault (PART).",
                e.held_drops,
            ),
            (
                "wave_holds",
                "Packets that waited in the reorder window behind a page-in wave (PART).",
                e.wave_holds,
            ),
            (
                "ring_completions",
                "Entries taken from the shm completion ring.",
                e.ring_completions,
            ),
        ];
        for (what, help, v) in counters {
            m.counter(&format!("remora_fabric_{what}_total"), help, v);
        }
    })
}

/// Prints the counters on SIGUSR1, and on SIGTERM/SIGINT before exiting.
fn on_signals(c: Arc<Counters>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGUSR1, SIGTERM, SIGINT])
        .context("installing signal handlers")?;
    std::thread::Builder::new()
        .name("remora-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                eprintln!("{}", c.report());
                if sig != SIGUSR1 {
                    std::process::exit(0);
                }
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let pd = Arc::new(Pd::new());
    let buf = Buffer::memfd("remora-serve", a.region_size.max(4096))
        .context("allocating the served region")?;
    let mode = if a.pinned {
        Mode::Pinned
    } else {
        Mode::OnDemand
    };
    let region = pd
        .register(buf, Access::ALL, mode)
        .context("registering the served region")?;
    let opts = QpOptions {
        mtu: a.mtu,
        udp_port: a.udp_port,
        icrc_check: !a.no_icrc_check,
        part: a.part.config(),
        progress: a.progress.progress,
        lazy_ack: a.progress.lazy_ack,
        ..QpOptions::default()
    };
    let listener = Listener::bind(a.listen, pd.clone(), opts)?;
    let counters = Arc::new(Counters::default());
    on_signals(counters.clone())?;
    let _metrics = match a.metrics {
        Some(addr) => {
            let reg = Arc::new(metrics(counters.clone()));
            let srv = remora_http::metrics::serve_metrics(addr, reg)
                .with_context(|| format!("--metrics {addr}"))?;
            tracing::info!("metrics on http://{}/metrics", srv.local_addr());
            Some(srv)
        }
        None => None,
    };
    // The first stdout line tells a parent process where we listen.
    println!("listening on {}", listener.local_addr());
    std::io::stdout().flush().ok();
    match listener.udp_device(a.listen.ip()) {
        Some(d) if d.port() == remora_wire::ROCE_PORT => {
            tracing::info!("RoCEv2 (udp) on {d}, progress {}", a.progress.progress)
        }
        Some(d) => eprintln!(
            "[responder] UDP {} is taken on {}: RoCEv2 (udp) peers are told to send to {d}",
            remora_wire::ROCE_PORT,
            a.listen.ip()
        ),
        None => tracing::info!("RoCEv2 (udp) devices are bound per local address as peers come"),
    }
    let spin = a.progress.spin;
    let info = RegionInfo::of(&region).encode();
    let mut admitted = 0;
    let mut next_id = 0u64;
    loop {
        let inc = match listener.incoming() {
            Ok(i) => i,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        let held = counters.held.load(Ordering::Acquire);
        if held >= a.max_connections || counters.setups.load(Ordering::Acquire) >= MAX_SETUPS {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(from = %inc.peer_addr(), held, "connection refused: over the limits");
            continue;
        }
        counters.held.fetch_add(1, Ordering::AcqRel);
        counters.setups.fetch_add(1, Ordering::AcqRel);
        next_id += 1;
        let (id, c, region) = (next_id, counters.clone(), region.clone());
        let spawned = std::thread::Builder::new()
            .name("remora-conn".into())
            .stack_size(CONN_STACK)
            .spawn(move || connection(id, inc, &info, region, &c, spin));
        match spawned {
            // Detached: the thread cleans up after itself.
            Ok(_) => admitted += 1,
            Err(e) => {
                counters.setups.fetch_sub(1, Ordering::AcqRel);
                counters.held.fetch_sub(1, Ordering::AcqRel);
                counters.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "no thread for a connection; refused");
            }
        }
        if a.connections > 0 && admitted >= a.connections {
            break;
        }
    }
    // Wait for the last connections to end (setups included: they finish within 10 s).
    let mut live = counters.live.lock().unwrap_or_else(|e| e.into_inner());
    while counters.held.load(Ordering::Acquire) > 0 {
        live = counters
            .gone
            .wait_timeout(live, Duration::from_millis(100))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    drop(live);
    eprintln!("{}", counters.report());
    Ok(())
}

/// One connection: setup, then the role the client asked for.
fn connection(
    id: u64,
    inc: remora_fabric::Incoming,
    info: &[u8],
    region: Arc<Region>,
    c: &Counters,
    spin: bool,
) {
    let from = inc.peer_addr();
    let setup = inc.establish(info);
    let (qp, private) = match setup {
        Ok((qp, private)) => (Arc::new(qp), private),
        Err(e) => {
            c.setup_failed.fetch_add(1, Ordering::Relaxed);
            c.setups.fetch_sub(1, Ordering::AcqRel);
            c.held.fetch_sub(1, Ordering::AcqRel);
            c.gone.notify_all();
            tracing::warn!(%from, error = %e, "connection setup refused");
            return;
        }
    };
    c.live
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, qp.clone());
    c.established.fetch_add(1, Ordering::Relaxed);
    c.setups.fetch_sub(1, Ordering::AcqRel);
    tracing::info!(
        transport = %qp.transport(), qp = %qp.qp_type(), qpn = qp.local_qpn(),
        peer = ?qp.peer_credentials(), "peer connected"
    );
    if let Err(e) = handle(&qp, &private, region, spin) {
        eprintln!("[responder] connection ended with an error: {e:#}");
    }
    c.end(id);
}

/// The client's private data: role byte, its region, the message size.
fn parse_private(p: &[u8]) -> (Role, Option<RegionInfo>, usize) {
    let role = p
        .first()
        .and_then(|b| Role::from_byte(*b))
        .unwrap_or(Role::Passive);
    let region = p.get(1..).and_then(|r| RegionInfo::decode(r).ok());
    let size = p
        .get(1 + RegionInfo::LEN..5 + RegionInfo::LEN)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
        .unwrap_or(0);
    (role, region, size)
}

/// Waits for the next completion (busy polling with `spin`), or returns `None` once the peer
/// has gone. With `--progress poll` this is also what serves the peer's requests.
fn next(qp: &Qp, spin: bool) -> anyhow::Result<Option<Completion>> {
    loop {
        let got = if spin {
            qp.spin(Duration::from_millis(100))
        } else {
            qp.wait(Duration::from_millis(100))?
        };
        if let Some(c) = got {
            return Ok(Some(c));
        }
        if qp.wait_disconnect(Some(Duration::from_millis(1))).is_ok() {
            return Ok(None);
        }
    }
}

fn handle(qp: &Qp, private: &[u8], region: Arc<Region>, spin: bool) -> anyhow::Result<()> {
    let (role, peer, size) = parse_private(private);
    let label = format!("{}/{}", qp.transport(), qp.qp_type());
    match role {
        Role::Passive => {
            // Completions of a passive peer (its WRITE-with-immediate arrivals) are dropped;
            // waiting for them drives the queue pair when it is polled.
            while next(qp, spin)?.is_some() {}
        }
        Role::Pong => {
            let peer = peer.context("pong needs the peer's region")?;
            while let Some(c) = next(qp, spin)? {
                if c.opcode == WcOpcode::RecvRdmaWithImm {
                    let len = (c.byte_len as usize).min(region.len());
                    qp.post_write(0, &region, 0, len, peer.addr, peer.rkey, c.imm)?;
                } else if !c.status.is_ok() {
                    anyhow::bail!("pong write failed: {:?}", c.status);
                }
            }
        }
        Role::Sink => {
            let size = size.clamp(1, region.len());
            let slots = (region.len() / size).clamp(1, SINK_RECVS);
            for i in 0..slots.max(SINK_RECVS) {
                let slot = i % slots;
                qp.post_recv(slot as u64, &region, slot * size, size)?;
            }
            while let Some(c) = next(qp, spin)? {
                if c.opcode == WcOpcode::Recv {
                    let slot = c.wr_id as usize;
                    qp.post_recv(c.wr_id, &region, slot * size, size)?;
                }
            }
        }
        Role::Report => {
            let mut imms = Vec::new();
            let mut bytes = 0u64;
            while let Some(c) = next(qp, spin)? {
                if c.opcode == WcOpcode::RecvRdmaWithImm {
                    imms.push(c.imm.unwrap_or(0));
                    bytes += c.byte_len as u64;
                }
            }
            let s = qp.stats();
            eprintln!(
                "[responder] {label}: {} WRITE-with-immediate arrivals, {} bytes, immediates {:?}; \
                 packets rx {} tx {}, ACKs sent {}, access errors {}",
                imms.len(),
                bytes,
                imms,
                s.engine.rx_packets,
                s.engine.tx_packets,
                s.engine.acks_sent,
                s.engine.access_errors
            );
        }
    }
    tracing::info!(%label, "peer left");
    Ok(())
}
