//! Both ends in one process over real sockets on loopback: every transport, every operation,
//! every byte checked.
mod common;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use remora_fabric::{
    connect, Listener, Progress, QpOptions, QpType, RegionInfo, Status, Transport, WcOpcode,
};
use remora_mem::Pd;

fn exercise(transport: Transport, mtu: usize) {
    exercise_on(transport, mtu, false)
}

fn exercise_on(transport: Transport, mtu: usize, memfd: bool) {
    let (c, s) = pair_on(transport, QpType::Rc, mtu, memfd);
    exercise_pair(c, s, mtu, transport);
}

fn exercise_pair(c: End, s: End, mtu: usize, transport: Transport) {
    // WRITE with immediate, several sizes, to distinct places.
    let sizes = [1usize, 100, mtu, mtu + 1, 65_536, 1 << 20];
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
        off += n;
    }
    for (i, &n) in sizes.iter().enumerate() {
        let done = wait(&c.qp);
        assert_eq!(
            (done.wr_id, done.status, done.opcode),
            (i as u64, Status::Success, WcOpcode::Write)
        );
        let got = wait(&s.qp);
        assert_eq!(got.opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!((got.imm, got.byte_len as usize), (Some(i as u32), n));
    }
    assert_eq!(
        bytes(&s.region, 0, off),
        bytes(&c.region, 0, off),
        "{transport} WRITE bytes"
    );
    // READ back from the server into another part of the client region.
    let back = 2 << 20;
    c.qp.post_read(
        100,
        &c.region,
        back,
        1 << 20,
        c.peer.addr + 12345,
        c.peer.rkey,
    )
    .unwrap();
    let done = wait(&c.qp);
    assert_eq!(
        (done.wr_id, done.status, done.opcode),
        (100, Status::Success, WcOpcode::Read)
    );
    assert_eq!(
        bytes(&c.region, back, 1 << 20),
        bytes(&s.region, 12345, 1 << 20),
        "{transport} READ bytes"
    );
    // SEND into a posted receive buffer, both directions.
    s.qp.post_recv(7, &s.region, 3 << 20, 100_000).unwrap();
    c.qp.post_send(8, &c.region, 500, 70_000, Some(99)).unwrap();
    assert_eq!(wait(&c.qp).status, Status::Success);
    let r = wait(&s.qp);
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.imm),
        (7, WcOpcode::Recv, 70_000, Some(99))
    );
    assert_eq!(
        bytes(&s.region, 3 << 20, 70_000),
        bytes(&c.region, 500, 70_000)
    );
    // The server writes to the client too.
    s.qp.post_write(
        9,
        &s.region,
        0,
        300_000,
        s.peer.addr + 100,
        s.peer.rkey,
        None,
    )
    .unwrap();
    assert_eq!(wait(&s.qp).status, Status::Success);
    assert_eq!(bytes(&c.region, 100, 300_000), bytes(&s.region, 0, 300_000));
    // A wrong key is refused with an error completion; the responder keeps serving.
    c.qp.post_write(
        10,
        &c.region,
        0,
        10,
        c.peer.addr,
        c.peer.rkey ^ 0xff00,
        None,
    )
    .unwrap();
    assert_eq!(wait(&c.qp).status, Status::RemoteAccessError);
    assert_eq!(s.qp.stats().engine.access_errors, 1);
    s.qp.post_read(11, &s.region, 0, 4096, s.peer.addr, s.peer.rkey)
        .unwrap();
    assert_eq!(wait(&s.qp).status, Status::Success);
}

#[test]
fn udp_rc_moves_every_byte() {
    exercise(Transport::Udp, 4096);
}

#[test]
fn udp_rc_small_mtu_moves_every_byte() {
    exercise(Transport::Udp, 1024);
}

#[test]
fn tcp_rc_moves_every_byte() {
    exercise(Transport::Tcp, 4096);
}

#[test]
fn shm_rc_moves_every_byte() {
    exercise(Transport::Shm, 4096);
}

#[test]
fn shm_rc_with_memfd_regions_moves_every_byte() {
    exercise_on(Transport::Shm, 4096, true);
}

