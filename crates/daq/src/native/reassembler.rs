//! Reassembly of detector frames from JUNGFRAU packets, as a sans-IO state machine: no sockets,
//! no clock (every call takes `now`), no memory of its own for pixels.
//!
//! The caller owns the frames: a [`FrameStore`] lends the 512 × 1024 words of one module of one
//! frame ([`FrameStore::module_mut`]) and is told, in frame order, when a frame is done
//! ([`FrameStore::done`]). [`Reassembler::push`] validates a datagram and copies its payload
//! straight into the store at its packet's rows ([`rows_of_packet`](super::rows_of_packet)).
//!
//! A frame is done
//! - at once when every module's 128 packets are in and every older frame is done;
//! - when its deadline passes ([`Reassembler::poll`]): `timeout` after the first packet of the
//!   earliest-started frame still open, older frames first;
//! - when a newer frame needs its place (eviction): open frames always lie within `slots`
//!   consecutive frame numbers, so a store may put frame `f` in slot `f % slots`; a packet of
//!   frame `f ≥ oldest + slots` first finishes the frames that would share slots with it;
//! - at the end of a run ([`Reassembler::flush`]).
//!
//! Before a frame is reported, the rows of the packets it misses are filled with
//! [`ERROR_WORD`] (0xFFFF, what slsDetectorPackage's receiver writes too; the conversion flags
//! such pixels and never converts them): a reused slot never shows stale data. The report,
//! [`Done`], lists the missing packets per module.
//!
//! Frames are reported in frame order and at most once; a packet of a frame already reported,
//! or too far behind the newest open frame to have a slot, is late: counted, never written.
//! Repeated packets are counted once. Datagrams of the wrong length, module id, packet number
//! or (when [`Reassembler::frames`] limits it) frame number are counted by reason; nothing a
//! datagram holds makes this module panic. A frame none of whose packets arrived is never
//! opened, so never reported: the caller counts whole lost frames.
//!
//! Panics: only on a store that breaks its contract (a module frame that is not
//! [`MODULE_PIXELS`] words long).
use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use super::packet::{words_of_packet, Packet, PACKETS_PER_FRAME};
use crate::model::{ERROR_WORD, MODULE_PIXELS};

/// Where frames are written, and who is told when they are done.
pub trait FrameStore {
    /// The [`MODULE_PIXELS`] words of `module` in `frame`, or `None` when that frame's memory
    /// cannot be written now (its slot is still being processed): the packet is then dropped
    /// ([`Dropped::NoSlot`]) and its rows end up masked. Once a frame is open (one packet
    /// placed), the store must lend the same memory until the frame is done.
    fn module_mut(&mut self, frame: u64, module: usize) -> Option<&mut [u16]>;

    /// `frame` is done and masked. Called in frame order, and before any packet of a frame
    /// that could share its slot is written, so the store may hand the slot over now.
    fn done(&mut self, done: Done);
}

/// Why a datagram was not placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Dropped {
    /// Not a JUNGFRAU packet's length.
    #[error("datagram of {0} bytes, a JUNGFRAU packet has 8240")]
    Length(usize),
    /// Module id beyond the detector.
    #[error("module id {0} beyond the detector")]
    Module(u16),
    /// Packet number beyond 127.
    #[error("packet number {0} beyond 127")]
    PacketNumber(u32),
    /// Frame number outside the range the reassembler was told to take.
    #[error("frame number {0} outside this run")]
    Frame(u64),
    /// Its frame was already reported, or is too far behind the newest open frame.
    #[error("packet of frame {0}, already done or behind the window")]
    Late(u64),
    /// This packet was already placed.
    #[error("repeated packet")]
    Duplicate,
    /// The store had no memory for its frame.
    #[error("no slot free for frame {0}")]
    NoSlot(u64),
}

/// A frame handed to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// Frame number as the detector sent it.
    pub frame: u64,
    /// Per module, bit `k` set when packet `k` did not arrive (its rows hold [`ERROR_WORD`]).
    pub missing: Vec<u128>,
}

impl Done {
    /// Whether every packet of every module arrived.
    pub fn complete(&self) -> bool {
        self.missing.iter().all(|&m| m == 0)
    }

    /// Packets lost, per module.
    pub fn lost_packets(&self) -> Vec<u32> {
        self.missing.iter().map(|m| m.count_ones()).collect()
    }

    /// Modules with a packet missing, a bit per module (modules 0..64).
    pub fn lost_modules(&self) -> u64 {
        self.missing
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, &m)| m != 0)
            .fold(0, |acc, (i, _)| acc | 1 << i)
    }
}

