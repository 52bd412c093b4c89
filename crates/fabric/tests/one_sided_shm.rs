//! One-sided shm between two queue pairs in one process: WRITE, WRITE-with-immediate and READ
//! into granted memfd regions, what was not granted, ring wrap-around, and a peer that goes.
mod common;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use remora_fabric::{
    connect, Listener, Progress, QpOptions, RegionInfo, Status, Transport, WcOpcode,
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
