//! Two engines on virtual time: loss, duplication, reordering, timeouts and access errors,
//! exact and without sockets.
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use remora_mem::{Access, Buffer, Mode, Pd, Region};
use remora_wire::{NakCode, Op, Psn, Repr, Service, Syndrome};

use super::*;
use crate::error::Error;
use crate::wr::{RecvWr, SendWr, Status, WcOpcode, WrOp};

/// A deterministic xorshift generator, so failures replay from the seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() % 1_000_000) as f64 / 1_000_000.0 < p
    }
}

#[derive(Clone, Copy, Default)]
struct Faults {
    loss: f64,
    dup: f64,
    reorder: f64,
}

struct Side {
    engine: Engine,
    pd: Arc<Pd>,
    region: Arc<Region>,
    completions: Vec<Completion>,
}

/// Two queue pairs joined by a virtual link with latency and injected faults.
struct Pair {
    a: Side,
    b: Side,
    now: Instant,
    latency: Duration,
    /// (deliver at, to b?, datagram)
    flight: Vec<(Instant, bool, Vec<u8>)>,
    faults: Faults,
    /// Drop everything going from a to b.
    cut_a_to_b: bool,
    rng: Rng,
    /// The page-in worker: requests done at an instant, for b (true) or a.
    pager: Vec<(Instant, bool, PageInRequest)>,
    /// Virtual time a page-in takes: fixed cost and cost per 4 KiB page (the paper's ~6 + 3 µs).
    page_in_fixed: Duration,
    page_in_per_page: Duration,
    /// Every packet sent, as (time, from a?, opcode, PSN, syndrome of an ACK/NAK).
    trace: Vec<(Instant, bool, Op, u32, Option<Syndrome>)>,
}

const REGION: usize = 1 << 20;

fn side(cfg: EngineConfig, access: Access) -> Side {
    let pd = Arc::new(Pd::new());
    let region = pd
        .register(Buffer::anonymous(REGION).unwrap(), access, Mode::OnDemand)
        .unwrap();
    Side {
        engine: Engine::new(cfg, pd.clone()),
        pd,
        region,
        completions: Vec::new(),
    }
}

fn configs(service: Service, mtu: usize, psn_a: u32, psn_b: u32) -> (EngineConfig, EngineConfig) {
    let mut a = EngineConfig::new(service, 0x12, 0x34, mtu);
    let mut b = EngineConfig::new(service, 0x34, 0x12, mtu);
    a.send_psn = Psn::new(psn_a);
    b.recv_psn = Psn::new(psn_a);
    b.send_psn = Psn::new(psn_b);
    a.recv_psn = Psn::new(psn_b);
    (a, b)
}

impl Pair {
    fn new(service: Service, mtu: usize) -> Pair {
        Pair::with(configs(service, mtu, 0, 0x100), Access::ALL)
    }

    fn with((ca, cb): (EngineConfig, EngineConfig), b_access: Access) -> Pair {
        Pair {
            a: side(ca, Access::ALL),
            b: side(cb, b_access),
            now: Instant::now(),
            latency: Duration::from_micros(5),
            flight: Vec::new(),
            faults: Faults::default(),
            cut_a_to_b: false,
            rng: Rng(0x9E37_79B9_7F4A_7C15),
            pager: Vec::new(),
            page_in_fixed: Duration::from_micros(6),
            page_in_per_page: Duration::from_micros(3),
            trace: Vec::new(),
        }
    }

    fn write(&mut self, wr_id: u64, off: usize, len: usize, remote_off: usize, imm: Option<u32>) {
        let wr = SendWr {
            wr_id,
            op: WrOp::Write { imm },
            local: self.a.region.clone(),
            offset: off,
            len,
            remote_va: self.b.region.addr() + remote_off as u64,
            rkey: self.b.region.rkey(),
        };
        self.a.engine.post_send(self.now, wr).unwrap();
    }

    fn read(&mut self, wr_id: u64, off: usize, len: usize, remote_off: usize) {
        let wr = SendWr {
            wr_id,
            op: WrOp::Read,
            local: self.a.region.clone(),
            offset: off,
            len,
            remote_va: self.b.region.addr() + remote_off as u64,
            rkey: self.b.region.rkey(),
        };
        self.a.engine.post_send(self.now, wr).unwrap();
    }

    fn send(&mut self, wr_id: u64, off: usize, len: usize, imm: Option<u32>) {
        let wr = SendWr {
            wr_id,
            op: WrOp::Send { imm },
            local: self.a.region.clone(),
            offset: off,
            len,
            remote_va: 0,
            rkey: 0,
        };
        self.a.engine.post_send(self.now, wr).unwrap();
    }

    fn transmit(&mut self) {
        let mut buf = vec![0u8; 8192];
        for to_b in [true, false] {
            loop {
                let s = if to_b { &mut self.a } else { &mut self.b };
                let Some(n) = s.engine.poll_transmit(self.now, &mut buf) else {
                    break;
                };
                let (repr, _) = Repr::parse(&buf[..n]).expect("the engine emits valid packets");
                self.trace.push((
                    self.now,
                    to_b,
                    repr.bth.opcode.op,
                    repr.bth.psn.value(),
                    repr.aeth.map(|a| a.syndrome),
                ));
                if to_b && self.cut_a_to_b {
                    continue;
                }
                if self.rng.chance(self.faults.loss) {
                    continue;
                }
                let mut at = self.now + self.latency;
                if self.rng.chance(self.faults.reorder) {
                    at += Duration::from_micros(self.rng.next() % 50);
                }
                if self.rng.chance(self.faults.dup) {
                    self.flight.push((at, to_b, buf[..n].to_vec()));
                }
                self.flight.push((at, to_b, buf[..n].to_vec()));
            }
        }
    }

