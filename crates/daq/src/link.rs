//! The link between a module's transmitter and a receiver, as both ends set it up: the queue
//! pair options, the transmitter's hello and the receiver's announcement of its ring.
//!
//! At connection setup (the fabric's out-of-band exchange) the transmitter sends a [`Hello`]
//! (which module it is, and where it wants ring credits written when the receiver's overrun
//! policy uses them) and the receiver answers with an [`Announce`] (its ring region and layout),
//! after which the transmitter computes every destination address itself.
//!
//! Wire formats, little-endian:
//! - hello: `"REMU"`, module (u16), then optionally the credit word's region (20 bytes:
//!   address u64, length u64, rkey u32);
//! - announce: the ring's region (20 bytes, as above), then the ring layout
//!   ([`RingLayout::encode`], 12 bytes).
use remora_fabric::{Faults, QpOptions, QpType, RegionInfo, Transport};

use crate::config::{Config, TransportKind};
use crate::flow::CreditTarget;
use crate::ring::RingLayout;
use crate::{DaqError, Result};

/// The first bytes of a transmitter's hello.
pub const HELLO_MAGIC: &[u8; 4] = b"REMU";

/// The queue pair options of the link between module `module` and receiver `receiver`, as the
/// transmitter uses them (the receiver takes the same, without fault injection).
///
/// A detector's link is UC: it cannot wait, so it cannot retransmit either, and a lost packet
/// masks its module. A source that waits for ring credits (`pause`, `backpressure`) can also
/// wait for acknowledgements: its link is RC, so that over udp, where a socket buffer overflows
/// at full speed, nothing is lost either.
pub fn qp_options(cfg: &Config, module: usize, receiver: usize) -> QpOptions {
    let transport = match cfg.transport.kind {
        TransportKind::Shm => Transport::Shm,
        _ => Transport::Udp,
    };
    QpOptions {
        transport,
        qp_type: match cfg.receiver.overrun.flow_controlled() {
            true => QpType::Rc,
            false => QpType::Uc,
        },
        mtu: cfg.transport.mtu,
        faults: (cfg.transport.loss > 0.0).then(|| Faults {
            loss: cfg.transport.loss,
            duplicate: 0.0,
            reorder: 0.0,
            seed: cfg
                .transport
                .loss_seed
                .wrapping_mul(0x9e37_79b9)
                .wrapping_add((receiver * 64 + module) as u64),
        }),
        ..QpOptions::default()
    }
}

/// What a transmitter says when it connects.
#[derive(Debug, Clone, Copy)]
pub struct Hello {
    /// The module it sends.
    pub module: usize,
    /// Where it wants ring credits written, if it follows them.
    pub credit: Option<CreditTarget>,
}

impl Hello {
    /// The bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = HELLO_MAGIC.to_vec();
        b.extend_from_slice(&(self.module as u16).to_le_bytes());
        if let Some(c) = &self.credit {
            b.extend_from_slice(&c.0.encode());
        }
        b
    }

    /// Reads a hello; `None` when it is not one from a module of a `modules`-module detector.
    pub fn decode(b: &[u8], modules: usize) -> Option<Hello> {
        if b.len() < 6 || &b[..4] != HELLO_MAGIC {
            return None;
        }
        let module = u16::from_le_bytes([b[4], b[5]]) as usize;
        (module < modules).then(|| Hello {
            module,
            credit: CreditTarget::decode(&b[6..]),
        })
    }
}

/// What the receiver answers: its ring.
#[derive(Debug, Clone, Copy)]
pub struct Announce {
    /// The ring's region.
    pub region: RegionInfo,
    /// Its layout.
    pub ring: RingLayout,
}

impl Announce {
    /// The bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.region.encode().to_vec();
        b.extend_from_slice(&self.ring.encode());
        b
    }

    /// Reads and checks an announcement: the layout must be valid and the region large enough.
    pub fn decode(b: &[u8]) -> Result<Announce> {
        let region = RegionInfo::decode(b)
            .map_err(|e| DaqError::Acquisition(format!("the receiver's ring: {e}")))?;
        let ring = RingLayout::decode(b.get(RegionInfo::LEN..).unwrap_or(&[]))?;
        if region.len < ring.bytes() as u64 {
            return Err(DaqError::Acquisition(format!(
                "the receiver's ring region is {} bytes, its layout needs {}",
                region.len,
                ring.bytes()
            )));
        }
        Ok(Announce { region, ring })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_round_trip_and_strangers_are_refused() {
        let h = Hello {
            module: 3,
            credit: None,
        };
        let b = h.encode();
        assert_eq!(b, b"REMU\x03\x00");
        let d = Hello::decode(&b, 4).unwrap();
        assert_eq!(d.module, 3);
        assert!(d.credit.is_none());
        assert!(
            Hello::decode(&b, 3).is_none(),
            "module 3 of a 3-module detector"
        );
        assert!(Hello::decode(b"REMX\x00\x00", 4).is_none());
        assert!(Hello::decode(b"REM", 4).is_none());
        let info = RegionInfo {
            addr: 0x1000,
            len: 4096,
            rkey: 9,
        };
        let b = Hello {
            module: 1,
            credit: Some(CreditTarget(info)),
        }
        .encode();
        let c = Hello::decode(&b, 2).unwrap().credit.unwrap();
        assert_eq!((c.0.addr, c.0.rkey), (0x1000, 9));
        // A credit word too short to hold a limit is no credit word.
        let short = RegionInfo { len: 4, ..info };
        let mut b = b"REMU\x00\x00".to_vec();
        b.extend_from_slice(&short.encode());
        assert!(Hello::decode(&b, 1).unwrap().credit.is_none());
    }

    #[test]
    fn announcements_check_the_region_against_the_layout() {
        let ring = RingLayout::with_stacks(2, 4, 3).unwrap();
        let region = RegionInfo {
            addr: 0,
            len: ring.bytes() as u64,
            rkey: 1,
        };
        let a = Announce { region, ring }.encode();
        assert_eq!(Announce::decode(&a).unwrap().ring, ring);
        let small = Announce {
            region: RegionInfo {
                len: ring.bytes() as u64 - 1,
                ..region
            },
            ring,
        }
        .encode();
        assert!(Announce::decode(&small).is_err());
        assert!(Announce::decode(&a[..RegionInfo::LEN + 4]).is_err());
    }
}
