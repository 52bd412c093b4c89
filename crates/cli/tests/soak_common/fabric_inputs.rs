//! What the soak throws at `remora fabric serve`: setup-port inputs built on hellos captured
//! from a real client, and RoCEv2 packets for a live queue pair.
use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use remora_fabric::{QpOptions, RegionInfo, Transport};
use remora_mem::Pd;
use remora_wire::{
    icrc, AethRepr, BthRepr, Endpoints, Op, Opcode, Psn, Repr, RethRepr, Service, Syndrome,
};

use super::Rng;

/// The 48-byte hello a real client sends for `transport`, captured from `remora_fabric::connect`
/// against a listener of ours (so the template follows the setup protocol as it changes).
pub fn captured_hello(transport: Transport) -> Vec<u8> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let client = std::thread::spawn(move || {
        let opts = QpOptions {
            transport,
            ..QpOptions::default()
        };
        // Fails once we close the socket, which is what we want.
        let _ = remora_fabric::connect(addr, Arc::new(Pd::new()), opts, &[0]);
    });
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut h = vec![0u8; 48];
    s.read_exact(&mut h).expect("read a client's hello");
    drop(s);
    client.join().unwrap();
    assert_eq!(
        &h[..4],
        b"RMRA",
        "the hello no longer starts with RMRA: {h:02x?}"
    );
    h
}

/// One setup-port input: random bytes, a truncated or mutated hello with a hostile private
/// length, or a valid hello followed by garbage (which a tcp queue pair reads as frames).
pub fn setup_input(rng: &mut Rng, templates: &[Vec<u8>], sink_port: u16) -> (String, Vec<u8>) {
    let mut h = rng.pick(templates).clone();
    // A udp peer's receive port: our sink, so that nothing the server sends lands elsewhere.
    h[20..22].copy_from_slice(&sink_port.to_le_bytes());
    match rng.below(6) {
        0 => {
            let n = rng.below(200);
            ("random bytes".into(), rng.bytes(n))
        }
        1 => {
            let n = rng.below(48);
            h.truncate(n);
            ("truncated hello".into(), h)
        }
        2 => {
            let plen = rng.hostile_u32();
            h[44..48].copy_from_slice(&plen.to_le_bytes());
            let n = rng.below(300);
            h.extend(rng.bytes(n));
            (format!("hello with private length {plen}"), h)
        }
        3 => {
            // Mutate the fixed fields (version, transport, qp type, MTU, QPN, PSN, rendezvous).
            let i = 4 + rng.below(44 - 4);
            h[i] = rng.next() as u8;
            if rng.chance(2) {
                let j = 4 + rng.below(44 - 4);
                h[j] ^= 1 << rng.below(8);
            }
            let plen = rng.below(64) as u32;
            h[44..48].copy_from_slice(&plen.to_le_bytes());
            h.extend(rng.bytes(plen as usize));
            ("hello with mutated fields".into(), h)
        }
        4 => {
            // A well-formed hello, its private data random (role byte, region), then garbage
            // that a tcp queue pair's frame reader gets.
            let plen = rng.below(40) as u32;
            h[44..48].copy_from_slice(&plen.to_le_bytes());
            h.extend(rng.bytes(plen as usize));
            let n = rng.below(400);
            h.extend(rng.bytes(n));
            ("valid hello then garbage".into(), h)
        }
        _ => {
            let mut b = h;
            let n = rng.below(64);
            b.extend(rng.bytes(n));
            rng.mutate(&mut b);
            ("mutated hello".into(), b)
        }
    }
}

/// A RoCEv2 packet for the served queue pair: every opcode, right or wrong keys and addresses,
/// hostile lengths, mutated or truncated; most sealed with a valid ICRC (so that they reach the
/// engine), some mutated after sealing.
pub fn roce_packet(
    rng: &mut Rng,
    qpn: u32,
    region: &RegionInfo,
    ep: &Endpoints,
    mtu: usize,
) -> (String, Vec<u8>) {
    let op = *rng.pick(&Op::ALL);
    let service = if rng.chance(4) {
        Service::Uc
    } else {
        Service::Rc
    };
    let opcode = Opcode::new(service, op)
        .or_else(|_| Opcode::new(Service::Rc, op))
        .expect("every op exists on RC");
    let va = match rng.below(4) {
        0 => rng.next(),
        1 => region.addr + region.len - rng.below(64) as u64,
        _ => region.addr + rng.below(region.len as usize) as u64,
    };
    let rkey = if rng.chance(3) {
        rng.next() as u32
    } else {
        region.rkey
    };
    let payload_len = if opcode.has_payload() {
        rng.below(mtu + 1)
    } else {
        0
    };
    let len = if rng.chance(3) {
        rng.hostile_u32()
    } else {
        payload_len as u32
    };
    let repr = Repr {
        bth: BthRepr {
            opcode,
            solicited: rng.chance(2),
            mig_req: rng.chance(8),
            pad_count: 0,
            pkey: if rng.chance(8) {
                rng.next() as u16
            } else {
                0xffff
            },
            fecn: rng.chance(8),
            becn: rng.chance(8),
            dest_qp: if rng.chance(16) {
                rng.next() as u32 & Psn::MASK
            } else {
                qpn
            },
            ack_req: rng.chance(2),
            psn: Psn::new(rng.next() as u32),
        },
        reth: opcode.has_reth().then_some(RethRepr { va, rkey, len }),
        immdt: opcode.has_immdt().then(|| rng.next() as u32),
        aeth: opcode.has_aeth().then(|| AethRepr {
            syndrome: Syndrome::Ack {
                credits: rng.below(32) as u8,
            },
            msn: rng.next() as u32 & Psn::MASK,
        }),
        payload_len,
    };
    let payload = rng.bytes(payload_len);
    let mut d = vec![0u8; repr.buffer_len()];
    repr.emit(&mut d, &payload);
    let mut kind = format!("{op:?} {service:?} len {len} payload {payload_len}");
    match rng.below(5) {
        0 => {
            rng.mutate(&mut d);
            kind.push_str(", mutated then sealed");
        }
        1 => {
            let n = rng.below(d.len());
            d.truncate(n.max(remora_wire::ICRC_LEN));
            kind.push_str(", truncated then sealed");
        }
        2 => {
            icrc::seal(ep, &mut d);
            rng.mutate(&mut d);
            kind.push_str(", sealed then mutated");
            return (kind, d);
        }
        _ => {}
    }
    if d.len() >= remora_wire::ICRC_LEN {
        icrc::seal(ep, &mut d);
    }
    (kind, d)
}
