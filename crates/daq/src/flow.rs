//! The receiver's frame buffer and what happens when it is full: how deep the ring is, the
//! overrun policy, and the ring credits a flow-controlled source waits for.
//!
//! The frame buffer is the ring itself ([`crate::ring`]): `[receiver] buffer` bytes of stack
//! buffers the modules WRITE into, so a stall of the processing unit costs memory, not frames,
//! and nothing is copied on the way in. When the source comes round to a stack buffer whose
//! stack is not processed yet, the [`OverrunPolicy`] decides:
//! - `mask`: the source does not wait (a real detector cannot); the older stack is overrun,
//!   counted and masked as before.
//! - `backpressure`: the source waits for *ring credits*: before it starts stack `s` it needs
//!   `s < limit`, where the receiver keeps `limit = released + stacks` up to date (`released`:
//!   every stack below it is done with). A replay or an emulator loses nothing by construction.
//! - `pause`: the manager's way in the thesis: when the ring is nearly full the receiver pauses
//!   the source at its next stack boundary and resumes it once the ring has drained to a
//!   quarter, so the source runs in bursts rather than stack by stack.
//!
//! Credits travel the RDMA way, one-sided and without the source's CPU: the source registers an
//! 8-byte word per transmitter, names it in its hello, and the receiver WRITEs the current limit
//! into it over the module's own queue pair whenever it changes (and again every 50 ms, since
//! UC may lose a WRITE). A lost or late credit only makes the source wait longer, never
//! overwrite: the limit only grows under `backpressure`. The source polls its word at the pace
//! the limit has been moving ([`CreditWord::wait_for`]), not on a fixed short nap.
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use remora_fabric::{Qp, RegionInfo};
use remora_mem::{Access, Buffer, Mode, Pd, Region};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::access::bytes::Bytes;
use crate::config::Config;
use crate::ring::RingLayout;
use crate::{DaqError, Result};

mod word;
pub use word::CreditWord;

/// What a receiver does when the source comes round to a stack not yet processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverrunPolicy {
    /// Overwrite; the older stack is counted as overrun and its frames are lost.
    #[default]
    Mask,
    /// The source pauses when the ring is nearly full and resumes when it has drained.
    Pause,
    /// The source waits for a free stack buffer before each stack.
    Backpressure,
}

impl OverrunPolicy {
    /// The name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            OverrunPolicy::Mask => "mask",
            OverrunPolicy::Pause => "pause",
            OverrunPolicy::Backpressure => "backpressure",
        }
    }

    /// Whether the source waits for ring credits.
    pub fn flow_controlled(self) -> bool {
        self != OverrunPolicy::Mask
    }
}

/// A size in bytes, written as a number or with a suffix: `"2GiB"`, `"512M"`, `"1.5G"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSize(pub u64);

impl BufferSize {
    /// Parses `N`, `N[KMGT]`, `N[KMGT]i?B` (powers of 1024; fractions allowed with a suffix).
    pub fn parse(s: &str) -> std::result::Result<BufferSize, String> {
        crate::access::bytes::parse_bytes(s).map(BufferSize)
    }
}

impl Serialize for BufferSize {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for BufferSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<BufferSize, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) if n > 0 => Ok(BufferSize(n)),
            Raw::N(_) => Err(serde::de::Error::custom("a buffer of 0 bytes")),
            Raw::S(s) => BufferSize::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// The default frame buffer of one receiver: a quarter of the available memory (or of the memory
/// budget, when there is one) shared by the receivers, at most this.
pub const DEFAULT_BUFFER_CAP: u64 = 8 << 30;

/// How a receiver's ring was sized, for the start-up line and the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferChoice {
    /// Bytes of the ring.
    pub bytes: u64,
    /// Frames it holds.
    pub frames: u64,
    /// Whether `[receiver] buffer` set it (false: chosen from the host's memory).
    pub configured: bool,
    /// Whether the whole run fits (then a bigger buffer would only cost memory).
    pub holds_run: bool,
}

