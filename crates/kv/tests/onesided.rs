//! GETs by one-sided READs over the fabric (shm and udp) while the arena's writer churns, and a
//! hostile peer that READs outside the grant and WRITEs into it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use remora_fabric::{QpOptions, RegionInfo, Status, Transport};
use remora_kv::arena::remote::{Got, Reader};
use remora_kv::arena::{Arena, ArenaConfig, Backing, Mapping};
use remora_kv::onesided::{FabricFetch, Grants};
use remora_mem::{Access, Buffer, Mode, Pd};

fn remote_cfg() -> ArenaConfig {
    ArenaConfig {
        page_size: 64 << 10,
        hash_power: 12,
        hash_power_init: 2,
        item_max: 64 << 10,
        remote: true,
        ..ArenaConfig::new(1 << 20)
    }
}

/// An arena in a registered memfd and a listener granting it.
fn serve(transport: Transport) -> (Arena, Grants) {
    let cfg = remote_cfg();
    let pd = Arc::new(Pd::new());
    let map = Mapping::new(Backing::Memfd, cfg.mapped()).unwrap();
    let (map, region) = map.register(&pd).unwrap();
    let (arena, _) = Arena::open(map, &cfg).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let grants = Grants::bind(any, pd, &region, transport).unwrap();
    (arena, grants)
}

/// A value that says what it is (see `arena/remote_tests.rs`).
fn value_of(key: &[u8], seq: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(12));
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(len.max(12) as u32).to_le_bytes());
    let mut x = key
        .iter()
        .fold(seq | 1, |h, &b| h.wrapping_mul(31) ^ u64::from(b));
    while v.len() < len.max(12) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.push((x >> 33) as u8);
    }
    v
}

fn written(key: &[u8], value: &[u8], flags: u32) -> bool {
    value.len() >= 12 && {
        let seq = u64::from_le_bytes(value[..8].try_into().unwrap());
        let len = u32::from_le_bytes(value[8..12].try_into().unwrap()) as usize;
        flags == seq as u32 && value_of(key, seq, len) == value
    }
}

/// The writer sets, replaces, deletes, touches, expires, evicts (the arena is small for the
/// keys), moves slab pages and grows the table while a reader over `transport` looks keys up,
/// one at a time and 32 walked together: every hit must be a value written for its key, and
/// no older than the key's last set or delete that had returned before the lookup began.
fn churn_under_readers(transport: Transport, reads: u64) {
    const KEYS: u64 = 5000;
    // Per key, the last set (its sequence number) or delete (`DELETED | seq`) that returned.
    const DELETED: u64 = 1 << 63;
    let last: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let (mut arena, grants) = serve(transport);
    let addr = grants.local_addr();
    let accept = std::thread::spawn(move || (grants.accept().unwrap(), grants));
    let done = Arc::new(AtomicBool::new(false));
    let clock = Arc::new(AtomicU32::new(1));
    let reader = {
        let (done, clock, last) = (done.clone(), clock.clone(), last.clone());
        std::thread::spawn(move || {
            let mut f = FabricFetch::connect(addr, transport).unwrap();
            let mut r = Reader::open(&mut f).unwrap();
            let (mut hits, mut misses, mut fallbacks, mut wrong) = (0u64, 0u64, 0u64, 0u64);
            let mut stale = 0u64;
            let mut i = 0u64;
            while i < reads {
                // Every 8th lookup one key, the others 32 together.
                let n = if (i / 32) % 8 == 0 { 1 } else { 32 };
                let ids: Vec<u64> = (i..i + n).map(|j| j.wrapping_mul(7919) % KEYS).collect();
                let keys: Vec<Vec<u8>> = ids
                    .iter()
                    .map(|id| format!("key:{id}").into_bytes())
                    .collect();
                let before: Vec<u64> = ids
                    .iter()
                    .map(|&id| last[id as usize].load(Ordering::Acquire))
                    .collect();
                i += n;
                let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                let now = clock.load(Ordering::Relaxed);
                let got = r.get_many(&mut f, &refs, now).unwrap();
                for ((k, got), lo) in keys.iter().zip(got).zip(&before) {
                    match got {
                        Got::Hit(it) => {
                            hits += 1;
                            wrong += u64::from(!written(k, &it.value, it.flags));
                            let seq = u64::from_le_bytes(it.value[..8].try_into().unwrap());
                            let fresh = match lo & DELETED {
                                0 => seq >= *lo,
                                _ => seq > lo & !DELETED,
                            };
                            stale += u64::from(!fresh);
                        }
                        Got::Miss => misses += 1,
                        Got::Fallback(_) => fallbacks += 1,
                    }
                }
            }
            done.store(true, Ordering::Relaxed);
            (hits, misses, fallbacks, wrong, stale, r.retries)
        })
    };
    let level = arena.hash_level().0;
    let (mut seq, mut x, mut moved) = (0u64, 0x9e37_79b9u64, 0u64);
    while !done.load(Ordering::Relaxed) || seq < 50_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        seq += 1;
        let now = clock.load(Ordering::Relaxed);
        if seq % 500 == 0 {
            clock.store(now + 1, Ordering::Relaxed);
        }
        if seq % 16 == 0 {
            // Two cores: leave the reader and the fabric's threads their share.
            std::thread::yield_now();
        }
        let id = (x >> 8) % KEYS;
        let k = format!("key:{id}").into_bytes();
        match x % 100 {
            0..=64 => {
                let v = value_of(&k, seq, 12 + (x >> 20) as usize % 500);
                let exptime = if x % 7 == 0 { now + 2 } else { 0 };
                if arena.set(&k, &v, seq as u32, exptime, now).is_ok() {
                    last[id as usize].store(seq, Ordering::Release);
                }
            }
            65..=74 => {
                if arena.delete(&k) {
                    last[id as usize].store(DELETED | seq, Ordering::Release);
                }
            }
            75..=94 => _ = arena.touch(&k, if x % 3 == 0 { now + 3 } else { 0 }, now),
            95..=97 => {
                let from = (x >> 32) as usize % arena.class_count();
                if arena.move_page(from, None, &mut |_| true).is_ok() {
                    moved += 1;
                }
            }
            _ => _ = arena.reclaim_expired(now),
        }
    }
    let (hits, misses, fallbacks, wrong, stale, retries) = reader.join().unwrap();
    eprintln!(
        "{transport:?}: writes {seq}, page moves {moved}, evictions {}, table level {level} -> {}; \
         reads: hits {hits}, misses {misses}, fallbacks {fallbacks}, retries {retries}, wrong {wrong}, \
         stale {stale}",
        arena.stats().evictions,
        arena.hash_level().0
    );
    assert_eq!(wrong, 0, "{transport:?}: a value never written for its key");
    assert_eq!(
        stale, 0,
        "{transport:?}: a value older than a write done before the lookup"
    );
    assert!(hits > 0 && misses > 0, "{transport:?}");
    assert!(
        arena.stats().evictions > 0,
        "memory was tight enough to evict"
    );
    assert!(
        arena.hash_level().0 > level,
        "the table grew under the reader"
    );
    drop(accept.join().unwrap());
}

