//! `remora fabric serve`: a responder for benchmarks, the demo and remote peers.
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use remora_fabric::{Completion, Listener, Qp, QpOptions, RegionInfo, WcOpcode};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

use super::{Role, ServeArgs};

/// Receive buffers a sink keeps posted.
const SINK_RECVS: usize = 256;

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
        ..QpOptions::default()
    };
    let listener = Listener::bind(a.listen, pd.clone(), opts)?;
    // The first stdout line tells a parent process where we listen.
    println!("listening on {}", listener.local_addr());
    std::io::stdout().flush().ok();
    let info = RegionInfo::of(&region).encode();
    let mut workers = Vec::new();
    let mut accepted = 0;
    loop {
        let inc = match listener.incoming() {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        accepted += 1;
        let region = region.clone();
        // Setup runs on the connection's own thread: a silent peer cannot block the others.
        workers.push(std::thread::spawn(move || {
            let from = inc.peer_addr();
            let (qp, private) = match inc.establish(&info) {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(%from, error = %e, "connection setup refused");
                    return;
                }
            };
            tracing::info!(
                transport = %qp.transport(), qp = %qp.qp_type(), qpn = qp.local_qpn(),
                "peer connected"
            );
            if let Err(e) = handle(qp, &private, region) {
                eprintln!("[responder] connection ended with an error: {e:#}");
            }
        }));
        if a.connections > 0 && accepted >= a.connections {
            break;
        }
    }
    for w in workers {
        let _ = w.join();
    }
    Ok(())
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

/// Waits for the next completion, or returns `None` once the peer has gone.
fn next(qp: &Qp) -> anyhow::Result<Option<Completion>> {
    loop {
        if let Some(c) = qp.wait(Duration::from_millis(100))? {
            return Ok(Some(c));
        }
        if qp.wait_disconnect(Some(Duration::from_millis(1))).is_ok() {
            return Ok(None);
        }
    }
}

fn handle(qp: Qp, private: &[u8], region: Arc<Region>) -> anyhow::Result<()> {
    let (role, peer, size) = parse_private(private);
    let label = format!("{}/{}", qp.transport(), qp.qp_type());
    match role {
        Role::Passive => {
            qp.wait_disconnect(None)?;
        }
        Role::Pong => {
            let peer = peer.context("pong needs the peer's region")?;
            while let Some(c) = next(&qp)? {
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
            while let Some(c) = next(&qp)? {
                if c.opcode == WcOpcode::Recv {
                    let slot = c.wr_id as usize;
                    qp.post_recv(c.wr_id, &region, slot * size, size)?;
                }
            }
        }
        Role::Report => {
            let mut imms = Vec::new();
            let mut bytes = 0u64;
            while let Some(c) = next(&qp)? {
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
