//! Registration, keys, lookups, deregistration and the remote-access check.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use remora_mem::{Access, AccessError, Backing, Buffer, Error, Mode, Pd};

fn anon(pd: &Pd, len: usize, access: Access) -> Arc<remora_mem::Region> {
    pd.register(Buffer::anonymous(len).unwrap(), access, Mode::OnDemand)
        .unwrap()
}

#[test]
fn keys_are_unique_and_lookups_find_the_region() {
    let pd = Pd::new();
    let regions: Vec<_> = (0..300).map(|_| anon(&pd, 4096, Access::ALL)).collect();
    assert_eq!(pd.len(), 300);
    let mut keys = HashSet::new();
    for r in &regions {
        assert!(keys.insert(r.rkey()), "duplicate rkey {:#x}", r.rkey());
        assert!(keys.insert(r.lkey()), "duplicate lkey {:#x}", r.lkey());
        assert_ne!(r.rkey(), 0);
        assert!(Arc::ptr_eq(&pd.by_rkey(r.rkey()).unwrap(), r));
        assert!(Arc::ptr_eq(&pd.by_lkey(r.lkey()).unwrap(), r));
        // An lkey is not an rkey and vice versa.
        assert!(pd.by_rkey(r.lkey()).is_none());
        assert!(pd.by_lkey(r.rkey()).is_none());
    }
    // Tags are random, not a sequence: over 300 keys many distinct tags appear.
    let tags: HashSet<u8> = regions.iter().map(|r| r.rkey() as u8).collect();
    assert!(tags.len() > 100, "only {} distinct tags", tags.len());
    assert!(pd.by_rkey(0).is_none());
    assert!(pd.by_rkey(u32::MAX).is_none());
}

#[test]
fn deregister_kills_the_key_even_when_the_slot_is_reused() {
    let pd = Pd::new();
    let r = anon(&pd, 8192, Access::ALL);
    let (rkey, lkey, va) = (r.rkey(), r.lkey(), r.addr());
    assert!(pd.check_remote(rkey, va, 8, Access::REMOTE_WRITE).is_ok());
    pd.deregister(rkey).unwrap();
    assert!(pd.is_empty());
    assert_eq!(
        pd.check_remote(rkey, va, 8, Access::REMOTE_WRITE)
            .unwrap_err(),
        AccessError::UnknownKey(rkey)
    );
    assert!(pd.by_lkey(lkey).is_none());
    assert!(matches!(pd.deregister(rkey), Err(Error::UnknownKey(k)) if k == rkey));
    // The old Arc still works (an access in flight keeps the memory alive).
    r.write_at(0, b"still here").unwrap();
    // Churn through many registrations: the slot is reused (after the quarantine), yet the
    // stale keys never come back to life.
    let mut reused = 0;
    for _ in 0..(remora_mem::pd::QUARANTINE + 2) * 3 {
        let n = anon(&pd, 4096, Access::ALL);
        if n.rkey() >> 8 == rkey >> 8 {
            reused += 1;
            assert_ne!(n.rkey(), rkey);
            assert_ne!(n.lkey(), lkey);
        }
        assert!(pd.by_rkey(rkey).is_none());
        assert!(pd.by_lkey(lkey).is_none());
        pd.deregister(n.rkey()).unwrap();
    }
    assert!(reused >= 2, "index reused {reused} times");
}

#[test]
fn a_slot_never_repeats_a_tag_within_its_window() {
    let pd = Pd::new();
    // Fill the quarantine so that every further registration reuses a freed index.
    let hold: Vec<_> = (0..=remora_mem::pd::QUARANTINE + 1)
        .map(|_| anon(&pd, 4096, Access::NONE))
        .collect();
    for r in &hold {
        pd.deregister(r.rkey()).unwrap();
    }
    let mut per_index: std::collections::HashMap<u32, Vec<u32>> = Default::default();
    for _ in 0..(remora_mem::pd::QUARANTINE + 2) * 12 {
        let n = anon(&pd, 4096, Access::NONE);
        per_index.entry(n.rkey() >> 8).or_default().push(n.rkey());
        pd.deregister(n.rkey()).unwrap();
    }
    for keys in per_index.values() {
        // 12 draws per index: without the window a repeat would show in about a quarter of
        // the ~1000 indexes.
        assert!(keys.len() >= 10, "index reused only {} times", keys.len());
        let distinct: HashSet<_> = keys.iter().collect();
        assert_eq!(
            distinct.len(),
            keys.len(),
            "a tag repeated within the window"
        );
    }
}

