//! The I/O of a stream queue pair: engine packets in and out of the byte stream, the shm
//! transport's own frames, and the round of progress that the progress thread
//! ([`Progress::Thread`](crate::Progress)) or the polling thread runs.
//!
//! Everything runs under the queue pair's [`Conn`] lock, so the stream's order is the engine's.
//! A thread that cannot write (the peer's socket buffer is full) keeps reading and handing what
//! arrives to the engine while it waits: two peers writing large messages at each other never
//! deadlock, and a polled queue pair needs no second thread for it. A payload is copied once:
//! sent from its region (`writev`) and read straight into its place ([`StreamPayload`]), or
//! copied from a memfd its owner handed over (shm, `BYREF`).
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_mem::Region;
use remora_wire::{aeth, bth, immdt, reth, AethRepr, BthRepr, NakCode, Repr, RethRepr};

use super::frame::*;
use super::{region_slice, DataPath, Shared, MAX_PEER_MAPS};
use crate::engine::{Payload, QpProtocol};
use crate::poll::wait_io;

/// Receive buffer: frames and the first bytes of payloads land here.
const RX_BUFFER: usize = 256 << 10;
/// Bytes read beyond what the next frame needs, so that frames come many per system call
/// while the rest of a large payload goes straight into its region.
const READ_AHEAD: usize = 128 << 10;
/// The BTH opcode of an RC ACK or NAK (`RC Acknowledge`).
const RC_ACKNOWLEDGE: u8 = 0x11;

/// Payloads up to this size are copied in with their frame (many small packets, one system
/// call); larger ones are sent from the region.
const INLINE_COPY: usize = 8 << 10;
/// Frames handled per read before answering (ACKs are coalesced over them).
const FRAMES_PER_READ: usize = 1024;
/// How long a blocked writer sleeps before looking at the stop flag again.
const WRITE_WAIT: Duration = Duration::from_millis(100);

/// A connection broken: the reason, for the log.
pub(super) type Broken = String;

/// The locked state of a stream queue pair.
pub(super) struct Conn {
    pub(super) engine: QpProtocol,
    rx: Vec<u8>,
    rs: usize,
    re: usize,
    /// Scratch for the headers of an outgoing packet (`mtu + 64` bytes, of which only the
    /// headers are ever written, so the rest is never touched).
    hdr: Vec<u8>,
    stage: Vec<u8>,
    /// `stage` holds only ACKs held back by a busy-polling round (see [`Shared::flush_with`]).
    owed: bool,
    /// shm frames to send: GRANT answers, GRANT_REQ, RING, DOORBELL.
    pub(super) ctl: VecDeque<(Frame, Option<OwnedFd>)>,
}

impl Conn {
    pub(super) fn new(engine: QpProtocol) -> Conn {
        let mtu = engine.config().mtu;
        Conn {
            engine,
            rx: vec![0; RX_BUFFER],
            rs: 0,
            re: 0,
            hdr: vec![0; mtu + 64],
            stage: Vec::with_capacity(2 * INLINE_COPY),
            owed: false,
            ctl: VecDeque::new(),
        }
    }
}

/// The payload of a received DATA frame: in the receive buffer and the stream, or (`BYREF`)
/// in a memfd the peer handed over.
struct StreamPayload<'a> {
    sh: &'a Shared,
    rx: &'a [u8],
    rs: &'a mut usize,
    re: usize,
    len: usize,
    byref: Option<u64>,
    taken: bool,
    broken: Option<io::Error>,
}

impl Payload for StreamPayload<'_> {
    fn len(&self) -> usize {
        self.len
    }

    fn place(&mut self, region: &Region, offset: usize) -> Result<(), NakCode> {
        self.taken = true;
        // One populate for the whole range of an on-demand region (pages already in cost a
        // bitmap scan): the stream cannot skip ahead, so a fault here stalls only this queue
        // pair, and one call replaces a fault per page. On an error the copy takes the faults.
        if let Err(e) = region.page_in_range(offset, self.len) {
            tracing::debug!(error = %e, "populating a range failed; the copy takes the faults");
        }
        // SAFETY: the engine checked offset+len against the region (access check, receive
        // buffer or posted READ).
        let dst = unsafe { region_slice(region, offset, self.len) };
        if let Some(addr) = self.byref {
            let maps = self.sh.peer_maps.lock().unwrap_or_else(|e| e.into_inner());
            let Some(src) = peer_ptr(&maps, addr, self.len) else {
                tracing::debug!("payload is in no memfd the peer handed over");
                return Err(NakCode::InvalidRequest);
            };
            // SAFETY: src..src+len lies inside a live mapping of the peer's memfd (held by the
            // lock), dst inside our region; different mappings.
            unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), self.len) };
            return Ok(());
        }
        let have = self.len.min(self.re - *self.rs);
        dst[..have].copy_from_slice(&self.rx[*self.rs..*self.rs + have]);
        *self.rs += have;
        read_exact(self.sh, &mut dst[have..]).map_err(|e| {
            self.broken = Some(e);
            NakCode::RemoteOperationalError
        })
    }
}