    /// Runs until nothing is in flight and no timer is armed, or `limit` of virtual time passes.
    fn drive_for(&mut self, limit: Duration) {
        let end = self.now + limit;
        loop {
            self.transmit();
            for (is_b, s) in [(false, &mut self.a), (true, &mut self.b)] {
                while let Some(c) = s.engine.poll_completion() {
                    s.completions.push(c);
                }
                while let Some(r) = s.engine.poll_page_in() {
                    let pages = r.len.div_ceil(4096) as u32;
                    let at = self.now + self.page_in_fixed + self.page_in_per_page * pages;
                    self.pager.push((at, is_b, r));
                }
            }
            let next_packet = self.flight.iter().map(|f| f.0).min();
            let next_page_in = self.pager.iter().map(|f| f.0).min();
            let next_timer = [self.a.engine.poll_timeout(), self.b.engine.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = [next_packet, next_page_in, next_timer]
                .into_iter()
                .flatten()
                .min()
            else {
                return;
            };
            if t > end {
                return;
            }
            self.now = self.now.max(t);
            // Deliver every packet due now, in arrival order.
            let (mut due, rest): (Vec<_>, Vec<_>) =
                self.flight.drain(..).partition(|f| f.0 <= self.now);
            self.flight = rest;
            due.sort_by_key(|d| d.0);
            for (_, to_b, pkt) in due {
                let s = if to_b { &mut self.b } else { &mut self.a };
                s.engine.handle(self.now, &pkt);
            }
            let (done, rest): (Vec<_>, Vec<_>) =
                self.pager.drain(..).partition(|f| f.0 <= self.now);
            self.pager = rest;
            for (_, is_b, r) in done {
                let s = if is_b { &mut self.b } else { &mut self.a };
                let result = r.run(64 << 10).map_err(|e| e.to_string());
                s.engine.page_in_done(self.now, r.id, result);
            }
            for s in [&mut self.a, &mut self.b] {
                if s.engine.poll_timeout().is_some_and(|t| t <= self.now) {
                    s.engine.handle_timeout(self.now);
                }
            }
        }
    }

    fn drive(&mut self) {
        self.drive_for(Duration::from_secs(10));
    }
}

fn fill(region: &Region, seed: u8) {
    let data: Vec<u8> = (0..region.len())
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    region.write_at(0, &data).unwrap();
}

fn bytes(region: &Region, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    region.read_at(off, &mut v).unwrap();
    v
}

#[test]
fn write_only_lands_and_completes_on_requester_only() {
    let mut p = Pair::new(Service::Rc, 1024);
    fill(&p.a.region, 1);
    p.write(7, 100, 200, 5000, None);
    p.drive();
    assert_eq!(bytes(&p.b.region, 5000, 200), bytes(&p.a.region, 100, 200));
    assert_eq!(p.a.completions.len(), 1);
    let c = p.a.completions[0];
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (7, Status::Success, WcOpcode::Write)
    );
    assert!(p.b.completions.is_empty(), "plain WRITE must be silent");
}

