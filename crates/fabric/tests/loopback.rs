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

#[test]
fn progress_poll_on_tcp_is_refused_with_the_reason() {
    let pd = Arc::new(Pd::new());
    let opts = QpOptions {
        transport: Transport::Tcp,
        progress: Progress::Poll,
        ..QpOptions::default()
    };
    let e = connect("127.0.0.1:9".parse().unwrap(), pd, opts, &[])
        .err()
        .expect("refused");
    assert!(e.to_string().contains("progress poll"), "{e}");
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
