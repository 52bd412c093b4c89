//! PART end to end, across two processes: the responder runs in a child process (this test
//! binary re-executed with `--exact part_child_serves`), its region freshly mapped and never
//! touched, so every WRITE lands on pages that are not resident; between rounds the child drops
//! its pages (`Region::evict`) and the parent writes different bytes again. Every byte is
//! checked; over udp the PART counters of both sides are checked too (the stream transports
//! populate a whole message's range before placing and count no faults).
//!
//! Control messages are SENDs on the same queue pair: the parent sends a command (evict,
//! stats, bye) into a receive buffer the child posted; the child answers with a SEND carrying
//! its engine counters.
mod part_common;

use std::time::Duration;

use part_common::child::{serve_if_child, ChildProc};
use part_common::session::{Session, Source};
use part_common::*;
use remora_fabric::{PageInPolicy, Progress, Transport, DEFAULT_REORDER};

/// The child's entry: runs only when re-executed by a parent test (see [`serve_if_child`]).
#[test]
fn part_child_serves() {
    serve_if_child();
}

/// All sizes up to 64 MiB over one transport: a round into never-touched pages, the child's
/// pages dropped, a round with other bytes (READ destinations dropped too), and a round from a
/// never-touched source (zeros over what the child held).
fn all_sizes(transport: Transport, progress: Progress) {
    let child = ChildProc::spawn(PageInPolicy::Pia, 1, progress, DEFAULT_REORDER);
    let mut s = Session::open(transport, child.addr, None, progress);
    let udp = transport == Transport::Udp;

    let before = s.command(EVICT);
    s.round(Source::Pattern(1), &CASES);
    let r0 = s.command(STATS);
    let p0 = s.qp.stats().engine;
    if udp {
        assert!(r0.faults > before.faults, "udp: no fault: {r0:?}");
        // Each fault either waited behind its wave or stopped the sender until the ERR (or,
        // when the pages came in first, until the sender's own timer resent): a loaded machine
        // can keep every packet of a wave in the window. The policy tests, which have no
        // window, check the ERR itself.
        assert!(
            r0.errs_sent + r0.wave_holds > 0,
            "udp: no fault was held or stopped: {r0:?}"
        );
        assert!(r0.pages_in > 0, "udp: no page made resident: {r0:?}");
        assert!(
            p0.source_faults > 0,
            "udp: READs into never-touched pages populate them: {p0:?}"
        );
    }

    // Pages dropped mid-run: what the child held is gone (reads back as zeros), and the next
    // round faults again.
    let e1 = s.command(EVICT);
    let c = CASES[2];
    s.mem.write_at(DST + c.dst, &pattern(0xBAD, c.len)).unwrap();
    let got = s.read(c.remote, c.len, c.dst);
    check_eq(
        &format!("{transport}: READ of evicted pages"),
        &vec![0; c.len],
        &got,
    );
    s.evict_destinations();
    s.round(Source::Pattern(2), &CASES);
    let r1 = s.command(STATS);
    let p1 = s.qp.stats().engine;
    if udp {
        assert!(
            r1.faults > e1.faults,
            "udp: no fault after the pages were dropped: {e1:?} -> {r1:?}"
        );
        // Each fault either waited behind its wave or stopped the sender until the ERR.
        assert!(
            r1.errs_sent + r1.wave_holds > e1.errs_sent + e1.wave_holds,
            "udp: {e1:?} -> {r1:?}"
        );
        assert!(
            r1.source_faults > e1.source_faults,
            "udp: the READ of dropped pages populates them at the responder: {r1:?}"
        );
    }

    // A never-touched source arrives as zeros over what the child holds now.
    s.round(Source::Fresh, &CASES);
    let p2 = s.qp.stats().engine;
    eprintln!("{transport}: child {before:?}\n -> {r0:?}\n -> {e1:?}\n -> {r1:?}");
    eprintln!("{transport}: parent {p0:?}\n -> {p1:?}\n -> {p2:?}");
    if udp {
        assert!(
            p2.source_faults > p1.source_faults,
            "udp: the never-touched source is populated before reading: {p2:?}"
        );
    }
    s.bye();
    child.finish();
}

#[test]
fn udp_part_all_sizes_with_pages_dropped_mid_run() {
    all_sizes(Transport::Udp, Progress::Thread);
}

/// Both processes drive their queue pairs from the threads that wait (no receive thread).
#[test]
fn udp_part_all_sizes_with_progress_in_the_callers_thread() {
    all_sizes(Transport::Udp, Progress::Poll);
}

#[test]
fn shm_all_sizes_with_pages_dropped_mid_run() {
    all_sizes(Transport::Shm, Progress::Thread);
}

#[test]
fn shm_all_sizes_with_progress_in_the_callers_thread() {
    all_sizes(Transport::Shm, Progress::Poll);
}

#[test]
fn tcp_all_sizes_with_pages_dropped_mid_run() {
    all_sizes(Transport::Tcp, Progress::Thread);
}

