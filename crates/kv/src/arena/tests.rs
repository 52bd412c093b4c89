use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

fn small(memory: usize) -> ArenaConfig {
    ArenaConfig {
        memory,
        page_size: 64 << 10,
        hash_power: 8,
        // Small, so the proptest's few dozen keys grow the table.
        hash_power_init: 2,
        item_max: 64 << 10,
        ..ArenaConfig::new(memory)
    }
}

fn anon(cfg: &ArenaConfig) -> Arena {
    let map = Mapping::new(Backing::Anonymous, cfg.mapped()).unwrap();
    let (a, o) = Arena::open(map, cfg).unwrap();
    assert_eq!(o, Opened::Cold(None));
    a
}

#[test]
fn classes_grow_by_the_factor_from_the_minimum_space_to_the_page() {
    let c = ArenaConfig::new(64 << 20).classes().unwrap();
    // memcached 1.6 with -n 48 -f 1.25: 96, 120, 152, 192, 240, ...
    assert_eq!(&c[..5], &[96, 120, 152, 192, 240]);
    // Up to memcached's slab_chunk_max (half a page); larger items are chunked.
    assert_eq!(*c.last().unwrap(), 1 << 19);
    assert!(c.windows(2).all(|w| w[0] < w[1] && w[0] % 8 == 0));
    assert!(c.len() <= 63);
    let bad = ArenaConfig {
        growth_factor: 1.0,
        ..ArenaConfig::new(1 << 20)
    };
    assert!(bad
        .classes()
        .unwrap_err()
        .to_string()
        .contains("growth factor"));
}

#[test]
fn items_are_stored_found_replaced_and_deleted_by_offset() {
    let mut a = anon(&small(1 << 20));
    let c1 = a.set(b"alpha", b"one", 5, 0, 100).unwrap();
    let c2 = a.set(b"beta", &[7u8; 3000], 0, 0, 100).unwrap();
    assert!(c2 > c1);
    assert_eq!(a.get(b"alpha", 100).unwrap().value, b"one");
    let big = a.get(b"beta", 100).unwrap();
    assert_eq!((big.value.len(), big.class > 0), (3000, true));
    let c3 = a.set(b"alpha", b"two", 6, 0, 100).unwrap();
    let it = a.get(b"alpha", 100).unwrap();
    assert_eq!((it.value, it.flags, it.cas), (&b"two"[..], 6, c3));
    assert!(a.delete(b"alpha") && !a.delete(b"alpha"));
    assert!(a.get(b"alpha", 100).is_none());
    assert_eq!(a.stats().items, 1);
    a.check().unwrap();
}

#[test]
fn expired_items_are_never_returned_and_are_reclaimed() {
    let mut a = anon(&small(1 << 20));
    a.set(b"short", b"x", 0, 150, 100).unwrap();
    a.set(b"long", b"y", 0, 500, 100).unwrap();
    assert!(a.get(b"short", 149).is_some());
    assert!(a.get(b"short", 150).is_none());
    assert!(a.touch(b"long", 160, 151));
    assert_eq!(a.reclaim_expired(200), 1);
    assert_eq!(a.stats().items, 0);
    a.check().unwrap();
}

#[test]
fn a_full_class_evicts_its_least_recently_used_item() {
    // 4 pages of 64 KiB: 1000-byte items, 56 per 64 KiB page of the 1184-byte class.
    let cfg = small(4 * (64 << 10));
    let mut a = anon(&cfg);
    let n = 400;
    for i in 0..n {
        a.set(format!("k{i}").as_bytes(), &[i as u8; 1000], 0, 0, 1)
            .unwrap();
        if i == 10 {
            // k0 is used: it moves to the head and outlives the others.
            assert!(a.get(b"k0", 1).is_some());
        }
    }
    let st = a.stats();
    assert!(st.evictions > 0 && st.items + st.evictions == n, "{st:?}");
    assert!(a.get(b"k1", 1).is_none(), "the coldest went first");
    assert!(a.get(format!("k{}", n - 1).as_bytes(), 1).is_some());
    a.check().unwrap();
}