#[test]
fn udp_rc_moves_every_byte_with_progress_in_the_callers_thread() {
    for mtu in [4096, 1024] {
        // The server writes to the client too: the client needs a thread that polls while
        // the test waits on the server.
        let (c, s) = pair_with(Transport::Udp, QpType::Rc, mtu, false, Progress::Poll);
        exercise_pair(c.pumped(), s, mtu, Transport::Udp);
    }
}

#[test]
fn a_polled_requester_talks_to_a_threaded_responder_and_back() {
    let opts = |progress| QpOptions {
        progress,
        ..QpOptions::default()
    };
    let (c, s) = join(opts(Progress::Thread), 1, opts(Progress::Poll), false);
    exercise_pair(c.pumped(), s, 4096, Transport::Udp);
    let (c, s) = join(opts(Progress::Poll), 1, opts(Progress::Thread), false);
    exercise_pair(c, s, 4096, Transport::Udp);
}

#[test]
fn uc_with_progress_in_the_callers_thread_delivers_every_immediate() {
    let (c, s) = pair_with(Transport::Udp, QpType::Uc, 4096, false, Progress::Poll);
    for i in 0..50u32 {
        c.qp.post_write(
            i as u64,
            &c.region,
            0,
            20_000,
            c.peer.addr + i as u64 * 20_000,
            c.peer.rkey,
            Some(i),
        )
        .unwrap();
        assert_eq!(wait(&c.qp).status, Status::Success);
    }
    for i in 0..50u32 {
        assert_eq!(wait(&s.qp).imm, Some(i));
    }
}

#[test]
fn busy_polling_spins_progress_and_finds_the_completion() {
    let (c, s) = pair_with(Transport::Udp, QpType::Rc, 4096, false, Progress::Poll);
    for i in 0..200u64 {
        c.qp.post_write(i, &c.region, 0, 8, c.peer.addr, c.peer.rkey, Some(i as u32))
            .unwrap();
        // The client's spin alone drives the client (the first WRITE into a page the server
        // has not mapped yet is held and resumed by an ERR that only this spin receives).
        let done = c.qp.spin(Duration::from_secs(10)).expect("completion");
        assert_eq!((done.wr_id, done.status), (i, Status::Success));
        let got = s.qp.spin(Duration::from_secs(10)).expect("arrival");
        assert_eq!(got.imm, Some(i as u32));
    }
}

/// tcp and shm drive the same engine as udp: with progress in the caller's thread every
/// operation (WRITE, WRITE+imm, READ, SEND, an access error) moves every byte, and a polled
/// end talks to a threaded one both ways.
#[test]
fn stream_transports_move_every_byte_with_progress_in_the_callers_thread() {
    for transport in [Transport::Tcp, Transport::Shm] {
        let (c, s) = pair_with(transport, QpType::Rc, 4096, false, Progress::Poll);
        exercise_pair(c.pumped(), s, 4096, transport);
        let opts = |progress| QpOptions {
            transport,
            progress,
            ..QpOptions::default()
        };
        let (c, s) = join(opts(Progress::Thread), 1, opts(Progress::Poll), false);
        exercise_pair(c.pumped(), s, 4096, transport);
        let (c, s) = join(opts(Progress::Poll), 1, opts(Progress::Thread), false);
        exercise_pair(c, s, 4096, transport);
    }
}

