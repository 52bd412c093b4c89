//! The receive side of a stream queue pair: requests from the peer (access checks, placing
//! payloads, READ responses, ACK/NAK) and responses to our own requests.
use std::io::{self, BufReader, Read};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use remora_mem::{Access, Region};
use remora_wire::NakCode;

use super::frame::*;
use super::{resident_slice, DataPath, Out, Shared, Sock, MAX_PEER_MAPS, STREAM_BUFFER};
use crate::wr::{Completion, RecvWr, Status, WcOpcode, WrOp};

pub(super) fn receiver(sock: Sock, tx: mpsc::Sender<Out>, sh: Arc<Shared>) {
    let mut r = BufReader::with_capacity(STREAM_BUFFER, sock);
    let why = match serve(&mut r, &tx, &sh) {
        Ok(()) => "peer closed".to_string(),
        Err(e) => e,
    };
    if !sh.stop.load(Ordering::Acquire) {
        tracing::debug!(reason = %why, "stream queue pair closed");
    }
    sh.error.store(true, Ordering::Release);
    sh.flush_pending(None);
    *sh.closed.lock().unwrap_or_else(|e| e.into_inner()) = true;
    sh.closed_cv.notify_all();
}

/// Discards `n` bytes of a refused inline payload.
fn skip(r: &mut impl Read, n: u64) -> io::Result<()> {
    let copied = io::copy(&mut r.take(n), &mut io::sink())?;
    if copied < n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// The receive loop: requests from the peer and responses to ours. Returns on EOF (`Ok`) or a
/// protocol or I/O error (`Err` with the reason).
fn serve(
    r: &mut BufReader<Sock>,
    tx: &mpsc::Sender<Out>,
    sh: &Shared,
) -> std::result::Result<(), String> {
    let mut acks: u32 = 0;
    let send = |o: Out| {
        sh.count(|s| s.tx_packets += 1);
        tx.send(o).map_err(|_| "writer gone".to_string())
    };
    let flush_acks = |acks: &mut u32| -> std::result::Result<(), String> {
        if *acks > 0 {
            sh.count(|s| s.acks_sent += 1);
            send(Out::Frame(Frame {
                kind: ACK,
                len: std::mem::take(acks),
                ..Frame::default()
            }))?;
        }
        Ok(())
    };
    let nak = |acks: &mut u32, code: NakCode| -> std::result::Result<(), String> {
        sh.count(|s| s.naks_sent += 1);
        if !sh.reliable {
            return Ok(());
        }
        flush_acks(acks)?;
        send(Out::Frame(Frame {
            kind: NAK,
            code: nak_byte(code),
            ..Frame::default()
        }))
    };
    loop {
        if r.buffer().is_empty() {
            flush_acks(&mut acks)?;
        }
        let mut h = [0u8; HDR];
        match r.read_exact(&mut h) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.to_string()),
        }
        let f = Frame::decode(&h);
        sh.count(|s| s.rx_packets += 1);
        let len = f.len as usize;
        let io = |e: io::Error| e.to_string();
        match f.kind {
            WRITE | WRITE_IMM => {
                match sh
                    .pd
                    .check_remote(f.rkey, f.va, len as u64, Access::REMOTE_WRITE)
                {
                    Ok(ra) => {
                        match place(r, sh, &ra.region, ra.offset, len, &f) {
                            Ok(()) => {}
                            Err(Placement::Io(e)) => return Err(io(e)),
                            Err(Placement::NotHandedOver) => {
                                tracing::debug!("WRITE source is in no memfd the peer handed over");
                                sh.count(|s| s.invalid_requests += 1);
                                nak(&mut acks, NakCode::InvalidRequest)?;
                                continue;
                            }
                        }
                        if f.kind == WRITE_IMM {
                            sh.push_in_order([Completion {
                                wr_id: 0,
                                status: Status::Success,
                                opcode: WcOpcode::RecvRdmaWithImm,
                                byte_len: f.len,
                                imm: Some(f.imm),
                                in_sequence: u32::MAX,
                            }]);
                        }
                        acks += sh.reliable as u32;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "remote WRITE refused");
                        sh.count(|s| s.access_errors += 1);
                        if f.code != BYREF {
                            skip(r, len as u64).map_err(io)?;
                        }
                        nak(&mut acks, NakCode::RemoteAccessError)?;
                    }
                }
            }
            SEND | SEND_IMM => {
                flush_acks(&mut acks)?;
                let Some(recv) = wait_recv(sh) else {
                    return Ok(());
                };
                if len > recv.len {
                    if f.code != BYREF {
                        skip(r, len as u64).map_err(io)?;
                    }
                    sh.count(|s| s.invalid_requests += 1);
                    sh.cq.push_all([Completion {
                        wr_id: recv.wr_id,
                        status: Status::LocalLengthError,
                        opcode: WcOpcode::Recv,
                        byte_len: 0,
                        imm: None,
                        in_sequence: u32::MAX,
                    }]);
                    nak(&mut acks, NakCode::InvalidRequest)?;
                    continue;
                }
                match place(r, sh, &recv.local, recv.offset, len, &f) {
                    Ok(()) => {}
                    Err(Placement::Io(e)) => return Err(io(e)),
                    Err(Placement::NotHandedOver) => {
                        // The receive buffer is consumed, as a NIC consumes it on an error.
                        tracing::debug!("SEND source is in no memfd the peer handed over");
                        sh.count(|s| s.invalid_requests += 1);
                        sh.cq.push_all([Completion {
                            wr_id: recv.wr_id,
                            status: Status::RemoteInvalidRequest,
                            opcode: WcOpcode::Recv,
                            byte_len: 0,
                            imm: None,
                            in_sequence: u32::MAX,
                        }]);
                        nak(&mut acks, NakCode::InvalidRequest)?;
                        continue;
                    }
                }
                sh.push_in_order([Completion {
                    wr_id: recv.wr_id,
                    status: Status::Success,
                    opcode: WcOpcode::Recv,
                    byte_len: f.len,
                    imm: (f.kind == SEND_IMM).then_some(f.imm),
                    in_sequence: u32::MAX,
                }]);
                acks += sh.reliable as u32;
            }
            READ_REQ => match sh
                .pd
                .check_remote(f.rkey, f.va, len as u64, Access::REMOTE_READ)
            {
                Ok(ra) => {
                    flush_acks(&mut acks)?;
                    let resp = Frame {
                        kind: READ_RESP,
                        len: f.len,
                        ..Frame::default()
                    };
                    if f.code != BYREF {
                        send(Out::Payload(resp, ra.region, ra.offset))?;
                        continue;
                    }
                    // SAFETY: the access check bounds offset+len within the region.
                    let src = unsafe { ra.region.as_ptr().add(ra.offset) };
                    match peer_ptr(sh, f.aux, len) {
                        Some(dst) => {
                            // SAFETY: dst..dst+len is inside a live shared mapping of a memfd
                            // the peer handed over; src inside our region.
                            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
                            send(Out::Frame(Frame {
                                code: BYREF,
                                ..resp
                            }))?;
                        }
                        None => {
                            tracing::debug!("READ destination is in no memfd the peer handed over");
                            sh.count(|s| s.invalid_requests += 1);
                            nak(&mut acks, NakCode::InvalidRequest)?;
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "remote READ refused");
                    sh.count(|s| s.access_errors += 1);
                    nak(&mut acks, NakCode::RemoteAccessError)?;
                }
            },
            READ_RESP => {
                let mut pending = sh.pending.lock().unwrap_or_else(|e| e.into_inner());
                let ok = pending.front().is_some_and(|p| {
                    p.op == WrOp::Read && p.len == len && p.byref == (f.code == BYREF)
                });
                if !ok {
                    return Err("READ response matches no outstanding READ".into());
                }
                let p = pending.pop_front().expect("checked above");
                drop(pending);
                if !p.byref {
                    // SAFETY: bounds checked when the READ was posted.
                    let dst = unsafe { resident_slice(&p.local, p.offset, len) };
                    r.read_exact(dst).map_err(io)?;
                }
                sh.cq
                    .push_all([Completion::send_side(p.wr_id, p.op, Status::Success, p.len)]);
            }
            ACK => {
                let mut pending = sh.pending.lock().unwrap_or_else(|e| e.into_inner());
                let n = len;
                if n > pending.len() || pending.iter().take(n).any(|p| p.op == WrOp::Read) {
                    return Err(format!(
                        "ACK of {n} requests does not match what is outstanding"
                    ));
                }
                let done: Vec<_> = pending
                    .drain(..n)
                    .map(|p| Completion::send_side(p.wr_id, p.op, Status::Success, p.len))
                    .collect();
                drop(pending);
                sh.cq.push_all(done);
            }
            NAK => {
                sh.count(|s| s.naks_received += 1);
                let status = match nak_code(f.code) {
                    Some(NakCode::RemoteAccessError) => Status::RemoteAccessError,
                    Some(NakCode::InvalidRequest | NakCode::InvalidRdRequest) => {
                        Status::RemoteInvalidRequest
                    }
                    _ => Status::RemoteOperationalError,
                };
                sh.error.store(true, Ordering::Release);
                sh.flush_pending(Some(status));
            }
            GRANT => {
                let mapped = match r.get_ref().take_fd() {
                    None => Err("GRANT frame without a descriptor".to_string()),
                    Some(fd) => super::direct::Grant::map(fd, f.va, f.aux, f.rkey, f.code),
                };
                let mut grants = sh.grants.write().unwrap_or_else(|e| e.into_inner());
                match mapped {
                    Ok(_) if grants.len() >= MAX_PEER_MAPS => {
                        sh.count(|s| s.invalid_requests += 1);
                    }
                    Ok(g) => {
                        grants.retain(|o| o.rkey() != g.rkey());
                        grants.push(g);
                    }
                    // Not fatal: requests to that region take the stream.
                    Err(e) => {
                        sh.count(|s| s.invalid_requests += 1);
                        tracing::debug!(error = %e, "cannot map a region the peer granted");
                    }
                }
            }
            GRANT_REQ => {
                // Only a region the peer names by its remote key, with remote rights, backed by
                // a sealed memfd; a bounded number per connection. No answer otherwise: the
                // peer's requests to that key keep taking the stream, where they are checked.
                let given = sh.grants_given.load(Ordering::Relaxed);
                let grant = (matches!(sh.path, DataPath::Shm) && given < MAX_PEER_MAPS)
                    .then(|| sh.pd.by_rkey(f.rkey))
                    .flatten()
                    .and_then(|r| super::direct::grantable(&r).map(|g| (r, g)));
                match grant {
                    Some((r, (code, fd))) => {
                        sh.grants_given.fetch_add(1, Ordering::Relaxed);
                        let g = Frame {
                            kind: GRANT,
                            code,
                            va: r.addr(),
                            aux: r.len() as u64,
                            rkey: r.rkey(),
                            ..Frame::default()
                        };
                        send(Out::WithFd(g, fd))?;
                    }
                    // Not an error of the peer: a region that is not a memfd is served
                    // through the socket, and an unknown key is refused there.
                    None => tracing::debug!(rkey = f.rkey, "shm: no grant for this key"),
                }
            }
            RING => {
                let ring = match r.get_ref().take_fd() {
                    None => Err("RING frame without a descriptor".to_string()),
                    Some(fd) => super::direct::Ring::map(fd),
                };
                match ring {
                    Ok(ring) => {
                        *sh.producer.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(super::direct::Producer::new(ring))
                    }
                    Err(e) => {
                        sh.count(|s| s.invalid_requests += 1);
                        tracing::debug!(error = %e, "cannot map the peer's completion ring");
                    }
                }
            }
            DOORBELL => {
                sh.drain_ring();
            }
            MAP => {
                // The memfd came with this frame's bytes (SCM_RIGHTS); nothing else is mapped.
                let fd = r.get_ref().take_fd();
                let mut maps = sh.peer_maps.lock().unwrap_or_else(|e| e.into_inner());
                let mapped = match fd {
                    None => Err("MAP frame without a descriptor".to_string()),
                    Some(_) if maps.len() >= MAX_PEER_MAPS => {
                        Err(format!("more than {MAX_PEER_MAPS} regions mapped"))
                    }
                    Some(fd) => usize::try_from(f.aux)
                        .map_err(|_| "region too large".to_string())
                        .and_then(|n| {
                            remora_mem::Buffer::map_memfd(fd, n).map_err(|e| e.to_string())
                        }),
                };
                match mapped {
                    Ok(b) => maps.push((f.va, b)),
                    // Not fatal: requests that name the region by reference are refused.
                    Err(e) => {
                        sh.count(|s| s.invalid_requests += 1);
                        tracing::debug!(error = %e, "cannot map the peer's memfd");
                    }
                }
            }
            k => {
                sh.count(|s| s.rx_malformed += 1);
                return Err(format!("unknown frame kind {k}: stream out of sync"));
            }
        }
    }
}

