use super::*;
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

fn config(mem: usize) -> StoreConfig {
    StoreConfig {
        mem_limit: mem,
        item_max: 1 << 20,
        no_evict: false,
        use_cas: true,
        track_sizes: false,
    }
}

/// Both implementations of the same configuration: the tests that run on both are the
/// contract every [`EntryStore`] keeps.
fn both(cfg: StoreConfig) -> [Box<Store>; 2] {
    [
        Box::new(HeapStore::new(cfg)),
        Box::new(ArenaStore::new(cfg)),
    ]
}

fn stores(mem: usize) -> [Box<Store>; 2] {
    both(config(mem))
}

fn store(mem: usize) -> HeapStore {
    HeapStore::new(config(mem))
}

const R: ReadOpts = ReadOpts {
    touch: None,
    no_bump: false,
    meta: false,
    recache: None,
    claim: false,
};

fn get(s: &dyn EntryStore, k: &[u8], now: u32) -> Option<Vec<u8>> {
    s.get(k, now, R, 0, |it| it.value.to_vec())
}

#[test]
fn set_get_delete() {
    for s in stores(64 << 20) {
        let s = &*s;
        assert!(matches!(
            s.store(StoreMode::Set, b"k", 5, 0, b"v", 10),
            StoreOutcome::Stored(_)
        ));
        assert_eq!(get(s, b"k", 10), Some(b"v".to_vec()));
        assert_eq!(
            s.store(StoreMode::Add, b"k", 0, 0, b"x", 10),
            StoreOutcome::NotStored
        );
        assert_eq!(
            s.store(StoreMode::Replace, b"z", 0, 0, b"x", 10),
            StoreOutcome::NotStored
        );
        assert_eq!(s.delete(b"k", 10, None), DeleteOutcome::Deleted);
        assert_eq!(s.delete(b"k", 10, None), DeleteOutcome::NotFound);
    }
}

#[test]
fn size_histogram_follows_stores_deletes_and_evictions() {
    let tracked = |use_cas, mem| {
        HeapStore::new(StoreConfig {
            mem_limit: mem,
            item_max: 4096,
            no_evict: false,
            use_cas,
            track_sizes: true,
        })
    };
    let s = tracked(true, 64 << 20);
    assert_eq!(s.sizes(), Some(vec![]));
    assert_eq!(store(64 << 20).sizes(), None);
    // memcached's item size: 48 + key + 1 + value + 2 (+ 4 for non-zero flags) + 8 (CAS).
    s.store(StoreMode::Set, b"a", 0, 0, b"x", 10); // 61 -> 64
    s.store(StoreMode::Set, b"b", 7, 0, &[b'v'; 20], 10); // 84 -> 96
    s.store(StoreMode::Set, b"c", 0, 0, &[b'v'; 20], 10); // 80 -> 96
    assert_eq!(s.sizes(), Some(vec![(64, 1), (96, 2)]));
    s.store(StoreMode::Set, b"a", 0, 0, &[b'v'; 100], 10); // overwrite: 160
    s.delete(b"c", 10, None);
    assert_eq!(s.sizes(), Some(vec![(96, 1), (160, 1)]));
    // With CAS off memcached's histogram stays empty; so does this one.
    let s = tracked(false, 64 << 20);
    s.store(StoreMode::Set, b"a", 0, 0, b"x", 10);
    assert_eq!(s.sizes(), Some(vec![]));
    // Evicted items leave the histogram.
    let s = tracked(true, 8 * 1024);
    for i in 0..500u32 {
        s.store(StoreMode::Set, &i.to_be_bytes(), 0, 0, &[b'v'; 100], 10);
    }
    let counted: u64 = s.sizes().unwrap().iter().map(|&(_, n)| n).sum();
    assert_eq!(counted, s.counters().curr_items);
}

#[test]
fn cas_rules() {
    for s in stores(64 << 20) {
        let s = &*s;
        let StoreOutcome::Stored(c) = s.store(StoreMode::Set, b"k", 0, 0, b"v", 10) else {
            panic!()
        };
        assert_eq!(
            s.store(StoreMode::Cas(c + 100), b"k", 0, 0, b"w", 10),
            StoreOutcome::Exists
        );
        assert_eq!(
            s.store(StoreMode::Cas(c), b"z", 0, 0, b"w", 10),
            StoreOutcome::NotFound
        );
        assert!(
            matches!(s.store(StoreMode::Cas(c), b"k", 0, 0, b"w", 10), StoreOutcome::Stored(n) if n > c)
        );
        assert_eq!(get(s, b"k", 10), Some(b"w".to_vec()));
    }
}

