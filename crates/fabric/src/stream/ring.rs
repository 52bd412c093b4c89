//! The one-sided shm completion ring: a memfd its consumer creates and hands to the producer
//! (the peer), which publishes WRITE-with-immediate notices and SENDs (up to [`CELL`] bytes,
//! copied into a data cell) in it; the consumer writes a status back per SEND, so an RC
//! requester completes its SEND only once the receiver placed or refused it.
//!
//! Layout: `head` (producer), `tail` (consumer), `doorbell` (the consumer may sleep: ring it),
//! `wake` (the producer waits for SEND statuses: ring back), then [`RING_SLOTS`] entries of
//! 16 bytes (imm, len, kind, status; u32 each), then [`CELLS`] data cells of [`CELL`] bytes
//! (sparse: a cell costs a page once used). SEND number k of the connection uses cell
//! `k % CELLS`; both sides count SENDs themselves, and the producer publishes a SEND only while
//! fewer than [`CELLS`] of its SENDs are unconsumed, so a cell is never rewritten while read.
//!
//! Neither side trusts the other's words: the consumer keeps its own tail and SEND count,
//! refuses a head more than a ring ahead, a length above a cell or an unknown kind; the
//! producer keeps its own head and refuses a tail behind what it saw or beyond its head.
//! Either is a broken connection to the caller; no access leaves the mapping.
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use remora_mem::{Buffer, Region};
use remora_wire::NakCode;

use super::region_slice;
use crate::engine::Payload;
use crate::wr::{Completion, Status, WcOpcode};

/// Entries in a completion ring.
pub(super) const RING_SLOTS: u64 = 1024;
/// Largest SEND through the ring (larger ones take the stream, as UCX's rendezvous).
pub(super) const CELL: usize = 4096;
/// Data cells: SENDs published and not yet consumed, at most.
const CELLS: u64 = 256;
const HEAD: usize = 0;
const TAIL: usize = 64;
const DOORBELL: usize = 128;
const WAKE: usize = 192;
/// Set by the consumer while a SEND waits for a receive buffer (RNR, no time limit).
const RNR: usize = 196;
/// A DOORBELL frame is on its way to the consumer (set by the producer's swap, cleared by the
/// consumer before it drains): one frame per batch, not per entry.
const RUNG: usize = 200;
/// The same for the consumer's ring-back to the producer.
const WOKEN: usize = 204;
/// Set by the consumer when its queue pair stops: from then on the producer makes no
/// one-sided access to what the consumer granted, although its mapping of the grant lasts
/// until it notices the closed socket (a revoked grant ends at once, not a poll turn later).
const GONE: usize = 208;
const ENTRIES: usize = 256;
const ENTRY: usize = 16;
const CELLS_AT: usize = (ENTRIES + ENTRY * RING_SLOTS as usize).next_multiple_of(4096);
/// Bytes of a ring memfd.
pub(super) const RING_BYTES: usize = CELLS_AT + CELL * CELLS as usize;

const WRITE_IMM: u32 = 1;
const SEND: u32 = 2;
const SEND_IMM: u32 = 3;

/// SEND statuses written back by the consumer.
pub(super) const ST_OK: u32 = 1;
/// Refused (RC: a NAK on the packet path; the requester's QP goes to error).
pub(super) const ST_REFUSED: u32 = 2;
/// Not executed: after a refusal (RC), or dropped (UC, whose requester reads no status).
pub(super) const ST_FLUSHED: u32 = 3;

/// A completion ring mapping (ours as consumer, or the peer's as producer).
pub(super) struct Ring {
    map: Buffer,
}

impl Ring {
    /// A fresh ring for the peer to fill; `doorbell` raised from the start when no thread of
    /// ours polls it (progress by a thread).
    pub(super) fn create(doorbell: bool) -> Result<Ring, String> {
        let map = Buffer::memfd("remora-shm-ring", RING_BYTES).map_err(|e| e.to_string())?;
        let r = Ring { map };
        r.word(DOORBELL).store(doorbell as u32, Ordering::SeqCst);
        Ok(r)
    }

    /// Maps the ring the peer handed over (refused unless it is at least [`RING_BYTES`]).
    pub(super) fn map(fd: OwnedFd) -> Result<Ring, String> {
        let map = Buffer::map_memfd(fd, RING_BYTES).map_err(|e| e.to_string())?;
        Ok(Ring { map })
    }

    /// The consumer's queue pair stopped ([`GONE`]).
    pub(super) fn set_gone(&self) {
        self.word(GONE).store(1, Ordering::Release);
    }

    /// Whether the consumer's queue pair stopped.
    pub(super) fn gone(&self) -> bool {
        self.word(GONE).load(Ordering::Acquire) != 0
    }