impl fmt::Display for BufferChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "frame buffer {} ({} frames",
            Bytes(self.bytes),
            self.frames
        )?;
        if self.holds_run {
            write!(f, ", the whole run")?;
        }
        if self.configured {
            write!(f, "; receiver.buffer)")
        } else {
            write!(
                f,
                "; default: a quarter of the available memory, at most {}, set receiver.buffer to change)",
                Bytes(DEFAULT_BUFFER_CAP)
            )
        }
    }
}

/// `MemAvailable` from `/proc/meminfo`, if it can be read.
fn available_memory() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// The ring of receiver `index`: as many stack buffers as `[receiver] buffer` holds (or the
/// default), no more than the receiver's frames need, at least two.
pub fn ring_for(cfg: &Config, index: usize) -> Result<(RingLayout, BufferChoice)> {
    let two = RingLayout::new(cfg.detector.modules, cfg.acquisition.bunch)?;
    let stack = two.stack_bytes() as u64;
    let run_stacks = cfg.frames_of(index).div_ceil(two.bunch as u64).max(2);
    let (bytes, configured) = match cfg.receiver.buffer {
        Some(b) => (b.0, true),
        None => {
            let avail = available_memory().unwrap_or(4 << 30);
            // Under a memory budget (`daq serve`) the default leaves three quarters of it to
            // everything else.
            let avail = cfg.access.memory.map_or(avail, |b| avail.min(b.bytes));
            let share = avail / 4 / cfg.receivers.len().max(1) as u64;
            (share.min(DEFAULT_BUFFER_CAP), false)
        }
    };
    let fit = bytes / stack;
    if configured && fit < 2 {
        return Err(DaqError::Config(format!(
            "{} holds fewer than two stacks of {} frames ({} each); the ring needs at least {}",
            Bytes(bytes),
            two.bunch,
            Bytes(stack),
            Bytes(2 * stack)
        )));
    }
    let stacks = fit.clamp(2, run_stacks);
    let ring = RingLayout::with_stacks(two.modules, two.bunch, stacks as usize)?;
    Ok((
        ring,
        BufferChoice {
            bytes: ring.bytes() as u64,
            frames: ring.slots() as u64,
            configured,
            holds_run: stacks >= run_stacks,
        },
    ))
}

/// The credit word a transmitter names in its hello.
pub const CREDIT_INFO_LEN: usize = RegionInfo::LEN;

/// Every credit write is re-sent this often, so a lost one costs at most this much waiting.
const RESEND: Duration = Duration::from_millis(50);

/// The ring is nearly full (pause the source) at this many stacks held out of `stacks`.
fn pause_at(stacks: u64) -> u64 {
    stacks.saturating_sub(2).max(1)
}

/// It has drained enough to resume at this many.
fn resume_at(stacks: u64) -> u64 {
    (stacks / 4).min(pause_at(stacks).saturating_sub(1))
}

/// Where the receiver writes a module's credits.
#[derive(Debug, Clone, Copy)]
pub struct CreditTarget(pub RegionInfo);

impl CreditTarget {
    /// The credit word at `info`; `None` when it is too short to hold a limit.
    pub fn new(info: RegionInfo) -> Option<CreditTarget> {
        (info.len >= 8).then_some(CreditTarget(info))
    }

    /// Reads a region description (as [`CreditWord::info`] gives it).
    pub fn decode(b: &[u8]) -> Option<CreditTarget> {
        Self::new(RegionInfo::decode(b).ok()?)
    }
}

/// What flow control cost, for the report, `/status` and the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowStats {
    /// Credit writes posted.
    pub credit_writes: u64,
    /// Times the receiver paused the source (`pause`).
    pub pauses: u64,
    /// Seconds the source was paused (`pause`), from the receiver's side.
    pub paused_seconds: f64,
}

