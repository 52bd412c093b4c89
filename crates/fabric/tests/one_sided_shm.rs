//! One-sided shm between two queue pairs in one process: WRITE, WRITE-with-immediate and READ
//! into granted memfd regions, what was not granted, ring wrap-around, and a peer that goes.
mod common;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use remora_fabric::{
    connect, Listener, Progress, QpOptions, QpType, RegionInfo, Status, Transport, WcOpcode,
};
use remora_mem::{Buffer, Mode, Pd};

/// A pair over shm whose regions are memfds (granted for one-sided access at setup), with
/// `progress` on both sides.
fn shm_pair(progress: Progress) -> (End, End) {
    let opts = QpOptions {
        transport: Transport::Shm,
        progress,
        ..QpOptions::default()
    };
    let (c, s) = join(opts.clone(), 5, opts, true);
    await_grants(&c);
    await_grants(&s);
    (c, s)
}

/// The grants travel in the first frames after setup: writes one byte (to offset 0, which the
/// tests overwrite) until one of them goes one-sided.
fn await_grants(e: &End) {
    let t0 = std::time::Instant::now();
    while e.qp.stats().engine.one_sided == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "grants never arrived"
        );
        e.qp.post_write(u64::MAX, &e.region, 0, 1, e.peer.addr, e.peer.rkey, None)
            .unwrap();
        assert_eq!(wait(&e.qp).status, Status::Success);
    }
}

#[test]
fn one_sided_shm_writes_reads_and_signals_every_byte_in_both_progress_modes() {
    for progress in [Progress::Thread, Progress::Poll] {
        let (c, s) = shm_pair(progress);
        // Setup grants arrive with the first frames: wait until the client sees them.
        let sizes = [1usize, 8, 4095, 4096, 65_537, 1 << 20];
        let mut off = 0;
        for (i, &n) in sizes.iter().enumerate() {
            c.qp.post_write(
                i as u64,
                &c.region,
                off,
                n,
                c.peer.addr + off as u64,
                c.peer.rkey,
                Some(i as u32),
            )
            .unwrap();
            assert_eq!(wait(&c.qp).status, Status::Success);
            let got = wait(&s.qp);
            assert_eq!(got.opcode, WcOpcode::RecvRdmaWithImm);
            assert_eq!((got.imm, got.byte_len as usize), (Some(i as u32), n));
            off += n;
        }
        assert_eq!(bytes(&s.region, 0, off), bytes(&c.region, 0, off));
        // Plain WRITE: silent at the target, bytes in place when the requester completes.
        c.qp.post_write(
            50,
            &c.region,
            7,
            3000,
            c.peer.addr + (2 << 20),
            c.peer.rkey,
            None,
        )
        .unwrap();
        assert_eq!(wait(&c.qp).status, Status::Success);
        assert_eq!(bytes(&s.region, 2 << 20, 3000), bytes(&c.region, 7, 3000));
        // READ back into another part of the client's region.
        c.qp.post_read(
            51,
            &c.region,
            3 << 20,
            100_000,
            c.peer.addr + 999,
            c.peer.rkey,
        )
        .unwrap();
        let r = wait(&c.qp);
        assert_eq!(
            (r.wr_id, r.status, r.opcode),
            (51, Status::Success, WcOpcode::Read)
        );
        assert_eq!(
            bytes(&c.region, 3 << 20, 100_000),
            bytes(&s.region, 999, 100_000)
        );
        let st = c.qp.stats().engine;
        let warm = st.tx_packets; // what went through the stream before the grants landed
        assert_eq!(
            st.one_sided,
            sizes.len() as u64 + 2 + 1,
            "{st:?} (after {warm})"
        );
        assert_eq!(s.qp.stats().engine.ring_completions, sizes.len() as u64);
        // The server's direction works the same way.
        s.qp.post_write(
            60,
            &s.region,
            0,
            5000,
            s.peer.addr + 100,
            s.peer.rkey,
            Some(77),
        )
        .unwrap();
        assert_eq!(wait(&s.qp).status, Status::Success);
        assert_eq!(wait(&c.qp).imm, Some(77));
        assert_eq!(bytes(&c.region, 100, 5000), bytes(&s.region, 0, 5000));
    }
}