    /// The ring's memfd, to hand over.
    pub(super) fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.map.fd()
    }

    fn word64(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is 8-aligned inside the page-aligned mapping, which lives as long as
        // self; the peer writes it only through atomics of the same width.
        unsafe { &*(self.map.as_ptr().add(at) as *const AtomicU64) }
    }

    fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: as in `word64`, 4-aligned.
        unsafe { &*(self.map.as_ptr().add(at) as *const AtomicU32) }
    }

    fn head(&self) -> &AtomicU64 {
        self.word64(HEAD)
    }

    fn tail(&self) -> &AtomicU64 {
        self.word64(TAIL)
    }

    /// Word `w` (0 imm, 1 len, 2 kind, 3 status) of entry `i` (reduced modulo the slots).
    fn field(&self, i: u64, w: usize) -> &AtomicU32 {
        self.word(ENTRIES + ENTRY * (i % RING_SLOTS) as usize + 4 * w)
    }

    fn cell(&self, k: u64) -> *mut u8 {
        // SAFETY: the index is reduced modulo the cell count; a cell lies inside the mapping.
        unsafe {
            self.map
                .as_ptr()
                .add(CELLS_AT + CELL * (k % CELLS) as usize)
        }
    }
}

/// A send-side completion held back for order behind a ring SEND whose status is not back.
struct Held {
    /// The ring entry whose status decides it; `None` once decided (or for a request that was
    /// carried out already).
    slot: Option<u64>,
    done: Completion,
}

/// The producing side: a ring of the peer and what we published in it.
pub(super) struct Producer {
    ring: Ring,
    head: u64,
    /// The peer's tail as last seen (checked): entries below it are consumed.
    seen: u64,
    /// SENDs published so far (the next one's cell).
    sent: u64,
    /// Ring indices of our SENDs not yet consumed (their cells are busy), oldest first.
    sends: VecDeque<u64>,
    /// RC: send-side completions in posting order from the oldest ring SEND without a status.
    held: VecDeque<Held>,
    /// A ring SEND failed: the QP is in error; later ones complete as flushed.
    pub(super) failed: bool,
}

/// What a publish did.
pub(super) enum Pushed {
    /// Published; the consumer asked to be woken.
    Ring { doorbell: bool },
    /// No room (entries or cells): wait for the consumer.
    Full { rnr: bool },
}

/// One entry to publish.
pub(super) struct Entry<'a> {
    pub imm: Option<u32>,
    pub len: u32,
    /// A SEND's payload (`None`: a WRITE-with-immediate's notice).
    pub send: Option<&'a [u8]>,
    /// RC SEND: its completion, held until the status comes back.
    pub hold: Option<Completion>,
}

impl Producer {
    /// The peer's ring.
    pub(super) fn ring(&self) -> &Ring {
        &self.ring
    }

    pub(super) fn new(ring: Ring, wake: bool) -> Producer {
        let head = ring.head().load(Ordering::Acquire);
        ring.word(WAKE).store(wake as u32, Ordering::SeqCst);
        Producer {
            ring,
            head,
            seen: head,
            sent: 0,
            sends: VecDeque::new(),
            held: VecDeque::new(),
            failed: false,
        }
    }

    /// Looks at the peer's tail and the statuses of our SENDs it consumed; an error when the
    /// tail is outside what we published and it has not seen (a corrupt or hostile peer).
    pub(super) fn collect(&mut self) -> Result<(), String> {
        let tail = self.ring.tail().load(Ordering::SeqCst);
        let done = tail.wrapping_sub(self.seen);
        if done > self.head.wrapping_sub(self.seen) {
            return Err(format!(
                "the peer's ring tail {tail} is outside {}..={}",
                self.seen, self.head
            ));
        }
        if done == 0 {
            return Ok(());
        }
        let consumed = |i: u64| i.wrapping_sub(self.seen) < done;
        while self.sends.front().is_some_and(|&i| consumed(i)) {
            self.sends.pop_front();
        }
        let mut bad = None;
        for h in self.held.iter_mut() {
            let Some(i) = h.slot.filter(|&i| consumed(i)) else {
                continue;
            };
            let st = self.ring.field(i, 3).load(Ordering::Relaxed);
            h.done.status = match st {
                _ if self.failed => Status::Flushed,
                ST_OK => Status::Success,
                ST_REFUSED => Status::RemoteInvalidRequest,
                ST_FLUSHED => Status::Flushed,
                _ => {
                    bad = Some(st);
                    Status::RemoteOperationalError
                }
            };
            self.failed |= h.done.status != Status::Success;
            h.slot = None;
        }
        self.seen = tail;
        match bad {
            Some(st) => Err(format!("SEND status {st} in the peer's ring")),
            None => Ok(()),
        }
    }

