//! One-sided shm: the requester maps the memfd regions its peer granted and performs WRITE and
//! READ itself, and tells the peer about a WRITE-with-immediate through a completion ring in
//! shared memory that the peer's completion queue drains.
//!
//! Setup: at the start of every shm queue pair each side hands the other its completion ring
//! (a small memfd, `SCM_RIGHTS` over the unix socket). Regions are granted on request: the
//! first request to a remote key the requester has no grant for takes the stream as before and
//! asks for a grant (GRANT_REQ); the responder answers with the region's memfd only if the key
//! names one of its regions that is a sealed memfd with remote rights, as a read-only
//! descriptor when the region has no remote write, so the peer cannot map it writable. Knowing
//! the remote key stays the capability, as with RDMA: a peer is given only regions it can name.
//! Memory that is not a memfd keeps the copy path through the stream.
//!
//! Every access is still checked here, on the requester's side, by the engine's own check
//! ([`crate::engine::access::check`], the one its responder applies to requests that arrive):
//! the remote key must name a granted region, the region must carry the right and the range
//! must lie inside it (checked arithmetic). A refused access completes with
//! `RemoteAccessError`, and on RC the queue pair goes to the error state, as after a NAK.
//!
//! The ring ([`super::ring`]) is single-producer (the peer's posting threads, serialized by a
//! lock) and single-consumer (this side, under a lock). The producer publishes an entry with a
//! release store of `head` after the payload's memcpy, so a consumer that sees the entry sees
//! the data. When the consumer may be asleep it raises the doorbell flag, and the producer then
//! also sends a DOORBELL frame on the stream, which the consumer's receive thread turns into a
//! drain of the ring into the completion queue (Dekker pattern on two SeqCst atomics: the
//! producer stores head then loads the flag, the consumer stores the flag then loads head, so
//! one of them sees the other). A producer that finds the ring full rings the doorbell anyway
//! and waits for room, which the consumer's receive thread makes whether or not its
//! application polls: backpressure, as a receiver not ready, never a lost immediate.
//!
//! SENDs of up to [`CELL`] bytes take the ring too (larger ones the stream, as UCX's
//! eager/rendezvous split): the payload goes into a data cell and the consumer matches the
//! entry with the next posted receive through the engine ([`QpProtocol::accept_send`], the
//! responder's own matching, length check and MSN). With no receive posted the entry waits
//! in the ring (RNR without limit, as on the stream) until `post_recv` drains it. Matching
//! needs the engine, under the connection lock: a drain that holds it (a round, a DOORBELL,
//! `post_recv`, `deliver`) takes SENDs; an application's drain takes the lock only after
//! releasing the consumer's (the order is conn, then consumer), or stops at the SEND. The
//! consumer writes a status per SEND into its entry before releasing `tail`, and rings back
//! (a DOORBELL) when the producer raised its `wake` flag; an RC requester completes the SEND
//! from that status: success, or `RemoteInvalidRequest` and the QP in error for a SEND that
//! did not fit the receive buffer (the stream's NAK), as [`Shared::harvest`] finds it from
//! whichever thread makes progress. UC completes a SEND once it is published.
//!
//! Order: a request takes this path only when no request of the queue pair is outstanding on
//! the stream (RC) or the queue pair never used the stream (UC), and the receive thread drains
//! the ring before it delivers a completion of its own, so completions keep the posting order.
//! Send-side completions after a ring SEND wait behind it, and a request for the stream waits
//! until the ring SENDs before it have their status (RC).
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use remora_mem::{grant, Access};

use super::frame::*;
use super::grant::{grantable, Grant};
use super::io::Conn;
use super::ring::*;
use super::{lock, resident_slice, DataPath, Shared, StreamQp, MAX_PEER_MAPS};
use crate::engine::{Accepted, QpProtocol};
use crate::error::Error;
use crate::wr::{Completion, SendWr, Status, WrOp};

/// Longest a ring entry waits for room while the peer consumes nothing (a SEND waiting for a
/// receive buffer, which the peer flags, waits without limit, as RNR on the stream does).
const RING_FULL_LIMIT: Duration = Duration::from_secs(10);