#[test]
fn one_sided_shm_refuses_what_was_not_granted() {
    let (c, s) = shm_pair(Progress::Thread);
    // Past the end of the granted region: refused on the requester, nothing written.
    let before = bytes(&s.region, LEN - 100, 100);
    c.qp.post_write(
        2,
        &c.region,
        0,
        200,
        c.peer.addr + LEN as u64 - 100,
        c.peer.rkey,
        Some(1),
    )
    .unwrap();
    assert_eq!(wait(&c.qp).status, Status::RemoteAccessError);
    assert_eq!(bytes(&s.region, LEN - 100, 100), before);
    assert!(c.qp.stats().engine.access_errors >= 1);
    assert!(
        s.qp.wait(Duration::from_millis(100)).unwrap().is_none(),
        "no immediate for a refused WRITE"
    );
    // RC after a refused request: the queue pair is in error, as after a NAK.
    assert!(c
        .qp
        .post_write(3, &c.region, 0, 8, c.peer.addr, c.peer.rkey, None)
        .is_err());

    // A region granted for reading only cannot be written, and an address below its base
    // (checked arithmetic) is refused too.
    let spd = Arc::new(Pd::new());
    let ro = spd
        .register(
            Buffer::memfd("remora-ro", 1 << 16).unwrap(),
            remora_mem::Access::REMOTE_READ | remora_mem::Access::LOCAL_WRITE,
            Mode::OnDemand,
        )
        .unwrap();
    ro.write_at(0, &[0xAB; 4096]).unwrap();
    let opts = QpOptions {
        transport: Transport::Shm,
        ..QpOptions::default()
    };
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), spd, opts.clone()).unwrap();
    let addr = listener.local_addr();
    let info = RegionInfo::of(&ro).encode();
    let server = thread::spawn(move || listener.accept(&info).unwrap());
    let cpd = Arc::new(Pd::new());
    let mine = region_on(&cpd, 9, true);
    let (qp, p) = connect(addr, cpd, opts, &[]).unwrap();
    let _keep = server.join().unwrap();
    let peer = RegionInfo::decode(&p).unwrap();
    let t0 = std::time::Instant::now();
    while qp.stats().engine.one_sided == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "grants never arrived"
        );
        qp.post_read(1, &mine, 0, 4096, peer.addr, peer.rkey)
            .unwrap();
        assert_eq!(wait(&qp).status, Status::Success);
    }
    assert_eq!(bytes(&mine, 0, 4096), vec![0xAB; 4096]);
    qp.post_write(2, &mine, 0, 16, peer.addr, peer.rkey, None)
        .unwrap();
    assert_eq!(wait(&qp).status, Status::RemoteAccessError);
    assert_eq!(
        bytes(&ro, 0, 16),
        vec![0xAB; 16],
        "the read-only region is untouched"
    );
}

#[test]
fn one_sided_shm_rings_wrap_and_keep_order_under_a_long_run() {
    for progress in [Progress::Thread, Progress::Poll] {
        let (c, s) = shm_pair(progress);
        // Thousands of immediates (the ring holds 1024) before the server looks: the client
        // waits for room, the server's receive thread drains on the doorbell.
        let n = 5000u32;
        for i in 0..n {
            let off = (i as usize % 512) * 64;
            c.qp.post_write(
                i as u64,
                &c.region,
                off,
                64,
                c.peer.addr + off as u64,
                c.peer.rkey,
                Some(i),
            )
            .unwrap();
        }
        for i in 0..n {
            let d = wait(&c.qp);
            assert_eq!((d.wr_id, d.status), (i as u64, Status::Success));
        }
        for i in 0..n {
            let got = wait(&s.qp);
            assert_eq!(got.imm, Some(i), "{progress}: immediates in order");
        }
        assert!(s.qp.wait(Duration::from_millis(50)).unwrap().is_none());
        let st = s.qp.stats().engine;
        assert!(st.ring_completions > 4000, "{progress}: {st:?}");
    }
}