/// Counters of a reassembler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReassemblyStats {
    /// Packets placed.
    pub placed: u64,
    /// Repeated packets (not placed again).
    pub duplicates: u64,
    /// Packets of frames already done, or too far behind the newest open frame.
    pub late: u64,
    /// Datagrams not 8240 bytes long.
    pub bad_length: u64,
    /// Packets with a module id beyond the detector.
    pub bad_module: u64,
    /// Packets with a packet number beyond 127.
    pub bad_packet: u64,
    /// Packets with a frame number outside the run (see [`Reassembler::frames`]).
    pub bad_frame: u64,
    /// Packets the store had no memory for.
    pub no_slot: u64,
    /// Frames done with every packet.
    pub complete: u64,
    /// Frames done with packets missing.
    pub partial: u64,
    /// Frames done early because a newer frame needed their place.
    pub evicted: u64,
    /// Packets missing from frames done (their rows masked).
    pub missing_packets: u64,
}

impl ReassemblyStats {
    /// Datagrams that were not packets of this detector and run.
    pub fn malformed(&self) -> u64 {
        self.bad_length + self.bad_module + self.bad_packet + self.bad_frame
    }
}

/// An open frame: when its first packet came, and a bit per packet placed, per module.
struct Open {
    first_seen: Instant,
    got: Vec<u128>,
}

/// All 128 packets.
const ALL: u128 = u128::MAX >> (128 - PACKETS_PER_FRAME);

/// The reassembler of one detector's stream.
pub struct Reassembler {
    modules: usize,
    slots: u64,
    timeout: Duration,
    frames: RangeInclusive<u64>,
    open: BTreeMap<u64, Open>,
    /// The newest frame done: it and all older ones are done.
    last_done: Option<u64>,
    stats: ReassemblyStats,
}

impl Reassembler {
    /// A reassembler of `modules` modules with at most `slots` frames in flight (at least 1)
    /// that waits at most `timeout` for a frame's packets.
    pub fn new(modules: usize, slots: usize, timeout: Duration) -> Reassembler {
        Reassembler {
            modules,
            slots: slots.max(1) as u64,
            timeout,
            frames: 0..=u64::MAX,
            open: BTreeMap::new(),
            last_done: None,
            stats: ReassemblyStats::default(),
        }
    }

    /// Takes only frame numbers in `range` (e.g. `1..=n` for a run of `n` frames), so that a
    /// stray packet cannot push the window away; others count as [`Dropped::Frame`].
    pub fn frames(mut self, range: RangeInclusive<u64>) -> Reassembler {
        self.frames = range;
        self
    }

    /// Places one datagram into `store`. Frames it finishes (it completes them, or they must
    /// make room for it) are handed to the store before this returns.
    pub fn push(
        &mut self,
        now: Instant,
        datagram: &[u8],
        store: &mut impl FrameStore,
    ) -> Result<(), Dropped> {
        let r = self.place(now, datagram, store);
        match r {
            Ok(()) => self.stats.placed += 1,
            Err(Dropped::Length(_)) => self.stats.bad_length += 1,
            Err(Dropped::Module(_)) => self.stats.bad_module += 1,
            Err(Dropped::PacketNumber(_)) => self.stats.bad_packet += 1,
            Err(Dropped::Frame(_)) => self.stats.bad_frame += 1,
            Err(Dropped::Late(_)) => self.stats.late += 1,
            Err(Dropped::Duplicate) => self.stats.duplicates += 1,
            Err(Dropped::NoSlot(_)) => self.stats.no_slot += 1,
        }
        r
    }

    fn place(
        &mut self,
        now: Instant,
        datagram: &[u8],
        store: &mut impl FrameStore,
    ) -> Result<(), Dropped> {
        let p = Packet::new_checked(datagram).map_err(|_| Dropped::Length(datagram.len()))?;
        let (frame, k, module) = (p.frame_number(), p.packet_number(), p.module_id());
        let m = usize::from(module);
        if m >= self.modules {
            return Err(Dropped::Module(module));
        }
        if k >= PACKETS_PER_FRAME {
            return Err(Dropped::PacketNumber(k));
        }
        if !self.frames.contains(&frame) {
            return Err(Dropped::Frame(frame));
        }
        if self.last_done.is_some_and(|d| frame <= d) {
            return Err(Dropped::Late(frame));
        }
        let bit = 1u128 << k;
        match self.open.get(&frame) {
            Some(o) if o.got[m] & bit != 0 => return Err(Dropped::Duplicate),
            Some(_) => {}
            None => {
                let newest = self.open.last_key_value().map(|(&f, _)| f);
                if newest.is_some_and(|n| n.saturating_sub(frame) >= self.slots) {
                    return Err(Dropped::Late(frame));
                }
                // Frames that would share a slot with this one are done first.
                while let Some((&oldest, _)) = self.open.first_key_value() {
                    if frame.saturating_sub(oldest) < self.slots {
                        break;
                    }
                    self.stats.evicted += 1;
                    self.finish(oldest, store);
                }
            }
        }
        let dest = store.module_mut(frame, m).ok_or(Dropped::NoSlot(frame))?;
        assert_eq!(
            dest.len(),
            MODULE_PIXELS,
            "a store lends whole module frames"
        );
        let words = &mut dest[words_of_packet(k)];
        for (w, b) in words.iter_mut().zip(p.payload().chunks_exact(2)) {
            *w = u16::from_le_bytes([b[0], b[1]]);
        }
        let modules = self.modules;
        let o = self.open.entry(frame).or_insert_with(|| Open {
            first_seen: now,
            got: vec![0; modules],
        });
        o.got[m] |= bit;
        self.deliver_whole(store);
        Ok(())
    }

