//! Reassembly of module frames from the detector's packets, as a sans-IO state machine: it
//! decides where each packet goes and when a frame is done; the caller owns the memory.
//!
//! Frames are delivered in frame order. A frame is done when every module's 128 packets have
//! arrived, when its deadline (`timeout` after its first packet) passes, or when a packet of a
//! frame `slots` or more ahead needs its ring slot. A done frame lists the packets that did not
//! arrive, so the caller masks their rows: never stale data. A packet of a frame already done is
//! late and dropped, a repeated one is a duplicate: both counted, neither written.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::packet::{Repr, PACKETS_PER_FRAME};

/// Why a packet was not placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// Module id beyond the detector.
    BadModule,
    /// Packet number beyond 127.
    BadPacket,
    /// Its frame was already delivered.
    Late,
    /// Already received.
    Duplicate,
}

/// A frame handed over to processing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// Frame number as the detector sent it.
    pub frame: u64,
    /// Per module, a bit per packet that did not arrive.
    pub missing: Vec<u128>,
}

impl Done {
    /// Whether every packet arrived.
    pub fn complete(&self) -> bool {
        self.missing.iter().all(|&m| m == 0)
    }

    /// Modules with at least one packet missing (bit per module).
    pub fn lost_modules(&self) -> u64 {
        self.missing
            .iter()
            .enumerate()
            .filter(|(_, &m)| m != 0)
            .fold(0, |acc, (i, _)| acc | 1 << i)
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReasmStats {
    /// Packets placed.
    pub placed: u64,
    /// Packets with a bad module id or packet number.
    pub malformed: u64,
    /// Packets of frames already done.
    pub late: u64,
    /// Repeated packets.
    pub duplicates: u64,
    /// Frames done with every packet.
    pub complete: u64,
    /// Frames done with packets missing.
    pub partial: u64,
    /// Packets missing from done frames.
    pub missing_packets: u64,
}

struct Open {
    first_seen: Instant,
    got: Vec<u128>,
}

/// The reassembler.
pub struct Reassembler {
    modules: usize,
    slots: u64,
    timeout: Duration,
    open: BTreeMap<u64, Open>,
    /// Frames below this were delivered.
    floor: u64,
    stats: ReasmStats,
}

const ALL: u128 = u128::MAX >> (128 - PACKETS_PER_FRAME);

impl Reassembler {
    /// `slots` frames may be open at once (the ring's slots); `timeout` bounds a frame's wait.
    pub fn new(modules: usize, slots: usize, timeout: Duration, first_frame: u64) -> Reassembler {
        Reassembler {
            modules,
            slots: slots.max(1) as u64,
            timeout,
            open: BTreeMap::new(),
            floor: first_frame,
            stats: ReasmStats::default(),
        }
    }

    /// Accepts a packet's header: `Ok` means write its payload at its rows of its module in its
    /// frame's slot. Frames pushed out of the ring by this one are done first: [`poll`] them.
    ///
    /// [`poll`]: Reassembler::poll
    pub fn accept(&mut self, now: Instant, h: &Repr) -> Result<(), Drop> {
        if usize::from(h.module) >= self.modules {
            self.stats.malformed += 1;
            return Err(Drop::BadModule);
        }
        if h.packet >= PACKETS_PER_FRAME {
            self.stats.malformed += 1;
            return Err(Drop::BadPacket);
        }
        if h.frame < self.floor {
            self.stats.late += 1;
            return Err(Drop::Late);
        }
        let modules = self.modules;
        let o = self.open.entry(h.frame).or_insert_with(|| Open {
            first_seen: now,
            got: vec![0; modules],
        });
        let bit = 1u128 << h.packet;
        let m = &mut o.got[usize::from(h.module)];
        if *m & bit != 0 {
            self.stats.duplicates += 1;
            return Err(Drop::Duplicate);
        }
        *m |= bit;
        self.stats.placed += 1;
        Ok(())
    }

    /// Whether frame `f` may be written now: false when an older frame still holds its slot
    /// (the caller polls first, then writes).
    pub fn must_evict_for(&self, f: u64) -> bool {
        self.open
            .keys()
            .next()
            .is_some_and(|&oldest| f >= oldest + self.slots)
    }

    /// The next frame done, in frame order. `force` delivers the oldest open frame whatever its
    /// state (end of the run, or its slot is needed).
    pub fn poll(&mut self, now: Instant, force: bool) -> Option<Done> {
        let (&f, o) = self.open.iter().next()?;
        let whole = o.got.iter().all(|&g| g == ALL);
        if !(whole || force || now >= o.first_seen + self.timeout) {
            return None;
        }
        let o = self.open.remove(&f).expect("found above");
        self.floor = f + 1;
        let missing: Vec<u128> = o.got.iter().map(|g| !g & ALL).collect();
        let n: u64 = missing.iter().map(|m| u64::from(m.count_ones())).sum();
        if n == 0 {
            self.stats.complete += 1;
        } else {
            self.stats.partial += 1;
            self.stats.missing_packets += n;
        }
        Some(Done { frame: f, missing })
    }

    /// When [`poll`](Self::poll) may next deliver by deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.open
            .values()
            .next()
            .map(|o| o.first_seen + self.timeout)
    }

    /// Frames open.
    pub fn open(&self) -> usize {
        self.open.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> ReasmStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TO: Duration = Duration::from_millis(10);

    fn h(frame: u64, module: u16, packet: u32) -> Repr {
        Repr {
            frame,
            packet,
            module,
            timestamp: 0,
        }
    }

    fn send_frame(r: &mut Reassembler, t: Instant, f: u64, modules: u16, skip: &[(u16, u32)]) {
        for m in 0..modules {
            for k in (0..PACKETS_PER_FRAME).rev() {
                if !skip.contains(&(m, k)) {
                    r.accept(t, &h(f, m, k)).unwrap();
                }
            }
        }
    }

    #[test]
    fn a_whole_frame_in_any_order_is_done_at_once() {
        let t = Instant::now();
        let mut r = Reassembler::new(2, 4, TO, 1);
        send_frame(&mut r, t, 1, 2, &[]);
        let d = r.poll(t, false).unwrap();
        assert!(d.complete() && d.frame == 1);
        assert_eq!(r.stats().complete, 1);
    }

    #[test]
    fn missing_packets_are_listed_after_the_deadline() {
        let t = Instant::now();
        let mut r = Reassembler::new(2, 4, TO, 1);
        send_frame(&mut r, t, 1, 2, &[(1, 7), (1, 100)]);
        assert_eq!(r.poll(t, false), None);
        let d = r.poll(t + TO, false).unwrap();
        assert_eq!(d.missing, vec![0, (1 << 7) | (1 << 100)]);
        assert_eq!(d.lost_modules(), 0b10);
        assert_eq!(r.stats().missing_packets, 2);
    }

    #[test]
    fn frames_are_delivered_in_order_and_late_packets_are_dropped() {
        let t = Instant::now();
        let mut r = Reassembler::new(1, 4, TO, 1);
        send_frame(&mut r, t, 2, 1, &[]);
        r.accept(t, &h(1, 0, 0)).unwrap();
        assert_eq!(r.poll(t, false), None, "frame 1 is older and still open");
        assert_eq!(r.poll(t, true).map(|d| d.frame), Some(1));
        assert_eq!(r.poll(t, false).map(|d| d.frame), Some(2));
        assert_eq!(r.accept(t, &h(1, 0, 5)), Err(Drop::Late));
    }

    #[test]
    fn a_frame_a_ring_ahead_needs_the_oldest_delivered() {
        let t = Instant::now();
        let mut r = Reassembler::new(1, 2, TO, 0);
        r.accept(t, &h(0, 0, 0)).unwrap();
        assert!(!r.must_evict_for(1));
        assert!(r.must_evict_for(2));
    }

    #[test]
    fn malformed_and_duplicate_packets_are_counted_not_placed() {
        let t = Instant::now();
        let mut r = Reassembler::new(2, 4, TO, 0);
        assert_eq!(r.accept(t, &h(0, 2, 0)), Err(Drop::BadModule));
        assert_eq!(r.accept(t, &h(0, 0, 128)), Err(Drop::BadPacket));
        r.accept(t, &h(0, 0, 3)).unwrap();
        assert_eq!(r.accept(t, &h(0, 0, 3)), Err(Drop::Duplicate));
        let s = r.stats();
        assert_eq!((s.malformed, s.duplicates, s.placed), (2, 1, 1));
    }
}