    /// Publishes an entry (the bytes of a WRITE are already in place; a SEND's payload is
    /// copied into its cell here).
    pub(super) fn push(&mut self, e: &Entry<'_>) -> Result<Pushed, String> {
        self.collect()?;
        let full = self.head.wrapping_sub(self.seen) >= RING_SLOTS
            || (e.send.is_some() && self.sends.len() as u64 >= CELLS);
        if full {
            let rnr = self.ring.word(RNR).load(Ordering::Acquire) != 0;
            return Ok(Pushed::Full { rnr });
        }
        let i = self.head;
        let kind = match (e.send, e.imm) {
            (None, _) => WRITE_IMM,
            (Some(_), None) => SEND,
            (Some(_), Some(_)) => SEND_IMM,
        };
        if let Some(data) = e.send {
            assert!(data.len() <= CELL, "a ring SEND fits a cell");
            // SAFETY: a cell of the mapping not being read: the consumer reads only cells of
            // SENDs below head, and fewer than CELLS of ours are unconsumed.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.ring.cell(self.sent), data.len())
            };
            self.sent += 1;
            self.sends.push_back(i);
        }
        self.ring
            .field(i, 0)
            .store(e.imm.unwrap_or(0), Ordering::Relaxed);
        self.ring.field(i, 1).store(e.len, Ordering::Relaxed);
        self.ring.field(i, 2).store(kind, Ordering::Relaxed);
        self.ring.field(i, 3).store(0, Ordering::Relaxed);
        if let Some(done) = e.hold {
            self.held.push_back(Held {
                slot: Some(i),
                done,
            });
        }
        self.head = self.head.wrapping_add(1);
        // Release of everything above (SeqCst: the Dekker pair with the doorbell load).
        self.ring.head().store(self.head, Ordering::SeqCst);
        // A frame still on its way makes the consumer drain after this store (it clears RUNG
        // before loading head), so only the first of a batch sends one.
        let want = self.ring.word(DOORBELL).load(Ordering::SeqCst) != 0;
        Ok(Pushed::Ring {
            doorbell: want && self.ring.word(RUNG).swap(1, Ordering::SeqCst) == 0,
        })
    }

    /// True while a completion is held behind a ring SEND.
    pub(super) fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Queues a send-side completion behind those held (or returns it when none is).
    pub(super) fn in_order(&mut self, c: Completion) -> Option<Completion> {
        if self.held.is_empty() {
            return Some(c);
        }
        self.held.push_back(Held {
            slot: None,
            done: c,
        });
        None
    }

    /// Moves the completions decided, in order, into `out`.
    pub(super) fn ready(&mut self, out: &mut Vec<Completion>) {
        while self.held.front().is_some_and(|h| h.slot.is_none()) {
            out.push(self.held.pop_front().expect("front exists").done);
        }
    }

    /// The connection is gone: everything held completes, undecided SENDs as flushed.
    pub(super) fn flush_all(&mut self, out: &mut Vec<Completion>) {
        self.failed = true;
        for mut h in self.held.drain(..) {
            if h.slot.is_some() {
                h.done.status = Status::Flushed;
            }
            out.push(h.done);
        }
    }

    /// Asks the consumer to ring back when it wrote statuses (a thread of ours may sleep).
    pub(super) fn want_wake(&self, on: bool) {
        self.ring.word(WAKE).store(on as u32, Ordering::SeqCst);
    }

    /// A DOORBELL frame arrived: the next status write rings back again (cleared before the
    /// caller looks at the statuses).
    pub(super) fn woken(&self) {
        self.ring.word(WOKEN).store(0, Ordering::SeqCst);
    }
}

/// A SEND's payload in a cell of our ring, for the engine to place.
pub(super) struct CellPayload {
    src: *const u8,
    len: usize,
}

impl Payload for CellPayload {
    fn len(&self) -> usize {
        self.len
    }

    fn place(&mut self, region: &Region, offset: usize) -> Result<(), NakCode> {
        if let Err(e) = region.page_in_range(offset, self.len) {
            tracing::debug!(error = %e, "populating a range failed; the copy takes the faults");
        }
        // SAFETY: the engine checked offset+len against the receive buffer; the source is a
        // cell of our mapping and len is at most a cell (checked by the consumer).
        unsafe {
            let dst = region_slice(region, offset, self.len);
            std::ptr::copy_nonoverlapping(self.src, dst.as_mut_ptr(), self.len);
        }
        Ok(())
    }
}

/// What the consumer's caller decides for a SEND entry.
pub(super) enum SendFate {
    /// Consumed: the receive's completion if any, and the status for the producer.
    Done(Option<Completion>, u32),
    /// No receive buffer: the entry stays (RNR).
    Wait,
}

