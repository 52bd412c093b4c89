//! The reader's [`Fetch`] as one-sided READs of the granted region.
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_fabric::{Progress, Qp, RegionInfo, Status, Transport};
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

    /// READs `len` bytes at `va` of the peer into the staging region.
    fn read(&mut self, va: u64, len: usize) -> io::Result<()> {
        let id = self.next;
        self.next += 1;
        self.qp
            .post_read(id, &self.stage, 0, len, va, self.remote.rkey)
            .map_err(|e| fab("post READ", e))?;
        let deadline = Instant::now() + READ_TIMEOUT;
        let c = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "READ timed out"));
            }
            if let Some(c) = self.qp.spin(left.min(Duration::from_micros(200))) {
                break c;
            }
            if let Some(c) = self.qp.wait(left).map_err(|e| fab("completion", e))? {
                break c;
            }
        };
        match (c.wr_id == id, c.status) {
            (true, Status::Success) => Ok(()),
            (true, s) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("READ refused: {s:?}"),
            )),
            (false, _) => Err(fab("READ", format!("completion {} for {id}", c.wr_id))),
        }
    }
}

impl Fetch for FabricFetch {
    fn fetch(&mut self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(STAGE);
            let va = self
                .remote
                .addr
                .checked_add(off + done as u64)
                .ok_or_else(|| fab("READ", "address overflows"))?;
            self.read(va, n)?;
            self.stage
                .read_at(0, &mut buf[done..done + n])
                .map_err(|e| fab("staging buffer", e))?;
            done += n;
        }
        Ok(())
    }
}