/// Why a payload could not be placed.
enum Placement {
    /// The stream failed (fatal for the connection).
    Io(io::Error),
    /// A by-reference payload outside every memfd the peer handed over.
    NotHandedOver,
}

/// Moves an incoming payload into `region` at `off`: from the stream, or (`BYREF`, shm) from
/// the mapping of a memfd the peer handed over.
fn place(
    r: &mut BufReader<Sock>,
    sh: &Shared,
    region: &Region,
    off: usize,
    len: usize,
    f: &Frame,
) -> std::result::Result<(), Placement> {
    // SAFETY: callers checked off+len against the region (access check or receive buffer).
    let dst = unsafe { resident_slice(region, off, len) };
    if f.code != BYREF {
        return r.read_exact(dst).map_err(Placement::Io);
    }
    if !matches!(sh.path, DataPath::Shm) {
        return Err(Placement::NotHandedOver);
    }
    let p = peer_ptr(sh, f.aux, len).ok_or(Placement::NotHandedOver)?;
    // SAFETY: p..p+len lies inside a live shared mapping of the peer's memfd and dst inside
    // our region; they are different mappings, so no overlap in use.
    unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), len) };
    Ok(())
}

/// Where `[addr, addr+len)` of the peer's memory is mapped here, if it is.
fn peer_ptr(sh: &Shared, addr: u64, len: usize) -> Option<*mut u8> {
    let maps = sh.peer_maps.lock().unwrap_or_else(|e| e.into_inner());
    maps.iter().find_map(|(base, b)| {
        let off = addr.checked_sub(*base)? as usize;
        (off.checked_add(len)? <= b.len()).then(|| {
            // SAFETY: off + len is within the mapping.
            unsafe { b.as_ptr().add(off) }
        })
    })
}

fn wait_recv(sh: &Shared) -> Option<RecvWr> {
    let mut q = sh.recvs.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(r) = q.pop_front() {
            return Some(r);
        }
        if sh.stop.load(Ordering::Acquire) {
            return None;
        }
        q = sh
            .recv_cv
            .wait_timeout(q, Duration::from_millis(100))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
