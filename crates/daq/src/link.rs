//! The link between a module's transmitter and a receiver, as both ends set it up: the queue
//! pair options, the transmitter's hello and the receiver's announcement of its ring.
//!
//! At connection setup (the fabric's out-of-band exchange) the transmitter sends a [`Hello`]
//! (which module it is, and where it wants ring credits written when the receiver's overrun
//! policy uses them) and the receiver answers with an [`Announce`] (its ring region and layout),
//! after which the transmitter computes every destination address itself.
//!
//! The bytes are [`remora_wire::ctrl::remu`]'s (little-endian): the hello is `"REMU"`, the
//! module (u16), then optionally the credit word's region (address u64, length u64, rkey u32);
//! the announcement is the ring's region, then its layout (modules, bunch, stacks: u32 each).
//! This module converts them to the acquisition's types and checks what only it can: the module
//! exists, the layout is sound and fits the region.
use remora_fabric::{Faults, QpOptions, QpType, RegionInfo, Transport};
use remora_wire::ctrl::remu::{self, AnnouncePacket, AnnounceRepr, RemuHelloPacket, RemuHelloRepr};

use crate::config::{Config, TransportKind};
use crate::flow::CreditTarget;
use crate::ring::RingLayout;
use crate::{DaqError, Result};

/// The first bytes of a transmitter's hello.
pub const HELLO_MAGIC: &[u8; 4] = &remu::MAGIC;

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
    /// The bytes (a configuration has at most 32 modules, so the number fits the u16).
    pub fn encode(&self) -> Vec<u8> {
        RemuHelloRepr {
            module: self.module as u16,
            credit: self.credit.map(|c| c.0.into()),
        }
        .to_bytes()
    }

    /// Reads a hello; `None` when it is not one from a module of a `modules`-module detector.
    pub fn decode(b: &[u8], modules: usize) -> Option<Hello> {
        let h = RemuHelloRepr::parse(&RemuHelloPacket::new_unchecked(b)).ok()?;
        let module = usize::from(h.module);
        (module < modules).then(|| Hello {
            module,
            credit: h.credit.and_then(|r| CreditTarget::new(r.into())),
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
        // Layouts are bounded far below u32 (RingLayout::with_stacks).
        AnnounceRepr {
            ring: self.region.into(),
            modules: self.ring.modules as u32,
            bunch: self.ring.bunch as u32,
            stacks: self.ring.stacks as u32,
        }
        .to_bytes()
        .to_vec()
    }

    /// Reads and checks an announcement: the layout must be valid and the region large enough.
    pub fn decode(b: &[u8]) -> Result<Announce> {
        let a = AnnounceRepr::parse(&AnnouncePacket::new_unchecked(b))
            .map_err(|e| DaqError::Acquisition(format!("the receiver's ring: {e}")))?;
        let region = RegionInfo::from(a.ring);
        let ring =
            RingLayout::with_stacks(a.modules as usize, a.bunch as usize, a.stacks as usize)?;
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

    /// The bytes a receiver built before the codec moved to remora-wire sent for a 2-module ring
    /// of 3 stacks of 4 frames: the conversion keeps the field order.
    #[test]
    fn announcements_keep_their_golden_bytes() {
        let ring = RingLayout::with_stacks(2, 4, 3).unwrap();
        let region = RegionInfo {
            addr: 0x7f12_3456_0000,
            len: ring.bytes() as u64,
            rkey: 0xcafe,
        };
        let golden = [
            0x00, 0x00, 0x56, 0x34, 0x12, 0x7f, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00, 0x00,
            0x00, 0x00, 0xfe, 0xca, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
            0x03, 0x00, 0x00, 0x00,
        ];
        assert_eq!(Announce { region, ring }.encode(), golden);
        let a = Announce::decode(&golden).unwrap();
        assert_eq!((a.region, a.ring), (region, ring));
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