/// The receiver's side: works out the limit from the scheduler's books and writes it to every
/// module that gave a credit word.
pub struct CreditSender {
    policy: OverrunPolicy,
    stacks: u64,
    src: Arc<Region>,
    targets: Vec<Option<CreditTarget>>,
    sent: Option<u64>,
    sent_at: Instant,
    paused_since: Option<Instant>,
    wr: u64,
    /// Counters.
    pub stats: FlowStats,
}

impl CreditSender {
    /// Whether every module waits for ring credits: then no stack buffer is written before
    /// the receiver releases it, unless a source breaks the protocol.
    pub fn every_module_waits(&self) -> bool {
        self.policy.flow_controlled() && self.targets.iter().all(Option::is_some)
    }

    /// A sender for `targets` (per module; `None`: that module asked for no credits).
    pub fn new(
        policy: OverrunPolicy,
        ring: &RingLayout,
        pd: &Arc<Pd>,
        targets: Vec<Option<CreditTarget>>,
    ) -> Result<CreditSender> {
        let buf = Buffer::anonymous(4096)
            .map_err(|e| DaqError::Acquisition(format!("credit buffer: {e}")))?;
        let src = pd
            .register(buf, Access::LOCAL_WRITE, Mode::OnDemand)
            .map_err(|e| DaqError::Acquisition(format!("registering the credit buffer: {e}")))?;
        src.page_in_range(0, src.len())
            .map_err(|e| DaqError::Acquisition(format!("credit buffer: {e}")))?;
        Ok(CreditSender {
            policy,
            stacks: ring.stacks as u64,
            src,
            targets,
            sent: None,
            sent_at: Instant::now(),
            paused_since: None,
            wr: 1 << 62,
            stats: FlowStats::default(),
        })
    }

    /// The limit for the ring's state: `released` (every stack below is done with) and
    /// `latest` (the newest stack that has started arriving).
    fn limit(&mut self, released: u64, latest: Option<u64>, now: Instant) -> u64 {
        match self.policy {
            OverrunPolicy::Mask => u64::MAX,
            OverrunPolicy::Backpressure => released.saturating_add(self.stacks),
            OverrunPolicy::Pause => {
                let held = latest.map_or(0, |l| (l + 1).saturating_sub(released));
                match self.paused_since {
                    None if held >= pause_at(self.stacks) => {
                        self.paused_since = Some(now);
                        self.stats.pauses += 1;
                    }
                    Some(t) if held <= resume_at(self.stacks) => {
                        self.paused_since = None;
                        self.stats.paused_seconds += now.duration_since(t).as_secs_f64();
                    }
                    _ => {}
                }
                match self.paused_since {
                    // Stop after the stacks already started; never beyond what the ring holds.
                    Some(_) => latest
                        .map_or(released, |l| l + 1)
                        .min(released.saturating_add(self.stacks)),
                    None => released.saturating_add(self.stacks),
                }
            }
        }
    }

    /// Posts the limit to every module when it changed, or when the last post is old.
    pub fn update(&mut self, qps: &[Qp], released: u64, latest: Option<u64>) {
        if !self.policy.flow_controlled() {
            return;
        }
        let now = Instant::now();
        let limit = self.limit(released, latest, now);
        if self.sent == Some(limit) && self.sent_at.elapsed() < RESEND {
            return;
        }
        for (m, (qp, t)) in qps.iter().zip(&self.targets).enumerate() {
            let Some(t) = t else { continue };
            let off = 8 * (m % 512);
            if self.src.write_at(off, &limit.to_le_bytes()).is_err() {
                continue;
            }
            self.wr += 1;
            match qp.post_write(self.wr, &self.src, off, 8, t.0.addr, t.0.rkey, None) {
                Ok(()) => self.stats.credit_writes += 1,
                // A full send queue or a closed connection: the next update tries again.
                Err(e) => tracing::debug!(module = m, error = %e, "credit write not posted"),
            }
        }
        self.sent = Some(limit);
        self.sent_at = now;
    }

