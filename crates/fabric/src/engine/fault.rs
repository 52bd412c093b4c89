//! Page-fault-tolerant placement (PART): the settings, the page-in requests the responder hands
//! to its driver, and the byte ranges each page-in policy covers.
//!
//! The engine never touches a page that is not resident in an `on-demand` region from the
//! receive path. A packet that faults asks for a [`PageInRequest`], which the driver's page-in
//! worker runs off the receive path, in pieces, reporting each with
//! [`super::QpProtocol::page_in_progress`] and the end with [`super::QpProtocol::page_in_done`].
//!
//! **The wave.** When the policy's range reaches past the faulting packet (PIA: the rest of the
//! message; PI4: the block), the page-in is a wave the transfer rides behind: the faulting packet
//! and those after it wait in a bounded reorder window ([`PartConfig::reorder`] packets, their
//! payloads copied out) and are placed in order as the wave's front passes them. Only when the
//! window is full, or the policy brings in the faulting packet's pages alone (PIO), does the
//! responder stop the sender: the packet is dropped and a fault NAK (an RNR NAK with timer code
//! [`FAULT_RNR_TIMER`]) names its PSN, so the sender resends exactly from there.
//!
//! **The pace.** A fault NAK's AETH MSN field carries the responder's estimate, in microseconds,
//! of when that packet's pages will be resident (what the waves still have to bring in before it,
//! at the page-in rate measured from their progress reports); 0 means no estimate. A requester
//! with a fault timeout (TO) resumes then, rather than probing; one without (NTO) waits for the
//! explicit retransmission request (ERR): a PSN sequence error NAK naming the PSN to resume
//! from, which any RC requester already treats as "resend from here", sent once the page-in that
//! holds the packet is complete, as in the paper.
//!
//! A fault NAK does not acknowledge what precedes its PSN (packets there may still wait in the
//! window, and their page-in may yet fail); the ERR, ACKs and every other NAK do.
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_mem::{Mode, Region};
use remora_wire::Psn;

/// RNR NAK timer code that means "a page fault: hold until an ERR or your fault timeout".
/// Code 0 is the longest RNR wait in the IBA table (655.36 ms), so a requester that does not
/// know PART still waits long enough for the page-in and then simply retries.
pub const FAULT_RNR_TIMER: u8 = 0;

/// Where a fault on a non-resident page is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultMode {
    /// PART: the receive path never blocks on a fault (RC only; UC, which cannot ask for a
    /// resend, places inline).
    Part,
    /// The copy into the region takes the fault on the receive thread, as a NIC would with
    /// pinned memory and nothing else: every queue pair behind that thread waits for the
    /// page-in (head-of-line blocking). Kept for comparison.
    Inline,
}

/// Which pages a fault brings in (the paper's policies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageInPolicy {
    /// PIO: the pages of the faulting packet only.
    Pio,
    /// PI4: the aligned block(s) of [`PartConfig::block`] bytes holding the faulting packet.
    Pi4,
    /// PIA: every page of the message from the faulting packet to its end.
    Pia,
}

impl std::str::FromStr for PageInPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<PageInPolicy, String> {
        match s.to_ascii_lowercase().as_str() {
            "pio" => Ok(PageInPolicy::Pio),
            "pi4" | "block" => Ok(PageInPolicy::Pi4),
            "pia" => Ok(PageInPolicy::Pia),
            _ => Err(format!("unknown page-in policy {s:?} (pio, pi4 or pia)")),
        }
    }
}

impl std::fmt::Display for PageInPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PageInPolicy::Pio => "pio",
            PageInPolicy::Pi4 => "pi4",
            PageInPolicy::Pia => "pia",
        })
    }
}

impl std::str::FromStr for FaultMode {
    type Err = String;
    fn from_str(s: &str) -> Result<FaultMode, String> {
        match s {
            "part" => Ok(FaultMode::Part),
            "inline" => Ok(FaultMode::Inline),
            _ => Err(format!("unknown fault mode {s:?} (part or inline)")),
        }
    }
}