#[test]
fn write_with_immediate_spanning_packets_completes_on_both_sides() {
    let mut p = Pair::new(Service::Rc, 256);
    fill(&p.a.region, 2);
    p.write(1, 0, 10_000, 0, Some(0xdead_beef));
    p.drive();
    assert_eq!(bytes(&p.b.region, 0, 10_000), bytes(&p.a.region, 0, 10_000));
    let rc = p.b.completions[0];
    assert_eq!(rc.opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!((rc.imm, rc.byte_len), (Some(0xdead_beef), 10_000));
    assert_eq!(p.a.completions[0].status, Status::Success);
    // 40 data packets, ACKs coalesced (one per ack_req_every and one at the end).
    assert!(
        p.b.engine.stats().acks_sent <= 2,
        "{:?}",
        p.b.engine.stats()
    );
}

#[test]
fn read_spanning_packets_returns_remote_bytes() {
    let mut p = Pair::new(Service::Rc, 1024);
    fill(&p.b.region, 3);
    p.read(9, 64, 50_000, 1000);
    p.drive();
    assert_eq!(
        bytes(&p.a.region, 64, 50_000),
        bytes(&p.b.region, 1000, 50_000)
    );
    let c = p.a.completions[0];
    assert_eq!(
        (c.wr_id, c.status, c.opcode, c.byte_len),
        (9, Status::Success, WcOpcode::Read, 50_000)
    );
}

#[test]
fn zero_length_write_and_read_complete() {
    let mut p = Pair::new(Service::Rc, 1024);
    p.write(1, 0, 0, 0, Some(5));
    p.read(2, 0, 0, 0);
    p.drive();
    let st: Vec<_> = p.a.completions.iter().map(|c| c.status).collect();
    assert_eq!(st, [Status::Success, Status::Success]);
    assert_eq!(p.b.completions[0].imm, Some(5));
}

#[test]
fn send_waits_for_a_receive_buffer_with_rnr_naks() {
    let mut p = Pair::new(Service::Rc, 512);
    fill(&p.a.region, 4);
    p.send(3, 10, 3000, Some(77));
    p.drive_for(Duration::from_micros(300));
    assert!(
        p.b.engine.stats().naks_sent >= 1,
        "no receive buffer: RNR NAK"
    );
    assert!(p.a.completions.is_empty());
    let recv = RecvWr {
        wr_id: 42,
        local: p.b.region.clone(),
        offset: 777,
        len: 4096,
    };
    p.b.engine.post_recv(recv).unwrap();
    p.drive();
    assert_eq!(bytes(&p.b.region, 777, 3000), bytes(&p.a.region, 10, 3000));
    let c = p.b.completions[0];
    assert_eq!(
        (c.wr_id, c.opcode, c.byte_len, c.imm),
        (42, WcOpcode::Recv, 3000, Some(77))
    );
    assert_eq!(p.a.completions[0].status, Status::Success);
}

#[test]
fn send_longer_than_receive_buffer_is_a_length_error() {
    let mut p = Pair::new(Service::Rc, 512);
    let recv = RecvWr {
        wr_id: 1,
        local: p.b.region.clone(),
        offset: 0,
        len: 1000,
    };
    p.b.engine.post_recv(recv).unwrap();
    p.send(2, 0, 2000, None);
    p.drive();
    assert_eq!(p.b.completions[0].status, Status::LocalLengthError);
    assert_eq!(p.a.completions[0].status, Status::RemoteInvalidRequest);
}

#[test]
fn wrong_rkey_is_naked_and_flushes_the_rest() {
    let mut p = Pair::new(Service::Rc, 1024);
    p.write(1, 0, 100, 0, None);
    let bad = SendWr {
        wr_id: 2,
        op: WrOp::Write { imm: None },
        local: p.a.region.clone(),
        offset: 0,
        len: 100,
        remote_va: p.b.region.addr(),
        rkey: p.b.region.rkey() ^ 0x5a5a,
    };
    p.a.engine.post_send(p.now, bad).unwrap();
    p.write(3, 0, 100, 0, None);
    p.drive();
    let st: Vec<_> =
        p.a.completions
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(
        st,
        [
            (1, Status::Success),
            (2, Status::RemoteAccessError),
            (3, Status::Flushed)
        ]
    );
    assert!(p.a.engine.is_error());
    assert!(matches!(
        p.a.engine.post_send(
            p.now,
            SendWr {
                wr_id: 4,
                op: WrOp::Read,
                local: p.a.region.clone(),
                offset: 0,
                len: 1,
                remote_va: 0,
                rkey: 0
            }
        ),
        Err(Error::QpError)
    ));
    assert_eq!(p.b.engine.stats().access_errors, 1);
}

#[test]
fn out_of_bounds_and_missing_rights_are_refused_and_the_responder_keeps_serving() {
    // The responder's region allows remote writes but not reads.
    let mut p = Pair::with(
        configs(Service::Rc, 1024, 0, 0),
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    p.write(1, 0, 4096, REGION - 100, None); // runs past the end
    p.drive();
    assert_eq!(p.a.completions[0].status, Status::RemoteAccessError);
    // A fresh queue pair against the same responder memory: a read is refused...
    let (ca, cb) = configs(Service::Rc, 1024, 0, 0);
    let mut q = Pair::with((ca, cb), Access::ALL);
    q.b.engine = Engine::new(q.b.engine.config().clone(), p.b.pd.clone());
    q.b.region = p.b.region.clone();
    q.read(5, 0, 10, 0);
    q.drive();
    assert_eq!(q.a.completions[0].status, Status::RemoteAccessError);
    // ...while a valid write on a third queue pair still works.
    let (ca, cb) = configs(Service::Rc, 1024, 0, 0);
    let mut r = Pair::with((ca, cb), Access::ALL);
    r.b.engine = Engine::new(r.b.engine.config().clone(), p.b.pd.clone());
    r.b.region = p.b.region.clone();
    fill(&r.a.region, 9);
    r.write(6, 0, 3000, 10, None);
    r.drive();
    assert_eq!(r.a.completions[0].status, Status::Success);
    assert_eq!(bytes(&p.b.region, 10, 3000), bytes(&r.a.region, 0, 3000));
}

#[test]
fn retry_limit_ends_in_an_error_completion() {
    let mut p = Pair::new(Service::Rc, 1024);
    p.cut_a_to_b = true;
    p.write(1, 0, 5000, 0, None);
    p.write(2, 0, 10, 0, None);
    p.drive();
    let st: Vec<_> = p.a.completions.iter().map(|c| c.status).collect();
    assert_eq!(st, [Status::RetryExceeded, Status::Flushed]);
    let s = p.a.engine.stats();
    assert_eq!(s.timeouts, 8, "retry_count 7 = 8 expiries");
    assert!(s.retransmits >= 7 * 5);
}

#[test]
fn uc_drops_a_message_with_a_gap_and_resumes_at_the_next_first() {
    let mut p = Pair::new(Service::Uc, 256);
    fill(&p.a.region, 5);
    p.write(1, 0, 1024, 0, Some(1)); // 4 packets: F M M L
    p.write(2, 2048, 512, 4096, Some(2)); // F L
                                          // Lose the second packet of message 1 only.
    let mut buf = vec![0u8; 8192];
    let mut pkts = Vec::new();
    while let Some(n) = p.a.engine.poll_transmit(p.now, &mut buf) {
        pkts.push(buf[..n].to_vec());
    }
    assert_eq!(pkts.len(), 6);
    for (i, pkt) in pkts.iter().enumerate() {
        if i != 1 {
            p.b.engine.handle(p.now, pkt);
        }
    }
    while let Some(c) = p.b.engine.poll_completion() {
        p.b.completions.push(c);
    }
    let imms: Vec<_> = p.b.completions.iter().map(|c| c.imm).collect();
    assert_eq!(imms, [Some(2)], "message 1 dropped, message 2 delivered");
    assert_eq!(bytes(&p.b.region, 4096, 512), bytes(&p.a.region, 2048, 512));
    let s = p.b.engine.stats();
    assert_eq!((s.uc_messages_dropped, s.uc_packets_dropped), (1, 2));
    // UC sends no ACKs and the requester completed both at transmit time.
    assert!(p.b.engine.poll_transmit(p.now, &mut buf).is_none());
    let st: Vec<_> = std::iter::from_fn(|| p.a.engine.poll_completion()).collect();
    assert_eq!(st.len(), 2);
}

#[test]
fn uc_in_sequence_counts_packets_since_the_last_gap() {
    let mut p = Pair::new(Service::Uc, 256);
    fill(&p.a.region, 3);
    // Stack 1: two messages, 3 + 2 packets, the second with an immediate. Stack 2 the same.
    for stack in 1..=2u32 {
        p.write(10 * u64::from(stack), 0, 768, 0, None);
        p.write(10 * u64::from(stack) + 1, 0, 512, 1024, Some(stack));
    }
    let mut buf = vec![0u8; 8192];
    let mut pkts = Vec::new();
    while let Some(n) = p.a.engine.poll_transmit(p.now, &mut buf) {
        pkts.push(buf[..n].to_vec());
    }
    assert_eq!(pkts.len(), 10);
    // Lose the first packet of stack 2: its immediate still arrives (its message is whole),
    // but fewer than 5 packets precede it in sequence, so the receiver can tell.
    for (i, pkt) in pkts.iter().enumerate() {
        if i != 5 {
            p.b.engine.handle(p.now, pkt);
        }
    }
    let got: Vec<_> = std::iter::from_fn(|| p.b.engine.poll_completion())
        .map(|c| (c.imm, c.in_sequence))
        .collect();
    assert_eq!(got, [(Some(1), 5), (Some(2), 2)]);
}

#[test]
fn rc_arrivals_report_an_unbroken_sequence() {
    let mut p = Pair::new(Service::Rc, 256);
    p.write(1, 0, 1000, 0, Some(9));
    p.drive();
    let c =
        p.b.completions
            .iter()
            .find(|c| c.imm == Some(9))
            .expect("arrival");
    assert_eq!(c.in_sequence, u32::MAX);
}

#[test]
fn uc_read_is_unsupported() {
    let mut p = Pair::new(Service::Uc, 1024);
    let wr = SendWr {
        wr_id: 1,
        op: WrOp::Read,
        local: p.a.region.clone(),
        offset: 0,
        len: 10,
        remote_va: p.b.region.addr(),
        rkey: p.b.region.rkey(),
    };
    assert!(matches!(
        p.a.engine.post_send(p.now, wr),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn malformed_and_misaddressed_packets_are_counted_and_dropped() {
    let mut p = Pair::new(Service::Rc, 1024);
    p.b.engine.handle(p.now, &[0xff; 3]);
    p.b.engine.handle(p.now, &[0x0a; 64]);
    // A valid packet for another QP.
    p.write(1, 0, 10, 0, None);
    let mut buf = vec![0u8; 8192];
    let n = p.a.engine.poll_transmit(p.now, &mut buf).unwrap();
    let mut other = buf[..n].to_vec();
    other[7] ^= 0x01; // dest QP low byte
    p.b.engine.handle(p.now, &other);
    let s = p.b.engine.stats();
    assert_eq!(s.rx_malformed + s.rx_wrong_qp, 3, "{s:?}");
    // The real packet still gets through afterwards.
    p.b.engine.handle(p.now, &buf[..n]);
    p.drive();
    assert_eq!(p.a.completions[0].status, Status::Success);
}

#[test]
fn a_packet_with_a_wrong_pkey_is_dropped_and_counted() {
    let mut p = Pair::new(Service::Rc, 1024);
    p.write(1, 0, 10, 0, None);
    let mut buf = vec![0u8; 8192];
    let n = p.a.engine.poll_transmit(p.now, &mut buf).unwrap();
    let mut bad = buf[..n].to_vec();
    bad[2..4].copy_from_slice(&0x8123u16.to_be_bytes()); // another partition
    p.b.engine.handle(p.now, &bad);
    let mut limited = buf[..n].to_vec();
    limited[2..4].copy_from_slice(&0x7fffu16.to_be_bytes()); // same partition, limited member
    p.b.engine.handle(p.now, &limited);
    assert_eq!(p.b.engine.stats().bad_pkey, 1, "{:?}", p.b.engine.stats());
    assert_eq!(
        bytes(&p.b.region, 0, 10),
        bytes(&p.a.region, 0, 10),
        "limited member admitted"
    );
    p.drive();
    assert_eq!(p.a.completions[0].status, Status::Success);
}

#[test]
fn pkey_membership_rules() {
    use crate::engine::pkey_matches;
    assert!(pkey_matches(0xffff, 0xffff));
    assert!(
        pkey_matches(0x7fff, 0xffff),
        "limited sender, full receiver"
    );
    assert!(
        pkey_matches(0xffff, 0x7fff),
        "full sender, limited receiver"
    );
    assert!(!pkey_matches(0x7fff, 0x7fff), "two limited members");
    assert!(!pkey_matches(0x8001, 0xffff), "other partition");
}

#[test]
fn psn_wraps_around_24_bits() {
    let mut p = Pair::with(configs(Service::Rc, 256, 0xFF_FFF0, 0xFF_FFFE), Access::ALL);
    fill(&p.a.region, 6);
    fill(&p.b.region, 7);
    for i in 0..10 {
        p.write(
            i,
            i as usize * 1000,
            1000,
            i as usize * 1000,
            Some(i as u32),
        );
    }
    p.read(100, 20_000, 5000, 50_000);
    p.drive();
    assert_eq!(p.a.completions.len(), 11);
    assert!(p.a.completions.iter().all(|c| c.status == Status::Success));
    assert_eq!(bytes(&p.b.region, 0, 10_000), bytes(&p.a.region, 0, 10_000));
    assert_eq!(
        bytes(&p.a.region, 20_000, 5000),
        bytes(&p.b.region, 50_000, 5000)
    );
}

/// A mixed workload under loss, duplication and reordering: every message arrives exactly once,
/// in order, with the right bytes.
fn lossy_run(seed: u64, faults: Faults, mtu: usize) {
    let mut p = Pair::new(Service::Rc, mtu);
    p.rng = Rng(seed | 1);
    p.faults = faults;
    fill(&p.a.region, 11);
    fill(&p.b.region, 13);
    let recv_area = 600_000;
    for i in 0..16 {
        let recv = RecvWr {
            wr_id: 1000 + i,
            local: p.b.region.clone(),
            offset: recv_area + i as usize * 8192,
            len: 8192,
        };
        p.b.engine.post_recv(recv).unwrap();
    }
    let mut rng = Rng(seed.wrapping_mul(7) | 1);
    let mut expect = Vec::new();
    let mut sends = 0;
    for i in 0..60u64 {
        let len = (rng.next() % 9000) as usize;
        let slot = i as usize * 9000;
        match rng.next() % 3 {
            0 => {
                p.write(i, slot, len, slot, Some(i as u32));
                expect.push((i, WrOp::Write { imm: None }, slot, len));
            }
            1 => {
                p.read(i, slot, len, slot);
                expect.push((i, WrOp::Read, slot, len));
            }
            _ if sends < 16 => {
                let len = len.min(8192);
                p.send(i, slot, len, None);
                expect.push((i, WrOp::Send { imm: None }, recv_area + sends * 8192, len));
                sends += 1;
            }
            _ => {}
        }
    }
    p.drive_for(Duration::from_secs(60));
    let ids: Vec<_> = p.a.completions.iter().map(|c| c.wr_id).collect();
    let want: Vec<_> = expect.iter().map(|e| e.0).collect();
    assert_eq!(
        ids,
        want,
        "every request completes once, in order; statuses {:?}, a {:?}, b {:?}, a timer {:?}",
        p.a.completions.iter().map(|c| c.status).collect::<Vec<_>>(),
        p.a.engine.stats(),
        p.b.engine.stats(),
        p.a.engine.poll_timeout().map(|t| t - p.now),
    );
    assert!(
        p.a.completions.iter().all(|c| c.status == Status::Success),
        "statuses {:?}, a {:?}, b {:?}",
        p.a.completions.iter().map(|c| c.status).collect::<Vec<_>>(),
        p.a.engine.stats(),
        p.b.engine.stats(),
    );
    for (i, op, off, len) in &expect {
        let slot = *i as usize * 9000;
        match op {
            WrOp::Read => assert_eq!(
                bytes(&p.a.region, slot, *len),
                bytes(&p.b.region, slot, *len)
            ),
            _ => assert_eq!(
                bytes(&p.b.region, *off, *len),
                bytes(&p.a.region, slot, *len)
            ),
        }
    }
    let imms: Vec<_> =
        p.b.completions
            .iter()
            .filter(|c| c.opcode == WcOpcode::RecvRdmaWithImm)
            .map(|c| c.imm.unwrap() as u64)
            .collect();
    let writes: Vec<_> = expect
        .iter()
        .filter(|e| matches!(e.1, WrOp::Write { .. }))
        .map(|e| e.0)
        .collect();
    assert_eq!(imms, writes, "immediates exactly once, in order");
    let recvs =
        p.b.completions
            .iter()
            .filter(|c| c.opcode == WcOpcode::Recv)
            .count();
    assert_eq!(recvs, sends);
}

#[test]
fn rc_survives_loss_duplication_and_reordering() {
    lossy_run(
        1,
        Faults {
            loss: 0.05,
            dup: 0.05,
            reorder: 0.05,
        },
        1024,
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn rc_delivers_exactly_once_in_order_under_faults(
        seed in any::<u64>(),
        loss in 0.0f64..0.15,
        dup in 0.0f64..0.1,
        reorder in 0.0f64..0.1,
        mtu in prop::sample::select(vec![256usize, 1024, 4096]),
    ) {
        lossy_run(seed, Faults { loss, dup, reorder }, mtu);
    }
}

#[test]
fn uc_access_violation_is_a_counted_drop_and_the_next_message_arrives() {
    let mut p = Pair::new(Service::Uc, 1024);
    fill(&p.a.region, 8);
    let bad = SendWr {
        wr_id: 1,
        op: WrOp::Write { imm: Some(1) },
        local: p.a.region.clone(),
        offset: 0,
        len: 3000,
        remote_va: p.b.region.addr(),
        rkey: p.b.region.rkey().wrapping_add(0x100),
    };
    p.a.engine.post_send(p.now, bad).unwrap();
    p.write(2, 0, 3000, 8192, Some(2));
    p.drive();
    let imms: Vec<_> = p.b.completions.iter().map(|c| c.imm).collect();
    assert_eq!(imms, [Some(2)]);
    assert_eq!(bytes(&p.b.region, 8192, 3000), bytes(&p.a.region, 0, 3000));
    let s = p.b.engine.stats();
    assert_eq!(s.access_errors, 1);
    assert_eq!(
        s.uc_packets_dropped, 3,
        "the refused First and its Middle and Last"
    );
    assert_eq!(s.naks_sent, 0, "UC never NAKs");
}

// ---- PART: faults at the responder, ERR, timeouts, sources ----

/// A pair whose both sides use `part` (the responder's policy, the requester's timeout).
fn part_pair(part: PartConfig) -> Pair {
    let (mut ca, mut cb) = configs(Service::Rc, 4096, 0, 0x100);
    ca.part = part;
    cb.part = part;
    Pair::with((ca, cb), Access::ALL)
}

fn part(policy: PageInPolicy, fault_timeout: Option<Duration>) -> PartConfig {
    PartConfig {
        policy,
        fault_timeout,
        ..PartConfig::default()
    }
}

/// An offset in b's region whose address is 16 KiB-aligned, so PI4 blocks fall predictably.
fn aligned_offset(p: &Pair) -> usize {
    let a = p.b.region.addr() as usize;
    (16384 - a % 16384) % 16384
}

/// The NAKs b sent, in order: ("fault" | "err" | other, PSN relative to a's first).
fn naks_from_b(p: &Pair) -> Vec<(&'static str, u32)> {
    p.trace
        .iter()
        .filter(|t| !t.1)
        .filter_map(|t| match t.4 {
            Some(Syndrome::RnrNak {
                timer: FAULT_RNR_TIMER,
            }) => Some(("fault", t.3)),
            Some(Syndrome::Nak(NakCode::PsnSequenceError)) => Some(("err", t.3)),
            Some(Syndrome::Nak(_)) => Some(("nak", t.3)),
            _ => None,
        })
        .collect()
}

/// Writes `len` bytes of a's filled region into b's fresh region and checks every byte.
fn write_fresh(p: &mut Pair, len: usize) -> usize {
    fill(&p.a.region, 3);
    let off = aligned_offset(p);
    p.write(1, 0, len, off, None);
    p.drive();
    assert_eq!(bytes(&p.b.region, off, len), bytes(&p.a.region, 0, len));
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.a.completions[0].status, Status::Success);
    off
}

#[test]
fn pio_faults_on_every_page_and_resumes_after_each_err() {
    let mut p = part_pair(part(PageInPolicy::Pio, None));
    write_fresh(&mut p, 4 * 4096);
    assert_eq!(
        naks_from_b(&p),
        [
            ("fault", 0),
            ("err", 0),
            ("fault", 1),
            ("err", 1),
            ("fault", 2),
            ("err", 2),
            ("fault", 3),
            ("err", 3)
        ]
    );
    let (a, b) = (p.a.engine.stats(), p.b.engine.stats());
    assert_eq!(
        (b.faults, b.page_ins, b.pages_in, b.errs_sent),
        (4, 4, 4, 4)
    );
    assert_eq!((a.errs_received, a.fault_timeouts), (4, 0));
    // The first burst's packets behind the fault were dropped, not NAKed out of sequence.
    assert_eq!(b.held_drops, 3 + 2 + 1);
    assert_eq!(b.out_of_sequence, 0);
}

#[test]
fn pi4_brings_in_a_16k_block_per_fault() {
    let mut p = part_pair(part(PageInPolicy::Pi4, None));
    write_fresh(&mut p, 8 * 4096);
    assert_eq!(
        naks_from_b(&p),
        [("fault", 0), ("err", 0), ("fault", 4), ("err", 4)]
    );
    let b = p.b.engine.stats();
    assert_eq!(
        (b.faults, b.page_ins, b.pages_in, b.errs_sent),
        (2, 2, 8, 2)
    );
}

#[test]
fn pia_brings_in_the_rest_of_the_message_at_the_first_fault() {
    let mut p = part_pair(part(PageInPolicy::Pia, None));
    let off = write_fresh(&mut p, 64 * 4096);
    assert_eq!(naks_from_b(&p), [("fault", 0), ("err", 0)]);
    let b = p.b.engine.stats();
    assert_eq!(
        (b.faults, b.page_ins, b.pages_in, b.errs_sent),
        (1, 1, 64, 1)
    );
    // PIA stops at the message's end: the page after it is still out.
    assert!(!p.b.region.is_resident(off + 64 * 4096, 1));
}

#[test]
fn a_timeout_shorter_than_the_page_in_resends_and_is_held_again() {
    // 64 pages take 6 + 192 µs to come in; the sender tries again every 50 µs.
    let mut p = part_pair(part(PageInPolicy::Pia, Some(Duration::from_micros(50))));
    write_fresh(&mut p, 64 * 4096);
    let (a, b) = (p.a.engine.stats(), p.b.engine.stats());
    assert_eq!((b.faults, b.page_ins), (1, 1), "one fault, asked for once");
    assert!(a.fault_timeouts >= 3, "{a:?}");
    assert_eq!(
        b.fault_naks,
        1 + a.fault_timeouts,
        "every early resend is held again"
    );
    let naks = naks_from_b(&p);
    assert_eq!(naks.first(), Some(&("fault", 0)));
    assert!(naks.iter().all(|n| n.1 == 0), "{naks:?}");
    assert_eq!(naks.iter().filter(|n| n.0 == "err").count(), 1);
}

#[test]
fn a_timeout_racing_the_err_makes_only_harmless_duplicates() {
    // Fault at 5 µs; pages in at 5 + 6 + 12 = 23 µs (ERR at b); ERR reaches a at 28 µs. The
    // hold started at 10 µs ends at 25 µs: a resends before the ERR arrives, then goes back
    // again on the ERR.
    let mut p = part_pair(part(PageInPolicy::Pia, Some(Duration::from_micros(15))));
    write_fresh(&mut p, 4 * 4096);
    let (a, b) = (p.a.engine.stats(), p.b.engine.stats());
    assert_eq!(a.fault_timeouts, 1);
    assert_eq!(b.errs_sent, 1);
    assert_eq!(a.errs_received, 0, "the ERR came after the hold had ended");
    assert!(b.duplicates > 0, "{b:?}");
    assert!(a.retransmits > 4, "the burst once, then again: {a:?}");
}

#[test]
fn a_long_timeout_loses_to_the_err() {
    let mut p = part_pair(part(PageInPolicy::Pia, Some(Duration::from_millis(1))));
    write_fresh(&mut p, 4 * 4096);
    let a = p.a.engine.stats();
    assert_eq!((a.fault_timeouts, a.errs_received), (0, 1));
}

#[test]
fn faults_recur_when_pages_are_dropped_between_transfers() {
    let mut p = part_pair(part(PageInPolicy::Pia, None));
    let off = write_fresh(&mut p, 8 * 4096);
    p.b.region.evict(off, 8 * 4096).unwrap();
    fill(&p.a.region, 9);
    p.write(2, 0, 8 * 4096, off, Some(77));
    p.drive();
    assert_eq!(
        bytes(&p.b.region, off, 8 * 4096),
        bytes(&p.a.region, 0, 8 * 4096)
    );
    assert_eq!(p.b.engine.stats().faults, 2);
    // The immediate completes once, after the whole message is in.
    let imms: Vec<_> =
        p.b.completions
            .iter()
            .filter(|c| c.imm == Some(77))
            .collect();
    assert_eq!(imms.len(), 1);
    assert_eq!(imms[0].byte_len, 8 * 4096);
}

#[test]
fn sends_fault_like_writes() {
    let mut p = part_pair(part(PageInPolicy::Pio, None));
    fill(&p.a.region, 5);
    let off = aligned_offset(&p);
    p.b.engine
        .post_recv(RecvWr {
            wr_id: 9,
            local: p.b.region.clone(),
            offset: off,
            len: 3 * 4096,
        })
        .unwrap();
    p.send(1, 0, 3 * 4096, None);
    p.drive();
    assert_eq!(
        bytes(&p.b.region, off, 3 * 4096),
        bytes(&p.a.region, 0, 3 * 4096)
    );
    assert_eq!(p.b.engine.stats().faults, 3);
    assert_eq!(p.b.completions.len(), 1);
    assert_eq!(p.b.completions[0].wr_id, 9);
}

#[test]
fn a_page_in_that_fails_fails_the_request_and_the_responder_keeps_serving() {
    let mut p = part_pair(part(PageInPolicy::Pia, None));
    fill(&p.a.region, 1);
    p.write(1, 0, 4096, 0, None);
    // Take the request before the pager does and report it failed.
    p.transmit();
    let now = p.now + p.latency;
    for (_, _, pkt) in p.flight.drain(..).collect::<Vec<_>>() {
        p.b.engine.handle(now, &pkt);
    }
    let req = p.b.engine.poll_page_in().expect("a page-in request");
    p.b.engine
        .page_in_done(now, req.id, Err("the page server is gone".into()));
    assert_eq!(p.b.engine.page_ins_in_flight(), 0);
    p.now = now;
    p.drive();
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.a.completions[0].status, Status::RemoteOperationalError);
    // A stale report changes nothing.
    p.b.engine.page_in_done(p.now, req.id, Ok(1));
}

#[test]
fn never_touched_sources_are_populated_before_they_are_read() {
    let mut p = part_pair(part(PageInPolicy::Pia, None));
    // Nothing filled: a's region was never touched, nor b's.
    p.write(1, 0, 16 * 4096, 0, None);
    p.drive();
    assert_eq!(p.a.completions[0].status, Status::Success);
    assert!(p.a.engine.stats().source_faults >= 1);
    assert!(p.a.region.is_resident(0, 16 * 4096));
    // A READ from b's untouched tail into a's untouched tail: b populates its source, a its
    // destination.
    let off = 1 << 19;
    p.read(2, off, 8 * 4096, off);
    p.drive();
    assert_eq!(p.a.completions[1].status, Status::Success);
    assert!(p.b.engine.stats().source_faults >= 1);
    assert!(p.b.region.is_resident(off, 8 * 4096));
    assert!(p.a.region.is_resident(off, 8 * 4096));
}

#[test]
fn inline_mode_places_without_faults() {
    let mut p = part_pair(PartConfig {
        mode: FaultMode::Inline,
        ..PartConfig::default()
    });
    write_fresh(&mut p, 8 * 4096);
    let b = p.b.engine.stats();
    assert_eq!((b.faults, b.fault_naks, b.page_ins), (0, 0, 0));
}

#[test]
fn uc_never_faults() {
    let (mut ca, mut cb) = configs(Service::Uc, 4096, 0, 0x100);
    ca.part = PartConfig::default();
    cb.part = PartConfig::default();
    let mut p = Pair::with((ca, cb), Access::ALL);
    fill(&p.a.region, 2);
    p.write(1, 0, 4 * 4096, 0, Some(1));
    p.drive();
    assert_eq!(
        bytes(&p.b.region, 0, 4 * 4096),
        bytes(&p.a.region, 0, 4 * 4096)
    );
    assert_eq!(p.b.engine.stats().faults, 0);
}

#[test]
fn a_read_into_a_fresh_destination_pages_it_in_and_asks_again() {
    let mut p = part_pair(part(PageInPolicy::Pia, None));
    fill(&p.b.region, 4);
    // b's source is resident; a's destination was never touched.
    p.b.region.page_in_range(0, 64 * 4096).unwrap();
    p.read(1, 0, 64 * 4096, 0);
    p.drive();
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.a.completions[0].status, Status::Success);
    assert_eq!(
        bytes(&p.a.region, 0, 64 * 4096),
        bytes(&p.b.region, 0, 64 * 4096)
    );
    let a = p.a.engine.stats();
    assert_eq!((a.faults, a.page_ins, a.pages_in), (1, 1, 64), "{a:?}");
    assert!(
        a.held_drops > 0,
        "the responses after the first were dropped: {a:?}"
    );
    // One READ request sent again, after the page-in; nothing resent by the timer meanwhile.
    assert_eq!(a.retransmits, 1, "{a:?}");
}

#[test]
fn a_read_whose_destination_cannot_be_paged_in_fails_locally() {
    let mut p = part_pair(part(PageInPolicy::Pia, None));
    p.b.region.page_in_range(0, 4 * 4096).unwrap();
    p.read(1, 0, 4 * 4096, 0);
    // Run until a's page-in request appears, and report it failed instead of running it.
    let mut req = None;
    for _ in 0..1000 {
        p.transmit();
        let due = p.flight.iter().map(|f| f.0).min();
        if let Some(t) = due {
            p.now = p.now.max(t);
            let (d, rest): (Vec<_>, Vec<_>) = p.flight.drain(..).partition(|f| f.0 <= p.now);
            p.flight = rest;
            for (_, to_b, pkt) in d {
                let s = if to_b { &mut p.b } else { &mut p.a };
                s.engine.handle(p.now, &pkt);
            }
        }
        if let Some(r) = p.a.engine.poll_page_in() {
            req = Some(r);
            break;
        }
    }
    let req = req.expect("a page-in request for the READ destination");
    p.a.engine
        .page_in_done(p.now, req.id, Err("no memory".into()));
    p.drive();
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.a.completions[0].status, Status::LocalPageInError);
    assert!(p.a.engine.is_error());
}

#[test]
fn a_resend_after_a_fault_timeout_probes_with_a_small_window_and_an_err_resumes_in_full() {
    // 64 pages take 6 + 192 µs; the sender's 50 µs timeout ends holds before the ERR.
    let mut p = part_pair(part(PageInPolicy::Pia, Some(Duration::from_micros(50))));
    write_fresh(&mut p, 64 * 4096);
    // Bursts of data packets a sent at one instant.
    let mut bursts: Vec<(Instant, usize)> = Vec::new();
    for t in p.trace.iter().filter(|t| t.1) {
        match bursts.last_mut() {
            Some((at, n)) if *at == t.0 => *n += 1,
            _ => bursts.push((t.0, 1)),
        }
    }
    assert_eq!(
        bursts[0].1, 64,
        "the first send is the whole message: {bursts:?}"
    );
    let a = p.a.engine.stats();
    assert!(a.fault_timeouts >= 1);
    // Every timed-out resend before the ERR was a probe of at most 16 packets.
    let err_at = p
        .trace
        .iter()
        .find(|t| !t.1 && t.4 == Some(Syndrome::Nak(NakCode::PsnSequenceError)))
        .map(|t| t.0)
        .expect("an ERR");
    for (at, n) in bursts.iter().skip(1).filter(|b| b.0 < err_at) {
        assert!(
            *n <= 16,
            "a probe of {n} packets at {:?}",
            *at - bursts[0].0
        );
    }
    // After the ERR the rest goes in one burst (the window is whole again).
    let after: Vec<_> = bursts.iter().filter(|b| b.0 > err_at).collect();
    assert!(after.iter().any(|b| b.1 > 16), "{after:?}");
}

#[test]
fn pio_resends_a_small_window_after_each_err_not_the_whole_rest() {
    let mut p = part_pair(part(PageInPolicy::Pio, None));
    write_fresh(&mut p, 64 * 4096);
    let (a, b) = (p.a.engine.stats(), p.b.engine.stats());
    assert_eq!(b.faults, 64);
    // Resending the rest of the message after each of the 64 ERRs would be 64·65/2 = 2080
    // packets; a window of 16 after each keeps it under 64 · 16.
    assert!(a.retransmits <= 64 * 16, "{a:?}");
}

#[test]
fn a_window_smaller_than_the_ack_interval_asks_for_acks_and_never_waits_for_the_timer() {
    let (mut ca, cb) = configs(Service::Rc, 4096, 0, 0x100);
    ca.window = 8;
    let mut p = Pair::with((ca, cb), Access::ALL);
    p.b.region.page_in_range(0, 64 * 4096).unwrap();
    fill(&p.a.region, 6);
    p.write(1, 0, 64 * 4096, 0, None);
    p.drive_for(Duration::from_millis(5));
    assert_eq!(p.a.completions.len(), 1, "{:?}", p.a.engine.stats());
    assert_eq!(p.a.engine.stats().retransmits, 0);
    assert_eq!(
        bytes(&p.b.region, 0, 64 * 4096),
        bytes(&p.a.region, 0, 64 * 4096)
    );
}

#[test]
fn a_fault_on_one_queue_pair_holds_only_that_queue_pair() {
    // Two queue pairs on one clock: the first faults on remote-backed memory whose page-in takes
    // 50 ms; the second streams 50 WRITE-with-immediate messages into resident memory meanwhile.
    let mut slow = part_pair(part(PageInPolicy::Pia, None));
    slow.page_in_fixed = Duration::from_millis(50);
    let mut fast = part_pair(part(PageInPolicy::Pia, None));
    fast.now = slow.now;
    fast.b.region.page_in_range(0, REGION).unwrap();
    fill(&slow.a.region, 1);
    fill(&fast.a.region, 2);
    slow.write(1, 0, 64 * 4096, 0, None);
    for i in 0..50u64 {
        fast.write(
            i,
            0,
            16 * 4096,
            (i as usize % 8) * 16 * 4096,
            Some(i as u32),
        );
    }
    let step = Duration::from_micros(100);
    let mut t = Duration::ZERO;
    while t < Duration::from_millis(10) {
        slow.drive_for(step);
        fast.drive_for(step);
        let now = slow.now.max(fast.now);
        slow.now = now;
        fast.now = now;
        t += step;
    }
    assert_eq!(
        fast.a.completions.len(),
        50,
        "the other queue pair kept completing"
    );
    assert_eq!(fast.b.completions.len(), 50);
    assert!(
        slow.a.completions.is_empty(),
        "the faulting one is still held"
    );
    assert!(slow.b.engine.stats().faults >= 1 && !slow.pager.is_empty());
    slow.drive();
    assert_eq!(slow.a.completions.len(), 1);
    assert_eq!(slow.a.completions[0].status, Status::Success);
}
