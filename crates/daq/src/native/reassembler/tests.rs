//! The reassembler's rules, one test per rule, on a recording store; then random loss, reorder
//! and duplication against the rules' invariants and, where no frame can time out or be
//! evicted, an exact model.
use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::native::packet::{Repr, PACKET_LEN};

const TO: Duration = Duration::from_millis(10);
/// What a slot holds before anything is written: stale data that must never show.
const STALE: u16 = 0x1234;

/// The test stream's word `i` of `module` in `frame`: distinct per frame and module, never
/// [`ERROR_WORD`] nor [`STALE`].
fn word(frame: u64, module: usize, i: usize) -> u16 {
    let x = frame
        .wrapping_mul(7919)
        .wrapping_add((module * 104_729 + i) as u64);
    (x % 0x1000) as u16 + 0x2000
}

fn packet(frame: u64, module: u16, k: u32) -> Vec<u8> {
    let mut b = vec![0u8; PACKET_LEN];
    let mut p = Packet::new_unchecked(&mut b[..]);
    Repr::jungfrau(frame, k, module).emit(&mut p);
    let first = words_of_packet(k).start;
    for (j, c) in p.payload_mut().chunks_exact_mut(2).enumerate() {
        c.copy_from_slice(&word(frame, usize::from(module), first + j).to_le_bytes());
    }
    b
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Lend(u64, usize),
    Done(u64),
}

/// A ring of `slots` frames that records every call and keeps a copy of every frame done.
struct Log {
    ring: Vec<u16>,
    modules: usize,
    slots: usize,
    busy: Option<u64>,
    events: Vec<Event>,
    frames: Vec<(Done, Vec<u16>)>,
}

impl Log {
    fn new(modules: usize, slots: usize) -> Log {
        Log {
            ring: vec![STALE; modules * slots * MODULE_PIXELS],
            modules,
            slots,
            busy: None,
            events: Vec::new(),
            frames: Vec::new(),
        }
    }

    fn done_frames(&self) -> Vec<u64> {
        self.frames.iter().map(|(d, _)| d.frame).collect()
    }

    fn lent(&self, frame: u64) -> usize {
        let lend = |e: &&Event| matches!(e, Event::Lend(f, _) if *f == frame);
        self.events.iter().filter(lend).count()
    }
}

impl FrameStore for Log {
    fn module_mut(&mut self, frame: u64, module: usize) -> Option<&mut [u16]> {
        if self.busy == Some(frame % self.slots as u64) {
            return None;
        }
        self.events.push(Event::Lend(frame, module));
        let at = ((frame % self.slots as u64) as usize * self.modules + module) * MODULE_PIXELS;
        Some(&mut self.ring[at..at + MODULE_PIXELS])
    }

    fn done(&mut self, done: Done) {
        self.events.push(Event::Done(done.frame));
        let n = self.modules * MODULE_PIXELS;
        let at = (done.frame % self.slots as u64) as usize * n;
        self.frames.push((done, self.ring[at..at + n].to_vec()));
    }
}

/// Every packet's rows hold its data, or 0xFFFF when it is listed missing.
#[track_caller]
fn assert_exact(done: &Done, words: &[u16]) {
    for (m, &miss) in done.missing.iter().enumerate() {
        for k in 0..PACKETS_PER_FRAME {
            let at = m * MODULE_PIXELS;
            for i in words_of_packet(k) {
                let want = if miss >> k & 1 == 1 {
                    ERROR_WORD
                } else {
                    word(done.frame, m, i)
                };
                assert_eq!(
                    words[at + i],
                    want,
                    "frame {} module {m} word {i}",
                    done.frame
                );
            }
        }
    }
}

/// Pushes every packet of `frame` except those in `skip`, last packet first.
fn push_frame(r: &mut Reassembler, t: Instant, s: &mut Log, frame: u64, skip: &[(u16, u32)]) {
    for m in 0..s.modules as u16 {
        for k in (0..PACKETS_PER_FRAME).rev() {
            if !skip.contains(&(m, k)) {
                r.push(t, &packet(frame, m, k), s).unwrap();
            }
        }
    }
}