/// The shm side of the driver: rings and grants (frames handled by [`super::io`]).
impl Shared {
    /// Queues the RING frame that hands the peer our completion ring.
    pub(super) fn queue_ring(&self, c: &mut Conn) {
        let fd = self.consumer.as_ref().and_then(|cons| {
            lock(cons).ring().fd().and_then(|f| {
                grant::seal_seals(f)
                    .and_then(|()| f.try_clone_to_owned())
                    .ok()
            })
        });
        if let Some(fd) = fd {
            let f = Frame {
                kind: RING,
                aux: RING_BYTES as u64,
                ..Frame::default()
            };
            c.ctl.push_back((f, Some(fd)));
        }
    }

    /// Maps the ring the peer handed over (RING frame).
    pub(super) fn take_ring(&self) {
        let ring = match self.sock.take_fd() {
            None => Err("RING frame without a descriptor".to_string()),
            Some(fd) => Ring::map(fd),
        };
        match ring {
            Ok(ring) => *lock(&self.producer) = Some(Producer::new(ring, self.ring_thread)),
            Err(e) => {
                self.count(|s| s.invalid_requests += 1);
                tracing::debug!(error = %e, "cannot map the peer's completion ring");
            }
        }
    }

    /// Maps a region the peer granted (GRANT frame).
    pub(super) fn take_grant(&self, f: Frame) {
        let mapped = match self.sock.take_fd() {
            None => Err("GRANT frame without a descriptor".to_string()),
            Some(fd) => Grant::map(fd, f.va, f.aux, f.rkey, f.code),
        };
        let mut grants = self.grants.write().unwrap_or_else(|e| e.into_inner());
        match mapped {
            Ok(_) if grants.len() >= MAX_PEER_MAPS => self.count(|s| s.invalid_requests += 1),
            Ok(g) => {
                grants.retain(|o| o.rkey() != g.rkey());
                grants.push(g);
            }
            // Not fatal: requests to that region take the stream.
            Err(e) => {
                self.count(|s| s.invalid_requests += 1);
                tracing::debug!(error = %e, "cannot map a region the peer granted");
            }
        }
    }

    /// The GRANT answering a GRANT_REQ: only a region the peer names by its remote key, with
    /// remote rights, backed by a sealed memfd; a bounded number per connection. No answer
    /// otherwise: the peer's requests to that key keep taking the stream, where the engine
    /// checks them.
    pub(super) fn answer_grant(&self, rkey: u32) -> Option<(Frame, Option<OwnedFd>)> {
        let given = self.grants_given.load(Ordering::Relaxed);
        if !matches!(self.path, DataPath::Shm) || given >= MAX_PEER_MAPS {
            return None;
        }
        let pd_region = self.pd.by_rkey(rkey);
        let Some((r, (code, fd))) = pd_region.and_then(|r| grantable(&r).map(|g| (r, g))) else {
            tracing::debug!(rkey, "shm: no grant for this key");
            return None;
        };
        self.grants_given.fetch_add(1, Ordering::Relaxed);
        let g = Frame {
            kind: GRANT,
            code,
            va: r.addr(),
            aux: r.len() as u64,
            rkey: r.rkey(),
            ..Frame::default()
        };
        Some((g, Some(fd)))
    }

    /// Moves what the peer published in our ring into the completion queue, without the
    /// connection lock (an application's poll). A SEND entry needs the engine's receive
    /// queue, so the drain stops there and takes the connection with the consumer released
    /// (the order is always conn, then consumer): waiting for it when `block`, else only if
    /// free (a busy holder drains the ring on its way out, or the next poll does).
    pub(super) fn drain_ring(&self, block: bool) -> bool {
        let Some(cons) = &self.consumer else {
            return false;
        };
        let stopped = {
            let mut k = lock(cons);
            if k.is_empty() {
                return false;
            }
            self.drain_locked(&mut k, None).stopped
        };
        if stopped {
            let conn = match self.conn.try_lock() {
                Ok(c) => Some(c),
                Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => block.then(|| lock(&self.conn)),
            };
            if let Some(mut c) = conn {
                self.drain_conn(&mut c);
                if let Err(why) = self.flush(&mut c) {
                    self.close(&mut c, &why);
                }
            }
        }
        true
    }