#[test]
fn check_remote_accepts_and_refuses() {
    let pd = Pd::new();
    let r = anon(&pd, 4 * 4096, Access::REMOTE_READ | Access::LOCAL_WRITE);
    let (k, base, size) = (r.rkey(), r.addr(), r.len() as u64);
    let ok = pd
        .check_remote(k, base + 100, 50, Access::REMOTE_READ)
        .unwrap();
    assert_eq!((ok.offset, ok.len), (100, 50));
    assert!(Arc::ptr_eq(&ok.region, &r));
    // Whole region, and exactly the end.
    assert!(pd.check_remote(k, base, size, Access::REMOTE_READ).is_ok());
    assert!(matches!(
        pd.check_remote(k, base + 1, size, Access::REMOTE_READ),
        Err(AccessError::OutOfBounds { .. })
    ));
    assert!(matches!(
        pd.check_remote(k, base - 1, 1, Access::REMOTE_READ),
        Err(AccessError::OutOfBounds { .. })
    ));
    // Hostile values near u64::MAX never wrap.
    assert!(pd
        .check_remote(k, u64::MAX, 2, Access::REMOTE_READ)
        .is_err());
    assert!(pd
        .check_remote(k, base + 8, u64::MAX, Access::REMOTE_READ)
        .is_err());
    // Rights.
    assert_eq!(
        pd.check_remote(k, base, 8, Access::REMOTE_WRITE)
            .unwrap_err(),
        AccessError::Denied {
            need: Access::REMOTE_WRITE,
            have: Access::REMOTE_READ | Access::LOCAL_WRITE
        }
    );
    // Zero length: key and rights checked, any va.
    let z = pd
        .check_remote(k, u64::MAX, 0, Access::REMOTE_READ)
        .unwrap();
    assert_eq!((z.offset, z.len), (size as usize, 0));
    assert!(pd.check_remote(k ^ 1, base, 0, Access::NONE).is_err());
    assert!(pd.check_remote(k, base, 0, Access::REMOTE_WRITE).is_err());
    // Local check by lkey.
    assert!(pd
        .check_local(r.lkey(), base, 8, Access::LOCAL_WRITE)
        .is_ok());
    assert!(pd.check_local(r.rkey(), base, 8, Access::NONE).is_err());
}