/// A refused access over tcp is the engine's NAK: remote access error (0x62) for a wrong key
/// or a range past the region, counted on both sides, and the RC queue pair is in error after.
#[test]
fn tcp_access_errors_are_the_engines_naks_in_both_progress_modes() {
    for progress in [Progress::Thread, Progress::Poll] {
        for bad in 0..2 {
            let (c, s) = pair_with(Transport::Tcp, QpType::Rc, 4096, false, progress);
            let (va, rkey) = match bad {
                0 => (c.peer.addr, c.peer.rkey ^ 0x0100),
                _ => (c.peer.addr + c.peer.len - 4, c.peer.rkey),
            };
            c.qp.post_read(1, &c.region, 0, 64, va, rkey).unwrap();
            // The NAK may already have put the queue pair in error (a progress thread took
            // it): then the WRITE is refused at once, else it completes flushed.
            let second =
                c.qp.post_write(2, &c.region, 0, 8, c.peer.addr, c.peer.rkey, None);
            let d = wait(&c.qp);
            assert_eq!(
                (d.wr_id, d.status),
                (1, Status::RemoteAccessError),
                "{progress}"
            );
            if second.is_ok() {
                assert_eq!(
                    wait(&c.qp).status,
                    Status::Flushed,
                    "{progress}: what follows"
                );
            }
            assert!(c
                .qp
                .post_write(3, &c.region, 0, 8, c.peer.addr, c.peer.rkey, None)
                .is_err());
            let st = s.qp.stats().engine;
            // As on udp, the WRITE behind the refused READ finds the responder still expecting
            // the READ's PSN: a PSN sequence NAK, which the failed requester ignores.
            assert_eq!(st.access_errors, 1, "{progress}: {st:?}");
            assert!(st.naks_sent >= 1, "{progress}: {st:?}");
            assert!(c.qp.stats().engine.naks_received >= 1);
        }
    }
}

/// Busy polling a tcp queue pair drives its socket: each side spins, nobody else reads.
#[test]
fn tcp_busy_polling_drives_the_stream_itself() {
    let (c, s) = pair_with(Transport::Tcp, QpType::Rc, 4096, false, Progress::Poll);
    let s = Arc::new(s);
    let s2 = s.clone();
    let echo = thread::spawn(move || {
        for i in 0..200u32 {
            let got = s2.qp.spin(Duration::from_secs(10)).expect("arrival");
            assert_eq!(got.imm, Some(i));
            s2.qp
                .post_write(
                    u64::from(i),
                    &s2.region,
                    0,
                    8,
                    s2.peer.addr,
                    s2.peer.rkey,
                    Some(i),
                )
                .unwrap();
            let d = s2.qp.spin(Duration::from_secs(10)).expect("own completion");
            assert_eq!(d.status, Status::Success);
        }
    });
    for i in 0..200u32 {
        c.qp.post_write(
            u64::from(i),
            &c.region,
            0,
            8,
            c.peer.addr,
            c.peer.rkey,
            Some(i),
        )
        .unwrap();
        let mut got = Vec::new();
        while got.len() < 2 {
            got.extend(c.qp.spin(Duration::from_secs(10)));
        }
        assert!(got
            .iter()
            .any(|g| g.opcode == WcOpcode::RecvRdmaWithImm && g.imm == Some(i)));
    }
    echo.join().unwrap();
    assert_eq!(c.qp.stats().engine.retransmits, 0, "a stream never resends");
}

/// With `lazy_ack`, a busy-polling round holds a lone ACK back so that the caller's next post
/// carries it; it must still leave on the caller's next call when nothing is posted, and before
/// the caller sleeps.
#[test]
fn lazy_acks_go_out_on_the_next_spin_or_before_a_sleep() {
    let opts = QpOptions {
        transport: Transport::Tcp,
        qp_type: QpType::Rc,
        progress: Progress::Poll,
        lazy_ack: true,
        ..QpOptions::default()
    };
    // The server end (pumped) writes; the client end only receives and never posts.
    let (c, s) = common::join(opts.clone(), 1, opts, false);
    let (done, acked) = std::sync::mpsc::channel();
    let (go, next) = std::sync::mpsc::channel::<()>();
    let requester = thread::spawn(move || {
        for i in 1..=2u32 {
            if i == 2 {
                next.recv().unwrap();
            }
            s.qp.post_write(
                u64::from(i),
                &s.region,
                0,
                8,
                s.peer.addr,
                s.peer.rkey,
                Some(i),
            )
            .unwrap();
            let wc = s.qp.wait(Duration::from_secs(5)).unwrap();
            assert_eq!(wc.expect("the WRITE's ACK came").status, Status::Success);
            done.send(i).unwrap();
        }
    });
    let got = c.qp.spin(Duration::from_secs(10)).expect("first arrival");
    assert_eq!(got.imm, Some(1));
    // Busy polling that never posts: the held ACK leaves on a later spin.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while acked.try_recv().is_err() {
        assert!(c.qp.spin(Duration::from_millis(1)).is_none());
        assert!(
            std::time::Instant::now() < deadline,
            "ACK 1 held while spinning"
        );
    }
    go.send(()).unwrap();
    let got = c.qp.spin(Duration::from_secs(10)).expect("second arrival");
    assert_eq!(got.imm, Some(2));
    // A blocking wait right after an arrival: the held ACK leaves before the sleep.
    assert!(c.qp.wait(Duration::from_millis(300)).unwrap().is_none());
    assert_eq!(acked.recv_timeout(Duration::from_secs(5)), Ok(2));
    requester.join().unwrap();
}

