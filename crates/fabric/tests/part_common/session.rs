//! The parent's side of one connection to the child: commands, WRITEs and READs, and rounds of
//! them checked byte for byte.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_fabric::{
    connect, Completion, PartConfig, Progress, Qp, QpOptions, RegionInfo, Stats, Status, Transport,
    WcOpcode,
};
use remora_mem::{Pd, Region};

use super::*;

/// Where a round's WRITE sources come from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A pattern written into the parent's region first.
    Pattern(u64),
    /// A range of a region nothing ever touched: it must arrive as zeros.
    Fresh,
}

pub struct Session {
    pub transport: Transport,
    pub qp: Qp,
    /// Sources and READ destinations.
    pub mem: Arc<Region>,
    /// Never touched (the zero-source round).
    pub fresh: Arc<Region>,
    pub ctrl: Arc<Region>,
    pub remote: RegionInfo,
    pub next_id: u64,
}

impl Session {
    pub fn open(
        transport: Transport,
        addr: SocketAddr,
        fault_timeout: Option<Duration>,
        progress: Progress,
    ) -> Session {
        let pd = Arc::new(Pd::new());
        let mem = anonymous(&pd, LOCAL_LEN);
        let fresh = anonymous(&pd, REMOTE_LEN);
        let ctrl = anonymous(&pd, CTRL_LEN);
        let opts = QpOptions {
            transport,
            part: PartConfig {
                fault_timeout,
                ..PartConfig::default()
            },
            progress,
            // The child posts its first receive only once the connection is up, which a loaded
            // machine may delay past a few RNR waits.
            rnr_retry: u32::MAX,
            ..QpOptions::default()
        };
        let (qp, private) = connect(addr, pd, opts, &[]).unwrap();
        let remote = RegionInfo::decode(&private).unwrap();
        assert_eq!(remote.len as usize, REMOTE_LEN);
        Session {
            transport,
            qp,
            mem,
            fresh,
            ctrl,
            remote,
            next_id: 100,
        }
    }

    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Waits for the completions of `ids` (any order), all successful.
    pub fn expect(&self, ids: &[u64], what: &str) -> Vec<Completion> {
        let deadline = Instant::now() + WAIT;
        let mut got: Vec<Completion> = Vec::new();
        while got.len() < ids.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            let c = self.qp.wait(left).unwrap().unwrap_or_else(|| {
                panic!(
                    "{} {what}: no completion within {WAIT:?} (have {got:?}); stats {:?}",
                    self.transport,
                    self.qp.stats()
                )
            });
            assert!(
                ids.contains(&c.wr_id) && !got.iter().any(|g| g.wr_id == c.wr_id),
                "{} {what}: unexpected {c:?}",
                self.transport
            );
            assert_eq!(
                c.status,
                Status::Success,
                "{} {what}: {c:?}; stats {:?}",
                self.transport,
                self.qp.stats()
            );
            got.push(c);
        }
        got
    }

    /// Sends a command to the child and returns its counters after carrying it out.
    pub fn command(&mut self, cmd: u32) -> Stats {
        let (r, s) = (self.id(), self.id());
        self.qp.post_recv(r, &self.ctrl, 0, REPLY_LEN).unwrap();
        let mut head = cmd.to_le_bytes().to_vec();
        head.extend_from_slice(&(s as u32).to_le_bytes());
        self.ctrl.write_at(CMD_AT, &head).unwrap();
        self.qp.post_send(s, &self.ctrl, CMD_AT, 8, None).unwrap();
        let got = self.expect(&[r, s], "command");
        let reply = got.iter().find(|c| c.wr_id == r).unwrap();
        assert_eq!(reply.opcode, WcOpcode::Recv);
        let b = bytes(&self.ctrl, 0, reply.byte_len as usize);
        assert_eq!(
            b[..8],
            head[..],
            "{} command {cmd}: the reply of another",
            self.transport
        );
        stats_decode(&b[8..])
    }

    pub fn write(&mut self, src: &Arc<Region>, src_off: usize, len: usize, remote_off: usize) {
        let id = self.id();
        self.qp
            .post_write(
                id,
                src,
                src_off,
                len,
                self.remote.addr + remote_off as u64,
                self.remote.rkey,
                None,
            )
            .unwrap();
        let c = self.expect(&[id], "WRITE");
        assert_eq!(
            (c[0].opcode, c[0].byte_len as usize),
            (WcOpcode::Write, len)
        );
    }

    pub fn read(&mut self, remote_off: usize, len: usize, dst_off: usize) -> Vec<u8> {
        let id = self.id();
        self.qp
            .post_read(
                id,
                &self.mem,
                DST + dst_off,
                len,
                self.remote.addr + remote_off as u64,
                self.remote.rkey,
            )
            .unwrap();
        let c = self.expect(&[id], "READ");
        assert_eq!(c[0].opcode, WcOpcode::Read);
        bytes(&self.mem, DST + dst_off, len)
    }

    /// Drops the pages of the READ destinations, so the READs land on missing pages again.
    pub fn evict_destinations(&self) {
        self.mem.evict(DST, LOCAL_LEN - DST).unwrap();
    }

    /// Writes every case, reads it back and checks every byte.
    pub fn round(&mut self, source: Source, cases: &[Case]) {
        for (i, c) in cases.iter().enumerate() {
            let what = match source {
                Source::Pattern(seed) => {
                    format!("{} {} bytes, pattern {seed}", self.transport, c.len)
                }
                Source::Fresh => format!("{} {} bytes, fresh source", self.transport, c.len),
            };
            let want = match source {
                Source::Pattern(seed) => {
                    let p = pattern(seed * 16 + i as u64, c.len);
                    self.mem.write_at(c.src, &p).unwrap();
                    self.write(&self.mem.clone(), c.src, c.len, c.remote);
                    p
                }
                Source::Fresh => {
                    assert!(!self.fresh.is_resident(c.src, c.len));
                    // What the destination held before must not survive the READ.
                    self.mem
                        .write_at(DST + c.dst, &pattern(0xBAD + i as u64, c.len))
                        .unwrap();
                    self.write(&self.fresh.clone(), c.src, c.len, c.remote);
                    vec![0; c.len]
                }
            };
            let got = self.read(c.remote, c.len, c.dst);
            check_eq(&what, &want, &got);
        }
    }

    /// Ends the connection: the child waits for us to close once we have its reply and the
    /// acknowledgement of the command.
    pub fn bye(mut self) {
        self.command(BYE);
    }
}