/// Decides a SEND entry: its payload and immediate in, its fate out.
pub(super) type SendFn<'a> = dyn FnMut(&mut CellPayload, Option<u32>) -> SendFate + 'a;

/// What a drain did.
#[derive(Default)]
pub(super) struct Drained {
    /// Entries consumed.
    pub n: usize,
    /// Stopped at a SEND: the caller had no engine, or no receive was posted.
    pub stopped: bool,
    /// Statuses were written and the producer asked to be woken.
    pub wake: bool,
}

/// The consuming side: our ring and the next index to read (kept here, not trusted from the
/// shared page).
pub(super) struct Consumer {
    ring: Ring,
    tail: u64,
    /// SENDs consumed so far (the next one's cell).
    sends: u64,
    /// RC: a SEND was refused; later SENDs are not executed (the requester is in error).
    refused: bool,
    /// Raised for good (progress by a thread): the receive thread drains on every doorbell.
    always_ring: bool,
}

impl Consumer {
    pub(super) fn new(ring: Ring, always_ring: bool) -> Consumer {
        Consumer {
            ring,
            tail: 0,
            sends: 0,
            refused: false,
            always_ring,
        }
    }

    pub(super) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// True when nothing is waiting (one atomic load).
    pub(super) fn is_empty(&self) -> bool {
        self.ring.head().load(Ordering::Acquire) == self.tail
    }

    /// Moves the published entries, in order, into `out` as completions; SENDs go through
    /// `send` (none: stop at the first). An error when the peer corrupted the ring.
    pub(super) fn drain(
        &mut self,
        out: &mut Vec<Completion>,
        mut send: Option<&mut SendFn<'_>>,
    ) -> Result<Drained, String> {
        let head = self.ring.head().load(Ordering::Acquire);
        let n = head.wrapping_sub(self.tail);
        let mut d = Drained::default();
        if n == 0 {
            return Ok(d);
        }
        if n > RING_SLOTS {
            return Err(format!(
                "the peer's completion ring claims {n} entries, more than its {RING_SLOTS} slots"
            ));
        }
        let mut statuses = false;
        let mut i = self.tail;
        while i != head {
            let imm = self.ring.field(i, 0).load(Ordering::Relaxed);
            let len = self.ring.field(i, 1).load(Ordering::Relaxed);
            match self.ring.field(i, 2).load(Ordering::Relaxed) {
                WRITE_IMM => out.push(Completion {
                    wr_id: 0,
                    status: Status::Success,
                    opcode: WcOpcode::RecvRdmaWithImm,
                    byte_len: len,
                    imm: Some(imm),
                    in_sequence: u32::MAX,
                }),
                kind @ (SEND | SEND_IMM) => {
                    if len as usize > CELL {
                        return Err(format!("a ring SEND of {len} bytes, above a cell"));
                    }
                    let st = if self.refused {
                        ST_FLUSHED
                    } else {
                        let Some(f) = send.as_mut() else {
                            d.stopped = true;
                            break;
                        };
                        let mut p = CellPayload {
                            src: self.ring.cell(self.sends),
                            len: len as usize,
                        };
                        match f(&mut p, (kind == SEND_IMM).then_some(imm)) {
                            SendFate::Wait => {
                                d.stopped = true;
                                self.ring.word(RNR).store(1, Ordering::Release);
                                break;
                            }
                            SendFate::Done(c, st) => {
                                out.extend(c);
                                st
                            }
                        }
                    };
                    self.refused |= st == ST_REFUSED;
                    self.ring.field(i, 3).store(st, Ordering::Relaxed);
                    self.sends += 1;
                    statuses = true;
                }
                k => return Err(format!("unknown ring entry kind {k}")),
            }
            i = i.wrapping_add(1);
            d.n += 1;
        }
        if !d.stopped {
            self.ring.word(RNR).store(0, Ordering::Release);
        }
        if d.n > 0 {
            self.tail = i;
            // Release of the statuses (SeqCst: the Dekker pair with the wake load).
            self.ring.tail().store(i, Ordering::SeqCst);
            d.wake = statuses
                && self.ring.word(WAKE).load(Ordering::SeqCst) != 0
                && self.ring.word(WOKEN).swap(1, Ordering::SeqCst) == 0;
        }
        Ok(d)
    }

    /// A DOORBELL frame arrived: the next entry rings again (cleared before draining).
    pub(super) fn rung(&self) {
        self.ring.word(RUNG).store(0, Ordering::SeqCst);
    }

    /// Raises or lowers the doorbell flag around a sleep (no effect when it is up for good).
    pub(super) fn want_doorbell(&self, on: bool) {
        if !self.always_ring {
            self.ring.word(DOORBELL).store(on as u32, Ordering::SeqCst);
        }
    }
}