/// Fault handling of one queue pair: the responder's policy and the requester's timeout.
///
/// ```
/// use std::time::{Duration, Instant};
/// use remora_fabric::{PageInPolicy, PartConfig};
/// let part = PartConfig {
///     policy: PageInPolicy::Pia,
///     fault_timeout: Some(Duration::from_micros(100)),
///     ..PartConfig::default()
/// };
/// assert_eq!(part.block, 16 << 10);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartConfig {
    /// PART or inline faults.
    pub mode: FaultMode,
    /// Pages brought in per fault.
    pub policy: PageInPolicy,
    /// Block size of [`PageInPolicy::Pi4`] in bytes (16 KiB, the paper's).
    pub block: usize,
    /// Requester side: after a fault NAK, resend on our own after this long even if no ERR came
    /// (the paper's TO: 100 µs, 500 µs, 1 ms); `None` waits for the ERR (NTO), with a long
    /// safety limit in case the ERR is lost. A fault NAK that carries the responder's estimate
    /// of when the pages will be in (the wave's pace) sets the resume time instead.
    pub fault_timeout: Option<Duration>,
    /// Responder side: packets that may wait in the reorder window behind a page-in wave
    /// (their payloads are copied out, so at most `reorder` × MTU bytes per queue pair while a
    /// wave runs). 0 turns the window off: every fault stops the sender, as in the paper.
    pub reorder: u32,
}

/// Default [`PartConfig::reorder`]: the default requester window (1024 packets), so that a
/// whole window sent into a wave waits and none of it is sent again; 4 MiB of copies at MTU
/// 4096 while a wave runs.
pub const DEFAULT_REORDER: u32 = 1024;

impl Default for PartConfig {
    fn default() -> PartConfig {
        PartConfig {
            mode: FaultMode::Part,
            policy: PageInPolicy::Pia,
            block: 16 << 10,
            fault_timeout: None,
            reorder: DEFAULT_REORDER,
        }
    }
}

/// Pages the responder needs resident before it can place a packet, handed to the driver's
/// page-in worker. Report the outcome with [`super::QpProtocol::page_in_done`] and `id`.
#[derive(Clone, Debug)]
pub struct PageInRequest {
    /// Names the request in [`super::QpProtocol::page_in_done`].
    pub id: u64,
    /// PSN of the packet that faulted.
    pub psn: Psn,
    /// The region to populate.
    pub region: Arc<Region>,
    /// Byte range in the region, as the policy chose it.
    pub offset: usize,
    /// Length of the range in bytes.
    pub len: usize,
}

impl PageInRequest {
    /// Makes the range resident in pieces of `chunk` bytes, in the order the packets will
    /// arrive. Returns the pages newly made resident.
    pub fn run(&self, chunk: usize) -> remora_mem::Result<usize> {
        self.run_reporting(chunk, |_| {})
    }

    /// [`PageInRequest::run`], calling `piece(done)` after each piece but the last with the
    /// bytes from [`PageInRequest::offset`] resident so far: hand that to
    /// [`super::QpProtocol::page_in_progress`], so that packets behind the wave's front are
    /// placed while the rest comes in.
    pub fn run_reporting(
        &self,
        chunk: usize,
        mut piece: impl FnMut(usize),
    ) -> remora_mem::Result<usize> {
        let chunk = chunk.max(1);
        let mut pages = 0;
        let mut done = 0;
        while done < self.len {
            let n = chunk.min(self.len - done);
            pages += self.region.page_in_range(self.offset + done, n)?;
            done += n;
            if done < self.len {
                piece(done);
            }
        }
        Ok(pages)
    }
}

/// Where the responder stopped taking packets: the packet at `psn` was neither placed nor held,
/// a fault NAK told the sender to hold there, and what follows is dropped until it comes again.
pub(super) struct Stall {
    pub(super) psn: Psn,
    /// The pages that packet needs, when it was looked at (a fault); `None` when it was dropped
    /// unopened because the reorder window was full.
    pub(super) target: Option<(Arc<Region>, usize, usize)>,
}

/// A page-in handed to the driver and not yet reported done: the wave, when it covers more
/// than the packet that asked for it.
pub(super) struct InFlight {
    pub(super) id: u64,
    pub(super) region: Arc<Region>,
    pub(super) offset: usize,
    pub(super) len: usize,
    /// Bytes from `offset` the driver reported resident so far (the wave's front).
    pub(super) front: usize,
    /// When it was asked for, then when the front last moved (for the page-in rate).
    pub(super) at: Instant,
}

