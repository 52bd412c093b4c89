//! What the PART tests share: the transfers, the helpers, the stats on the wire of the control
//! messages; the child process ([`child`]) and the parent's side of a connection ([`session`]).
use std::sync::Arc;
use std::time::Duration;

use remora_fabric::Stats;
use remora_mem::{Access, Buffer, Mode, Pd, Region};

pub mod child;
pub mod session;

pub const KIB: usize = 1 << 10;
pub const MIB: usize = 1 << 20;
/// The child's region: 64 MiB and some slack.
pub const REMOTE_LEN: usize = 66 * MIB;
/// The parent's region: sources in the first half, READ destinations in the second.
pub const DST: usize = 66 * MIB;
pub const LOCAL_LEN: usize = 2 * DST;
/// Control regions (commands and replies).
pub const CTRL_LEN: usize = 64 * KIB;
pub const CMD_AT: usize = 8 * KIB;
pub const REPLY_LEN: usize = 4 * KIB;

/// Carries the child's role: `"<policy> <connections>"`.
pub const ENV: &str = "REMORA_PART_CHILD";
pub const CHILD_TEST: &str = "part_child_serves";
pub const ADDR_TAG: &str = "PART_CHILD_ADDR=";
/// Hang guard for any single wait (a 64 MiB transfer in a debug build takes well under this).
pub const WAIT: Duration = Duration::from_secs(60);

pub const EVICT: u32 = 1;
pub const STATS: u32 = 2;
pub const BYE: u32 = 3;

/// One transfer: `len` bytes from `src` in the parent to `remote` in the child, read back to
/// `DST + dst` in the parent. Odd offsets, so packets straddle pages.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub len: usize,
    pub src: usize,
    pub remote: usize,
    pub dst: usize,
}

pub const CASES: [Case; 5] = [
    Case {
        len: 4 * KIB,
        src: 1,
        remote: 64 * MIB + 100,
        dst: 5,
    },
    Case {
        len: 64 * KIB,
        src: 3 * 4096 + 7,
        remote: 64 * MIB + 8192 + 3,
        dst: 3000,
    },
    Case {
        len: MIB,
        src: 11,
        remote: 64 * MIB + 512 * KIB + 5,
        dst: 77,
    },
    Case {
        len: 16 * MIB,
        src: 4096 + 13,
        remote: 1000,
        dst: 20_481,
    },
    Case {
        len: 64 * MIB,
        src: 99,
        remote: 17,
        dst: 123,
    },
];

// ---------------------------------------------------------------------------------------------
// Helpers shared by both sides.

pub fn anonymous(pd: &Pd, len: usize) -> Arc<Region> {
    let r = pd
        .register(Buffer::anonymous(len).unwrap(), Access::ALL, Mode::OnDemand)
        .unwrap();
    assert_eq!(
        r.refresh_residency().unwrap(),
        0,
        "a fresh mapping has no page"
    );
    r
}

/// Deterministic bytes that depend on the seed and the position (a misplaced block shows).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in 0..len.div_ceil(8) as u64 {
        let w = (i ^ s).wrapping_mul(0xD6E8_FEB8_6659_FD93).rotate_left(29) ^ s;
        v.extend_from_slice(&w.to_le_bytes());
    }
    v.truncate(len);
    v
}

pub fn bytes(r: &Region, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    r.read_at(off, &mut v).unwrap();
    v
}

/// Compares without printing megabytes: the first difference and how many bytes differ.
pub fn check_eq(what: &str, want: &[u8], got: &[u8]) {
    assert_eq!(want.len(), got.len(), "{what}: lengths");
    if want != got {
        let first = want.iter().zip(got).position(|(a, b)| a != b).unwrap();
        let bad = want.iter().zip(got).filter(|(a, b)| a != b).count();
        panic!(
            "{what}: {bad} of {} bytes differ, first at {first}: want {:#04x} got {:#04x}",
            want.len(),
            want[first],
            got[first]
        );
    }
}

/// The child's counters as it sends them back: every field, in declaration order.
pub fn stats_fields(s: &Stats) -> [u64; 27] {
    [
        s.tx_packets,
        s.rx_packets,
        s.rx_malformed,
        s.rx_wrong_qp,
        s.retransmits,
        s.timeouts,
        s.duplicates,
        s.out_of_sequence,
        s.naks_sent,
        s.naks_received,
        s.access_errors,
        s.invalid_requests,
        s.uc_messages_dropped,
        s.uc_packets_dropped,
        s.acks_sent,
        s.bad_pkey,
        s.faults,
        s.page_ins,
        s.pages_in,
        s.fault_naks,
        s.errs_sent,
        s.errs_received,
        s.fault_timeouts,
        s.held_drops,
        s.source_faults,
        s.wave_holds,
        s.paced_resumes,
    ]
}

pub fn stats_decode(b: &[u8]) -> Stats {
    let f = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
    Stats {
        tx_packets: f(0),
        rx_packets: f(1),
        rx_malformed: f(2),
        rx_wrong_qp: f(3),
        retransmits: f(4),
        timeouts: f(5),
        duplicates: f(6),
        out_of_sequence: f(7),
        naks_sent: f(8),
        naks_received: f(9),
        access_errors: f(10),
        invalid_requests: f(11),
        uc_messages_dropped: f(12),
        uc_packets_dropped: f(13),
        acks_sent: f(14),
        bad_pkey: f(15),
        faults: f(16),
        page_ins: f(17),
        pages_in: f(18),
        fault_naks: f(19),
        errs_sent: f(20),
        errs_received: f(21),
        fault_timeouts: f(22),
        held_drops: f(23),
        source_faults: f(24),
        wave_holds: f(25),
        paced_resumes: f(26),
        ..Stats::default()
    }
}