    /// The run is over: a pause still open ends now.
    pub fn finish(&mut self) -> FlowStats {
        if let Some(t) = self.paused_since.take() {
            self.stats.paused_seconds += t.elapsed().as_secs_f64();
        }
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        Config::parse(&format!(
            "[detector]\nmodules = 2\n[acquisition]\nframes = 100\nbunch = 4\n{text}"
        ))
        .unwrap()
    }

    #[test]
    fn the_buffer_sets_the_ring_depth_within_what_the_run_needs() {
        let stack = 4 * 2 * crate::ring::MODULE_BYTES as u64;
        let (ring, c) = ring_for(&cfg("[receiver]\nbuffer = \"64MiB\"\n"), 0).unwrap();
        assert_eq!(ring.stacks as u64, (64 << 20) / stack);
        assert!(c.configured && !c.holds_run);
        let (ring, c) = ring_for(&cfg("[receiver]\nbuffer = \"100G\"\n"), 0).unwrap();
        assert_eq!(ring.stacks, 25, "100 frames in stacks of 4");
        assert!(c.holds_run);
        let e = Config::parse(
            "[detector]\nmodules = 2\n[acquisition]\nframes = 100\nbunch = 4\n\
             [receiver]\nbuffer = \"1M\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("receiver.buffer") && e.contains("fewer than two stacks"),
            "{e}"
        );
        let (ring, c) = ring_for(&cfg(""), 0).unwrap();
        assert!(ring.stacks >= 2 && !c.configured);
    }

    #[test]
    fn sizes_and_policies_parse_and_bad_ones_are_named() {
        let c = cfg("[receiver]\nbuffer = 134217728\noverrun = \"backpressure\"\n");
        assert_eq!(c.receiver.buffer, Some(BufferSize(128 << 20)));
        assert_eq!(c.receiver.overrun, OverrunPolicy::Backpressure);
        for bad in ["buffer = \"lots\"", "buffer = 0", "overrun = \"drop\""] {
            let e = Config::parse(&format!(
                "[detector]\nmodules = 2\n[acquisition]\nframes = 10\n[receiver]\n{bad}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains("receiver."), "{bad}: {e}");
        }
        let e = Config::parse(
            "[detector]\nmodules = 2\n[acquisition]\nframes = 10\n[transport]\nkind = \"native\"\n\
             [receiver]\noverrun = \"pause\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("native"), "{e}");
    }

    #[test]
    fn backpressure_grants_what_is_released_and_pause_has_hysteresis() {
        let pd = Arc::new(Pd::new());
        let ring = RingLayout::with_stacks(1, 1, 8).unwrap();
        let mut bp = CreditSender::new(OverrunPolicy::Backpressure, &ring, &pd, vec![]).unwrap();
        let t = Instant::now();
        assert_eq!(bp.limit(0, None, t), 8);
        assert_eq!(bp.limit(5, Some(12), t), 13);
        let mut p = CreditSender::new(OverrunPolicy::Pause, &ring, &pd, vec![]).unwrap();
        assert_eq!(p.limit(0, Some(3), t), 8, "4 of 8 held: running");
        assert_eq!(
            p.limit(0, Some(5), t),
            6,
            "6 of 8 held: paused after stack 5"
        );
        assert_eq!(p.stats.pauses, 1);
        assert_eq!(p.limit(2, Some(5), t), 6, "4 held: still paused");
        assert_eq!(p.limit(4, Some(5), t), 12, "2 held: resumed");
        assert_eq!(p.finish().pauses, 1);
        let mut m = CreditSender::new(OverrunPolicy::Mask, &ring, &pd, vec![]).unwrap();
        assert_eq!(m.limit(0, Some(100), t), u64::MAX);
    }
}
