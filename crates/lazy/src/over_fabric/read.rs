//! One-sided READs on one queue pair: a [`Conn`] (the queue pair and its staging region), the
//! READ of a range in stage-sized pieces and the wait for its completion (which drives the queue
//! pair itself under [`Progress::Poll`]), and the push stream built on them.
use super::qp_options;
use crate::fetch::{FetchError, PushChunk, PushNext, PushStream};
use crate::source::{is_zero, PushCursor, PUSH_MAX_CHUNK};
use remora_fabric::{Completion, Progress, Qp, RegionInfo, Status, Transport};
use remora_mem::{Access, Buffer, Mode, Pd, Region};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One queue pair with its staging region.
pub(super) struct Conn {
    pub(super) qp: Qp,
    stage: Arc<Region>,
    next: u64,
}

const STAGE: usize = PUSH_MAX_CHUNK as usize;
/// Busy-poll the completion queue this long before sleeping on it (with [`Progress::Poll`] each
/// turn also receives from the queue pair's socket; the sleep is then on that socket).
const SPIN: Duration = Duration::from_micros(200);

impl Conn {
    /// Connects a new queue pair with its staging region; returns it with the server's private
    /// data.
    pub(super) fn dial(
        addr: SocketAddr,
        transport: Transport,
        progress: Progress,
        pd: &Arc<Pd>,
    ) -> std::result::Result<(Conn, Vec<u8>), String> {
        let stage = pd
            .register(
                Buffer::anonymous(STAGE).map_err(|e| e.to_string())?,
                Access::LOCAL_WRITE,
                Mode::OnDemand,
            )
            .map_err(|e| e.to_string())?;
        let opts = qp_options(transport, Some(addr), progress);
        let (qp, private) =
            remora_fabric::connect(addr, pd.clone(), opts, &[]).map_err(|e| e.to_string())?;
        Ok((Conn { qp, stage, next: 1 }, private))
    }
}

/// READs `buf.len()` bytes at `offset` of the remote region through `c`, in stage-sized pieces.
pub(super) fn read_remote(
    c: &mut Conn,
    remote: &RegionInfo,
    offset: u64,
    buf: &mut [u8],
    deadline: Instant,
) -> std::result::Result<(), FetchError> {
    let mut done = 0;
    while done < buf.len() {
        let n = (buf.len() - done).min(STAGE);
        let id = c.next;
        c.next += 1;
        let va = remote
            .addr
            .checked_add(offset + done as u64)
            .ok_or_else(|| FetchError::Fatal("remote address overflows".into()))?;
        c.qp.post_read(id, &c.stage, 0, n, va, remote.rkey)
            .map_err(|e| FetchError::Transient(format!("post READ: {e}")))?;
        let comp = wait(&c.qp, deadline)?;
        if comp.wr_id != id {
            return Err(FetchError::Transient(format!(
                "completion for {} while waiting for {id}",
                comp.wr_id
            )));
        }
        match comp.status {
            Status::Success => {}
            Status::RetryExceeded | Status::Flushed => {
                return Err(FetchError::Transient(format!("READ: {:?}", comp.status)))
            }
            s => return Err(FetchError::Fatal(format!("READ refused: {s:?}"))),
        }
        c.stage
            .read_at(0, &mut buf[done..done + n])
            .map_err(|e| FetchError::Fatal(e.to_string()))?;
        done += n;
    }
    Ok(())
}

/// The completion of the READ just posted on `qp`. With [`Progress::Poll`] this thread drives
/// the queue pair meanwhile: it receives the response, and runs the retransmission timers.
fn wait(qp: &Qp, deadline: Instant) -> std::result::Result<Completion, FetchError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if let Some(c) = qp.spin(left.min(SPIN)) {
        return Ok(c);
    }
    let left = deadline.saturating_duration_since(Instant::now());
    match qp.wait(left) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(FetchError::Transient("READ timed out".into())),
        Err(e) => Err(FetchError::Transient(format!("completion queue: {e}"))),
    }
}

/// The one-sided push: the client READs the rest of the region in growing chunks on a queue
/// pair of its own.
pub(super) struct FabricPush {
    c: Conn,
    remote: RegionInfo,
    cur: PushCursor,
}

impl FabricPush {
    pub(super) fn new(c: Conn, remote: RegionInfo, cur: PushCursor) -> FabricPush {
        FabricPush { c, remote, cur }
    }
}

impl PushStream for FabricPush {
    fn restart(&mut self, from: u64) -> std::result::Result<(), FetchError> {
        self.cur.restart(from);
        Ok(())
    }
    fn next(
        &mut self,
        buf: &mut Vec<u8>,
        _t: Duration,
    ) -> std::result::Result<PushNext, FetchError> {
        let Some((offset, len)) = self.cur.next_chunk() else {
            return Ok(PushNext::End);
        };
        let len = len as usize;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        read_remote(&mut self.c, &self.remote, offset, &mut buf[..len], deadline)?;
        Ok(PushNext::Chunk(PushChunk {
            offset,
            len,
            zero: is_zero(&buf[..len]),
        }))
    }
}