/// A million reads in all: most over shm, where they are cheap.
#[test]
fn one_sided_gets_over_shm_return_only_written_values() {
    churn_under_readers(Transport::Shm, 950_000);
}

#[test]
fn one_sided_gets_over_udp_return_only_written_values() {
    churn_under_readers(Transport::Udp, 50_000);
}

/// A peer of the grant listener at `addr` with a local buffer of its own: its queue pair, the
/// buffer and the grant it was given.
fn peer(
    addr: SocketAddr,
    transport: Transport,
) -> (remora_fabric::Qp, Arc<remora_mem::Region>, Vec<u8>) {
    let pd = Arc::new(Pd::new());
    let local = pd
        .register(
            Buffer::anonymous(1 << 16).unwrap(),
            Access::LOCAL_WRITE,
            Mode::OnDemand,
        )
        .unwrap();
    let opts = QpOptions {
        transport,
        ..QpOptions::default()
    };
    let (qp, grant) = remora_fabric::connect(addr, pd, opts, &[]).unwrap();
    (qp, local, grant)
}

/// A peer that READs past the grant or WRITEs into it is refused by the fabric's checks, and
/// the next peer reads as before.
#[test]
fn reads_outside_the_grant_and_writes_into_it_are_refused() {
    for transport in [Transport::Shm, Transport::Udp] {
        let (mut arena, grants) = serve(transport);
        arena.set(b"k", b"value", 0, 0, 1).unwrap();
        let addr = grants.local_addr();
        let accept = std::thread::spawn(move || {
            let a = grants.accept().unwrap();
            let b = grants.accept().unwrap();
            (a, b, grants)
        });
        let (qp, local, grant) = peer(addr, transport);
        let g = RegionInfo::decode(&grant).unwrap();
        let wait = |what: &str| {
            let c = qp
                .wait(std::time::Duration::from_secs(5))
                .unwrap()
                .unwrap_or_else(|| panic!("{transport:?} {what}: no completion"));
            c.status
        };
        qp.post_read(1, &local, 0, 64, g.addr + g.len - 32, g.rkey)
            .unwrap();
        assert_ne!(wait("READ past the end"), Status::Success, "{transport:?}");
        drop(qp);
        // A fresh peer: the WRITE into the read-only grant is refused too.
        let (qp, local, _) = peer(addr, transport);
        qp.post_write(2, &local, 0, 64, g.addr + 4096, g.rkey, None)
            .unwrap();
        let c = qp
            .wait(std::time::Duration::from_secs(5))
            .unwrap()
            .expect("a completion for the WRITE");
        assert_ne!(
            c.status,
            Status::Success,
            "{transport:?}: WRITE into a read-only grant"
        );
        let _kept = accept.join().unwrap();
        // The arena is as it was.
        assert_eq!(arena.get(b"k", 1).unwrap().value, b"value");
    }
}