#[test]
fn too_large_items_and_bad_keys_are_refused_and_lose_nothing() {
    let mut a = anon(&small(1 << 20));
    a.set(b"k", b"v", 0, 0, 1).unwrap();
    assert!(matches!(
        a.set(b"k", &vec![0; 70_000], 0, 0, 1),
        Err(ArenaError::TooLarge(_))
    ));
    assert!(matches!(
        a.set(&[b'x'; 251], b"v", 0, 0, 1),
        Err(ArenaError::BadKey(251))
    ));
    assert!(matches!(
        a.set(b"", b"v", 0, 0, 1),
        Err(ArenaError::BadKey(0))
    ));
    assert_eq!(a.get(b"k", 1).unwrap().value, b"v");
}

#[test]
fn a_class_gets_its_first_page_beyond_the_limit_and_then_evicts_only_its_own_items() {
    // One page of items allowed, taken by small items: a large item's class still gets its
    // first page (as in memcached), and then makes room from its own LRU tail only.
    let mut a = anon(&small(64 << 10));
    a.set(b"small", b"s", 0, 0, 1).unwrap();
    a.set(b"big", b"old", 0, 0, 1).unwrap();
    for i in 0..40 {
        a.set(format!("b{i}").as_bytes(), &[1; 5000], 0, 0, 1)
            .unwrap();
    }
    let st = a.stats();
    assert_eq!((st.pages_used, st.page_limit), (2, 1), "{st:?}");
    assert!(st.evictions > 0);
    assert_eq!(a.get(b"small", 1).unwrap().value, b"s");
    assert_eq!(a.get(b"big", 1).unwrap().value, b"old");
    a.check().unwrap();
}

#[test]
fn a_refused_eviction_reports_no_memory_and_keeps_the_old_value() {
    let mut a = anon(&small(64 << 10));
    for i in 0..20 {
        a.set(format!("b{i}").as_bytes(), &[1; 5000], 0, 0, 1)
            .unwrap();
    }
    let off = a.find(b"b19").unwrap();
    let old = a.item(off).value.to_vec();
    let mut keep = |_: Item<'_>| Victim::Keep;
    let r = a.alloc(b"b19", 5000, &mut keep);
    assert!(matches!(r, Err(ArenaError::NoMemory(_))), "{r:?}");
    assert_eq!(a.get(b"b19", 1).unwrap().value, &old[..]);
    a.check().unwrap();
}

#[test]
fn a_pinned_value_outlives_its_replacement_and_is_never_evicted_or_moved() {
    let mut a = anon(&small(64 << 10));
    a.set(b"p", &[7; 5000], 0, 0, 1).unwrap();
    let off = a.find(b"p").unwrap();
    let pin = a.pin(off);
    let class = a.item(off).class;
    // Replaced and then flooded: the pinned bytes stay as they were.
    a.set(b"p", &[8; 5000], 0, 0, 1).unwrap();
    for i in 0..40 {
        a.set(format!("f{i}").as_bytes(), &[9; 5000], 0, 0, 1)
            .unwrap();
    }
    assert_eq!(&pin.bytes()[..1], b"p");
    assert!(pin.bytes()[1..].iter().all(|&b| b == 7));
    assert_eq!(a.stats().held, 1);
    a.check().unwrap();
    // The class' one page holds a held chunk: it cannot move.
    assert!(matches!(
        a.move_page(class, None, &mut |_| false),
        Err(ArenaError::Busy(_))
    ));
    drop(pin);
    a.reap();
    assert_eq!(a.stats().held, 0);
    // A pinned tail item is passed over by eviction.
    let tail = a.find(b"f39").unwrap();
    let tail_pin = a.pin(tail);
    for i in 0..40 {
        a.set(format!("g{i}").as_bytes(), &[5; 5000], 0, 0, 1)
            .unwrap();
    }
    assert!(a.get(b"f39", 1).is_some(), "the pinned item was evicted");
    assert!(tail_pin.bytes()[3..].iter().all(|&b| b == 9));
    drop(tail_pin);
    a.check().unwrap();
}

