//! The reader's [`Fetch`] as one-sided READs of the granted region.
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_fabric::{Progress, Qp, RegionInfo, SendWr, Status, Transport, WrOp};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

use super::{fab, options};
use crate::arena::remote::Fetch;

/// Bytes one READ brings at most (larger fetches are split).
const STAGE: usize = 1 << 20;
/// How long a READ may take before the fetch fails (the caller then falls back).
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// A [`Fetch`] by one-sided READs of a granted arena.
pub struct FabricFetch {
    qp: Qp,
    stage: Arc<Region>,
    remote: RegionInfo,
    next: u64,
}

impl FabricFetch {
    /// Connects to a [`Grants`] listener and takes its grant.
    pub fn connect(addr: SocketAddr, transport: Transport) -> io::Result<FabricFetch> {
        let pd = Arc::new(Pd::new());
        let stage = pd
            .register(
                Buffer::anonymous(STAGE).map_err(|e| fab("staging buffer", e))?,
                Access::LOCAL_WRITE,
                Mode::OnDemand,
            )
            .map_err(|e| fab("staging buffer", e))?;
        let (qp, grant) = remora_fabric::connect(addr, pd, options(transport, Progress::Poll), &[])
            .map_err(|e| fab("connect", e))?;
        let remote = RegionInfo::decode(&grant).map_err(|e| fab("the server's grant", e))?;
        Ok(FabricFetch {
            qp,
            stage,
            remote,
            next: 1,
        })
    }

    /// The granted region: its address, length and remote key.
    pub fn grant(&self) -> &RegionInfo {
        &self.remote
    }

    /// The peer's address of `len` bytes at `off` of the granted region.
    fn va(&self, off: u64, len: usize) -> io::Result<u64> {
        off.checked_add(len as u64)
            .filter(|&end| end <= self.remote.len)
            .and_then(|_| self.remote.addr.checked_add(off))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{len} bytes at {off}: outside the granted region"),
                )
            })
    }

    /// Posts `reads` (staging offset, length, peer address) as one batch of READs and waits
    /// for all of them.
    fn read_batch(&mut self, reads: &[(usize, usize, u64)]) -> io::Result<()> {
        let first = self.next;
        self.next += reads.len() as u64;
        let wrs = reads
            .iter()
            .zip(first..)
            .map(|(&(at, len, va), wr_id)| SendWr {
                wr_id,
                op: WrOp::Read,
                local: self.stage.clone(),
                offset: at,
                len,
                remote_va: va,
                rkey: self.remote.rkey,
            })
            .collect();
        self.qp.post_batch(wrs).map_err(|e| fab("post READ", e))?;
        let deadline = Instant::now() + READ_TIMEOUT;
        // Over udp the reply is a round trip away: sleep on the socket rather than spin (the
        // server may need this core); over shm a READ is done when posted.
        let spin = if self.qp.transport() == Transport::Udp {
            Duration::ZERO
        } else {
            Duration::from_micros(200)
        };
        for id in first..self.next {
            let c = loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "READ timed out"));
                }
                if let Some(c) = self.qp.spin(left.min(spin)) {
                    break c;
                }
                if let Some(c) = self.qp.wait(left).map_err(|e| fab("completion", e))? {
                    break c;
                }
            };
            match (c.wr_id == id, c.status) {
                (true, Status::Success) => {}
                (true, s) => {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!("READ refused: {s:?}"),
                    ))
                }
                (false, _) => return Err(fab("READ", format!("completion {} for {id}", c.wr_id))),
            }
        }
        Ok(())
    }
}

impl Fetch for FabricFetch {
    fn fetch(&mut self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(STAGE);
            let va = self.va(off + done as u64, n)?;
            self.read_batch(&[(0, n, va)])?;
            self.stage
                .read_at(0, &mut buf[done..done + n])
                .map_err(|e| fab("staging buffer", e))?;
            done += n;
        }
        Ok(())
    }

    /// One batch of READs per staging region's worth (READs on a queue pair are carried out
    /// in order, each one's loads done before the next's: `Qp::post_batch`).
    fn fetch_all(&mut self, reads: &[(u64, usize)], out: &mut [u8]) -> io::Result<()> {
        let (mut i, mut at) = (0, 0);
        let mut batch = Vec::new();
        while i < reads.len() {
            batch.clear();
            let mut staged = 0usize;
            while let Some(&(off, len)) = reads.get(i) {
                let slot = staged.next_multiple_of(8);
                if len > STAGE || slot + len > STAGE {
                    break;
                }
                batch.push((slot, len, self.va(off, len)?));
                staged = slot + len;
                i += 1;
            }
            if batch.is_empty() {
                // One read larger than the staging region: in pieces, in order.
                let (off, len) = reads[i];
                self.fetch(off, &mut out[at..at + len])?;
                (i, at) = (i + 1, at + len);
                continue;
            }
            self.read_batch(&batch)?;
            for &(slot, len, _) in &batch {
                self.stage
                    .read_at(slot, &mut out[at..at + len])
                    .map_err(|e| fab("staging buffer", e))?;
                at += len;
            }
        }
        Ok(())
    }
}
