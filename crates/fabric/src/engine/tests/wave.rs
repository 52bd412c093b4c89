//! PART's page-in wave on virtual time: packets waiting behind its front, the reorder window
//! filling, the pace a fault NAK advertises, TO and NTO behind a wave, losses and failures
//! mid-wave, and PIO and PI4 with the window on.
use super::part::{aligned_offset, naks_from_b, part, part_pair, write_fresh};
use super::*;

/// The wave: PART with a reorder window of `reorder` packets.
fn wave(fault_timeout: Option<Duration>, reorder: u32) -> PartConfig {
    PartConfig {
        policy: PageInPolicy::Pia,
        fault_timeout,
        reorder,
        ..PartConfig::default()
    }
}

/// When a's last WRITE completed, from the first packet sent.
fn took(p: &Pair) -> Duration {
    let first = p.trace.first().expect("something was sent").0;
    let last_ack = p
        .trace
        .iter()
        .filter(|t| !t.1 && matches!(t.4, Some(Syndrome::Ack { .. })))
        .map(|t| t.0)
        .max()
        .expect("an ACK");
    last_ack - first
}

#[test]
fn a_wave_places_the_transfer_behind_its_front_without_stopping_the_sender() {
    // 64 pages at 3 µs each, in pieces of 16: the window of 256 takes every packet.
    let mut p = part_pair(wave(None, 256));
    let off = write_fresh(&mut p, 64 * 4096);
    let b = p.b.engine.stats();
    assert_eq!(naks_from_b(&p), [], "no fault NAK, no ERR");
    assert_eq!((b.faults, b.page_ins, b.pages_in), (1, 1, 64), "{b:?}");
    assert_eq!(b.wave_holds, 64, "every packet waited once: {b:?}");
    assert_eq!((b.held_drops, b.fault_naks), (0, 0));
    assert_eq!(p.a.engine.stats().retransmits, 0);
    assert!(!p.b.region.is_resident(off + 64 * 4096, 1));
    // The ACK of the last packet leaves as the wave ends: 5 µs there, then 6 µs + 64 × 3 µs of
    // page-in. The paper's protocol waits for the whole page-in, then the ERR goes and
    // everything comes again: a round trip more even on this link, which carries any number of
    // packets at once.
    assert_eq!(took(&p), Duration::from_micros(5 + 6 + 192));
    let mut paper = part_pair(part(PageInPolicy::Pia, None));
    write_fresh(&mut paper, 64 * 4096);
    assert_eq!(took(&paper), took(&p) + 2 * p.latency);
    assert_eq!(paper.b.engine.stats().held_drops, 63);
}

#[test]
fn a_full_window_stops_the_sender_at_the_exact_psn_with_the_pace_of_the_wave() {
    // Window of 8: packets 8.. overtake it. With a fault timeout, the sender resumes at the
    // advertised pace, not at its 1 ms timeout, and never needs the ERR.
    let mut p = part_pair(wave(Some(Duration::from_millis(1)), 8));
    write_fresh(&mut p, 64 * 4096);
    let (a, b) = (p.a.engine.stats(), p.b.engine.stats());
    let naks = naks_from_b(&p);
    assert_eq!(naks.first(), Some(&("fault", 8)), "{naks:?}");
    // Every stop is at a PSN the window could not take, never behind the last one.
    assert!(naks.windows(2).all(|w| w[0].1 <= w[1].1), "{naks:?}");
    assert!(a.paced_resumes >= 1, "{a:?}");
    assert_eq!(a.fault_timeouts, 0, "{a:?}");
    assert_eq!(b.page_ins, 1, "one wave: {b:?}");
    // The pace carried by the first fault NAK: about the page-in time of packets 0..=8.
    let pace = p
        .trace
        .iter()
        .find(|t| {
            !t.1 && t.4
                == Some(Syndrome::RnrNak {
                    timer: FAULT_RNR_TIMER,
                })
        })
        .map(|t| t.3);
    assert_eq!(pace, Some(8), "the NAK names PSN 8");
    assert!(
        took(&p) < Duration::from_millis(1),
        "never waited for the timeout"
    );
}

#[test]
fn without_a_timeout_a_stopped_sender_waits_for_the_err_after_the_whole_wave() {
    let mut p = part_pair(wave(None, 8));
    write_fresh(&mut p, 64 * 4096);
    let naks = naks_from_b(&p);
    assert_eq!(naks.first(), Some(&("fault", 8)), "{naks:?}");
    let a = p.a.engine.stats();
    assert_eq!(
        (a.errs_received, a.paced_resumes, a.fault_timeouts),
        (1, 0, 0)
    );
    // The ERR went once the page-in was complete: 5 + 6 + 192 µs after the first packet.
    let first = p.trace[0].0;
    let err = p
        .trace
        .iter()
        .find(|t| !t.1 && t.4 == Some(Syndrome::Nak(NakCode::PsnSequenceError)))
        .expect("an ERR");
    assert_eq!(
        (err.3, err.0 - first),
        (8, Duration::from_micros(5 + 6 + 192))
    );
}