impl InFlight {
    /// Whether the range holds page `page` of `region`.
    fn holds(&self, region: &Arc<Region>, page: usize) -> bool {
        Arc::ptr_eq(&self.region, region)
            && self.len > 0
            && self.region.page_of(self.offset).is_some_and(|a| a <= page)
            && self
                .region
                .page_of(self.offset + self.len - 1)
                .is_some_and(|b| page <= b)
    }
}

/// The responder's fault bookkeeping.
#[derive(Default)]
pub(super) struct FaultBook {
    /// At most one per queue pair: RC places in PSN order, so nothing after it can go in.
    pub(super) stall: Option<Stall>,
    /// Requests handed out and not reported done, oldest first (the order the worker runs them).
    pub(super) inflight: Vec<InFlight>,
    /// Requests not yet taken by the driver.
    pub(super) requests: std::collections::VecDeque<PageInRequest>,
    next_id: u64,
    tag: u64,
}

impl FaultBook {
    /// Whether page-ins already on their way cover every missing page of the range, so a
    /// resend that faults again asks for nothing new.
    pub(super) fn covered(&self, region: &Arc<Region>, offset: usize, len: usize) -> bool {
        let (Some(lo), Some(hi)) = (
            region.page_of(offset),
            region.page_of(offset + len.max(1) - 1),
        ) else {
            return false;
        };
        region
            .residency()
            .missing(lo..hi + 1)
            .all(|page| self.inflight.iter().any(|w| w.holds(region, page)))
    }

    /// Bytes still to come in before byte `end` of `region` is resident: the rest of the
    /// page-in that holds it and of every one asked for before it (the worker runs them in
    /// order). `None` when no page-in in flight holds it.
    pub(super) fn bytes_before(&self, region: &Arc<Region>, end: usize) -> Option<usize> {
        let page = region.page_of(end.max(1) - 1)?;
        let mut ahead = 0;
        for w in &self.inflight {
            if w.holds(region, page) {
                let upto = (end.max(w.offset) - w.offset).min(w.len);
                return Some(ahead + upto.saturating_sub(w.front));
            }
            ahead += w.len - w.front.min(w.len);
        }
        None
    }

    /// A book whose request ids carry `tag` (the requester's have the top bit set, so one
    /// [`super::QpProtocol::page_in_done`] routes both sides' reports).
    pub(super) fn tagged(tag: u64) -> FaultBook {
        FaultBook {
            tag,
            ..FaultBook::default()
        }
    }

    /// Queues a page-in of `[offset, offset+len)` for the driver; returns its id.
    pub(super) fn request(
        &mut self,
        now: Instant,
        psn: Psn,
        region: &Arc<Region>,
        offset: usize,
        len: usize,
    ) -> u64 {
        self.next_id += 1;
        let id = self.tag | self.next_id;
        self.inflight.push(InFlight {
            id,
            region: region.clone(),
            offset,
            len,
            front: 0,
            at: now,
        });
        self.requests.push_back(PageInRequest {
            id,
            psn,
            region: region.clone(),
            offset,
            len,
        });
        id
    }

    /// The driver reports the first `done` bytes of request `id` resident. Returns the bytes
    /// the front moved and the time since it last moved (or since the request), for the rate.
    pub(super) fn advance(
        &mut self,
        now: Instant,
        id: u64,
        done: usize,
    ) -> Option<(usize, Duration)> {
        let w = self.inflight.iter_mut().find(|w| w.id == id)?;
        let done = done.min(w.len);
        if done <= w.front {
            return None;
        }
        let moved = done - w.front;
        let took = now.saturating_duration_since(w.at);
        w.front = done;
        w.at = now;
        Some((moved, took))
    }

    /// Forgets request `id`; false if it was not in flight (a stale or foreign report).
    pub(super) fn finish(&mut self, id: u64) -> bool {
        let before = self.inflight.len();
        self.inflight.retain(|w| w.id != id);
        self.requests.retain(|r| r.id != id);
        self.inflight.len() != before
    }
}

/// True when placing `len` bytes at `offset` must go through PART: the region is on-demand and
/// some page of the range is not resident.
pub(super) fn must_fault(cfg: &PartConfig, region: &Region, offset: usize, len: usize) -> bool {
    cfg.mode == FaultMode::Part
        && len > 0
        && region.mode() == Mode::OnDemand
        && !region.is_resident(offset, len)
}