#[test]
fn whole_frames_in_order_are_done_at_once_and_exact() {
    let (t, mut s) = (Instant::now(), Log::new(2, 4));
    let mut r = Reassembler::new(2, 4, TO);
    for f in 1..=3 {
        push_frame(&mut r, t, &mut s, f, &[]);
        assert_eq!(s.frames.len() as u64, f, "done with its last packet");
    }
    for (d, w) in &s.frames {
        assert!(d.complete());
        assert_exact(d, w);
    }
    let st = r.stats();
    assert_eq!((st.placed, st.complete, st.partial), (3 * 256, 3, 0));
    assert_eq!(r.open_frames(), 0);
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn reordered_packets_of_interleaved_frames_reassemble_exactly() {
    let (t, mut s) = (Instant::now(), Log::new(2, 4));
    let mut r = Reassembler::new(2, 4, TO);
    let mut all: Vec<(u64, u16, u32)> = (0..256u32)
        .flat_map(|i| [(2, (i % 2) as u16, i / 2), (1, (i % 2) as u16, i / 2)])
        .collect();
    // A fixed scramble: stride 97 through 512 packets.
    all = (0..all.len()).map(|i| all[i * 97 % all.len()]).collect();
    for (f, m, k) in all {
        r.push(t, &packet(f, m, k), &mut s).unwrap();
    }
    assert_eq!(s.done_frames(), vec![1, 2]);
    for (d, w) in &s.frames {
        assert!(d.complete());
        assert_exact(d, w);
    }
}

#[test]
fn a_duplicate_is_counted_once_and_not_written_again() {
    let (t, mut s) = (Instant::now(), Log::new(1, 2));
    let mut r = Reassembler::new(1, 2, TO);
    r.push(t, &packet(1, 0, 9), &mut s).unwrap();
    let mut other = packet(1, 0, 9);
    other[PACKET_LEN - 1] ^= 0xff;
    assert_eq!(r.push(t, &other, &mut s), Err(Dropped::Duplicate));
    assert_eq!(s.lent(1), 1, "the duplicate was never written");
    push_frame(&mut r, t, &mut s, 1, &[(0, 9)]);
    let st = r.stats();
    assert_eq!((st.placed, st.duplicates, st.complete), (128, 1, 1));
    assert_exact(&s.frames[0].0, &s.frames[0].1);
}

#[test]
fn lost_packets_rows_are_error_words_after_the_deadline_never_stale_data() {
    let (t, mut s) = (Instant::now(), Log::new(2, 1));
    let mut r = Reassembler::new(2, 1, TO);
    push_frame(&mut r, t, &mut s, 1, &[]);
    // Frame 2 reuses frame 1's slot and loses two packets.
    push_frame(&mut r, t, &mut s, 2, &[(0, 0), (1, 100)]);
    assert_eq!(r.poll(t + TO - Duration::from_nanos(1), &mut s), 0);
    assert_eq!(r.poll_timeout(), Some(t + TO));
    assert_eq!(r.poll(t + TO, &mut s), 1);
    let (d, w) = &s.frames[1];
    assert_eq!((d.frame, d.missing.clone()), (2, vec![1, 1 << 100]));
    assert_eq!((d.lost_packets(), d.lost_modules()), (vec![1, 1], 0b11));
    assert!(!d.complete());
    assert_exact(d, w);
    assert!(w[..4096].iter().all(|&x| x == ERROR_WORD));
    let st = r.stats();
    assert_eq!((st.complete, st.partial, st.missing_packets), (1, 1, 2));
}

#[test]
fn the_deadline_runs_from_the_earliest_started_frame_and_frames_go_in_order() {
    let (t, mut s) = (Instant::now(), Log::new(1, 4));
    let mut r = Reassembler::new(1, 4, TO);
    r.push(t, &packet(3, 0, 0), &mut s).unwrap();
    let later = t + TO / 2;
    r.push(later, &packet(2, 0, 0), &mut s).unwrap();
    push_frame(&mut r, later, &mut s, 4, &[]);
    assert!(
        s.frames.is_empty(),
        "frame 4 is whole but waits for 2 and 3"
    );
    assert_eq!(r.poll_timeout(), Some(t + TO));
    assert_eq!(r.poll(t + TO, &mut s), 3);
    assert_eq!(s.done_frames(), vec![2, 3, 4]);
    assert!(s.frames[2].0.complete());
    assert_eq!(
        r.push(t + TO, &packet(3, 0, 1), &mut s),
        Err(Dropped::Late(3))
    );
}

#[test]
fn a_frame_a_window_ahead_evicts_the_oldest_before_it_is_written() {
    let (t, mut s) = (Instant::now(), Log::new(1, 2));
    let mut r = Reassembler::new(1, 2, TO);
    r.push(t, &packet(1, 0, 0), &mut s).unwrap();
    r.push(t, &packet(2, 0, 0), &mut s).unwrap();
    r.push(t, &packet(3, 0, 0), &mut s).unwrap();
    assert_eq!(s.done_frames(), vec![1]);
    let done = s.events.iter().position(|e| *e == Event::Done(1)).unwrap();
    let lend = s
        .events
        .iter()
        .position(|e| *e == Event::Lend(3, 0))
        .unwrap();
    assert!(
        done < lend,
        "frame 1 left slot 1 before frame 3 wrote there"
    );
    assert_exact(&s.frames[0].0, &s.frames[0].1);
    // Frame 6 needs frames 2 and 3 out (slots 0 and 1).
    r.push(t, &packet(6, 0, 5), &mut s).unwrap();
    assert_eq!(s.done_frames(), vec![1, 2, 3]);
    assert_eq!(r.stats().evicted, 3);
    assert_eq!(r.stats().missing_packets, 3 * 127);
}

#[test]
fn late_packets_are_counted_and_never_written() {
    let (t, mut s) = (Instant::now(), Log::new(1, 4));
    let mut r = Reassembler::new(1, 4, TO);
    push_frame(&mut r, t, &mut s, 1, &[(0, 3)]);
    r.flush(&mut s);
    let lent = s.lent(1);
    assert_eq!(r.push(t, &packet(1, 0, 3), &mut s), Err(Dropped::Late(1)));
    assert_eq!(r.push(t, &packet(0, 0, 0), &mut s), Err(Dropped::Late(0)));
    assert_eq!(s.lent(1), lent);
    assert_eq!(r.stats().late, 2);
}

#[test]
fn a_frame_too_far_behind_the_newest_is_late() {
    let (t, mut s) = (Instant::now(), Log::new(1, 2));
    let mut r = Reassembler::new(1, 2, TO);
    r.push(t, &packet(5, 0, 0), &mut s).unwrap();
    assert_eq!(r.push(t, &packet(3, 0, 0), &mut s), Err(Dropped::Late(3)));
    r.push(t, &packet(4, 0, 0), &mut s).unwrap();
    assert_eq!(r.flush(&mut s), 2);
    assert_eq!(s.done_frames(), vec![4, 5]);
}

#[test]
fn malformed_datagrams_are_counted_by_reason_and_never_written() {
    let (t, mut s) = (Instant::now(), Log::new(2, 2));
    let mut r = Reassembler::new(2, 2, TO).frames(1..=10);
    let p = packet(1, 0, 0);
    for n in [0, 1, 47, 48, PACKET_LEN - 1] {
        assert_eq!(r.push(t, &p[..n], &mut s), Err(Dropped::Length(n)));
    }
    let mut long = p.clone();
    long.push(0);
    assert_eq!(
        r.push(t, &long, &mut s),
        Err(Dropped::Length(PACKET_LEN + 1))
    );
    let mut b = packet(1, 2, 0);
    assert_eq!(r.push(t, &b, &mut s), Err(Dropped::Module(2)));
    b = packet(1, 0, 128);
    assert_eq!(r.push(t, &b, &mut s), Err(Dropped::PacketNumber(128)));
    b = packet(1, 0, u32::MAX);
    assert_eq!(r.push(t, &b, &mut s), Err(Dropped::PacketNumber(u32::MAX)));
    for f in [0, 11, u64::MAX] {
        assert_eq!(r.push(t, &packet(f, 0, 0), &mut s), Err(Dropped::Frame(f)));
    }
    let st = r.stats();
    assert_eq!(
        (st.bad_length, st.bad_module, st.bad_packet, st.bad_frame),
        (6, 1, 2, 3)
    );
    assert_eq!(st.malformed(), 12);
    assert!(s.events.is_empty());
    assert_eq!(r.open_frames(), 0);
}

#[test]
fn extreme_frame_numbers_do_not_overflow() {
    let (t, mut s) = (Instant::now(), Log::new(1, 2));
    let mut r = Reassembler::new(1, 2, TO);
    r.push(t, &packet(u64::MAX, 0, 0), &mut s).unwrap();
    assert_eq!(r.push(t, &packet(0, 0, 0), &mut s), Err(Dropped::Late(0)));
    r.push(t, &packet(u64::MAX - 1, 0, 0), &mut s).unwrap();
    assert_eq!(r.flush(&mut s), 2);
    assert_eq!(
        r.push(t, &packet(u64::MAX, 0, 1), &mut s),
        Err(Dropped::Late(u64::MAX))
    );
}

#[test]
fn a_busy_slot_drops_the_packet_and_its_rows_end_up_masked() {
    let (t, mut s) = (Instant::now(), Log::new(1, 2));
    let mut r = Reassembler::new(1, 2, TO);
    s.busy = Some(1);
    assert_eq!(r.push(t, &packet(1, 0, 0), &mut s), Err(Dropped::NoSlot(1)));
    assert_eq!(
        r.open_frames(),
        0,
        "a frame opens with its first placed packet"
    );
    s.busy = None;
    push_frame(&mut r, t, &mut s, 1, &[(0, 0)]);
    assert_eq!(r.flush(&mut s), 1);
    assert_eq!(s.frames[0].0.missing, vec![1]);
    assert_exact(&s.frames[0].0, &s.frames[0].1);
    assert_eq!(r.stats().no_slot, 1);
}

#[test]
fn flush_hands_over_everything_open_in_order_and_masked() {
    let (t, mut s) = (Instant::now(), Log::new(2, 4));
    let mut r = Reassembler::new(2, 4, TO);
    r.push(t, &packet(3, 1, 7), &mut s).unwrap();
    r.push(t, &packet(2, 0, 0), &mut s).unwrap();
    assert_eq!(r.flush(&mut s), 2);
    assert_eq!(s.done_frames(), vec![2, 3]);
    for (d, w) in &s.frames {
        assert_eq!(d.lost_packets().iter().sum::<u32>(), 255);
        assert_exact(d, w);
    }
    assert_eq!(r.flush(&mut s), 0);
}

#[test]
fn slice_store_puts_frame_f_in_slot_f_mod_slots() {
    let t = Instant::now();
    let mut ring = vec![STALE; 2 * 3 * MODULE_PIXELS];
    let mut seen = Vec::new();
    let mut store = SliceStore::new(&mut ring, 2, 3, |d: &Done, w: &mut [u16]| {
        assert_exact(d, w);
        seen.push(d.frame);
    });
    let mut r = Reassembler::new(2, 3, TO);
    for f in [4u64, 5] {
        for m in 0..2 {
            for k in 0..PACKETS_PER_FRAME {
                r.push(t, &packet(f, m, k), &mut store).unwrap();
            }
        }
    }
    assert_eq!(seen, vec![4, 5]);
    let slot1 = &ring[2 * MODULE_PIXELS..4 * MODULE_PIXELS];
    assert_eq!(slot1[MODULE_PIXELS + 10], word(4, 1, 10));
    assert!(
        ring[..2 * MODULE_PIXELS].iter().all(|&w| w == STALE),
        "slot 0 unused"
    );
}

/// A small xorshift, so that a proptest case is one seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_loss_reorder_and_duplication_never_show_wrong_data(
        modules in 1usize..3,
        frames in 1u64..6,
        slots in 1usize..5,
        seed in 1u64..,
        loss in 0.0f64..0.3,
        dup in 0.0f64..0.2,
        short_timeout: bool,
    ) {
        let mut rng = Rng(seed);
        let mut sent = BTreeSet::new();
        let mut pushes = Vec::new();
        for f in 1..=frames {
            for m in 0..modules as u16 {
                for k in 0..PACKETS_PER_FRAME {
                    if rng.chance(loss) {
                        continue;
                    }
                    sent.insert((f, m, k));
                    pushes.push((f, m, k));
                    if rng.chance(dup) {
                        pushes.push((f, m, k));
                    }
                }
            }
        }
        // Reordering: each packet moves up to 300 places (Fisher-Yates within a window).
        for i in (1..pushes.len()).rev() {
            let j = i - (rng.next() as usize % (i + 1)).min(300);
            pushes.swap(i, j);
        }
        let timeout = if short_timeout { Duration::from_micros(200) } else { Duration::from_secs(3600) };
        let t0 = Instant::now();
        let mut s = Log::new(modules, slots);
        let mut r = Reassembler::new(modules, slots, timeout);
        for (i, &(f, m, k)) in pushes.iter().enumerate() {
            let now = t0 + Duration::from_micros(i as u64);
            let _ = r.push(now, &packet(f, m, k), &mut s);
            r.poll(now, &mut s);
        }
        r.flush(&mut s);

        let st = r.stats();
        prop_assert_eq!(st.placed + st.duplicates + st.late, pushes.len() as u64);
        prop_assert_eq!(st.malformed() + st.no_slot, 0);
        let done = s.done_frames();
        prop_assert!(done.windows(2).all(|w| w[0] < w[1]), "in order, once: {:?}", done);
        prop_assert_eq!(st.complete + st.partial, done.len() as u64);
        let (mut present, mut missing) = (0u64, 0u64);
        for (d, w) in &s.frames {
            assert_exact(d, w);
            for (m, &miss) in d.missing.iter().enumerate() {
                missing += u64::from(miss.count_ones());
                for k in (0..PACKETS_PER_FRAME).filter(|k| miss >> k & 1 == 0) {
                    present += 1;
                    prop_assert!(sent.contains(&(d.frame, m as u16, k)), "placed but never sent");
                }
            }
        }
        prop_assert_eq!(present, st.placed);
        prop_assert_eq!(missing, st.missing_packets);

        // Nothing can time out or be evicted: the exact model. A frame is done early only when
        // whole, so every frame that opened got all its packets that were sent; a frame that
        // never opened was given up for a newer whole one.
        if !short_timeout && slots as u64 >= frames {
            for (d, _) in &s.frames {
                for (m, &miss) in d.missing.iter().enumerate() {
                    for k in 0..PACKETS_PER_FRAME {
                        let lost = !sent.contains(&(d.frame, m as u16, k));
                        prop_assert_eq!(miss >> k & 1 == 1, lost, "frame {} module {} packet {}", d.frame, m, k);
                    }
                }
            }
            let with_packets: BTreeSet<u64> = sent.iter().map(|&(f, _, _)| f).collect();
            for f in with_packets.iter().filter(|f| !done.contains(f)) {
                let newer_whole = s.frames.iter().any(|(d, _)| d.frame > *f && d.complete());
                prop_assert!(newer_whole, "frame {} given up for no whole newer frame", f);
            }
            prop_assert_eq!(st.evicted, 0);
        }
    }
}