#[test]
fn copies_are_bounds_checked() {
    let pd = Pd::new();
    let r = anon(&pd, 100, Access::ALL);
    assert_eq!(r.len(), 4096);
    r.write_at(4090, b"abcdef").unwrap();
    let mut out = [0u8; 6];
    r.read_at(4090, &mut out).unwrap();
    assert_eq!(&out, b"abcdef");
    assert!(matches!(
        r.write_at(4091, b"abcdef"),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(r.read_at(usize::MAX, &mut out).is_err());
    r.write_at(4096, b"").unwrap();
    // SAFETY: nothing else touches the region in this test.
    assert_eq!(unsafe { &r.as_slice()[4090..] }, b"abcdef");
    let ro = anon(&pd, 4096, Access::REMOTE_READ);
    assert!(matches!(ro.write_at(0, b"x"), Err(Error::ReadOnly { .. })));
}

#[test]
fn memfd_is_shared_between_two_mappings() {
    let pd = Pd::new();
    let a = pd
        .register(
            Buffer::memfd("remora-test", 3 * 4096).unwrap(),
            Access::ALL,
            Mode::OnDemand,
        )
        .unwrap();
    assert_eq!(a.backing(), Backing::Memfd);
    let dup = a.memfd().unwrap().try_clone_to_owned().unwrap();
    let b = pd
        .register(
            Buffer::map_memfd(dup, 3 * 4096).unwrap(),
            Access::ALL,
            Mode::OnDemand,
        )
        .unwrap();
    assert_ne!(a.as_ptr(), b.as_ptr());
    a.write_at(5000, b"through a").unwrap();
    let mut out = [0u8; 9];
    b.read_at(5000, &mut out).unwrap();
    assert_eq!(&out, b"through a");
    b.write_at(0, b"and back").unwrap();
    let mut out = [0u8; 8];
    a.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"and back");
}

#[test]
fn received_memfd_must_cover_the_mapping_and_be_sealed() {
    let a = Buffer::memfd("short", 4096).unwrap();
    let dup = a.fd().unwrap().try_clone_to_owned().unwrap();
    assert!(matches!(
        Buffer::map_memfd(dup, 8192),
        Err(Error::BadMemfd { .. })
    ));
    // A memfd without sealing support cannot be protected against shrinking.
    let raw = rustix::fs::memfd_create("unsealable", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&raw, 4096).unwrap();
    assert!(matches!(
        Buffer::map_memfd(raw, 4096),
        Err(Error::BadMemfd { .. })
    ));
    // A sealable one gets sealed and is accepted.
    let ok = rustix::fs::memfd_create("sealable", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&ok, 4096).unwrap();
    let b = Buffer::map_memfd(ok, 4096).unwrap();
    assert!(
        rustix::fs::ftruncate(b.fd().unwrap(), 0).is_err(),
        "shrink is sealed"
    );
}

#[test]
fn external_memory_is_registered_in_place() {
    let mut v = vec![0u8; 10_000];
    let pd = Pd::new();
    // SAFETY: `v` outlives the region, which is dropped (deregistered) before it.
    let buf = unsafe { Buffer::external(v.as_mut_ptr().add(3), 9_000) }.unwrap();
    let r = pd.register(buf, Access::ALL, Mode::OnDemand).unwrap();
    assert_eq!(r.len(), 9_000);
    assert_eq!(r.addr(), v.as_ptr() as u64 + 3);
    let acc = pd
        .check_remote(r.rkey(), r.addr() + 8_990, 10, Access::REMOTE_WRITE)
        .unwrap();
    acc.region.write_at(acc.offset, b"0123456789").unwrap();
    pd.deregister(r.rkey()).unwrap();
    drop((r, acc));
    assert_eq!(&v[8_993..9_003], b"0123456789");
}

/// The check, restated with plain checked arithmetic.
fn model(
    known: bool,
    have: Access,
    base: u64,
    size: u64,
    va: u64,
    len: u64,
    need: Access,
) -> Result<(usize, usize), &'static str> {
    if !known {
        return Err("key");
    }
    if !have.contains(need) {
        return Err("rights");
    }
    if len == 0 {
        return Ok((va.saturating_sub(base).min(size) as usize, 0));
    }
    match va.checked_add(len) {
        Some(end) if va >= base && end <= base + size => Ok(((va - base) as usize, len as usize)),
        _ => Err("bounds"),
    }
}

/// Eight regions, one per combination of rights, shared by the property cases.
fn fixture() -> &'static (Pd, Vec<Arc<remora_mem::Region>>) {
    static F: OnceLock<(Pd, Vec<Arc<remora_mem::Region>>)> = OnceLock::new();
    F.get_or_init(|| {
        let pd = Pd::new();
        let rs = (0..8u8)
            .map(|b| anon(&pd, 3 * 4096, Access::from_bits(b).unwrap()))
            .collect();
        (pd, rs)
    })
}

#[derive(Debug, Clone)]
enum Va {
    Abs(u64),
    FromBase(i64),
}

fn va() -> impl Strategy<Value = Va> {
    prop_oneof![
        any::<u64>().prop_map(Va::Abs),
        (-8i64..3 * 4096 + 16).prop_map(Va::FromBase),
        (0u64..8).prop_map(|d| Va::Abs(u64::MAX - d)),
        (0u64..8).prop_map(Va::Abs),
    ]
}

#[derive(Debug, Clone)]
enum Len {
    Abs(u64),
    /// Up to the region's end, plus this (so the boundary is hit exactly).
    ToEnd(i64),
}

fn len() -> impl Strategy<Value = Len> {
    prop_oneof![
        any::<u64>().prop_map(Len::Abs),
        (0u64..3 * 4096 + 16).prop_map(Len::Abs),
        (0u64..8).prop_map(|d| Len::Abs(u64::MAX - d)),
        Just(Len::Abs(0)),
        (-2i64..=2).prop_map(Len::ToEnd),
    ]
}

