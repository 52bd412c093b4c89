//! The scheduler in virtual time.
use super::*;

const DL: Duration = Duration::from_millis(50);

fn sched(modules: usize) -> (Scheduler, Instant) {
    (Scheduler::new(modules, DL, 2), Instant::now())
}

fn stack(s: &mut Scheduler, now: Instant, n: u64, modules: &[usize]) {
    for &m in modules {
        s.on_marker(now, m, Marker::Start(n), true);
    }
    for &m in modules {
        s.on_marker(now, m, Marker::End(n), true);
    }
}

#[test]
fn a_stack_is_issued_once_every_module_ended() {
    let (mut s, t) = sched(3);
    stack(&mut s, t, 0, &[0, 1]);
    assert_eq!(s.poll(t), None, "module 2 still missing");
    s.on_marker(t, 2, Marker::End(0), true);
    assert_eq!(
        s.poll(t),
        Some(Issue {
            stack: 0,
            lost_modules: 0
        })
    );
    assert_eq!(s.poll(t), None, "issued once");
}

#[test]
fn a_missing_module_is_masked_after_the_deadline() {
    let (mut s, t) = sched(4);
    stack(&mut s, t, 0, &[0, 1, 3]);
    assert_eq!(s.poll(t + DL / 2), None);
    assert_eq!(s.poll_timeout(), Some(t + DL));
    let i = s.poll(t + DL).unwrap();
    assert_eq!(i.lost_modules, 0b0100);
    assert_eq!(s.stats().stacks_partial, 1);
    assert_eq!(s.stats().modules_lost, 1);
}

#[test]
fn an_end_marker_after_a_loss_masks_that_module_at_once() {
    let (mut s, t) = sched(2);
    s.on_marker(t, 0, Marker::End(0), true);
    s.on_marker(t, 1, Marker::End(0), false);
    assert_eq!(
        s.poll(t),
        Some(Issue {
            stack: 0,
            lost_modules: 0b10
        })
    );
}

#[test]
fn stacks_are_issued_in_order() {
    let (mut s, t) = sched(1);
    s.on_marker(t, 0, Marker::Start(0), true);
    s.on_marker(t, 0, Marker::End(0), true);
    let (mut s2, _) = sched(2);
    stack(&mut s2, t, 0, &[0]);
    stack(&mut s2, t, 1, &[0, 1]);
    assert_eq!(
        s2.poll(t).map(|i| i.stack),
        Some(0),
        "module 1 moved on: lost"
    );
    assert_eq!(s2.poll(t).map(|i| i.stack), Some(1));
    let (mut s3, _) = sched(2);
    stack(&mut s3, t, 0, &[0]);
    stack(&mut s3, t, 1, &[0]);
    s3.on_marker(t, 1, Marker::Start(0), true);
    assert_eq!(
        s3.poll(t),
        None,
        "module 1 is still on stack 0, so stack 1 waits too"
    );
    assert_eq!(s3.poll(t + DL).map(|i| i.stack), Some(0));
    assert_eq!(s3.poll(t + DL).map(|i| i.stack), Some(1));
    assert_eq!(s.poll(t).map(|i| i.stack), Some(0));
}

#[test]
fn a_newer_stack_in_a_busy_half_is_an_overrun_of_the_one_being_processed() {
    let (mut s, t) = sched(1);
    stack(&mut s, t, 0, &[0]);
    let i = s.poll(t).unwrap();
    stack(&mut s, t, 1, &[0]);
    assert!(s.intact(0), "stack 1 lands in the other half");
    s.on_marker(t, 0, Marker::Start(2), true);
    assert!(!s.intact(i.stack), "stack 2 writes into stack 0's half");
    assert_eq!(s.stats().overruns, 1);
    s.finish(0, t);
    assert_eq!(
        s.poll(t).map(|i| i.stack),
        Some(1),
        "the acquisition goes on"
    );
}

#[test]
fn a_waiting_stack_overwritten_is_dropped_and_its_markers_are_late() {
    let (mut s, t) = sched(2);
    stack(&mut s, t, 0, &[0]);
    s.on_marker(t, 0, Marker::Start(2), true);
    assert_eq!(s.stats().stacks_dropped, 1);
    s.on_marker(t, 1, Marker::End(0), true);
    assert_eq!(s.stats().late, 1);
    stack(&mut s, t, 2, &[1]);
    s.on_marker(t, 0, Marker::End(2), true);
    assert_eq!(s.poll(t).map(|i| i.stack), Some(2));
}

#[test]
fn a_lost_start_marker_is_caught_by_the_end_marker() {
    let (mut s, t) = sched(1);
    stack(&mut s, t, 0, &[0]);
    s.poll(t).unwrap();
    s.on_marker(t, 0, Marker::End(2), true);
    assert!(!s.intact(0));
}

#[test]
fn flush_issues_everything_waiting() {
    let (mut s, t) = sched(2);
    stack(&mut s, t, 0, &[0]);
    stack(&mut s, t, 1, &[1]);
    s.flush(t);
    assert_eq!(s.poll(t).map(|i| i.lost_modules), Some(0b10));
    assert_eq!(s.poll(t).map(|i| i.lost_modules), Some(0b01));
}