    /// A DOORBELL frame: our ring has entries, or the peer wrote statuses of our SENDs in its
    /// ring. The flags that coalesce frames are cleared before looking.
    pub(super) fn doorbell_frame(&self, c: &mut Conn) {
        if let Some(k) = &self.consumer {
            lock(k).rung();
        }
        if let Some(p) = lock(&self.producer).as_ref() {
            p.woken();
        }
        self.drain_conn(c);
        self.harvest();
    }

    /// Drains the ring with the connection held, SENDs included; a wake-up the producer asked
    /// for is queued in `c.ctl` for the caller's next flush (never flushed here: this runs
    /// inside frame handling, where a write could interleave with one in progress).
    pub(super) fn drain_conn(&self, c: &mut Conn) {
        let Some(cons) = &self.consumer else {
            return;
        };
        let mut k = lock(cons);
        if k.is_empty() {
            return;
        }
        let wake = self.drain_locked(&mut k, Some(&mut c.engine)).wake;
        drop(k);
        if wake {
            c.ctl.push_back((doorbell(), None));
        }
    }

    /// Drains under the consumer lock into the completion queue; SENDs are matched with posted
    /// receives by `engine` (RC waits for one; UC drops the SEND, as on the packet path).
    pub(super) fn drain_locked(
        &self,
        k: &mut Consumer,
        engine: Option<&mut QpProtocol>,
    ) -> Drained {
        let mut out = Vec::new();
        let reliable = self.reliable;
        let mut dropped = 0;
        let r = match engine {
            None => k.drain(&mut out, None),
            Some(e) => {
                let mut f = |p: &mut CellPayload, imm| match e.accept_send(p, imm) {
                    Accepted::Placed(c) => SendFate::Done(Some(c), ST_OK),
                    Accepted::Refused(_, c) if reliable => SendFate::Done(c, ST_REFUSED),
                    Accepted::NoReceive if reliable => SendFate::Wait,
                    Accepted::Refused(_, c) => {
                        dropped += 1;
                        SendFate::Done(c, ST_FLUSHED)
                    }
                    Accepted::NoReceive => {
                        dropped += 1;
                        SendFate::Done(None, ST_FLUSHED)
                    }
                };
                k.drain(&mut out, Some(&mut f))
            }
        };
        let d = match r {
            Ok(d) => d,
            Err(e) => {
                // A peer that corrupts the ring is treated as a broken connection.
                tracing::warn!(error = %e, "shm completion ring");
                self.count(|s| s.rx_malformed += 1);
                self.error.store(true, Ordering::Release);
                Drained::default()
            }
        };
        self.count(|s| {
            s.ring_completions += d.n as u64;
            s.uc_messages_dropped += dropped;
        });
        self.cq.push_all(out);
        d
    }

    /// Raises or lowers the doorbell of our ring (and, polled, the wake-up of the peer's)
    /// around a sleep of a waiting thread, taking what came before the flags went up.
    pub(super) fn want_doorbell(&self, on: bool) {
        if !self.ring_thread {
            if let Some(p) = lock(&self.producer).as_ref() {
                p.want_wake(on);
            }
        }
        if let Some(c) = &self.consumer {
            lock(c).want_doorbell(on);
            if on {
                self.drain_ring(true);
                self.harvest();
            }
        }
    }

    /// Completes, in order, the send-side work that waited for the statuses of our ring SENDs.
    pub(super) fn harvest(&self) {
        let mut out = Vec::new();
        let mut g = lock(&self.producer);
        let Some(p) = g.as_mut().filter(|p| p.holding()) else {
            return;
        };
        if let Err(e) = p.collect() {
            tracing::warn!(error = %e, "shm completion ring; QP in error");
            self.count(|s| s.rx_malformed += 1);
            p.flush_all(&mut out);
        }
        if p.failed {
            self.error.store(true, Ordering::Release);
        }
        p.ready(&mut out);
        // Under the producer lock, so that no later send-side completion slips in between.
        self.cq.push_all(out);
    }

    /// Delivers a send-side completion after those held behind ring SENDs.
    pub(super) fn complete_send(&self, c: Completion) {
        let mut g = lock(&self.producer);
        if let Some(c) = g.as_mut().map_or(Some(c), |p| p.in_order(c)) {
            self.cq.push_all([c]);
        }
    }

    /// The connection is gone: ring SENDs without a status complete as flushed.
    pub(super) fn flush_ring_sends(&self) {
        let mut out = Vec::new();
        if let Some(p) = lock(&self.producer).as_mut() {
            p.flush_all(&mut out);
            self.cq.push_all(out);
        }
    }