#[test]
fn a_page_moves_between_classes_evicting_what_it_held() {
    let cfg = small(2 * (64 << 10));
    let mut a = anon(&cfg);
    for i in 0..20 {
        a.set(format!("s{i}").as_bytes(), b"small", 0, 0, 1)
            .unwrap();
    }
    a.set(b"mid", &[2; 3000], 0, 0, 1).unwrap();
    assert_eq!(a.stats().pages_used, 2);
    let small_class = a.get(b"s0", 1).unwrap().class;
    a.set(b"huge", &[3; 40_000], 0, 0, 1).unwrap();
    let big_class = a.get(b"huge", 1).unwrap().class;
    assert_eq!(
        a.move_page(small_class, Some(big_class), &mut |_| false)
            .unwrap()
            .evicted,
        20
    );
    a.check().unwrap();
    a.set(b"huge2", &[3; 40_000], 0, 0, 1).unwrap();
    assert_eq!(a.get(b"mid", 1).unwrap().value.len(), 3000);
    assert!(a.get(b"s3", 1).is_none());
    let cs = a.class_stats();
    assert_eq!((cs[small_class].pages, cs[big_class].pages), (0, 2));
    assert!(a
        .move_page(small_class, Some(big_class), &mut |_| false)
        .is_err());
    assert!(a.move_page(0, Some(99), &mut |_| false).is_err());
    a.check().unwrap();
}

#[test]
fn a_page_move_rescues_live_items_into_free_chunks_and_evicts_only_without_one() {
    let cfg = small(8 * (64 << 10));
    let mut a = anon(&cfg);
    let v = [7u8; 3000];
    let mut n = 0;
    while a.class_stats().iter().map(|c| c.pages).sum::<u32>() < 3 {
        a.set(format!("k{n}").as_bytes(), &v, 0, 0, 1).unwrap();
        n += 1;
    }
    let c = a.get(b"k0", 1).unwrap().class;
    // Fill the third page too, then free every other item: room elsewhere for rescues.
    while a.class_stats()[c].free > 0 {
        a.set(format!("k{n}").as_bytes(), &v, 0, 0, 1).unwrap();
        n += 1;
    }
    for i in (0..n).step_by(2) {
        a.delete(format!("k{i}").as_bytes());
    }
    // One item dead: dropped, not rescued.
    let m = a.move_page(c, None, &mut |it| it.key == b"k1").unwrap();
    assert!(m.rescued > 0 && m.evicted == 0, "{m:?}");
    assert_eq!(a.pool_pages(), 1);
    a.check().unwrap();
    for i in (3..n).step_by(2) {
        assert_eq!(a.get(format!("k{i}").as_bytes(), 1).unwrap().value, &v[..]);
    }
    assert_eq!(a.move_counters().0, m.rescued);
    // Full again: the next move has nowhere to put them and evicts.
    while a.class_stats()[c].free > 0 {
        a.set(format!("k{n}").as_bytes(), &v, 0, 0, 1).unwrap();
        n += 1;
    }
    let m = a.move_page(c, None, &mut |_| false).unwrap();
    assert!(m.evicted > 0 && m.rescued == 0, "{m:?}");
    assert_eq!(a.move_counters().1, m.evicted);
    a.check().unwrap();
}

