//! The segmented LRU's rules (memcached's `items.c`), one by one.

use super::layout::{ACTIVE, FETCHED};
use super::*;

fn arena(lru: LruConfig) -> Arena {
    let cfg = ArenaConfig {
        page_size: 64 << 10,
        hash_power: 8,
        item_max: 64 << 10,
        ..ArenaConfig::new(4 * (64 << 10))
    };
    let map = Mapping::new(Backing::Anonymous, cfg.mapped()).unwrap();
    let (mut a, _) = Arena::open(map, &cfg).unwrap();
    a.set_lru_config(lru);
    a
}

fn class(a: &Arena, key: &[u8]) -> usize {
    a.item(a.find(key).unwrap()).class
}

fn lru_of(a: &Arena, key: &[u8]) -> usize {
    a.lru_of(a.find(key).unwrap())
}

fn juggle(a: &mut Arena, c: usize, now: u32) -> u64 {
    a.drain_bumps(now);
    let n = a.juggle(c, now, &mut |it| it.exptime != 0 && it.exptime <= now);
    a.check().unwrap();
    n
}

#[test]
fn new_items_go_to_hot_or_temp_and_to_cold_when_flat() {
    let mut a = arena(LruConfig {
        temp_ttl: Some(61),
        ..LruConfig::default()
    });
    a.set(b"h", b"v", 0, 0, 10).unwrap();
    a.set(b"long", b"v", 0, 10 + 62, 10).unwrap();
    a.set(b"t", b"v", 0, 10 + 61, 10).unwrap();
    assert_eq!(
        (lru_of(&a, b"h"), lru_of(&a, b"long"), lru_of(&a, b"t")),
        (HOT, HOT, TEMP)
    );
    a.set_lru_config(LruConfig::flat());
    a.set(b"f", b"v", 0, 0, 10).unwrap();
    assert_eq!(lru_of(&a, b"f"), COLD);
    assert_eq!(a.lru_counts(class(&a, b"f")), [2, 0, 1, 1]);
    a.check().unwrap();
}

#[test]
fn hot_keeps_its_share_and_the_rest_drops_to_cold() {
    let mut a = arena(LruConfig::default());
    for i in 0..10 {
        a.set(format!("k{i}").as_bytes(), &[1; 1000], 0, 0, 10)
            .unwrap();
    }
    let c = class(&a, b"k0");
    assert!(juggle(&mut a, c, 10) > 0);
    // 20% of ten equal items: two stay hot, the eight oldest are cold.
    assert_eq!(a.lru_counts(c), [2, 0, 8, 0]);
    assert_eq!(a.class_stats()[c].moves_to_cold, 8);
    assert_eq!(lru_of(&a, b"k9"), HOT);
    assert_eq!(a.lru_tail(c).unwrap().key, b"k0");
    // Idle hot items drop too: older than hot_max_factor (0.2) times cold's tail age.
    assert!(juggle(&mut a, c, 20) > 0);
    assert_eq!(a.lru_counts(c), [0, 0, 10, 0]);
}

#[test]
fn reads_only_set_bits_and_the_maintainer_moves_active_items_to_warm() {
    let mut a = arena(LruConfig::default());
    for i in 0..10 {
        a.set(format!("k{i}").as_bytes(), &[1; 1000], 0, 0, 10)
            .unwrap();
    }
    let c = class(&a, b"k0");
    juggle(&mut a, c, 10);
    // A cold item read once is fetched, read twice active: still in cold, queued.
    a.get(b"k0", 11).unwrap();
    assert_eq!(
        a.item(a.find(b"k0").unwrap()).bits & (FETCHED | ACTIVE),
        FETCHED
    );
    let (bits, time) = a.get(b"k0", 12).map(|it| (it.bits, it.time)).unwrap();
    assert_eq!((bits & ACTIVE, time), (ACTIVE, 10));
    assert_eq!(lru_of(&a, b"k0"), COLD);
    assert_eq!(a.drain_bumps(13), 1);
    assert_eq!(lru_of(&a, b"k0"), WARM);
    let it = a.item(a.find(b"k0").unwrap());
    assert_eq!((it.bits & ACTIVE, it.time), (0, 13));
    assert_eq!(a.class_stats()[c].moves_to_warm, 1);
    // An active hot item at hot's tail goes to warm; active items elsewhere only get time.
    a.get(b"k8", 14).unwrap();
    a.get(b"k8", 14).unwrap();
    assert_eq!(a.item(a.find(b"k8").unwrap()).time, 14);
    juggle(&mut a, c, 14);
    assert_eq!(lru_of(&a, b"k8"), WARM);
    assert_eq!(a.class_stats()[c].moves_to_warm, 2);
    // An active warm tail item goes back to warm's head.
    a.get(b"k0", 15).unwrap();
    juggle(&mut a, c, 15);
    assert_eq!(a.class_stats()[c].moves_within_lru, 1);
    assert_eq!(lru_of(&a, b"k0"), WARM);
    a.check().unwrap();
}