    /// True while a completion is held behind a ring SEND.
    fn holding(&self) -> bool {
        lock(&self.producer).as_ref().is_some_and(|p| p.holding())
    }
}

fn doorbell() -> Frame {
    Frame {
        kind: super::frame::DOORBELL,
        ..Frame::default()
    }
}

/// The one-sided requester.
impl StreamQp {
    /// shm, one-sided: carries out a WRITE or READ on a region the peer granted, or a SEND of
    /// up to a cell through the peer's ring, when the order allows it; false when the request
    /// must take the stream.
    pub(super) fn try_direct(&self, wr: &SendWr) -> crate::Result<bool> {
        let sh = &self.shared;
        if !matches!(sh.path, DataPath::Shm) {
            return Ok(false);
        }
        let need = match wr.op {
            WrOp::Write { .. } => Access::REMOTE_WRITE,
            WrOp::Read => Access::REMOTE_READ,
            WrOp::Send { .. } if wr.len <= CELL => Access::NONE,
            WrOp::Send { .. } => return Ok(false),
        };
        // Only when nothing of ours is in the stream, which it could overtake.
        let behind_stream = if sh.reliable {
            let c = lock(&sh.conn);
            if c.engine.is_error() {
                // A NAK on the stream put the queue pair in error.
                return Err(Error::QpError);
            }
            c.engine.outstanding() > 0
        } else {
            sh.uc_streamed.load(Ordering::Acquire)
        };
        if behind_stream {
            return Ok(false);
        }
        if let WrOp::Send { imm } = wr.op {
            return self.ring_send(wr, imm);
        }
        if lock(&sh.producer).as_ref().is_some_and(|p| p.ring().gone()) {
            // The peer's queue pair stopped (a revoked grant): no access after that, although
            // our mapping of its memory is still here.
            sh.count(|s| s.access_errors += 1);
            return Err(Error::Disconnected);
        }
        let grants = sh.grants.read().unwrap_or_else(|e| e.into_inner());
        let Some(g) = grants.iter().find(|g| g.rkey() == wr.rkey) else {
            drop(grants);
            self.ask_grant(wr.rkey);
            return Ok(false);
        };
        if matches!(wr.op, WrOp::Write { imm: Some(_) }) && lock(&sh.producer).is_none() {
            // The ring is not here yet (setup still in flight): the stream carries this one.
            return Ok(false);
        }
        let Some(remote) = g.check(wr.remote_va, wr.len, need) else {
            drop(grants);
            sh.count(|s| {
                s.access_errors += 1;
                s.naks_received += 1;
            });
            if sh.reliable {
                sh.error.store(true, Ordering::Release);
            }
            sh.complete_send(Completion::send_side(
                wr.wr_id,
                wr.op,
                Status::RemoteAccessError,
                wr.len,
            ));
            return Ok(true);
        };
        // SAFETY: validate() checked offset+len against the local region; the remote range is
        // inside the granted mapping (checked above), which lives while `grants` is held.
        unsafe {
            let local = resident_slice(&wr.local, wr.offset, wr.len).as_mut_ptr();
            match wr.op {
                WrOp::Read => std::ptr::copy_nonoverlapping(remote, local, wr.len),
                _ => std::ptr::copy_nonoverlapping(local, remote, wr.len),
            }
        }
        // READs in post order, each one's loads done before the next's (`Qp::post_batch`).
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        drop(grants);
        if let WrOp::Write { imm: Some(imm) } = wr.op {
            self.publish(&Entry {
                imm: Some(imm),
                len: wr.len as u32,
                send: None,
                hold: None,
            })?;
        }
        sh.count(|s| s.one_sided += 1);
        sh.complete_send(Completion::send_side(
            wr.wr_id,
            wr.op,
            Status::Success,
            wr.len,
        ));
        Ok(true)
    }