/// The byte range a fault on `[offset, offset+len)` brings in under `cfg`'s policy, where
/// `rest` bytes of the message start at `offset` (`rest >= len`). Clamped to the region.
pub(super) fn policy_range(
    cfg: &PartConfig,
    region: &Region,
    offset: usize,
    len: usize,
    rest: usize,
) -> (usize, usize) {
    let size = region.len();
    let (lo, hi) = match cfg.policy {
        PageInPolicy::Pio => (offset, offset + len),
        PageInPolicy::Pia => (offset, offset + rest.max(len)),
        PageInPolicy::Pi4 => {
            // Blocks are aligned in the address space, as the paper's are.
            let b = cfg.block.max(1) as u64;
            let base = region.addr();
            let a_lo = (base + offset as u64) / b * b;
            let a_hi = (base + (offset + len) as u64).div_ceil(b) * b;
            (
                a_lo.saturating_sub(base) as usize,
                (a_hi - base).min(size as u64) as usize,
            )
        }
    };
    let hi = hi.min(size);
    (lo, hi.saturating_sub(lo))
}

/// Requester and responder sides both populate a *source* that faults before reading it
/// (a WRITE's local buffer, a READ response's region): the same policy, synchronously, since
/// the bytes are needed for the packet being built. Returns the pages brought in, or 0 when
/// nothing was missing.
pub(super) fn populate_source(
    cfg: &PartConfig,
    region: &Region,
    offset: usize,
    len: usize,
    rest: usize,
) -> usize {
    if !must_fault(cfg, region, offset, len) {
        return 0;
    }
    let (o, n) = policy_range(cfg, region, offset, len, rest);
    match region.page_in_range(o, n) {
        Ok(p) => p,
        Err(e) => {
            // The copy that follows takes the fault itself (or the kernel refuses it): the
            // populate was only there to batch it.
            tracing::debug!(error = %e, "populating a source range failed");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora_mem::{Access, Buffer, Pd};

    fn region(len: usize) -> Arc<Region> {
        let pd = Pd::new();
        pd.register(Buffer::anonymous(len).unwrap(), Access::ALL, Mode::OnDemand)
            .unwrap()
    }

    #[test]
    fn policies_cover_the_packet_the_block_or_the_rest_of_the_message() {
        let r = region(1 << 20);
        let cfg = |policy| PartConfig {
            policy,
            ..PartConfig::default()
        };
        assert_eq!(
            policy_range(&cfg(PageInPolicy::Pio), &r, 20_000, 4096, 100_000),
            (20_000, 4096)
        );
        // 20000..24096 lies in the 16 KiB blocks at 16384 and 32768 - 1; the region is
        // page-aligned, and anonymous mappings are at least page-aligned, so block alignment is
        // relative to an address that is a multiple of 4096 only: compute from the address.
        let (o, n) = policy_range(&cfg(PageInPolicy::Pi4), &r, 20_000, 4096, 100_000);
        let a = r.addr() + o as u64;
        assert_eq!(a % (16 << 10), 0, "block-aligned start");
        assert!(o <= 20_000 && o + n >= 24_096 && n % 4096 == 0 && n <= 32 << 10);
        assert_eq!(
            policy_range(&cfg(PageInPolicy::Pia), &r, 20_000, 4096, 100_000),
            (20_000, 100_000)
        );
        // Clamped at the end of the region.
        assert_eq!(
            policy_range(&cfg(PageInPolicy::Pia), &r, (1 << 20) - 10, 10, 1 << 30),
            ((1 << 20) - 10, 10)
        );
    }

    #[test]
    fn a_request_runs_in_chunks_and_marks_the_pages() {
        let r = region(1 << 20);
        assert!(must_fault(&PartConfig::default(), &r, 0, 1 << 20));
        let req = PageInRequest {
            id: 1,
            psn: Psn::new(0),
            region: r.clone(),
            offset: 4096,
            len: 64 << 10,
        };
        assert_eq!(req.run(16 << 10).unwrap(), 16);
        assert!(r.is_resident(4096, 64 << 10));
        assert!(!r.is_resident(0, 4096));
        assert_eq!(req.run(16 << 10).unwrap(), 0, "nothing twice");
        let inline = PartConfig {
            mode: FaultMode::Inline,
            ..PartConfig::default()
        };
        assert!(!must_fault(&inline, &r, 0, 4096));
    }
}