#[test]
fn eviction_takes_cold_tails_only_and_never_temp() {
    let mut a = arena(LruConfig {
        temp_ttl: Some(61),
        ..LruConfig::default()
    });
    a.set(b"temp", &[1; 20_000], 0, 40, 10).unwrap();
    for i in 0..4 {
        a.set(format!("p{i}").as_bytes(), &[1; 20_000], 0, 0, 10)
            .unwrap();
    }
    a.set(b"kept", &[1; 20_000], 0, 0, 10).unwrap();
    a.get(b"kept", 10).unwrap();
    a.get(b"kept", 10).unwrap();
    let c = class(&a, b"kept");
    // The pads drop to cold; "kept", active, goes to warm, and fits warm's share.
    juggle(&mut a, c, 10);
    assert_eq!(a.lru_counts(c), [0, 1, 4, 1]);
    assert_eq!(lru_of(&a, b"kept"), WARM);
    for i in 0..40 {
        a.set(format!("f{i}").as_bytes(), &[2; 20_000], 0, 0, 10)
            .unwrap();
        a.check().unwrap();
    }
    let st = a.class_stats()[c];
    assert!(st.evicted > 0 && st.direct_reclaims > 0, "{st:?}");
    assert!(a.get(b"temp", 10).is_some() && a.get(b"kept", 10).is_some());
    assert_eq!(a.lru_counts(c)[TEMP], 1);
    // A cold item made active and evicted before the maintainer moved it counts.
    juggle(&mut a, c, 10);
    let tail = a.lru_tail(c).unwrap().key.to_vec();
    a.get(&tail, 10).unwrap();
    a.get(&tail, 10).unwrap();
    a.set(b"last", &[3; 20_000], 0, 0, 10).unwrap();
    assert!(a.find(&tail).is_none());
    assert_eq!(a.class_stats()[c].evicted_active, 1);
    // The queued offset now names another item: draining it moves nothing wrongly.
    a.drain_bumps(11);
    a.check().unwrap();
}

#[test]
fn temp_items_are_reclaimed_as_they_expire_and_flat_mode_drains_hot_and_warm() {
    let mut a = arena(LruConfig {
        temp_ttl: Some(61),
        ..LruConfig::default()
    });
    for i in 0..3 {
        a.set(format!("t{i}").as_bytes(), b"v", 0, 20, 10).unwrap();
        a.set(format!("h{i}").as_bytes(), b"v", 0, 0, 10).unwrap();
    }
    let c = class(&a, b"t0");
    a.get(b"h2", 10).unwrap();
    a.get(b"h2", 10).unwrap();
    juggle(&mut a, c, 10);
    assert_eq!(a.lru_counts(c)[TEMP], 3);
    juggle(&mut a, c, 20);
    assert_eq!(a.lru_counts(c)[TEMP], 0);
    assert_eq!(a.class_stats()[c].reclaimed, 3);
    assert!(a.lru_counts(c)[WARM] > 0);
    a.set_lru_config(LruConfig::flat());
    juggle(&mut a, c, 21);
    assert_eq!(a.lru_counts(c), [0, 0, 3, 0]);
}

#[test]
fn flat_mode_relinks_a_read_at_most_once_a_minute() {
    let mut a = arena(LruConfig::flat());
    for k in [b"a", b"b"] {
        a.set(k, b"v", 0, 0, 10).unwrap();
    }
    let c = class(&a, b"a");
    let off = a.find(b"a").unwrap();
    a.hit(off, 20);
    assert_eq!(
        a.lru_tail(c).unwrap().key,
        b"a",
        "within a minute: not relinked"
    );
    a.hit(off, 20 + UPDATE_INTERVAL);
    assert_eq!(a.lru_tail(c).unwrap().key, b"b");
    assert_eq!(a.lru_counts(c), [0, 0, 2, 0]);
    a.check().unwrap();
}