#[test]
fn stale_cas_store_keeps_expiry_and_marks_stale() {
    for s in stores(64 << 20) {
        let s = &*s;
        let StoreOutcome::Stored(c) = s.store(StoreMode::Set, b"k", 0, 500, b"v", 10) else {
            panic!()
        };
        // A CAS newer than the item's is still a conflict.
        assert_eq!(
            s.store(StoreMode::CasStale(c + 1), b"k", 0, 0, b"w", 10),
            StoreOutcome::Exists
        );
        assert_eq!(
            s.store(StoreMode::CasStale(c), b"z", 0, 0, b"w", 10),
            StoreOutcome::NotFound
        );
        let StoreOutcome::Stored(c2) = s.store(StoreMode::CasStale(c - 1), b"k", 0, 9, b"w", 10)
        else {
            panic!()
        };
        assert!(c2 > c);
        assert_eq!(get(s, b"k", 10), Some(b"w".to_vec()));
        // An exact CAS match is an ordinary store: not stale, new expiry.
        assert!(matches!(
            s.store(StoreMode::CasStale(c2), b"k", 0, 0, b"x", 10),
            StoreOutcome::Stored(_)
        ));
    }
}

#[test]
fn expiry_rules() {
    let started = 1_700_000_000i64;
    assert_eq!(exptime(0, 10, started), 0);
    assert_eq!(exptime(-1, 10, started), 1);
    assert_eq!(exptime(100, 10, started), 110);
    assert_eq!(exptime(started + 50, 10, started), 50);
    assert_eq!(exptime(started - 50, 10, started), 1);
    for s in stores(64 << 20) {
        let s = &*s;
        s.store(StoreMode::Set, b"k", 0, 110, b"v", 10);
        assert!(get(s, b"k", 109).is_some());
        assert!(get(s, b"k", 110).is_none());
        s.store(StoreMode::Set, b"n", 0, 1, b"v", 10);
        assert!(get(s, b"n", 10).is_none());
    }
}

#[test]
fn arith_wraps_and_floors() {
    for s in stores(64 << 20) {
        let s = &*s;
        s.store(StoreMode::Set, b"n", 0, 0, b"18446744073709551615", 10);
        assert!(matches!(
            s.arith(b"n", true, 2, 10, None),
            ArithOutcome::Value(1, _)
        ));
        s.store(StoreMode::Set, b"n", 0, 0, b"10", 10);
        assert!(matches!(
            s.arith(b"n", false, 1, 10, None),
            ArithOutcome::Value(9, _)
        ));
        assert_eq!(get(s, b"n", 10), Some(b"9 ".to_vec()));
        assert!(matches!(
            s.arith(b"n", false, 100, 10, None),
            ArithOutcome::Value(0, _)
        ));
        s.store(StoreMode::Set, b"x", 0, 0, b"abc", 10);
        assert_eq!(s.arith(b"x", true, 1, 10, None), ArithOutcome::NonNumeric);
        assert_eq!(s.arith(b"y", true, 1, 10, None), ArithOutcome::NotFound);
    }
}

#[test]
fn flush_now_and_delayed() {
    for s in stores(64 << 20) {
        let s = &*s;
        s.store(StoreMode::Set, b"a", 0, 0, b"v", 10);
        s.flush(None);
        assert!(get(s, b"a", 10).is_none());
        s.store(StoreMode::Set, b"b", 0, 0, b"v", 10);
        assert!(get(s, b"b", 10).is_some());
        s.flush(Some(14));
        assert!(get(s, b"b", 13).is_some());
        assert!(get(s, b"b", 15).is_none());
    }
}

/// flush-all.t: without CAS (`-C`) memcached can only compare times, so an item stored in the
/// same second as `flush_all` is flushed too; with CAS it survives.
#[test]
fn flush_without_cas_flushes_the_same_second() {
    for no_cas in both(StoreConfig {
        use_cas: false,
        ..config(64 << 20)
    }) {
        let no_cas = &*no_cas;
        no_cas.flush_now(10);
        no_cas.store(StoreMode::Set, b"a", 0, 0, b"v", 10);
        assert!(get(no_cas, b"a", 10).is_none());
        no_cas.store(StoreMode::Set, b"b", 0, 0, b"v", 11);
        assert!(get(no_cas, b"b", 11).is_some());
    }
    for cas in stores(64 << 20) {
        let cas = &*cas;
        cas.flush_now(10);
        cas.store(StoreMode::Set, b"a", 0, 0, b"v", 10);
        assert!(get(cas, b"a", 10).is_some());
    }
}