#[test]
fn a_clean_close_restores_every_item_and_a_crash_or_other_settings_start_cold() {
    let dir = std::env::temp_dir().join(format!("remora-arena-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("arena");
    let _ = std::fs::remove_file(&path);
    let cfg = ArenaConfig {
        chunk_max: 8192,
        ..small(1 << 20)
    };
    let open = |cfg: &ArenaConfig| {
        let map = Mapping::new(Backing::File(path.clone()), cfg.mapped()).unwrap();
        Arena::open(map, cfg).unwrap()
    };
    let (mut a, o) = open(&cfg);
    assert_eq!(o, Opened::Cold(None));
    let cas = a.set(b"kept", b"value", 9, 4000, 1).unwrap();
    let big: Vec<u8> = (0..30_000).map(|i| i as u8).collect();
    a.set(b"chunked", &big, 0, 0, 1).unwrap();
    a.close(1_700_000_000).unwrap();
    let (mut a, o) = open(&cfg);
    assert_eq!(
        o,
        Opened::Restored {
            items: 2,
            epoch: 1_700_000_000
        }
    );
    let off = a.find(b"chunked").unwrap();
    assert_eq!(a.value_bytes(off), big);
    let it = a.get(b"kept", 2).unwrap();
    assert_eq!(
        (it.value, it.flags, it.cas, it.exptime),
        (&b"value"[..], 9, cas, 4000)
    );
    // CAS values keep growing after a restart.
    assert!(a.set(b"next", b"v", 0, 0, 2).unwrap() > cas);
    a.check().unwrap();
    // Dropped without close: a crash. The next start is cold and says why.
    drop(a);
    let (a, o) = open(&cfg);
    assert!(
        matches!(&o, Opened::Cold(Some(r)) if r.contains("did not stop cleanly")),
        "{o:?}"
    );
    assert_eq!(a.stats().items, 0);
    a.close(1_700_000_000).unwrap();
    // Other settings: cold, with the reason.
    for other in [
        ArenaConfig {
            growth_factor: 1.5,
            ..cfg.clone()
        },
        ArenaConfig {
            chunk_max: 16384,
            ..cfg.clone()
        },
    ] {
        let (a, o) = open(&other);
        assert!(
            matches!(&o, Opened::Cold(Some(r)) if r.contains("other settings")),
            "{o:?}"
        );
        a.close(1_700_000_000).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_hash_table_doubles_past_one_and_a_half_items_per_bucket_and_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("remora-arena-hash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("arena");
    let _ = std::fs::remove_file(&path);
    let cfg = ArenaConfig {
        hash_power: 6,
        hash_power_init: 3,
        ..small(1 << 20)
    };
    let open = || {
        let map = Mapping::new(Backing::File(path.clone()), cfg.mapped()).unwrap();
        Arena::open(map, &cfg).unwrap()
    };
    let (mut a, _) = open();
    assert_eq!(a.hash_level(), (3, false));
    // 12 items in 8 buckets: not yet; the 13th starts a growth that links finish.
    for i in 0..12 {
        a.set(format!("k{i}").as_bytes(), b"v", 0, 0, 1).unwrap();
    }
    assert_eq!(a.hash_level(), (3, false));
    a.set(b"k12", b"v", 0, 0, 1).unwrap();
    assert_eq!(
        a.hash_level(),
        (4, true),
        "growing: memcached reports the new level"
    );
    a.check().unwrap();
    for i in 13..40 {
        a.set(format!("k{i}").as_bytes(), b"v", 0, 0, 1).unwrap();
        a.check().unwrap();
    }
    // 40 items: 16 buckets passed (24), 32 not yet (48).
    assert_eq!(a.hash_level(), (5, false));
    // The reserved room bounds it: 2^6 buckets at most.
    for i in 40..400 {
        a.set(format!("k{i}").as_bytes(), b"v", 0, 0, 1).unwrap();
    }
    while a.grow(1) {}
    assert_eq!(a.hash_level(), (6, false));
    a.check().unwrap();
    for i in 0..400 {
        assert!(a.get(format!("k{i}").as_bytes(), 1).is_some(), "k{i}");
    }
    // Deleted items do not shrink it, and a restart restores the active level.
    for i in 0..400 {
        a.delete(format!("k{i}").as_bytes());
    }
    a.set(b"last", b"v", 0, 0, 1).unwrap();
    a.close(1_700_000_000).unwrap();
    let (a, o) = open();
    assert!(matches!(o, Opened::Restored { items: 1, .. }), "{o:?}");
    assert_eq!(a.hash_level(), (6, false));
    a.check().unwrap();
    // A cold start begins at the starting level again.
    drop(a);
    let (a, _) = open();
    assert_eq!(a.hash_level(), (3, false));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_arena_reads_the_same_through_a_second_mapping_at_another_address() {
    let cfg = small(1 << 20);
    let map = Mapping::new(Backing::Memfd, cfg.mapped()).unwrap();
    let (mut a, _) = Arena::open(map, &cfg).unwrap();
    a.set(b"shared", b"bytes", 1, 0, 1).unwrap();
    let fd = a.mapping().fd().unwrap().try_clone_to_owned().unwrap();
    let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", {
        use std::os::fd::AsRawFd;
        fd.as_raw_fd()
    }));
    // A second, independent mapping of the same memory, marked clean as a graceful handover.
    put_u32(a.mapping_bytes(), H_CLEAN, 1);
    put_u64(a.mapping_bytes(), H_EPOCH, 1_700_000_000);
    let other = Mapping::new(Backing::File(path), cfg.mapped()).unwrap();
    let (mut b, o) = Arena::open(other, &cfg).unwrap();
    assert_eq!(
        o,
        Opened::Restored {
            items: 1,
            epoch: 1_700_000_000
        }
    );
    assert_eq!(b.get(b"shared", 1).unwrap().value, b"bytes");
    assert_ne!(a.mapping().view().as_ptr(), b.mapping().view().as_ptr());
}

#[derive(Debug, Clone)]
enum Op {
    Set(u8, u16),
    Get(u8),
    Delete(u8),
    Move(u8, u8),
    Expire(u8),
    /// The maintainer's pass: queued reads, then every class' juggle.
    Juggle,
    /// The clock moves on this many seconds.
    Tick(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..40, 0u16..9000).prop_map(|(k, n)| Op::Set(k, n)),
        3 => (0u8..40).prop_map(Op::Get),
        1 => (0u8..40).prop_map(Op::Delete),
        1 => (0u8..12, 0u8..12).prop_map(|(a, b)| Op::Move(a, b)),
        1 => (0u8..40).prop_map(Op::Expire),
        2 => Just(Op::Juggle),
        1 => (0u8..4).prop_map(Op::Tick),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Against a map: a value read is always the last one written under its key; a key is
    /// missing only after an eviction, a page move, a delete or its expiry; every structure
    /// (each sub-LRU's links, items and bytes included) stays consistent after every step,
    /// flat or segmented (with a temp LRU for the keys stored with a TTL).
    #[test]
    fn the_arena_agrees_with_a_map_through_evictions_and_page_moves(
        ops in proptest::collection::vec(op(), 1..160),
        segmented in any::<bool>(),
        chunked in any::<bool>(),
    ) {
        let mut cfg = small(HEADER_BYTES + (8 << 8) + 6 * (64 << 10) + 8192);
        if chunked {
            // Values above 4 KiB are chunked: chains across classes, moved and evicted.
            cfg.chunk_max = 4096;
        }
        let mut a = anon(&cfg);
        a.set_lru_config(LruConfig {
            segmented,
            temp_ttl: Some(20_000),
            ..LruConfig::default()
        });
        // key -> (value, evictions + moves when it was written)
        let mut model: HashMap<u8, (Vec<u8>, u64)> = HashMap::new();
        let losses = |a: &Arena| a.stats().evictions + a.stats().moves;
        let mut now = 10;
        for (step, o) in ops.into_iter().enumerate() {
            match o {
                Op::Set(k, n) => {
                    let v: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_add(k).wrapping_add(step as u8)).collect();
                    // Every third key has a TTL short enough for the temp LRU (and far
                    // beyond the clock's ticks here).
                    let exp = if k % 3 == 0 { now + 10_000 } else { 0 };
                    match a.set(&[b'k', k], &v, u32::from(k), exp, now) {
                        Ok(_) => { model.insert(k, (v, losses(&a))); }
                        Err(ArenaError::NoMemory(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::Get(k) => {
                    let got = a.get(&[b'k', k], now).map(|i| i.flags);
                    let got = got.map(|f| {
                        let off = a.find(&[b'k', k]).unwrap();
                        (a.value_bytes(off).to_vec(), f)
                    });
                    match (got, model.get(&k)) {
                        (Some((v, f)), Some((want, _))) => {
                            prop_assert_eq!(&v, want);
                            prop_assert_eq!(f, u32::from(k));
                        }
                        (Some(_), None) => prop_assert!(false, "key {} came back", k),
                        (None, Some((_, at))) => {
                            prop_assert!(losses(&a) > *at, "key {} lost without an eviction", k);
                            model.remove(&k);
                        }
                        (None, None) => {}
                    }
                }
                Op::Delete(k) => {
                    let had = a.delete(&[b'k', k]);
                    if model.remove(&k).is_none() { prop_assert!(!had); }
                }
                Op::Move(from, to) => { let _ = a.move_page(from as usize, Some(to as usize), &mut |_| false); }
                Op::Expire(k) => {
                    if a.touch(&[b'k', k], now, now) {
                        prop_assert!(a.get(&[b'k', k], now).is_none());
                    }
                    model.remove(&k);
                }
                Op::Juggle => {
                    a.drain_bumps(now);
                    for c in 0..a.class_count() {
                        a.juggle(c, now, &mut |it| it.exptime != 0 && it.exptime <= now);
                    }
                }
                Op::Tick(s) => now += u32::from(s),
            }
            if let Err(e) = a.check() {
                prop_assert!(false, "step {}: {}", step, e);
            }
        }
    }
}

#[test]
fn chunked_items_chain_over_classes_move_with_their_pages_and_go_as_one() {
    let cfg = ArenaConfig {
        chunk_max: 4096,
        ..small(HEADER_BYTES + (8 << 8) + 8 * (64 << 10) + 8192)
    };
    let mut a = anon(&cfg);
    let top = a.class_count() - 1;
    let val = |i: usize| -> Vec<u8> { (0..11_000).map(|j| (i * 7 + j) as u8).collect() };
    for i in 0..8 {
        a.set(format!("n{i}").as_bytes(), &val(i), 1, 0, 10)
            .unwrap();
    }
    a.check().unwrap();
    let off = a.find(b"n3").unwrap();
    let it = a.item(off);
    // Linked in the largest class' LRU; its header lives in a small class.
    assert!(it.chunked && it.value.is_empty() && it.value_len == 11_000);
    assert_eq!(it.class, top);
    assert!(a.mem_class_of(off) < top);
    assert_eq!(a.value_bytes(off), val(3));
    assert!(a.chain(off).len() >= 3);
    // A pin owns a copy: the item may go while the reply holds it.
    let pin = a.pin(off);
    a.delete(b"n3");
    assert_eq!(&pin.bytes()[2..], &val(3)[..]);
    a.check().unwrap();
    // Moving pages of the largest class rescues chunks into free ones, else evicts whole
    // items.
    let before = a.stats().items;
    a.set(b"n3", &val(3), 1, 0, 10).unwrap();
    a.delete(b"n0");
    let moved = a.move_page(top, None, &mut |_| false).unwrap();
    assert!(a.stats().chunk_rescues > 0, "{moved:?}");
    a.check().unwrap();
    for i in 1..8 {
        if let Some(off) = a.find(format!("n{i}").as_bytes()) {
            assert_eq!(a.value_bytes(off), val(i), "n{i}");
        }
    }
    assert!(a.stats().items <= before);
    // A full class evicts chunked items whole; every chain stays consistent.
    for i in 0..40 {
        a.set(format!("m{i}").as_bytes(), &val(i), 0, 0, 11)
            .unwrap();
        a.check().unwrap();
    }
    assert!(a.stats().evictions > 0);
    let off = a.find(b"m39").unwrap();
    assert_eq!(a.value_bytes(off), val(39));
    // A warm restart keeps the chains.
    a.close(1_700_000_000).unwrap();
}

#[test]
fn crawler_and_maintainer_count_per_class_and_reset_zeroes() {
    let cfg = small(1 << 20);
    let mut a = anon(&cfg);
    for i in 0..30 {
        a.set(format!("i{i}").as_bytes(), b"ok", 0, 0, 10).unwrap();
    }
    for i in 0..30 {
        a.set(format!("s{i}").as_bytes(), b"ok", 0, 20, 10).unwrap();
    }
    let c = a.item(a.find(b"i0").unwrap()).class;
    let st = a.class_stats()[c];
    assert_eq!(st.requested, a.stats().bytes);
    // tocrawl: only the 10 oldest (the first immortals) are looked at.
    assert_eq!(a.crawl_class(c, 10, |it| it.exptime == 20), (10, 0));
    assert_eq!(a.crawl_class(c, 0, |it| it.exptime == 20), (60, 30));
    let st = a.class_stats()[c];
    assert_eq!((st.crawler_checked, st.crawler_reclaimed), (70, 30));
    assert_eq!((st.expired_unfetched, st.reclaimed), (30, 0));
    assert_eq!(st.requested, a.stats().bytes);
    // The maintainer looks at a bounded stretch of the tail.
    a.set(b"late", b"ok", 0, 20, 11).unwrap();
    assert_eq!(a.reclaim_tail(c, 30, |it| it.exptime == 20), 0);
    assert_eq!(a.reclaim_tail(c, 31, |it| it.exptime == 20), 1);
    assert_eq!(a.class_stats()[c].reclaimed, 1);
    let mut seen = 0;
    a.walk_hash(|_| seen += 1);
    assert_eq!(seen, 30);
    a.reset_counters();
    let st = a.class_stats()[c];
    assert_eq!(
        (
            st.crawler_checked,
            st.crawler_reclaimed,
            st.reclaimed,
            st.evicted
        ),
        (0, 0, 0, 0)
    );
    assert_eq!((a.stats().reclaimed, a.stats().evictions), (0, 0));
    assert_eq!(st.used, 30, "counters only");
    a.check().unwrap();
}

#[test]
fn pages_beyond_a_lowered_limit_go_back_and_are_reused() {
    let cfg = small(8 * (64 << 10));
    let mut a = anon(&cfg);
    let v = vec![b'x'; 20_000];
    for i in 0..24 {
        a.set(format!("k{i}").as_bytes(), &v, 0, 0, 10).unwrap();
    }
    let full = a.malloced_pages();
    assert!(full >= 7, "{full}");
    // Lowered: nothing is free yet, nothing goes.
    a.set_page_limit(2);
    assert_eq!(a.release_free_pages(), 0);
    for i in 0..24 {
        a.delete(format!("k{i}").as_bytes());
    }
    assert_eq!(a.release_free_pages(), full - 2);
    assert_eq!(a.malloced_pages(), 2);
    // Raised again: the released pages are used again.
    a.set_page_limit(8);
    for i in 0..24 {
        a.set(format!("k{i}").as_bytes(), &v, 0, 0, 10).unwrap();
    }
    assert_eq!(a.malloced_pages(), full);
    assert_eq!(a.stats().evictions, 0);
    a.check().unwrap();
}

/// What a migration target maps: a sparse file with every page of `a` but those its zero
/// map names (checked to be zero in fresh memory, as far as the used pages reach).
fn copy_but_zero_pages(
    a: &Arena,
    cfg: &ArenaConfig,
    zero: &[u64],
    name: &str,
) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::FileExt;
    let pages = cfg.mapped() / ZERO_PAGE;
    let src = a.mapping().view();
    let reach = (16 << 20) / ZERO_PAGE;
    for p in (0..reach).filter(|&p| zero[p / 64] >> (p % 64) & 1 == 1) {
        assert!(src[p * ZERO_PAGE..(p + 1) * ZERO_PAGE]
            .iter()
            .all(|&b| b == 0));
    }
    let dir = std::env::temp_dir().join(format!("remora-arena-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("arena");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(cfg.mapped() as u64).unwrap();
    for p in (0..pages).filter(|&p| zero[p / 64] >> (p % 64) & 1 == 0) {
        let r = p * ZERO_PAGE..(p + 1) * ZERO_PAGE;
        f.write_all_at(&src[r], (p * ZERO_PAGE) as u64).unwrap();
    }
    (dir, path)
}

#[test]
fn a_handed_over_arena_frees_the_chunks_its_source_held_and_nothing_else() {
    let cfg = small(4 * (64 << 10));
    let mut a = anon(&cfg);
    a.set(b"p", &[7; 5000], 0, 0, 1).unwrap();
    let off = a.find(b"p").unwrap();
    let class = a.item(off).class;
    let pin = a.pin(off);
    a.set(b"p", &[8; 5000], 0, 0, 1).unwrap();
    a.set(b"q", &[9; 5000], 0, 0, 1).unwrap();
    assert_eq!(a.held_offsets(), vec![off]);
    let free_before = a.class_stats()[class].free;
    a.mark_handed_over(1_700_000_000);
    let zero = a.zero_map();
    let (dir, path) = copy_but_zero_pages(&a, &cfg, &zero, "held");
    let map = Mapping::new(Backing::File(path), cfg.mapped()).unwrap();
    let q = b"q".as_slice();
    let live = a.find(q).unwrap();
    // Bogus names (outside the pages, inside a chunk, a live item) change nothing.
    let bogus = [off, 3, off + 1, live, u64::MAX];
    let (mut b, o) = Arena::open_handed_over(map, &cfg, &bogus).unwrap();
    assert!(matches!(o, Opened::Restored { items: 2, .. }), "{o:?}");
    assert_eq!(b.class_stats()[class].free, free_before + 1);
    assert_eq!(b.get(b"p", 2).unwrap().value, &[8; 5000][..]);
    assert_eq!(b.get(q, 2).unwrap().value, &[9; 5000][..]);
    b.check().unwrap();
    drop(pin);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_arena_copied_without_its_zero_map_pages_opens_restored_and_works() {
    // What a migration target gets: every page but those the zero map names, which it
    // installs as zeroes. The copy must be the same cache: items, chains, lists, free pages.
    let cfg = small(8 * (64 << 10));
    let mut a = anon(&cfg);
    let v = vec![b'x'; 20_000];
    for i in 0..24 {
        a.set(format!("big{i}").as_bytes(), &v, 0, 0, 10).unwrap();
    }
    // Pages given back to the system, then small items growing the hash table.
    a.set_page_limit(3);
    for i in 0..20 {
        a.delete(format!("big{i}").as_bytes());
    }
    assert!(a.release_free_pages() > 0);
    for i in 0..300 {
        a.set(
            format!("small{i}").as_bytes(),
            format!("value {i}").as_bytes(),
            i,
            0,
            11,
        )
        .unwrap();
    }
    a.mark_handed_over(1_700_000_000);
    let zero = a.zero_map();
    let pages = cfg.mapped() / ZERO_PAGE;
    let zeroed = (0..pages)
        .filter(|&p| zero[p / 64] >> (p % 64) & 1 == 1)
        .count();
    assert!(zeroed > pages / 2, "{zeroed} of {pages} pages known zero");
    let (dir, path) = copy_but_zero_pages(&a, &cfg, &zero, "zero");
    let map = Mapping::new(Backing::File(path.clone()), cfg.mapped()).unwrap();
    let (mut b, o) = Arena::open(map, &cfg).unwrap();
    assert!(matches!(o, Opened::Restored { items: 304, .. }), "{o:?}");
    b.check().unwrap();
    for i in 0..300 {
        let it = b.get(format!("small{i}").as_bytes(), 12).unwrap();
        assert_eq!((it.value, it.flags), (format!("value {i}").as_bytes(), i));
    }
    for i in 20..24 {
        assert_eq!(
            b.get(format!("big{i}").as_bytes(), 12).unwrap().value,
            &v[..]
        );
    }
    // And it goes on as a cache: the released pages come back into use.
    b.set_page_limit(8);
    for i in 0..24 {
        b.set(format!("again{i}").as_bytes(), &v, 0, 0, 12).unwrap();
    }
    b.check().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