proptest! {
    #[test]
    fn check_remote_agrees_with_the_model(
        have_bits in 0u8..8, need_bits in 0u8..8,
        key in prop_oneof![Just(None), any::<u32>().prop_map(Some)],
        va in va(), len in len(),
    ) {
        let (pd, rs) = fixture();
        let r = &rs[have_bits as usize];
        let va = match va {
            Va::Abs(v) => v,
            Va::FromBase(d) => r.addr().wrapping_add_signed(d),
        };
        let len = match len {
            Len::Abs(l) => l,
            Len::ToEnd(d) => (r.addr() + r.len() as u64).wrapping_sub(va).wrapping_add_signed(d),
        };
        let key = key.unwrap_or(r.rkey());
        let need = Access::from_bits(need_bits).unwrap();
        // A random key may name another live region: then the model is about that one.
        let target = rs.iter().find(|x| x.rkey() == key);
        let want = match target {
            Some(t) => model(true, t.access(), t.addr(), t.len() as u64, va, len, need),
            None => model(false, Access::NONE, 0, 0, va, len, need),
        };
        let got = pd.check_remote(key, va, len, need);
        match (&got, &want) {
            (Ok(g), Ok(w)) => {
                prop_assert_eq!((g.offset, g.len), *w);
                prop_assert!(Arc::ptr_eq(&g.region, target.unwrap()));
            }
            (Err(AccessError::UnknownKey(k)), Err("key")) => prop_assert_eq!(*k, key),
            (Err(AccessError::Denied { .. }), Err("rights"))
            | (Err(AccessError::OutOfBounds { .. }), Err("bounds")) => {}
            _ => prop_assert!(false, "got {:?} want {:?} (va {:#x} len {:#x})", got, want, va, len),
        }
    }
}

#[test]
fn lookups_race_with_registration_safely() {
    let pd = Pd::new();
    let stable = anon(&pd, 4096, Access::ALL);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let checks = std::sync::atomic::AtomicU64::new(0);
    let checks = &checks;
    std::thread::scope(|s| {
        let checker = s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let n = checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let a = pd
                    .check_remote(stable.rkey(), stable.addr(), 8, Access::REMOTE_WRITE)
                    .unwrap();
                a.region.write_at(a.offset, &n.to_le_bytes()).unwrap();
            }
        });
        let churn = s.spawn(|| {
            // Start churning only once the checker runs, so the two overlap (bounded wait).
            let t0 = std::time::Instant::now();
            while checks.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                assert!(t0.elapsed() < std::time::Duration::from_secs(10));
                std::thread::yield_now();
            }
            for _ in 0..200 {
                let r = anon(&pd, 4096, Access::ALL);
                let k = r.rkey();
                assert!(pd.check_remote(k, r.addr(), 1, Access::REMOTE_READ).is_ok());
                pd.deregister(k).unwrap();
                assert!(pd
                    .check_remote(k, r.addr(), 1, Access::REMOTE_READ)
                    .is_err());
            }
        });
        churn.join().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        checker.join().unwrap();
    });
    assert_eq!(pd.len(), 1);
}

#[test]
fn owned_external_memory_lives_as_long_as_the_region() {
    let pd = Pd::new();
    let mut v = vec![0u8; 1000];
    v[999] = 42;
    let r = pd
        .register(Buffer::from_vec(v).unwrap(), Access::ALL, Mode::OnDemand)
        .unwrap();
    assert_eq!(r.backing(), Backing::External);
    assert_eq!(r.len(), 1000);
    pd.deregister(r.rkey()).unwrap();
    // The Vec lives inside the buffer: the bytes are still there and writable.
    let mut out = [0u8; 1];
    r.read_at(999, &mut out).unwrap();
    assert_eq!(out, [42]);
    r.write_at(0, b"ok").unwrap();
    assert!(matches!(
        Buffer::from_vec(Vec::new()),
        Err(Error::ZeroLength)
    ));
    // An owner object is dropped exactly when the buffer is.
    let alive = Arc::new(());
    let mut backing = vec![1u8; 64];
    // SAFETY: `backing` outlives the buffer (dropped at the end of the test, after it).
    let b = unsafe { Buffer::external_owned(backing.as_mut_ptr(), 64, Box::new(alive.clone())) }
        .unwrap();
    assert_eq!(Arc::strong_count(&alive), 2);
    drop(b);
    assert_eq!(Arc::strong_count(&alive), 1);
    drop(backing);
}