/// Reads exactly `buf.len()` bytes, blocking: the rest of a frame the peer is writing now.
fn read_exact(sh: &Shared, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match sh.sock.recv_some(buf, true)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => buf = &mut buf[n..],
        }
    }
    Ok(())
}

/// Where `[addr, addr+len)` of the peer's memory is mapped here, if it is.
fn peer_ptr(maps: &[(u64, remora_mem::Buffer)], addr: u64, len: usize) -> Option<*const u8> {
    maps.iter().find_map(|(base, b)| {
        let off = addr.checked_sub(*base)? as usize;
        (off.checked_add(len)? <= b.len()).then(|| {
            // SAFETY: off + len is within the mapping.
            unsafe { b.as_ptr().add(off) as *const u8 }
        })
    })
}

/// The headers of a DATA frame as the engine's [`Repr`]: the same views as udp parses, with
/// the payload length from the frame (a stream has no pad and no ICRC).
fn parse_headers(h: &[u8], payload_len: usize) -> Result<Repr, String> {
    if h.len() < remora_wire::BTH_LEN {
        return Err(format!("{} header bytes, less than a BTH", h.len()));
    }
    let bth = BthRepr::parse(&bth::Packet::new_unchecked(h)).map_err(|e| e.to_string())?;
    let op = bth.opcode;
    if op.header_len() != h.len() {
        return Err(format!("{} header bytes for opcode {op:?}", h.len()));
    }
    if !op.has_payload() && payload_len > 0 {
        return Err(format!("payload on opcode {op:?}"));
    }
    let mut off = remora_wire::BTH_LEN;
    let mut reth = None;
    if op.has_reth() {
        let r =
            RethRepr::parse(&reth::Packet::new_unchecked(&h[off..])).map_err(|e| e.to_string())?;
        off += r.buffer_len();
        reth = Some(r);
    }
    let mut imm = None;
    if op.has_immdt() {
        imm = Some(
            immdt::parse(&immdt::Packet::new_unchecked(&h[off..])).map_err(|e| e.to_string())?,
        );
        off += remora_wire::IMMDT_LEN;
    }
    let mut ack = None;
    if op.has_aeth() {
        let a =
            AethRepr::parse(&aeth::Packet::new_unchecked(&h[off..])).map_err(|e| e.to_string())?;
        ack = Some(a);
    }
    Ok(Repr {
        bth,
        reth,
        immdt: imm,
        aeth: ack,
        payload_len,
    })
}

impl Shared {
    /// One round of progress: handles what has arrived, runs due timers, sends what the engine
    /// (and the shm side) has to send, and delivers completions.
    pub(super) fn round(&self, c: &mut Conn, defer_ack: bool) -> Result<(), Broken> {
        for _ in 0..16 {
            let n = self.read_frames(c)?;
            let now = Instant::now();
            if c.engine.poll_timeout().is_some_and(|t| t <= now) {
                c.engine.handle_timeout(now);
            }
            // Deliver before the ACK goes out: the ring entries here now were published before
            // the peer saw it, so they are older than what it acknowledges; once it is out,
            // the peer may publish newer ones, which must come after.
            self.deliver(c);
            // Answer after every batch: one coalesced ACK per batch keeps the peer's window open.
            self.flush_with(c, defer_ack)?;
            if n < FRAMES_PER_READ {
                break;
            }
        }
        // What a read nested in a blocked write brought, and what it queued (a wake-up for
        // the peer's ring SENDs).
        self.deliver(c);
        if !c.ctl.is_empty() {
            self.flush(c)?;
        }
        Ok(())
    }

