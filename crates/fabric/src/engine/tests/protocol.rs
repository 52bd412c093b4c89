//! The queue-pair protocol on virtual time: timeouts, retries, access errors and the stream
//! configuration (loss, duplication and reordering under load are in `lossy`).
use super::*;

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
    q.b.engine = QpProtocol::new(q.b.engine.config().clone(), p.b.pd.clone());
    q.b.region = p.b.region.clone();
    q.read(5, 0, 10, 0);
    q.drive();
    assert_eq!(q.a.completions[0].status, Status::RemoteAccessError);
    // ...while a valid write on a third queue pair still works.
    let (ca, cb) = configs(Service::Rc, 1024, 0, 0);
    let mut r = Pair::with((ca, cb), Access::ALL);
    r.b.engine = QpProtocol::new(r.b.engine.config().clone(), p.b.pd.clone());
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

/// The configuration the stream transports (tcp, shm) drive: one packet per message up to the
/// stream MTU, no retransmission timer (a stream neither loses nor reorders), and a SEND that
/// finds no receive buffer retried past the datagram retry limit until one is posted.
#[test]
fn stream_configuration_sends_whole_messages_arms_no_timer_and_waits_for_receive_buffers() {
    let mut a = EngineConfig::stream(Service::Rc, 0x12, 0x34);
    let mut b = EngineConfig::stream(Service::Rc, 0x34, 0x12);
    (a.send_psn, b.recv_psn) = (Psn::new(5), Psn::new(5));
    (b.send_psn, a.recv_psn) = (Psn::new(0x00FF_FFF0), Psn::new(0x00FF_FFF0));
    let mut p = Pair::with((a, b), Access::ALL);
    fill(&p.a.region, 9);
    p.write(1, 0, REGION, 0, Some(3));
    p.transmit();
    assert_eq!(
        p.a.engine.stats().tx_packets,
        1,
        "a 1 MiB WRITE is one packet"
    );
    assert_eq!(p.a.engine.poll_timeout(), None, "no retransmission timer");
    p.drive();
    assert_eq!(bytes(&p.b.region, 0, REGION), bytes(&p.a.region, 0, REGION));
    assert_eq!(p.b.completions[0].imm, Some(3));
    p.read(2, 0, 300_000, 4096);
    p.drive();
    assert_eq!(
        bytes(&p.a.region, 0, 300_000),
        bytes(&p.b.region, 4096, 300_000)
    );
    // Far more RNR NAKs than a datagram queue pair's rnr_retry (7) allows: still waiting.
    p.send(3, 0, 2000, None);
    p.drive_for(Duration::from_millis(10));
    assert!(
        p.b.engine.stats().naks_sent > 20,
        "{:?}",
        p.b.engine.stats()
    );
    assert_eq!(
        p.a.completions.len(),
        2,
        "the SEND neither completed nor failed"
    );
    p.b.engine
        .post_recv(RecvWr {
            wr_id: 8,
            local: p.b.region.clone(),
            offset: 0,
            len: 4096,
        })
        .unwrap();
    p.drive();
    assert_eq!(p.a.completions[2].status, Status::Success);
    assert_eq!(p.b.completions[1].wr_id, 8);
    let st = p.a.engine.stats();
    assert_eq!((st.timeouts, st.retransmits > 0), (0, true), "{st:?}");
}