/// watcher.t: the eviction hook hears of each live item pushed out, with its key and size.
#[test]
fn evictions_reach_the_hook() {
    let mut s = HeapStore::new(StoreConfig {
        mem_limit: 12 * 1024,
        item_max: 4096,
        no_evict: false,
        use_cas: true,
        track_sizes: false,
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    s.set_evict_hook(Box::new(move |e| {
        log.lock()
            .unwrap()
            .push((e.key.to_vec(), e.size, e.fetched, e.ttl))
    }));
    for i in 0..30 {
        s.store(
            StoreMode::Set,
            format!("k{i}").as_bytes(),
            0,
            0,
            &[b'x'; 1000],
            10,
        );
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len() as u64, s.counters().evictions);
    assert!(!seen.is_empty());
    assert_eq!(seen[0], (b"k0".to_vec(), 1000, false, -1));
}

#[test]
fn lru_evicts_least_recently_used() {
    // One shard (small budget): 10 items of ~1 KiB fit in 12 KiB.
    let s = HeapStore::new(StoreConfig {
        mem_limit: 12 * 1024,
        item_max: 4096,
        no_evict: false,
        use_cas: true,
        track_sizes: false,
    });
    let v = vec![b'x'; 1000];
    for i in 0..10u32 {
        s.store(StoreMode::Set, format!("k{i}").as_bytes(), 0, 0, &v, 10);
    }
    // Read k0 after the bump interval so k1 becomes the oldest.
    assert!(get(&s, b"k0", 10 + shard::BUMP_INTERVAL).is_some());
    for i in 10..13u32 {
        s.store(StoreMode::Set, format!("k{i}").as_bytes(), 0, 0, &v, 80);
    }
    assert!(get(&s, b"k0", 10).is_some(), "recently used item survived");
    assert!(
        get(&s, b"k1", 10).is_none(),
        "least recently used item evicted"
    );
    let c = s.counters();
    assert!(c.evictions >= 1);
    assert!(c.bytes as usize <= 12 * 1024);
}

#[test]
fn reads_within_the_bump_interval_do_not_reorder() {
    let s = HeapStore::new(StoreConfig {
        mem_limit: 12 * 1024,
        item_max: 4096,
        no_evict: false,
        use_cas: true,
        track_sizes: false,
    });
    let v = vec![b'x'; 1000];
    for i in 0..10u32 {
        s.store(StoreMode::Set, format!("k{i}").as_bytes(), 0, 0, &v, 10);
    }
    assert!(get(&s, b"k0", 11).is_some());
    for i in 10..13u32 {
        s.store(StoreMode::Set, format!("k{i}").as_bytes(), 0, 0, &v, 11);
    }
    assert!(get(&s, b"k0", 11).is_none(), "k0 was still the oldest");
}

#[test]
fn shrinking_the_budget_evicts() {
    let s = store(64 << 20);
    let v = vec![b'x'; 10_000];
    for i in 0..1000u32 {
        s.store(StoreMode::Set, format!("k{i}").as_bytes(), 0, 0, &v, 10);
    }
    assert!(s.counters().bytes > 9_000_000);
    s.set_mem_limit(2 << 20, 10);
    let c = s.counters();
    assert!(c.bytes <= 2 << 20, "bytes {}", c.bytes);
    assert!(c.evictions > 700);
    assert_eq!(s.mem_limit(), 2 << 20);
}

#[test]
fn no_evict_mode_refuses() {
    let s = HeapStore::new(StoreConfig {
        mem_limit: 8 * 1024,
        item_max: 2048,
        no_evict: true,
        use_cas: true,
        track_sizes: false,
    });
    let v = vec![b'x'; 1000];
    let mut refused = false;
    for i in 0..20u32 {
        if s.store(StoreMode::Set, format!("k{i}").as_bytes(), 0, 0, &v, 10)
            == StoreOutcome::NoMemory
        {
            refused = true;
        }
    }
    assert!(refused);
    assert_eq!(s.counters().evictions, 0);
}

#[test]
fn too_large_drops_old_value() {
    for s in both(StoreConfig {
        item_max: 1024,
        ..config(64 << 20)
    }) {
        let s = &*s;
        s.store(StoreMode::Set, b"k", 0, 0, b"v", 10);
        assert_eq!(
            s.store(StoreMode::Set, b"k", 0, 0, &[0; 2000], 10),
            StoreOutcome::TooLarge
        );
        assert!(get(s, b"k", 10).is_none());
    }
}

#[derive(Debug, Clone)]
enum Op {
    Set(u8, Vec<u8>),
    Add(u8, Vec<u8>),
    Replace(u8, Vec<u8>),
    Append(u8, Vec<u8>),
    Prepend(u8, Vec<u8>),
    Delete(u8),
    Incr(u8, u64),
    Decr(u8, u64),
    Get(u8),
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..8;
    let v = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..16),
        (0u64..1000).prop_map(|n| n.to_string().into_bytes())
    ];
    prop_oneof![
        (k.clone(), v.clone()).prop_map(|(k, v)| Op::Set(k, v)),
        (k.clone(), v.clone()).prop_map(|(k, v)| Op::Add(k, v)),
        (k.clone(), v.clone()).prop_map(|(k, v)| Op::Replace(k, v)),
        (k.clone(), v.clone()).prop_map(|(k, v)| Op::Append(k, v)),
        (k.clone(), v).prop_map(|(k, v)| Op::Prepend(k, v)),
        k.clone().prop_map(Op::Delete),
        (k.clone(), any::<u64>()).prop_map(|(k, d)| Op::Incr(k, d)),
        (k.clone(), any::<u64>()).prop_map(|(k, d)| Op::Decr(k, d)),
        k.prop_map(Op::Get),
        Just(Op::Flush),
    ]
}

