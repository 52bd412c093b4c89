//! The receive side of a stream queue pair: requests from the peer (access checks, placing
//! payloads, READ responses, ACK/NAK) and responses to our own requests.
use std::io::{self, BufReader, Read};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use remora_mem::{Access, Region};
use remora_wire::NakCode;

use super::frame::*;
use super::{region_slice, DataPath, Out, Shared, STREAM_BUFFER};
use crate::wr::{Completion, RecvWr, Status, WcOpcode, WrOp};

pub(super) fn receiver(sock: TcpStream, tx: mpsc::Sender<Out>, sh: Arc<Shared>) {
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
    r: &mut BufReader<TcpStream>,
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
                        if let Err(e) = place(r, sh, &ra.region, ra.offset, len, f.aux) {
                            nak(&mut acks, NakCode::RemoteOperationalError)?;
                            tracing::debug!(error = %e, "WRITE could not be placed");
                            continue;
                        }
                        if f.kind == WRITE_IMM {
                            sh.cq.push_all([Completion {
                                wr_id: 0,
                                status: Status::Success,
                                opcode: WcOpcode::RecvRdmaWithImm,
                                byte_len: f.len,
                                imm: Some(f.imm),
                            }]);
                        }
                        acks += sh.reliable as u32;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "remote WRITE refused");
                        sh.count(|s| s.access_errors += 1);
                        if matches!(sh.path, DataPath::Inline) {
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
                    if matches!(sh.path, DataPath::Inline) {
                        skip(r, len as u64).map_err(io)?;
                    }
                    sh.count(|s| s.invalid_requests += 1);
                    sh.cq.push_all([Completion {
                        wr_id: recv.wr_id,
                        status: Status::LocalLengthError,
                        opcode: WcOpcode::Recv,
                        byte_len: 0,
                        imm: None,
                    }]);
                    nak(&mut acks, NakCode::InvalidRequest)?;
                    continue;
                }
                if let Err(e) = place(r, sh, &recv.local, recv.offset, len, f.aux) {
                    tracing::debug!(error = %e, "SEND could not be placed");
                    nak(&mut acks, NakCode::RemoteOperationalError)?;
                    continue;
                }
                sh.cq.push_all([Completion {
                    wr_id: recv.wr_id,
                    status: Status::Success,
                    opcode: WcOpcode::Recv,
                    byte_len: f.len,
                    imm: (f.kind == SEND_IMM).then_some(f.imm),
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
                    match sh.path {
                        DataPath::Inline => send(Out::Payload(resp, ra.region, ra.offset))?,
                        DataPath::Shm { peer_pid } => {
                            // SAFETY: the access check bounds offset+len within the region.
                            let src = unsafe { ra.region.as_ptr().add(ra.offset) };
                            let moved = match peer_ptr(sh, f.aux, len) {
                                Some(dst) => {
                                    // SAFETY: dst..dst+len is inside a live shared mapping of
                                    // the peer's memfd; src inside our region.
                                    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
                                    Ok(())
                                }
                                // SAFETY: src..src+len is readable region memory.
                                None => unsafe { crate::shm::write_to(peer_pid, f.aux, src, len) },
                            };
                            match moved {
                                Ok(()) => send(Out::Frame(resp))?,
                                Err(e) => {
                                    tracing::debug!(error = %e, "READ could not be delivered");
                                    nak(&mut acks, NakCode::RemoteOperationalError)?;
                                }
                            }
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
                let ok = pending
                    .front()
                    .is_some_and(|p| p.op == WrOp::Read && p.len == len);
                if !ok {
                    return Err("READ response matches no outstanding READ".into());
                }
                let p = pending.pop_front().expect("checked above");
                drop(pending);
                if matches!(sh.path, DataPath::Inline) {
                    // SAFETY: bounds checked when the READ was posted.
                    let dst = unsafe { region_slice(&p.local, p.offset, len) };
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
            MAP => {
                if let DataPath::Shm { peer_pid } = sh.path {
                    match map_peer(peer_pid, f.rkey as i32, f.aux as usize) {
                        Ok(b) => sh
                            .peer_maps
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((f.va, b)),
                        // Not fatal: the bytes still move with process_vm_readv/writev.
                        Err(e) => tracing::debug!(error = %e, "cannot map the peer's memfd"),
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

/// Moves an incoming payload into `region` at `off`: from the stream (tcp) or straight from
/// the peer's memory at `src` (shm).
fn place(
    r: &mut BufReader<TcpStream>,
    sh: &Shared,
    region: &Region,
    off: usize,
    len: usize,
    src: u64,
) -> io::Result<()> {
    // SAFETY: callers checked off+len against the region (access check or receive buffer).
    let dst = unsafe { region_slice(region, off, len) };
    match sh.path {
        DataPath::Inline => r.read_exact(dst),
        DataPath::Shm { peer_pid } => {
            if let Some(p) = peer_ptr(sh, src, len) {
                // SAFETY: p..p+len lies inside a live shared mapping of the peer's memfd and
                // dst inside our region; they are different mappings, so no overlap in use.
                unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), len) };
                return Ok(());
            }
            // SAFETY: dst is writable region memory of this process.
            unsafe { crate::shm::read_from(peer_pid, src, dst.as_mut_ptr(), len) }
        }
    }
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

/// Maps the peer's memfd through /proc (needs the same access as `process_vm_readv`).
fn map_peer(pid: i32, fd: i32, len: usize) -> io::Result<remora_mem::Buffer> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))?;
    remora_mem::Buffer::map_memfd(f.into(), len).map_err(io::Error::other)
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