#[test]
fn a_resend_racing_the_wave_waits_in_the_window() {
    // The pace is a guess until the worker reports (1.1 µs a page, the pager takes 3): the
    // paced resend overtakes the wave and waits in the window instead of being NAKed again.
    let mut p = part_pair(wave(Some(Duration::from_micros(500)), 8));
    write_fresh(&mut p, 64 * 4096);
    let (a, b) = (p.a.engine.stats(), p.b.engine.stats());
    assert!(a.paced_resumes >= 1, "{a:?}");
    assert!(b.wave_holds > 8, "resent packets waited too: {b:?}");
}

#[test]
fn a_lost_packet_behind_the_window_stops_the_sender_without_acknowledging_what_waits() {
    let mut p = part_pair(wave(None, 256));
    fill(&p.a.region, 7);
    let off = aligned_offset(&p);
    p.write(1, 0, 16 * 4096, off, None);
    p.transmit();
    // Packet 3 is lost on the way.
    let lost = p
        .flight
        .iter()
        .position(|f| Repr::parse(&f.2).unwrap().0.bth.psn.value() == 3)
        .unwrap();
    p.flight.remove(lost);
    p.drive();
    assert_eq!(
        bytes(&p.b.region, off, 16 * 4096),
        bytes(&p.a.region, 0, 16 * 4096)
    );
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.a.completions[0].status, Status::Success);
    let naks = naks_from_b(&p);
    assert_eq!(naks.first(), Some(&("fault", 3)), "{naks:?}");
    // Nothing was acknowledged past what was placed: no ACK of PSN 3 or later before it came
    // again.
    let resent_at = p
        .trace
        .iter()
        .filter(|t| t.1 && t.3 == 3)
        .nth(1)
        .expect("PSN 3 sent again")
        .0;
    assert!(p
        .trace
        .iter()
        .filter(|t| !t.1 && t.0 < resent_at && matches!(t.4, Some(Syndrome::Ack { .. })))
        .all(|t| Psn::new(t.3).add(1).diff(Psn::new(3)) <= 0));
}

#[test]
fn a_page_in_failing_mid_wave_fails_the_write_and_the_responder_keeps_serving() {
    let mut p = part_pair(wave(None, 256));
    fill(&p.a.region, 1);
    p.write(1, 0, 32 * 4096, 0, None);
    p.transmit();
    let now = p.now + p.latency;
    for (_, _, pkt) in p.flight.drain(..).collect::<Vec<_>>() {
        p.b.engine.handle(now, &pkt);
    }
    let req = p.b.engine.poll_page_in().expect("a page-in request");
    // The first piece comes in; then the page server goes away.
    req.region.page_in_range(req.offset, 64 << 10).unwrap();
    p.b.engine.page_in_progress(now, req.id, 64 << 10);
    p.b.engine
        .page_in_done(now, req.id, Err("the page server is gone".into()));
    p.now = now;
    p.drive();
    assert_eq!(p.a.completions.len(), 1);
    assert_eq!(p.a.completions[0].status, Status::RemoteOperationalError);
    let b = p.b.engine.stats();
    assert_eq!(b.wave_holds, 32, "{b:?}");
    // The first piece's 16 packets went in; nothing after them.
    assert!(p.b.region.is_resident(0, 16 * 4096));
    assert!(!p.b.region.is_resident(16 * 4096, 4096));
    // Another queue pair of b's device, its memory resident, is served as before.
    let mut q = part_pair(wave(None, 256));
    q.b.region.page_in_range(0, 4 * 4096).unwrap();
    write_fresh(&mut q, 4 * 4096);
}

#[test]
fn a_pi4_wave_is_the_block_and_the_next_block_starts_the_next_wave() {
    let mut p = part_pair(PartConfig {
        policy: PageInPolicy::Pi4,
        ..PartConfig::default()
    });
    write_fresh(&mut p, 8 * 4096);
    let b = p.b.engine.stats();
    assert_eq!(naks_from_b(&p), [], "the window took both blocks' packets");
    assert_eq!(
        (b.faults, b.page_ins, b.pages_in, b.wave_holds),
        (2, 2, 8, 8)
    );
}