proptest! {
    /// Random operation sequences agree with a HashMap model (no eviction at this size).
    #[test]
    fn matches_model(ops in proptest::collection::vec(op(), 1..200)) {
        for s in stores(64 << 20) {
        let s = &*s;
        let mut m: HashMap<u8, Vec<u8>> = HashMap::new();
        for o in ops.clone() {
            match o.clone() {
                Op::Set(k, v) => {
                    prop_assert!(matches!(s.store(StoreMode::Set, &[k], 0, 0, &v, 10), StoreOutcome::Stored(_)));
                    m.insert(k, v);
                }
                Op::Add(k, v) => {
                    let r = s.store(StoreMode::Add, &[k], 0, 0, &v, 10);
                    if let std::collections::hash_map::Entry::Vacant(e) = m.entry(k) {
                        prop_assert!(matches!(r, StoreOutcome::Stored(_)));
                        e.insert(v);
                    } else {
                        prop_assert_eq!(r, StoreOutcome::NotStored);
                    }
                }
                Op::Replace(k, v) => {
                    let r = s.store(StoreMode::Replace, &[k], 0, 0, &v, 10);
                    if let Some(e) = m.get_mut(&k) {
                        prop_assert!(matches!(r, StoreOutcome::Stored(_)));
                        *e = v;
                    } else {
                        prop_assert_eq!(r, StoreOutcome::NotStored);
                    }
                }
                Op::Append(k, ref v) | Op::Prepend(k, ref v) => {
                    let append = matches!(o, Op::Append(..));
                    let mode = if append { StoreMode::Append(None) } else { StoreMode::Prepend(None) };
                    let r = s.store(mode, &[k], 0, 0, v, 10);
                    if let Some(e) = m.get_mut(&k) {
                        prop_assert!(matches!(r, StoreOutcome::Stored(_)));
                        if append {
                            e.extend_from_slice(v);
                        } else {
                            let mut n = v.clone();
                            n.extend_from_slice(e);
                            *e = n;
                        }
                    } else {
                        prop_assert_eq!(r, StoreOutcome::NotStored);
                    }
                }
                Op::Delete(k) => {
                    let r = s.delete(&[k], 10, None);
                    prop_assert_eq!(r == DeleteOutcome::Deleted, m.remove(&k).is_some());
                }
                Op::Incr(k, d) | Op::Decr(k, d) => {
                    let incr = matches!(o, Op::Incr(..));
                    let r = s.arith(&[k], incr, d, 10, None);
                    match m.get_mut(&k) {
                        None => prop_assert_eq!(r, ArithOutcome::NotFound),
                        Some(v) => match shard::parse_counter(v) {
                            None => prop_assert_eq!(r, ArithOutcome::NonNumeric),
                            Some(n) => {
                                let want = if incr { n.wrapping_add(d) } else { n.saturating_sub(d) };
                                prop_assert!(matches!(r, ArithOutcome::Value(x, _) if x == want));
                                let mut t = want.to_string().into_bytes();
                                if t.len() < v.len() { t.resize(v.len(), b' '); }
                                *v = t;
                            }
                        },
                    }
                }
                Op::Get(k) => prop_assert_eq!(get(s, &[k], 10), m.get(&k).cloned()),
                Op::Flush => { s.flush(None); m.clear(); }
            }
        }
        // Flushed items stay stored (dead) until read or reclaimed: count the live ones.
        prop_assert_eq!(s.dump(1, 0, 10).len() + s.dump(2, 0, 10).len(), m.len());
        }
    }

    /// Under a tight budget the charged bytes never exceed the limit.
    #[test]
    fn memory_stays_bounded(sizes in proptest::collection::vec(0usize..3000, 1..300)) {
        let s = HeapStore::new(StoreConfig { mem_limit: 32 * 1024, item_max: 4096, no_evict: false, use_cas: true, track_sizes: false });
        for (i, n) in sizes.into_iter().enumerate() {
            let _ = s.store(StoreMode::Set, format!("k{}", i % 50).as_bytes(), 0, 0, &vec![1u8; n], 10);
            prop_assert!(s.counters().bytes <= 32 * 1024);
        }
    }
}