#[test]
fn one_sided_shm_peer_gone_is_an_error_not_a_hang() {
    for progress in [Progress::Thread, Progress::Poll] {
        let (c, s) = shm_pair(progress);
        c.qp.post_write(1, &c.region, 0, 8, c.peer.addr, c.peer.rkey, Some(1))
            .unwrap();
        assert_eq!(wait(&c.qp).status, Status::Success);
        drop(s);
        // Within a bounded time, posting or completing fails: never a hang, even with the
        // ring full and nobody left to drain it.
        let t0 = std::time::Instant::now();
        let mut failed = false;
        for i in 0..10_000u64 {
            match c.qp.post_write(
                i,
                &c.region,
                0,
                64,
                c.peer.addr,
                c.peer.rkey,
                Some(i as u32),
            ) {
                Err(_) => {
                    failed = true;
                    break;
                }
                Ok(()) => {
                    if let Some(d) = c.qp.wait(Duration::from_secs(5)).unwrap() {
                        if d.status != Status::Success {
                            failed = true;
                            break;
                        }
                    }
                }
            }
            if c.qp.is_closed() && i > 0 {
                failed = true;
                break;
            }
        }
        assert!(failed, "{progress}: the peer's end was noticed");
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
}

#[test]
fn one_sided_shm_grants_only_regions_named_by_their_key() {
    let (c, s) = shm_pair(Progress::Thread);
    let granted = s.qp.stats().engine;
    // A key the client made up: no grant comes back, and the WRITE, which takes the socket,
    // is refused by the server's own check.
    let guess = c.peer.rkey ^ 0x0100;
    c.qp.post_write(1, &c.region, 0, 64, c.peer.addr, guess, None)
        .unwrap();
    assert_eq!(wait(&c.qp).status, Status::RemoteAccessError);
    let st = s.qp.stats().engine;
    assert_eq!(st.access_errors, granted.access_errors + 1, "{st:?}");
    assert_eq!(
        c.qp.stats().engine.one_sided,
        1,
        "only the named region went one-sided"
    );
}

/// Receives of `len` bytes at `base + i * len` in the server's region, wr_id `1000 + i`.
fn post_recvs(s: &End, n: usize, base: usize, len: usize) {
    for i in 0..n {
        s.qp.post_recv(1000 + i as u64, &s.region, base + i * len, len)
            .unwrap();
    }
}

#[test]
fn one_sided_shm_sends_go_through_the_ring_every_byte_in_both_progress_modes() {
    for progress in [Progress::Thread, Progress::Poll] {
        let (c, s) = shm_pair(progress);
        let base = 1 << 20;
        let sizes = [1usize, 8, 100, 4095, 4096];
        post_recvs(&s, sizes.len(), base, 4096);
        for (i, &n) in sizes.iter().enumerate() {
            let imm = (i % 2 == 1).then_some(i as u32 + 40);
            c.qp.post_send(i as u64, &c.region, 3 * i, n, imm).unwrap();
            let d = wait(&c.qp);
            assert_eq!(
                (d.wr_id, d.status, d.opcode),
                (i as u64, Status::Success, WcOpcode::Send)
            );
            let r = wait(&s.qp);
            assert_eq!(
                (r.wr_id, r.status, r.opcode, r.byte_len as usize, r.imm),
                (1000 + i as u64, Status::Success, WcOpcode::Recv, n, imm),
                "{progress}"
            );
            assert_eq!(
                bytes(&s.region, base + i * 4096, n),
                bytes(&c.region, 3 * i, n)
            );
        }
        // SENDs before any receive: they wait in the ring (RNR), then land when posted.
        for i in 0..3u64 {
            c.qp.post_send(10 + i, &c.region, 500 + i as usize, 700, Some(i as u32))
                .unwrap();
        }
        assert!(
            s.qp.wait(Duration::from_millis(100)).unwrap().is_none(),
            "{progress}: nothing without a receive"
        );
        assert!(
            c.qp.poll(&mut Vec::new(), 8) == 0,
            "RC: not complete before placed"
        );
        let base2 = 2 << 20;
        post_recvs(&s, 3, base2, 1000);
        for i in 0..3u64 {
            let r = wait(&s.qp);
            assert_eq!(
                (r.wr_id, r.status, r.byte_len, r.imm),
                (1000 + i, Status::Success, 700, Some(i as u32))
            );
            let at = base2 + i as usize * 1000;
            assert_eq!(
                bytes(&s.region, at, 700),
                bytes(&c.region, 500 + i as usize, 700)
            );
        }
        for i in 0..3u64 {
            let d = wait(&c.qp);
            assert_eq!((d.wr_id, d.status), (10 + i, Status::Success));
        }
        let st = c.qp.stats().engine;
        assert_eq!(st.ring_sends, sizes.len() as u64 + 3, "{progress}: {st:?}");
        assert!(s.qp.stats().engine.ring_completions >= sizes.len() as u64 + 3);
    }
}

#[test]
fn one_sided_shm_send_too_long_fails_as_on_the_stream() {
    // (receive buffer, SEND): through the stream (above a ring cell) and through the ring.
    for (buf, n) in [(4500usize, 5000usize), (50, 100)] {
        let (c, s) = shm_pair(Progress::Thread);
        s.qp.post_recv(7, &s.region, 0, buf).unwrap();
        c.qp.post_send(1, &c.region, 0, n, None).unwrap();
        let r = wait(&s.qp);
        assert_eq!(
            (r.wr_id, r.status, r.opcode),
            (7, Status::LocalLengthError, WcOpcode::Recv)
        );
        let d = wait(&c.qp);
        assert_eq!(
            (d.wr_id, d.status),
            (1, Status::RemoteInvalidRequest),
            "{n}"
        );
        // RC after the refusal: the queue pair is in error, as after a NAK.
        assert!(c.qp.post_send(2, &c.region, 0, 8, None).is_err());
        assert_eq!(c.qp.stats().engine.ring_sends, (n <= 4096) as u64);
    }
}

#[test]
fn one_sided_shm_sends_keep_order_with_writes_reads_and_large_sends() {
    for progress in [Progress::Thread, Progress::Poll] {
        let (c, s) = shm_pair(progress);
        let rb = 3 << 20;
        post_recvs(&s, 40, rb, 20_000);
        // (kind, len): 0 WRITE+imm, 1 SEND, 2 READ, 3 SEND above a cell (the stream).
        let plan: Vec<(u8, usize)> = (0..40)
            .map(|i| match i % 7 {
                0 | 4 => (0, 64 + i),
                1 | 5 => (1, 10 * i + 1),
                2 => (2, 4000),
                3 => (1, 4096),
                _ => (3, 5000 + i),
            })
            .collect();
        let mut sends = 0;
        for (i, &(k, n)) in plan.iter().enumerate() {
            let id = i as u64;
            let off = i * 8192;
            match k {
                0 => c.qp.post_write(
                    id,
                    &c.region,
                    off,
                    n,
                    c.peer.addr + off as u64,
                    c.peer.rkey,
                    Some(i as u32),
                ),
                2 => {
                    c.qp.post_read(id, &c.region, off, n, c.peer.addr + off as u64, c.peer.rkey)
                }
                _ => c.qp.post_send(id, &c.region, off, n, Some(i as u32)),
            }
            .unwrap();
            sends += usize::from(k == 1 || k == 3);
        }
        for i in 0..plan.len() {
            let d = wait(&c.qp);
            assert_eq!(
                (d.wr_id, d.status),
                (i as u64, Status::Success),
                "{progress}"
            );
        }
        let mut recv = 0;
        for (i, &(k, n)) in plan.iter().enumerate() {
            if k == 2 {
                assert_eq!(bytes(&c.region, i * 8192, n), bytes(&s.region, i * 8192, n));
                continue;
            }
            let r = wait(&s.qp);
            assert_eq!(
                (r.imm, r.byte_len as usize),
                (Some(i as u32), n),
                "{progress}"
            );
            if k == 0 {
                assert_eq!(r.opcode, WcOpcode::RecvRdmaWithImm);
            } else {
                assert_eq!((r.opcode, r.wr_id), (WcOpcode::Recv, 1000 + recv));
                let at = rb + recv as usize * 20_000;
                assert_eq!(bytes(&s.region, at, n), bytes(&c.region, i * 8192, n));
                recv += 1;
            }
        }
        assert_eq!(recv as usize, sends);
        // The SENDs before the first large one went through the ring; after it, the queue
        // pair's work had the stream to follow.
        let st = c.qp.stats().engine;
        assert!(st.ring_sends >= 2, "{progress}: {st:?}");
    }
}

#[test]
fn one_sided_shm_sends_wrap_the_ring_with_backpressure() {
    for progress in [Progress::Thread, Progress::Poll] {
        let (c, s) = shm_pair(progress);
        let c = Arc::new(c);
        // More SENDs than ring entries and cells, posted before any receive: the poster waits
        // for room while the receiver has none (RNR), then everything lands in order.
        let n = 3000usize;
        let cc = c.clone();
        let poster = thread::spawn(move || {
            for i in 0..n {
                let off = (i % 1000) * 64;
                cc.qp
                    .post_send(i as u64, &cc.region, off, 64, Some(i as u32))
                    .unwrap();
            }
        });
        thread::sleep(Duration::from_millis(200));
        post_recvs(&s, n, 1 << 20, 64);
        for i in 0..n {
            let r = wait(&s.qp);
            assert_eq!(
                (r.wr_id, r.imm),
                (1000 + i as u64, Some(i as u32)),
                "{progress}"
            );
            let off = (i % 1000) * 64;
            assert_eq!(
                bytes(&s.region, (1 << 20) + i * 64, 64),
                bytes(&c.region, off, 64)
            );
        }
        poster.join().unwrap();
        for i in 0..n {
            let d = wait(&c.qp);
            assert_eq!((d.wr_id, d.status), (i as u64, Status::Success));
        }
        assert_eq!(c.qp.stats().engine.ring_sends, n as u64, "{progress}");
    }
}

#[test]
fn one_sided_shm_uc_sends_complete_when_published() {
    let opts = QpOptions {
        transport: Transport::Shm,
        qp_type: remora_fabric::QpType::Uc,
        ..QpOptions::default()
    };
    let (c, s) = join(opts.clone(), 5, opts, true);
    // UC leaves the ring for good once it used the stream: the first request must find the
    // peer's ring (handed over in the first frames).
    thread::sleep(Duration::from_millis(300));
    s.qp.post_recv(9, &s.region, 0, 4096).unwrap();
    c.qp.post_send(1, &c.region, 100, 300, Some(3)).unwrap();
    assert_eq!(wait(&c.qp).status, Status::Success);
    let r = wait(&s.qp);
    assert_eq!((r.wr_id, r.byte_len, r.imm), (9, 300, Some(3)));
    assert_eq!(bytes(&s.region, 0, 300), bytes(&c.region, 100, 300));
    assert_eq!(c.qp.stats().engine.ring_sends, 1);
}

/// Regression (issue 32 item 6): a UC requester that posts its WRITEs and drops its queue pair
/// at once, as an unpaced detector emulator does. Its first WRITE asks for a grant, and the
/// responder's answer met a socket the requester no longer reads (EPIPE): the responder closed
/// its queue pair with the rest of the stream still unread, and the later WRITE-with-immediate
/// completions were lost. What a peer sent before it left is delivered.
#[test]
fn a_uc_requester_that_leaves_right_after_posting_loses_no_immediate() {
    for round in 0..20 {
        let (c, s) = pair_on(Transport::Shm, QpType::Uc, 4096, true);
        c.qp.post_write(0, &c.region, 0, 0, c.peer.addr, c.peer.rkey, Some(100))
            .unwrap();
        for i in 0..4u64 {
            let imm = (i == 3).then_some(101);
            let off = i as usize * (1 << 20);
            c.qp.post_write(
                i + 1,
                &c.region,
                off,
                1 << 20,
                c.peer.addr + off as u64,
                c.peer.rkey,
                imm,
            )
            .unwrap();
        }
        drop(c);
        let mut imms = Vec::new();
        while imms.len() < 2 {
            let Some(got) = s.qp.wait(Duration::from_secs(2)).unwrap() else {
                break;
            };
            assert_eq!(got.opcode, WcOpcode::RecvRdmaWithImm, "round {round}");
            imms.push(got.imm);
        }
        assert_eq!(
            imms,
            [Some(100), Some(101)],
            "round {round}: {:?}",
            s.qp.stats()
        );
    }
}
