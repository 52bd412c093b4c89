//! Two engines on virtual time, exact and without sockets: the harness (a virtual link with
//! latency and injected faults, a virtual page-in worker, a packet trace); the protocol tests
//! are in `protocol` and `lossy`, the page-fault (PART) tests in `part`.
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
    engine: QpProtocol,
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
    /// The page-in worker: the next piece of a request done at an instant, for b (true) or a,
    /// with the bytes already in and the pages they made resident.
    pager: Vec<(Instant, bool, PageInRequest, usize, usize)>,
    /// Bytes per piece the worker reports (the udp driver's [`crate::udp`] piece).
    page_in_piece: usize,
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
        engine: QpProtocol::new(cfg, pd.clone()),
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
            page_in_piece: 64 << 10,
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
        let mtu = self.a.engine.config().mtu.max(self.b.engine.config().mtu);
        let mut buf = vec![0u8; mtu + 64];
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
                    let pages = r.len.min(self.page_in_piece).div_ceil(4096) as u32;
                    let at = self.now + self.page_in_fixed + self.page_in_per_page * pages;
                    self.pager.push((at, is_b, r, 0, 0));
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
            let (due, rest): (Vec<_>, Vec<_>) = self.pager.drain(..).partition(|f| f.0 <= self.now);
            self.pager = rest;
            for (_, is_b, r, done, pages) in due {
                // One worker piece: populate it, then report the front or the end.
                let s = if is_b { &mut self.b } else { &mut self.a };
                let n = self.page_in_piece.min(r.len - done);
                match r.region.page_in_range(r.offset + done, n) {
                    Ok(got) if done + n < r.len => {
                        s.engine.page_in_progress(self.now, r.id, done + n);
                        let next = self.page_in_piece.min(r.len - done - n);
                        let at = self.now + self.page_in_per_page * next.div_ceil(4096) as u32;
                        self.pager.push((at, is_b, r, done + n, pages + got));
                    }
                    Ok(got) => s.engine.page_in_done(self.now, r.id, Ok(pages + got)),
                    Err(e) => s.engine.page_in_done(self.now, r.id, Err(e.to_string())),
                }
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

mod lossy;
mod part;
mod protocol;
mod wave;