#[test]
fn arena_crawl_metadump_and_maintainer() {
    let s = ArenaStore::new(config(8 << 20));
    for i in 0..10 {
        s.store(StoreMode::Set, format!("i{i}").as_bytes(), 0, 0, b"ok", 10);
        s.store(StoreMode::Set, format!("s{i}").as_bytes(), 0, 12, b"ok", 10);
    }
    s.store(StoreMode::Set, b"big", 0, 0, &[b'x'; 600], 10);
    let all = s.metadump(10, &Dump::All).unwrap();
    assert_eq!(all.len(), 21);
    assert_eq!(s.metadump(10, &Dump::Hash).unwrap().len(), 21);
    let one = s.metadump(10, &Dump::Classes(vec![1])).unwrap();
    assert_eq!(one.len(), 20);
    assert!(one.iter().all(|m| m.class == 1));
    // Expired items are not dumped, and the crawler takes them back.
    assert_eq!(s.metadump(13, &Dump::All).unwrap().len(), 11);
    assert_eq!(s.crawl(13, Some(&[1]), 0), (20, 10));
    let c = s.counters();
    assert_eq!(
        (c.crawler_reclaimed, c.crawler_checked, c.reclaimed),
        (10, 20, 0)
    );
    // The maintainer's pass counts as `reclaimed`.
    s.store(StoreMode::Set, b"t", 0, 14, b"ok", 13);
    assert_eq!(s.maintain(20), 1);
    assert_eq!(s.counters().reclaimed, 1);
    assert_eq!(s.counters().curr_items, 11);
}

#[test]
fn arena_premalloc_counts_against_the_limit() {
    // memcached's T_MEMD_INITIAL_MALLOC: all but one page of -m is taken already.
    let s = ArenaStore::new(StoreConfig {
        no_evict: true,
        ..config(8 << 20)
    });
    s.set_premalloc((7 << 20) + 32);
    assert_eq!(s.counters().malloced, (7 << 20) + 32);
    let v = vec![b'a'; 400 * 1024];
    let stored = (0..5)
        .filter(|i| {
            let k = format!("big{i}");
            matches!(
                s.store(StoreMode::Set, k.as_bytes(), 0, 0, &v, 10),
                StoreOutcome::Stored(_)
            )
        })
        .count();
    assert_eq!(stored, 2, "the class' first page holds two, no second page");
    assert_eq!(s.counters().malloced, (8 << 20) + 32);
}

#[test]
fn segmented_arena_store_keeps_an_item_read_twice_through_a_flood() {
    // lru-maintainer.t's canary: read twice, moved to warm by the maintainer, it outlives a
    // flood of its class that evicts from cold.
    let s = ArenaStore::new(config(8 << 20));
    s.set_lru(crate::arena::LruConfig::default());
    let v = vec![b'B'; 66_560];
    let set = |k: &str, now| s.store(StoreMode::Set, k.as_bytes(), 0, 0, &v, now);
    assert!(matches!(set("canary", 10), StoreOutcome::Stored(_)));
    for i in 0..30 {
        set(&format!("key{i}"), 10);
    }
    s.maintain(10);
    let c = s.counters();
    assert!(
        c.moves_to_cold > 0 && c.lru_maintainer_juggles == 1,
        "{c:?}"
    );
    assert!(get(&s, b"canary", 11).is_some() && get(&s, b"canary", 11).is_some());
    s.maintain(12);
    assert_eq!(s.counters().moves_to_warm, 1);
    for i in 30..200 {
        assert!(matches!(
            set(&format!("key{i}"), 12),
            StoreOutcome::Stored(_)
        ));
    }
    let c = s.counters();
    assert!(c.evictions > 0 && c.direct_reclaims > 0, "{c:?}");
    assert!(get(&s, b"canary", 12).is_some());
    s.lock().arena.check().unwrap();
}