#[test]
fn a_listener_owns_the_roce_port_from_the_start_and_requesters_do_not_take_it() {
    // A loopback address of this test's own: no other test's listener competes for its 4791.
    let ip: std::net::IpAddr = "127.0.0.98".parse().unwrap();
    let spd = Arc::new(Pd::new());
    let mr = region_on(&spd, 3, false);
    let l = Listener::bind((ip, 0).into(), spd.clone(), QpOptions::default()).unwrap();
    let dev = l.udp_device(ip).expect("bound when the listener started");
    assert_eq!(dev.port(), 4791);
    // A second listener on the address finds 4791 taken, falls back and says where it went.
    let other = Listener::bind((ip, 0).into(), spd, QpOptions::default()).unwrap();
    let fallback = other.udp_device(ip).unwrap();
    assert_ne!(fallback.port(), 4791);
    drop(other);
    let addr = l.local_addr();
    let info = RegionInfo::of(&mr).encode();
    let server = thread::spawn(move || l.accept(&info).unwrap());
    let cpd = Arc::new(Pd::new());
    let cmr = region_on(&cpd, 4, false);
    let (qp, p) = connect(addr, cpd, QpOptions::default(), &[]).unwrap();
    let (_sqp, _) = server.join().unwrap();
    assert_eq!(
        qp.udp_peer(),
        Some(dev),
        "requests go to the responder's 4791"
    );
    assert_ne!(
        qp.udp_device().unwrap().port(),
        4791,
        "a requester leaves 4791 alone"
    );
    let peer = RegionInfo::decode(&p).unwrap();
    qp.post_write(1, &cmr, 0, 4096, peer.addr, peer.rkey, None)
        .unwrap();
    assert_eq!(wait(&qp).status, Status::Success);
    assert_eq!(bytes(&mr, 0, 4096), bytes(&cmr, 0, 4096));
}

fn lossy_pair(qp_type: QpType, loss: f64, progress: Progress) -> (End, End) {
    let faults = |seed| remora_fabric::Faults {
        loss,
        duplicate: 0.02,
        reorder: 0.02,
        seed,
    };
    let opts = QpOptions {
        transport: Transport::Udp,
        qp_type,
        mtu: 1024,
        retry_timeout: Duration::from_millis(5),
        retry_count: 12,
        progress,
        ..QpOptions::default()
    };
    join(
        QpOptions {
            faults: Some(faults(7)),
            ..opts.clone()
        },
        1,
        QpOptions {
            faults: Some(faults(11)),
            ..opts
        },
        false,
    )
}

#[test]
fn udp_rc_delivers_exactly_once_in_order_through_loss_duplication_and_reordering() {
    for progress in [Progress::Thread, Progress::Poll] {
        lossy_rc(progress);
    }
}