/// One responder policy of the paper's protocol (no reorder window: every fault stops the
/// sender), with and without a requester fault timeout: 4 KiB, 64 KiB and 1 MiB into
/// never-touched pages, then again after the child dropped them.
fn policy(policy: PageInPolicy) {
    let timeouts = [None, Some(Duration::from_micros(100))];
    let child = ChildProc::spawn(policy, timeouts.len(), Progress::Thread, 0);
    let cases = &CASES[..3];
    let packets_1m = (MIB / 4096) as u64;
    for (k, to) in timeouts.into_iter().enumerate() {
        let mut s = Session::open(Transport::Udp, child.addr, to, Progress::Thread);
        let what = format!("udp {policy} timeout {to:?}");
        for round in 0..2u64 {
            let e = s.command(EVICT);
            s.evict_destinations();
            s.round(Source::Pattern(10 * k as u64 + round + 3), cases);
            if policy == PageInPolicy::Pio {
                // Every packet of the 1 MiB WRITE needs a page the one before did not bring;
                // the READ back finds every page the WRITE placed resident.
                let r = s.command(STATS);
                let (faults, source) = (r.faults - e.faults, r.source_faults - e.source_faults);
                assert!(
                    faults >= packets_1m,
                    "{what} round {round}: {faults} faults, {source} source faults: {e:?} -> {r:?}"
                );
            }
        }
        let r = s.command(STATS);
        let p = s.qp.stats().engine;
        eprintln!("{what}: child {r:?}\n parent {p:?}");
        assert!(
            r.faults > 0 && r.page_ins > 0 && r.pages_in > 0,
            "{what}: {r:?}"
        );
        assert!(r.fault_naks >= r.faults, "{what}: {r:?}");
        match to {
            None => {
                assert!(r.errs_sent > 0, "{what}: {r:?}");
                assert!(p.errs_received > 0, "{what}: {p:?}");
                assert_eq!(p.fault_timeouts, 0, "{what}: no timeout set: {p:?}");
            }
            // Each hold ends either by the ERR or by the timeout, whichever comes first.
            Some(_) => assert!(p.errs_received + p.fault_timeouts > 0, "{what}: {p:?}"),
        }
        // What each policy brings in per fault (4 KiB pages, 4 KiB packets at odd offsets).
        match policy {
            PageInPolicy::Pio => {
                assert!(r.pages_in <= 2 * r.page_ins, "{what}: {r:?}");
            }
            PageInPolicy::Pi4 => {
                assert!(r.pages_in <= 8 * r.page_ins, "{what}: {r:?}");
                assert!(r.faults >= 2 * (MIB / (32 * KIB)) as u64, "{what}: {r:?}");
            }
            PageInPolicy::Pia => {
                // One page-in per message that found missing pages (3 per round) and one for
                // the command buffer: the rest of the message comes in with the first fault.
                assert!(r.page_ins <= 2 * 3 + 1, "{what}: {r:?}");
                assert!(r.pages_in >= 2 * packets_1m, "{what}: {r:?}");
            }
        }
        s.bye();
    }
    child.finish();
}

#[test]
fn udp_part_pio_with_and_without_fault_timeout() {
    policy(PageInPolicy::Pio);
}

#[test]
fn udp_part_pi4_with_and_without_fault_timeout() {
    policy(PageInPolicy::Pi4);
}

#[test]
fn udp_part_pia_with_and_without_fault_timeout() {
    policy(PageInPolicy::Pia);
}

/// The wave (the default reorder window), with and without a fault timeout: every message's
/// first fault starts one page-in, and the packets behind it wait for its front instead of
/// being sent again.
#[test]
fn udp_part_pia_wave_with_and_without_fault_timeout() {
    let timeouts = [None, Some(Duration::from_micros(100))];
    let child = ChildProc::spawn(
        PageInPolicy::Pia,
        timeouts.len(),
        Progress::Thread,
        DEFAULT_REORDER,
    );
    let cases = &CASES[..3];
    let packets_1m = (MIB / 4096) as u64;
    for (k, to) in timeouts.into_iter().enumerate() {
        let mut s = Session::open(Transport::Udp, child.addr, to, Progress::Thread);
        let what = format!("udp pia wave timeout {to:?}");
        let r0 = s.command(STATS);
        for round in 0..2u64 {
            s.command(EVICT);
            s.evict_destinations();
            s.round(Source::Pattern(10 * k as u64 + round + 5), cases);
        }
        let r = s.command(STATS);
        eprintln!("{what}: child {r0:?}\n -> {r:?}");
        assert!(r.faults > r0.faults, "{what}: {r:?}");
        assert!(r.wave_holds > r0.wave_holds, "{what}: {r:?}");
        assert!(r.page_ins - r0.page_ins <= 2 * 3 + 1, "{what}: {r:?}");
        assert!(r.pages_in - r0.pages_in >= 2 * packets_1m, "{what}: {r:?}");
        s.bye();
    }
    child.finish();
}