    /// Hands the engine's completions to the completion queue, after what the ring holds.
    pub(super) fn deliver(&self, c: &mut Conn) {
        if c.engine.completions_pending() > 0 {
            let items: Vec<_> = std::iter::from_fn(|| c.engine.poll_completion()).collect();
            self.push_in_order(c, items);
        }
    }

    /// Reads without blocking into the receive buffer, wanting `need` more bytes; false when
    /// nothing was waiting. Sets `drained` when the read came short (the socket is empty, so
    /// looking again would only cost a system call).
    fn fill(&self, c: &mut Conn, need: usize, drained: &mut bool) -> Result<bool, Broken> {
        if c.rs == c.re {
            c.rs = 0;
            c.re = 0;
        } else if c.re + need.max(READ_AHEAD) > c.rx.len() {
            // Only an unfinished frame (under 100 bytes) is left: move it to the front.
            c.rx.copy_within(c.rs..c.re, 0);
            c.re -= c.rs;
            c.rs = 0;
        }
        let end = c.rx.len().min(c.re + need.max(READ_AHEAD));
        match self.sock.recv_some(&mut c.rx[c.re..end], false) {
            Ok(0) => Err("peer closed".into()),
            Ok(n) => {
                *drained = c.re + n < end;
                c.re += n;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Handles the frames that have arrived, without blocking except to finish a frame whose
    /// first bytes are here; returns how many.
    pub(super) fn read_frames(&self, c: &mut Conn) -> Result<usize, Broken> {
        let mut n = 0;
        let mut drained = false;
        while n < FRAMES_PER_READ {
            let have = c.re - c.rs;
            let mut need = HDR;
            if have >= HDR {
                let f = Frame::parse(&FramePacket::new_unchecked(&c.rx[c.rs..c.rs + HDR]))
                    .map_err(|e| format!("stream frame: {e}"))?;
                if f.kind == DATA {
                    if f.imm as usize > MAX_HEADERS {
                        return Err(format!("DATA frame with {} header bytes", f.imm));
                    }
                    need += f.imm as usize;
                }
                if have >= need {
                    c.rs += HDR;
                    n += 1;
                    self.handle_frame(c, f)?;
                    continue;
                }
            }
            // A frame begun is finished; a new one is looked for only while reads come full.
            if (drained && have == 0) || !self.fill(c, need - have, &mut drained)? {
                break;
            }
        }
        Ok(n)
    }

    fn handle_frame(&self, c: &mut Conn, f: Frame) -> Result<(), Broken> {
        match f.kind {
            DATA => self.handle_data(c, f),
            MAP => {
                // The memfd came with this frame's bytes (SCM_RIGHTS); mapped read-only, since
                // payloads are only ever copied out of it.
                let mut maps = self.peer_maps.lock().unwrap_or_else(|e| e.into_inner());
                let mapped = match self.sock.take_fd() {
                    None => Err("MAP frame without a descriptor".to_string()),
                    Some(_) if maps.len() >= MAX_PEER_MAPS => {
                        Err(format!("more than {MAX_PEER_MAPS} regions mapped"))
                    }
                    Some(fd) => usize::try_from(f.aux)
                        .map_err(|_| "region too large".to_string())
                        .and_then(|n| {
                            remora_mem::Buffer::map_memfd_with(fd, n, false)
                                .map_err(|e| e.to_string())
                        }),
                };
                match mapped {
                    Ok(b) => maps.push((f.va, b)),
                    // Not fatal: payloads that name the region by reference are refused.
                    Err(e) => {
                        self.count(|s| s.invalid_requests += 1);
                        tracing::debug!(error = %e, "cannot map the peer's memfd");
                    }
                }
                Ok(())
            }
            GRANT => {
                self.take_grant(f);
                Ok(())
            }
            GRANT_REQ => {
                if let Some(g) = self.answer_grant(f.rkey) {
                    c.ctl.push_back(g);
                }
                Ok(())
            }
            RING => {
                self.take_ring();
                Ok(())
            }
            DOORBELL => {
                self.doorbell_frame(c);
                Ok(())
            }
            k => {
                self.count(|s| s.rx_malformed += 1);
                Err(format!("unknown frame kind {k}: stream out of sync"))
            }
        }
    }

    fn handle_data(&self, c: &mut Conn, f: Frame) -> Result<(), Broken> {
        let hl = f.imm as usize;
        let parsed = parse_headers(&c.rx[c.rs..c.rs + hl], f.len as usize);
        c.rs += hl;
        let byref = f.code == BYREF;
        if byref && !matches!(self.path, DataPath::Shm) {
            return Err("a by-reference payload on tcp".into());
        }
        let len = if byref { 0 } else { f.len as usize };
        let repr = match parsed {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, "malformed packet dropped");
                self.count(|s| s.rx_malformed += 1);
                return self.skip(c, len);
            }
        };
        let Conn {
            engine, rx, rs, re, ..
        } = c;
        let mut p = StreamPayload {
            sh: self,
            rx,
            rs,
            re: *re,
            len: f.len as usize,
            byref: byref.then_some(f.aux),
            taken: false,
            broken: None,
        };
        engine.handle_parts(Instant::now(), &repr, &mut p);
        if let Some(e) = p.broken {
            return Err(e.to_string());
        }
        if !p.taken {
            self.skip(c, len)?;
        }
        Ok(())
    }

    /// Discards `n` bytes of a payload the engine did not take.
    fn skip(&self, c: &mut Conn, mut n: usize) -> Result<(), Broken> {
        let here = n.min(c.re - c.rs);
        c.rs += here;
        n -= here;
        while n > 0 {
            let k = n.min(c.rx.len());
            c.rs = 0;
            c.re = 0;
            read_exact(self, &mut c.rx[..k]).map_err(|e| e.to_string())?;
            n -= k;
        }
        Ok(())
    }

    /// Sends the shm frames queued and every packet the engine has to send now.
    pub(super) fn flush(&self, c: &mut Conn) -> Result<(), Broken> {
        self.flush_with(c, false)
    }

    /// Writes out ACKs a busy-polling round held back (before the caller sleeps).
    pub(super) fn flush_owed(&self, c: &mut Conn) -> Result<(), Broken> {
        c.owed = false;
        self.flush_stage(c)
    }

    /// [`flush`](Self::flush); with `defer_ack` (a busy-polling round), a flush that would
    /// write nothing but ACKs keeps them staged, once: the caller's next post sends them in
    /// the same system call as its request (in a ping-pong, every ACK rides on the reply), and
    /// the next round or a sleep sends them anyway. A software transport pays a send and a
    /// receive per lone ACK, which is what put tcp's one-way WRITE above ucx's put.
    fn flush_with(&self, c: &mut Conn, defer_ack: bool) -> Result<(), Broken> {
        let mut acks_only = c.ctl.is_empty();
        while let Some((f, fd)) = c.ctl.pop_front() {
            self.flush_stage(c)?;
            self.write_all(c, &[&f.to_bytes()], fd.as_ref().map(|f| f.as_fd()))?;
        }
        let now = Instant::now();
        while let Some(t) = c.engine.poll_transmit_parts(now, &mut c.hdr) {
            let hl = t.header_len;
            let mut f = Frame {
                kind: DATA,
                imm: hl as u32,
                ..Frame::default()
            };
            let Some(src) = t.payload else {
                acks_only &= c.hdr.first() == Some(&RC_ACKNOWLEDGE);
                c.stage.extend_from_slice(&f.to_bytes());
                c.stage.extend_from_slice(&c.hdr[..hl]);
                continue;
            };
            acks_only = false;
            f.len = src.len as u32;
            if matches!(self.path, DataPath::Shm) && self.announce(c, &src.region)? {
                f.code = BYREF;
                f.aux = src.region.addr() + src.offset as u64;
                c.stage.extend_from_slice(&f.to_bytes());
                c.stage.extend_from_slice(&c.hdr[..hl]);
                continue;
            }
            c.stage.extend_from_slice(&f.to_bytes());
            c.stage.extend_from_slice(&c.hdr[..hl]);
            // SAFETY: the engine checked the range (post-time validation or access check).
            let bytes = unsafe { region_slice(&src.region, src.offset, src.len) };
            if src.len <= INLINE_COPY {
                c.stage.extend_from_slice(bytes);
                if c.stage.len() >= READ_AHEAD * 4 {
                    self.flush_stage(c)?;
                }
            } else {
                let staged = std::mem::take(&mut c.stage);
                let r = self.write_all(c, &[&staged, bytes], None);
                c.stage = staged;
                c.stage.clear();
                r?;
            }
        }
        if defer_ack && acks_only && !c.owed && !c.stage.is_empty() {
            c.owed = true;
            return Ok(());
        }
        c.owed = false;
        self.flush_stage(c)
    }

    fn flush_stage(&self, c: &mut Conn) -> Result<(), Broken> {
        if c.stage.is_empty() {
            return Ok(());
        }
        let staged = std::mem::take(&mut c.stage);
        let r = self.write_all(c, &[&staged], None);
        c.stage = staged;
        c.stage.clear();
        r
    }

    /// Writes `segs` in order (with `fd` attached to the first byte). While the peer cannot
    /// take more, reads what it sends and hands it to the engine, so that neither side's
    /// writes wait on the other's.
    fn write_all(
        &self,
        c: &mut Conn,
        segs: &[&[u8]],
        mut fd: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> Result<(), Broken> {
        let total: usize = segs.iter().map(|s| s.len()).sum();
        let mut done = 0;
        while done < total {
            let mut skip = done;
            let iov: Vec<IoSlice<'_>> = segs
                .iter()
                .filter_map(|s| {
                    if skip >= s.len() {
                        skip -= s.len();
                        None
                    } else {
                        let v = IoSlice::new(&s[skip..]);
                        skip = 0;
                        Some(v)
                    }
                })
                .collect();
            match self.sock.send_some(&iov, fd) {
                Ok(n) => {
                    done += n;
                    fd = None;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.stop.load(Ordering::Acquire) {
                        return Err("stopping".into());
                    }
                    let (readable, _) = wait_io(self.sock.fd(), true, None, Some(WRITE_WAIT))
                        .map_err(|e| e.to_string())?;
                    if readable {
                        self.read_frames(c)?;
                    }
                }
                Err(e) => {
                    if matches!(
                        e.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                    ) {
                        // The peer reads no more (it shut its side or left), but what it sent
                        // before is still in the socket: handled now, before the caller closes
                        // the queue pair, so that a peer that posts and goes at once (an
                        // unpaced UC source) loses none of it to an answer we owed it.
                        self.peer_gone.store(true, Ordering::Release);
                        while matches!(self.read_frames(c), Ok(n) if n > 0) {}
                    }
                    return Err(e.to_string());
                }
            }
        }
        Ok(())
    }

    /// shm: hands the peer a memfd-backed region of ours once (a MAP frame with a read-only
    /// descriptor), so that it copies that region's payloads out of the mapping; true if this
    /// region's payloads go by reference. Regions that are not sealed memfds stay inline: the
    /// peer could not map them safely, and nothing else of ours is ever exposed.
    fn announce(&self, c: &mut Conn, r: &Arc<Region>) -> Result<bool, Broken> {
        let Some(fd) = r.memfd() else {
            return Ok(false);
        };
        let mut done = self.announced.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&byref) = done.get(&r.lkey()) {
            return Ok(byref);
        }
        let handed = done.values().filter(|&&b| b).count();
        let ro = (super::grant::sealed(fd) && handed < MAX_PEER_MAPS)
            .then(|| remora_mem::grant::read_only(fd, remora_mem::grant::Writes::Continue).ok())
            .flatten();
        let Some(ro) = ro else {
            done.insert(r.lkey(), false);
            return Ok(false);
        };
        done.insert(r.lkey(), true);
        drop(done);
        let map = Frame {
            kind: MAP,
            va: r.addr(),
            aux: r.len() as u64,
            ..Frame::default()
        };
        self.flush_stage(c)?;
        self.write_all(c, &[&map.to_bytes()], Some(ro.as_fd()))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_as_on_udp_and_refuse_what_does_not_fit() {
        use remora_wire::{Op, Opcode, Psn, Service};
        let repr = Repr {
            bth: BthRepr {
                opcode: Opcode {
                    service: Service::Rc,
                    op: Op::WriteOnlyImm,
                },
                solicited: true,
                mig_req: true,
                pad_count: 0,
                pkey: 0xFFFF,
                fecn: false,
                becn: false,
                dest_qp: 0x123,
                ack_req: true,
                psn: Psn::new(77),
            },
            reth: Some(RethRepr {
                va: 0x1000,
                rkey: 9,
                len: 8,
            }),
            immdt: Some(5),
            aeth: None,
            payload_len: 8,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit_headers(&mut buf);
        let hl = repr.header_len();
        let mut back = parse_headers(&buf[..hl], 8).unwrap();
        back.bth.pad_count = 0;
        assert_eq!(back, repr);
        assert!(parse_headers(&buf[..hl - 1], 8).is_err());
        assert!(parse_headers(&buf[..4], 0).is_err());
    }
}