/// With `Progress::Poll` the retransmission timers run in the threads that wait: the test's
/// own for the client, the pump for the server.
fn lossy_rc(progress: Progress) {
    let (c, s) = lossy_pair(QpType::Rc, 0.05, progress);
    let n = 40;
    let size = 50_000;
    for i in 0..n {
        c.qp.post_write(
            i,
            &c.region,
            i as usize * size,
            size,
            c.peer.addr + i * size as u64,
            c.peer.rkey,
            Some(i as u32),
        )
        .unwrap();
    }
    c.qp.post_read(
        1000,
        &c.region,
        3 << 20,
        500_000,
        c.peer.addr + 3_000_000,
        c.peer.rkey,
    )
    .unwrap();
    for i in 0..n {
        let w = wait(&c.qp);
        assert_eq!((w.wr_id, w.status), (i, Status::Success));
        let imm = wait(&s.qp);
        assert_eq!(imm.imm, Some(i as u32), "immediates arrive once, in order");
    }
    let r = wait(&c.qp);
    assert_eq!((r.wr_id, r.status), (1000, Status::Success));
    let total = n as usize * size;
    assert_eq!(bytes(&s.region, 0, total), bytes(&c.region, 0, total));
    assert_eq!(
        bytes(&c.region, 3 << 20, 500_000),
        bytes(&s.region, 3_000_000, 500_000)
    );
    assert!(
        s.qp.wait(Duration::from_millis(200)).unwrap().is_none(),
        "no duplicate arrivals"
    );
    let st = c.qp.stats().engine;
    assert!(
        st.retransmits > 0,
        "losses were recovered by retransmission: {st:?}"
    );
}

#[test]
fn udp_uc_drops_damaged_messages_and_counts_them() {
    let (c, s) = lossy_pair(QpType::Uc, 0.05, Progress::Thread);
    for i in 0..100u64 {
        c.qp.post_write(
            i,
            &c.region,
            0,
            8192,
            c.peer.addr + i * 8192,
            c.peer.rkey,
            Some(i as u32),
        )
        .unwrap();
        assert_eq!(wait(&c.qp).status, Status::Success);
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut arrived = Vec::new();
    while let Some(x) = s.qp.wait(Duration::from_millis(50)).unwrap() {
        arrived.push(x.imm.unwrap());
    }
    let st = s.qp.stats().engine;
    assert!(
        arrived.len() < 100,
        "5% packet loss must cost some of 100 eight-packet messages"
    );
    assert!(
        arrived.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicates: {arrived:?}"
    );
    assert!(st.uc_messages_dropped + st.uc_packets_dropped > 0, "{st:?}");
    for &i in &arrived {
        let off = i as usize * 8192;
        assert_eq!(
            bytes(&s.region, off, 8192),
            bytes(&c.region, 0, 8192),
            "message {i} intact"
        );
    }
}

/// A responder that drops its queue pair as soon as it sees a SEND arrive must still have
/// acknowledged it: the requester's SEND completes as a success, not flushed. (The stream
/// transports once shut both directions at once on close and lost that last ACK about one time
/// in six.)
#[test]
fn a_responder_closing_right_after_a_send_still_acknowledges_it() {
    for transport in [Transport::Shm, Transport::Tcp, Transport::Udp] {
        for round in 0..20 {
            let (c, s) = pair(transport, QpType::Rc, 4096);
            s.qp.post_recv(1, &s.region, 0, 4096).unwrap();
            c.qp.post_send(7, &c.region, 0, 64, None).unwrap();
            let got = wait(&s.qp);
            assert_eq!(got.status, Status::Success);
            drop(s);
            let done = wait(&c.qp);
            assert_eq!(
                (done.wr_id, done.status),
                (7, Status::Success),
                "{transport}, round {round}"
            );
        }
    }
}

/// Regression: a UC completion over a stream said how many engine packets had arrived in
/// sequence (a few, at the 1 MiB stream MTU), and a receiver that checks it against the
/// packets the negotiated MTU would take saw every frame as partial. A stream has no gaps.
#[test]
fn uc_over_a_stream_reports_every_completion_in_sequence() {
    for transport in [Transport::Tcp, Transport::Shm] {
        let (c, s) = pair(transport, QpType::Uc, 4096);
        c.qp.post_write(1, &c.region, 0, 100_000, c.peer.addr, c.peer.rkey, Some(4))
            .unwrap();
        assert_eq!(wait(&c.qp).status, Status::Success);
        let got = wait(&s.qp);
        assert_eq!(
            (got.imm, got.in_sequence),
            (Some(4), u32::MAX),
            "{transport}"
        );
    }
}