    /// Hands over the oldest frames while they are whole.
    fn deliver_whole(&mut self, store: &mut impl FrameStore) {
        while let Some((&f, o)) = self.open.first_key_value() {
            if !o.got.iter().all(|&g| g == ALL) {
                break;
            }
            self.finish(f, store);
        }
    }

    /// Masks what `frame` misses, counts it and hands it to the store.
    fn finish(&mut self, frame: u64, store: &mut impl FrameStore) {
        let o = self.open.remove(&frame).expect("finish an open frame");
        self.last_done = Some(frame);
        let missing: Vec<u128> = o.got.iter().map(|g| !g & ALL).collect();
        let mut lost = 0u64;
        for (m, &miss) in missing.iter().enumerate().filter(|(_, &x)| x != 0) {
            lost += u64::from(miss.count_ones());
            // An open frame's memory stays lent (the store's contract).
            let Some(dest) = store.module_mut(frame, m) else {
                debug_assert!(false, "store took back open frame {frame}");
                continue;
            };
            for k in (0..PACKETS_PER_FRAME).filter(|k| miss >> k & 1 == 1) {
                dest[words_of_packet(k)].fill(ERROR_WORD);
            }
        }
        if lost == 0 {
            self.stats.complete += 1;
        } else {
            self.stats.partial += 1;
            self.stats.missing_packets += lost;
        }
        store.done(Done { frame, missing });
    }

    /// Hands over, oldest first, the frames done by `now`: whole ones, and all up to the
    /// newest whose deadline passed. Returns how many.
    pub fn poll(&mut self, now: Instant, store: &mut impl FrameStore) -> usize {
        let before = self.open.len();
        self.deliver_whole(store);
        while self.poll_timeout().is_some_and(|t| now >= t) {
            let (&f, _) = self.open.first_key_value().expect("a deadline has a frame");
            self.finish(f, store);
            self.deliver_whole(store);
        }
        before - self.open.len()
    }

    /// When [`poll`](Self::poll) will next hand over a frame by deadline, if any is open.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.open
            .values()
            .map(|o| o.first_seen)
            .min()
            .map(|t| t + self.timeout)
    }

    /// End of the run: hands over every open frame, oldest first, masked. Returns how many.
    pub fn flush(&mut self, store: &mut impl FrameStore) -> usize {
        let n = self.open.len();
        while let Some((&f, _)) = self.open.first_key_value() {
            self.finish(f, store);
        }
        n
    }

    /// Frames open.
    pub fn open_frames(&self) -> usize {
        self.open.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> ReassemblyStats {
        self.stats
    }
}

/// The simplest store: one contiguous ring of `slots` detector frames (module frames one after
/// the other), frame `f` in slot `f % slots`, every slot always writable; a done frame is shown
/// to `on_done` with its slot's words.
pub struct SliceStore<'a, F: FnMut(&Done, &mut [u16])> {
    words: &'a mut [u16],
    modules: usize,
    slots: usize,
    on_done: F,
}

impl<'a, F: FnMut(&Done, &mut [u16])> SliceStore<'a, F> {
    /// A store over `words`, which must hold `slots × modules ×` [`MODULE_PIXELS`] words.
    pub fn new(words: &'a mut [u16], modules: usize, slots: usize, on_done: F) -> Self {
        assert_eq!(words.len(), slots * modules * MODULE_PIXELS, "ring size");
        SliceStore {
            words,
            modules,
            slots,
            on_done,
        }
    }

    /// The words of `frame`'s slot.
    fn slot(&self, frame: u64) -> std::ops::Range<usize> {
        let n = self.modules * MODULE_PIXELS;
        let s = (frame % self.slots as u64) as usize;
        s * n..(s + 1) * n
    }
}

impl<F: FnMut(&Done, &mut [u16])> FrameStore for SliceStore<'_, F> {
    fn module_mut(&mut self, frame: u64, module: usize) -> Option<&mut [u16]> {
        let slot = self.slot(frame);
        self.words[slot].get_mut(module * MODULE_PIXELS..(module + 1) * MODULE_PIXELS)
    }

    fn done(&mut self, done: Done) {
        let slot = self.slot(done.frame);
        (self.on_done)(&done, &mut self.words[slot]);
    }
}

#[cfg(test)]
mod tests;