    /// A SEND through the peer's ring: its payload copied into a cell. RC completes it when
    /// the peer's status comes back ([`Shared::harvest`]), UC once published.
    fn ring_send(&self, wr: &SendWr, imm: Option<u32>) -> crate::Result<bool> {
        let sh = &self.shared;
        if lock(&sh.producer).is_none() {
            return Ok(false);
        }
        // SAFETY: validate() checked offset+len against the local region.
        let data = unsafe { resident_slice(&wr.local, wr.offset, wr.len) };
        let done = Completion::send_side(wr.wr_id, wr.op, Status::Success, wr.len);
        self.publish(&Entry {
            imm,
            len: wr.len as u32,
            send: Some(data),
            hold: sh.reliable.then_some(done),
        })?;
        sh.count(|s| {
            s.one_sided += 1;
            s.ring_sends += 1;
        });
        if !sh.reliable {
            sh.complete_send(done);
        }
        Ok(true)
    }

    /// RC: a request for the stream waits until our ring SENDs before it have their status,
    /// so that it can neither be carried out nor complete before them. Without limit, as the
    /// stream's RNR: a peer that never posts a receive holds it, a peer that goes ends it.
    pub(super) fn wait_ring_sends(&self) -> crate::Result<()> {
        let sh = &self.shared;
        let start = std::time::Instant::now();
        loop {
            sh.harvest();
            if !sh.holding() {
                return Ok(());
            }
            if sh.error.load(Ordering::Acquire) || sh.is_closed() {
                return Err(Error::QpError);
            }
            if start.elapsed() < Duration::from_millis(1) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Asks the peer, once per remote key, to grant that region for one-sided access; this
    /// request and the ones before the answer take the stream. Knowing the key is the
    /// capability, as with RDMA: a peer gets only regions it can name.
    fn ask_grant(&self, rkey: u32) {
        let sh = &self.shared;
        {
            let mut asked = lock(&sh.asked);
            if asked.len() >= MAX_PEER_MAPS || !asked.insert(rkey) {
                return;
            }
        }
        let f = Frame {
            kind: GRANT_REQ,
            rkey,
            ..Frame::default()
        };
        let _ = self.send_ctl(f);
    }

    /// Sends a frame of ours (and whatever the engine has queued) now.
    fn send_ctl(&self, f: Frame) -> crate::Result<()> {
        let sh = &self.shared;
        let mut c = lock(&sh.conn);
        c.ctl.push_back((f, None));
        if let Err(why) = sh.flush(&mut c) {
            sh.close(&mut c, &why);
            return Err(Error::Disconnected);
        }
        Ok(())
    }

    /// Publishes an entry in the peer's ring, ringing the doorbell when it sleeps, and waiting
    /// for room when the ring is full (the peer drains it on the doorbell).
    fn publish(&self, e: &Entry<'_>) -> crate::Result<()> {
        let sh = &self.shared;
        let mut start = std::time::Instant::now();
        let mut waited = start;
        let mut rang = false;
        loop {
            let pushed = match lock(&sh.producer).as_mut().map(|p| p.push(e)) {
                Some(Ok(p)) => p,
                Some(Err(why)) => {
                    tracing::warn!(error = %why, "shm completion ring; QP in error");
                    sh.error.store(true, Ordering::Release);
                    return Err(Error::QpError);
                }
                None => return Err(Error::QpError),
            };
            match pushed {
                Pushed::Ring { doorbell: ring } => {
                    if ring {
                        self.send_ctl(doorbell())?;
                    }
                    return Ok(());
                }
                Pushed::Full { rnr } => {
                    if sh.error.load(Ordering::Acquire) || sh.is_closed() {
                        return Err(Error::Disconnected);
                    }
                    // Statuses may have come back meanwhile.
                    sh.harvest();
                    if rnr {
                        start = std::time::Instant::now();
                    } else if start.elapsed() > RING_FULL_LIMIT {
                        // A ring full this long is a broken or hostile peer (its tail word is
                        // in memory it writes), not a slow one.
                        tracing::warn!("shm: the peer's completion ring stayed full; QP in error");
                        sh.error.store(true, Ordering::Release);
                        return Err(Error::QpError);
                    }
                    if !rang {
                        self.send_ctl(doorbell())?;
                        rang = true;
                        waited = std::time::Instant::now();
                    } else if waited.elapsed() > Duration::from_millis(100) {
                        // The doorbell may have been taken before the ring filled up.
                        rang = false;
                    }
                    // A polled side of ours may owe the peer answers meanwhile.
                    if self.polled() {
                        let _ = sh.progress(Duration::ZERO, None);
                    }
                    std::thread::yield_now();
                }
            }
        }
    }
}
