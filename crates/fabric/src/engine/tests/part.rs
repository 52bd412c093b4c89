//! PART on virtual time: faults at the responder, the hold NAK and the ERR, fault timeouts,
//! sources and READ destinations, and the requester's windows after a fault.
use super::*;

/// A pair whose both sides use `part` (the responder's policy, the requester's timeout).
pub(super) fn part_pair(part: PartConfig) -> Pair {
    let (mut ca, mut cb) = configs(Service::Rc, 4096, 0, 0x100);
    ca.part = part;
    cb.part = part;
    Pair::with((ca, cb), Access::ALL)
}

/// The paper's protocol: no reorder window, so every fault stops the sender.
pub(super) fn part(policy: PageInPolicy, fault_timeout: Option<Duration>) -> PartConfig {
    PartConfig {
        policy,
        fault_timeout,
        reorder: 0,
        ..PartConfig::default()
    }
}

/// An offset in b's region whose address is 16 KiB-aligned, so PI4 blocks fall predictably.
pub(super) fn aligned_offset(p: &Pair) -> usize {
    let a = p.b.region.addr() as usize;
    (16384 - a % 16384) % 16384
}

/// The NAKs b sent, in order: ("fault" | "err" | other, PSN relative to a's first).
pub(super) fn naks_from_b(p: &Pair) -> Vec<(&'static str, u32)> {
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
pub(super) fn write_fresh(p: &mut Pair, len: usize) -> usize {
    fill(&p.a.region, 3);
    let off = aligned_offset(p);
    p.write(1, 0, len, off, None);
    p.drive();
    assert_eq!(bytes(&p.b.region, off, len), bytes(&p.a.region, 0, len));
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.a.completions[0].status, Status::Success);
    off
}

/// A PIO page-in is the packet's own page: no wave, so every fault stops the sender, with the
/// reorder window on (`reorder` > 0) as without it.
fn pio_faults_on_every_page(reorder: u32) {
    let mut p = part_pair(PartConfig {
        reorder,
        ..part(PageInPolicy::Pio, None)
    });
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
    assert_eq!((b.out_of_sequence, b.wave_holds), (0, 0));
}

#[test]
fn pio_faults_on_every_page_and_resumes_after_each_err() {
    pio_faults_on_every_page(0);
}

#[test]
fn pio_keeps_the_papers_protocol_with_the_window_on() {
    pio_faults_on_every_page(DEFAULT_REORDER);
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
    assert_eq!(b.page_ins, 1, "asked for once: {b:?}");
    assert!(a.fault_timeouts >= 3, "{a:?}");
    // Every early resend is held again, except one that finds all its pages in.
    assert!(
        b.fault_naks >= a.fault_timeouts && b.fault_naks <= 1 + a.fault_timeouts,
        "{a:?} {b:?}"
    );
    let naks = naks_from_b(&p);
    assert_eq!(naks.first(), Some(&("fault", 0)));
    // Each resend gets in as far as the page-in's front has come, and is held there.
    assert!(naks.windows(2).all(|w| w[0].1 <= w[1].1), "{naks:?}");
    assert!(b.faults > 1 && naks.last().unwrap().1 > 0, "{naks:?}");
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
fn a_resend_after_a_fault_timeout_probes_with_a_small_window() {
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
    // The first timed-out resend was a probe of at most 16 packets, and each one after it at
    // most doubled (an acknowledged probe doubles the window).
    let err_at = p
        .trace
        .iter()
        .find(|t| !t.1 && t.4 == Some(Syndrome::Nak(NakCode::PsnSequenceError)))
        .map(|t| t.0)
        .expect("an ERR");
    let probes: Vec<_> = bursts.iter().skip(1).filter(|b| b.0 < err_at).collect();
    assert!(probes.first().is_some_and(|b| b.1 <= 16), "{probes:?}");
    for w in probes.windows(2) {
        assert!(w[1].1 <= 2 * w[0].1.max(16), "{probes:?}");
    }
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