#[test]
fn a_module_that_is_behind_but_alive_is_waited_for() {
    let (mut s, t) = sched(2);
    stack(&mut s, t, 0, &[0]);
    s.on_marker(t, 1, Marker::Start(0), true);
    // Module 1 is still sending stack 0 when the deadline passes, but spoke recently.
    s.on_marker(t + DL, 1, Marker::End(0), false);
    assert_eq!(
        s.poll(t + DL).map(|i| i.lost_modules),
        Some(0b10),
        "ended broken"
    );
    let (mut s, t) = sched(2);
    stack(&mut s, t, 0, &[0]);
    s.on_marker(t + DL * 3 / 4, 1, Marker::Start(0), true);
    assert_eq!(s.poll(t + DL), None, "behind, not silent");
    assert_eq!(
        s.poll(t + DL * 7 / 4).map(|i| i.lost_modules),
        Some(0b10),
        "silent for a deadline"
    );
}

/// Virtual time: a source starting a stack of 5 frames every 10 ms into a ring of `depth`
/// stacks, and a processing unit taking 5 ms per frame (the source runs 2.5x too fast),
/// which, like the receiver's, abandons a stack once it is overwritten. Returns (frames
/// processed and kept, frames processed and then found overwritten).
fn overloaded(depth: usize, skip: bool) -> (u32, u32) {
    let mut s = Scheduler::new(1, DL, depth);
    if skip {
        s = s.skipping_doomed();
    }
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let (mut kept, mut wasted) = (0, 0);
    // (stack, frames done, current frame ends at)
    let mut busy: Option<(u64, u32, u64)> = None;
    for now in 0..2000u64 {
        if now % 10 == 0 {
            stack(&mut s, ms(now), now / 10, &[0]);
        }
        if let Some((st, done, until)) = busy {
            if now >= until {
                let intact = s.intact(st);
                if intact {
                    kept += 1;
                } else {
                    wasted += 1;
                }
                if !intact || done + 1 == 5 {
                    s.finish(st, ms(now));
                    busy = None;
                } else {
                    busy = Some((st, done + 1, now + 5));
                }
            }
        }
        if busy.is_none() {
            if let Some(i) = s.poll(ms(now)) {
                busy = Some((i.stack, 0, now + 5));
            }
        }
    }
    (kept, wasted)
}

#[test]
fn past_its_rate_the_receiver_skips_doomed_stacks_and_keeps_what_it_can() {
    // 2 s of 5 ms frames: at most 400 can be processed.
    for depth in [3, 8] {
        let (kept, wasted) = overloaded(depth, true);
        assert!(kept >= 320, "depth {depth}: {kept} kept, {wasted} wasted");
        assert!(
            wasted * 5 <= kept,
            "depth {depth}: {kept} kept, {wasted} wasted"
        );
    }
    // Two buffers are overwritten 20 ms after a stack starts: a stack is never finished,
    // and the unit keeps what it can of each.
    let (kept, wasted) = overloaded(2, true);
    assert!(kept >= 200, "depth 2: {kept} kept, {wasted} wasted");
    // Without skipping, a deep ring's unit works through a backlog that is overwritten
    // under it.
    let (kept_deep, wasted_deep) = overloaded(8, false);
    let (kept_skip, _) = overloaded(8, true);
    assert!(
        kept_skip > kept_deep,
        "{kept_skip} vs {kept_deep} ({wasted_deep} wasted)"
    );
}

#[test]
fn on_reliable_links_a_silent_module_is_waited_for_until_its_link_closes() {
    let mut s = Scheduler::new(2, DL, 4).reliable_links();
    let t = Instant::now();
    stack(&mut s, t, 0, &[0]);
    s.on_marker(t, 1, Marker::Start(0), true);
    assert_eq!(s.poll(t + DL * 10), None, "slow, not lost");
    s.link_closed(1);
    assert_eq!(s.poll(t + DL * 10).map(|i| i.lost_modules), Some(0b10));
}

#[test]
fn a_deep_ring_holds_stacks_until_their_buffer_comes_round_again() {
    let mut s = Scheduler::new(1, DL, 4);
    let t = Instant::now();
    for n in 0..4 {
        stack(&mut s, t, n, &[0]);
    }
    assert_eq!(s.stats().overruns, 0, "four buffers hold four stacks");
    assert_eq!(s.released(), 0);
    assert_eq!(s.stats().high_water_stacks, 4);
    let i = s.poll(t).unwrap();
    s.finish(i.stack, t);
    assert_eq!(s.released(), 1, "stack 0's buffer is free");
    stack(&mut s, t, 4, &[0]);
    assert_eq!(s.stats().overruns, 0, "stack 4 reuses stack 0's buffer");
    s.on_marker(t, 0, Marker::Start(5), true);
    assert_eq!(
        s.stats().overruns,
        1,
        "stack 5 lands on stack 1, still waiting"
    );
    assert_eq!(s.stats().stacks_dropped, 1);
    assert_eq!(s.released(), 2);
}

#[test]
fn hostile_markers_do_not_panic() {
    let (mut s, t) = sched(2);
    s.on_marker(t, 99, Marker::End(0), true);
    s.on_marker(t, 0, Marker::End(u64::MAX), true);
    s.on_marker(t, 0, Marker::Start(u64::MAX - 1), true);
    assert_eq!(s.stats().late, 1);
    let _ = s.poll(t + DL);
}
