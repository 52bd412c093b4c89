//! The remotely readable arena: lock-free readers against the arena's single writer.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::remote::{Got, Mapped, Reader, Why};
use super::*;

fn remote_cfg(memory: usize) -> ArenaConfig {
    ArenaConfig {
        memory,
        page_size: 64 << 10,
        hash_power: 12,
        // Small, so the run grows the table while readers walk it.
        hash_power_init: 2,
        item_max: 64 << 10,
        remote: true,
        ..ArenaConfig::new(memory)
    }
}

fn open(cfg: &ArenaConfig) -> Arena {
    let map = Mapping::new(Backing::Anonymous, cfg.mapped()).unwrap();
    Arena::open(map, cfg).unwrap().0
}

/// A value that says what it is: its sequence number, its length and bytes derived from both
/// and the key, so a reader can tell any value that was never written for that key.
fn value_of(key: &[u8], seq: u64, len: usize) -> Vec<u8> {
    let len = len.max(12);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    let k = key
        .iter()
        .fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let mut x = k ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v
}

/// Whether `value` with `flags` is one [`value_of`] gives for `key`.
fn written(key: &[u8], value: &[u8], flags: u32) -> bool {
    if value.len() < 12 {
        return false;
    }
    let seq = u64::from_le_bytes(value[..8].try_into().unwrap());
    let len = u32::from_le_bytes(value[8..12].try_into().unwrap()) as usize;
    len == value.len() && flags == seq as u32 && value_of(key, seq, len) == value
}

fn key(i: u64) -> Vec<u8> {
    format!("key:{i}").into_bytes()
}

fn hit(got: Got) -> super::remote::RemoteItem {
    match got {
        Got::Hit(it) => it,
        other => panic!("expected a hit, got {other:?}"),
    }
}

#[test]
fn a_reader_finds_what_the_writer_stored_and_nothing_else() {
    let cfg = remote_cfg(4 << 20);
    let mut a = open(&cfg);
    let cas = a.set(b"alpha", b"one", 7, 0, 100).unwrap();
    a.set(b"beta", b"two", 0, 150, 100).unwrap();
    let mut f = Mapped::of(&a);
    let mut r = Reader::open(&mut f).unwrap();
    let it = hit(r.get(&mut f, b"alpha", 100).unwrap());
    assert_eq!((&it.value[..], it.flags, it.cas), (&b"one"[..], 7, cas));
    assert_eq!(r.get(&mut f, b"gamma", 100).unwrap(), Got::Miss);
    // Expired on the arena's clock: a miss, decided without the server.
    assert_eq!(hit(r.get(&mut f, b"beta", 149).unwrap()).value, b"two");
    assert_eq!(r.get(&mut f, b"beta", 150).unwrap(), Got::Miss);
    // Touch, replace and delete are seen at once.
    assert!(a.touch(b"alpha", 120, 100));
    assert_eq!(hit(r.get(&mut f, b"alpha", 100).unwrap()).exptime, 120);
    a.set(b"alpha", b"uno", 9, 0, 101).unwrap();
    assert_eq!(hit(r.get(&mut f, b"alpha", 101).unwrap()).value, b"uno");
    assert!(a.delete(b"alpha"));
    assert_eq!(r.get(&mut f, b"alpha", 101).unwrap(), Got::Miss);
    // Larger than the reader reads: back to the server.
    a.set(b"big", &[5u8; 4000], 0, 0, 101).unwrap();
    r.max_value = 1000;
    assert_eq!(
        r.get(&mut f, b"big", 101).unwrap(),
        Got::Fallback(Why::Large)
    );
    assert_eq!(r.retries, 0, "nothing changed while it read");
}

#[test]
fn an_arena_that_is_not_remotely_readable_is_refused() {
    let cfg = ArenaConfig {
        remote: false,
        ..remote_cfg(4 << 20)
    };
    let a = open(&cfg);
    let err = Reader::open(&mut Mapped::of(&a)).unwrap_err();
    assert!(err.to_string().contains("--one-sided"), "{err}");
}

#[test]
fn a_torn_item_is_never_returned() {
    let cfg = remote_cfg(4 << 20);
    let mut a = open(&cfg);
    a.set(b"k", b"value", 0, 0, 1).unwrap();
    let off = a.find(b"k").unwrap();
    let mut f = Mapped::of(&a);
    let mut r = Reader::open(&mut f).unwrap();
    r.tries = 3;
    // An incr under way: the item reads as changing until its new CAS is set.
    a.value_mut_linked(off)[0] = b'V';
    assert_eq!(
        r.get(&mut f, b"k", 1).unwrap(),
        Got::Fallback(Why::Contended)
    );
    assert_eq!(r.retries, 3);
    let cas = a.next_cas();
    a.set_cas(off, cas);
    match r.get(&mut f, b"k", 1).unwrap() {
        Got::Hit(it) => assert_eq!((&it.value[..], it.cas), (&b"Value"[..], cas)),
        other => panic!("{other:?}"),
    }
}

/// Stops the writer when its reader ends, panics included.
struct Done(Arc<AtomicBool>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A reader whose table state is older than several doublings still finds every key (the
/// buckets' levels send it to refresh the state), decides absent keys as misses, and a hit at
/// the head of its chain takes two rounds of fetches: the bucket, then the item.
#[test]
fn a_stale_table_state_is_noticed_and_a_hit_takes_two_rounds() {
    let cfg = remote_cfg(4 << 20);
    let mut a = open(&cfg);
    let mut f = Mapped::of(&a);
    let mut r = Reader::open(&mut f).unwrap();
    assert_eq!(r.get(&mut f, b"nothing", 1).unwrap(), Got::Miss);
    let level = a.hash_level().0;
    for i in 0..2000 {
        let k = key(i);
        a.set(&k, &value_of(&k, i, 20), i as u32, 0, 1).unwrap();
    }
    assert!(
        a.hash_level().0 >= level + 3,
        "the table doubled several times"
    );
    let keys: Vec<Vec<u8>> = (0..2000).map(key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    for (k, got) in keys.iter().zip(r.get_many(&mut f, &refs, 1).unwrap()) {
        let it = hit(got);
        assert!(
            written(k, &it.value, it.flags),
            "{}",
            String::from_utf8_lossy(k)
        );
    }
    let absent: Vec<Vec<u8>> = (5000..5100).map(key).collect();
    let refs: Vec<&[u8]> = absent.iter().map(|k| &k[..]).collect();
    assert!(r
        .get_many(&mut f, &refs, 1)
        .unwrap()
        .iter()
        .all(|g| *g == Got::Miss));
    // The last key set is at the head of its chain.
    let last = key(1999);
    let before = r.rounds;
    hit(r.get(&mut f, &last, 1).unwrap());
    assert_eq!(r.rounds - before, 2);
}

/// The writer sets, replaces, deletes, touches, rewrites in place, evicts, expires, moves pages
/// and grows the table while readers look keys up without a lock: every hit is a value that
/// was written for its key.
#[test]
fn readers_never_see_a_wrong_value_while_the_writer_churns() {
    const KEYS: u64 = 5000;
    const READS_PER_READER: u64 = 500_000;
    let cfg = remote_cfg(1 << 20);
    let mut a = open(&cfg);
    let clock = Arc::new(AtomicU32::new(1));
    // Set by the first reader done (or failing): the writer churns until then.
    let stop = Arc::new(AtomicBool::new(false));
    let (hits, misses, fallbacks, wrong) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let readers: Vec<_> = (0..2u64)
        .map(|t| {
            let mut f = Mapped::of(&a);
            let (clock, stop) = (clock.clone(), stop.clone());
            let (hits, misses, fallbacks, wrong) = (
                hits.clone(),
                misses.clone(),
                fallbacks.clone(),
                wrong.clone(),
            );
            std::thread::spawn(move || {
                let _done = Done(stop);
                let mut r = Reader::open(&mut f).unwrap();
                let mut x = 0x2545_f491_4f6c_dd1d ^ t;
                // One reader looks keys up one at a time, the other 16 walked together.
                let batch = if t == 0 { 1 } else { 16 };
                for _ in 0..READS_PER_READER / batch {
                    let keys: Vec<Vec<u8>> = (0..batch)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            key(x % KEYS)
                        })
                        .collect();
                    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                    let now = clock.load(Ordering::Relaxed);
                    let got = r.get_many(&mut f, &refs, now).unwrap();
                    for (k, got) in keys.iter().zip(got) {
                        match got {
                            Got::Hit(it) => {
                                hits.fetch_add(1, Ordering::Relaxed);
                                if !written(k, &it.value, it.flags) {
                                    wrong.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Got::Miss => _ = misses.fetch_add(1, Ordering::Relaxed),
                            Got::Fallback(_) => _ = fallbacks.fetch_add(1, Ordering::Relaxed),
                        }
                    }
                }
                r.retries
            })
        })
        .collect();

    let (mut seq, mut x, mut moved) = (0u64, 0x9e37_79b9u64, 0u64);
    let start_level = a.hash_level().0;
    // At least enough writes to fill memory and grow the table, however the threads are scheduled.
    while !stop.load(Ordering::Relaxed) || seq < 50_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        seq += 1;
        let now = clock.load(Ordering::Relaxed);
        if seq % 500 == 0 {
            clock.store(now + 1, Ordering::Relaxed);
        }
        let k = key((x >> 8) % KEYS);
        match x % 100 {
            0..=59 => {
                let v = value_of(&k, seq, 12 + (x >> 20) as usize % 700);
                let exptime = if x % 7 == 0 { now + 2 } else { 0 };
                let _ = a.set(&k, &v, seq as u32, exptime, now);
            }
            60..=74 => _ = a.delete(&k),
            75..=84 => _ = a.touch(&k, now + 3, now),
            85..=94 => {
                // In place, as incr does: a new value of the same length, then its CAS.
                if let Some(off) = a.find(&k) {
                    let len = a.item(off).value_len;
                    if len >= 12 && !a.item(off).chunked {
                        let v = value_of(&k, seq, len);
                        a.value_mut_linked(off).copy_from_slice(&v);
                        let cas = a.next_cas();
                        a.set_cas(off, cas);
                        a.set_bits(off, 0);
                        // Flags follow the sequence number, as `written` checks.
                        a.open_item(off);
                        let o = off as usize + layout::I_FLAGS;
                        layout::put_u32(a.bm(), o, seq as u32);
                        a.seal_item(off);
                    }
                }
            }
            95..=97 => {
                let from = (x >> 32) as usize % a.class_count();
                if a.move_page(from, None, &mut |_| true).is_ok() {
                    moved += 1;
                }
            }
            _ => _ = a.reclaim_expired(now),
        }
    }
    let retries: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let (hits, misses, fallbacks, wrong) = (
        hits.load(Ordering::Relaxed),
        misses.load(Ordering::Relaxed),
        fallbacks.load(Ordering::Relaxed),
        wrong.load(Ordering::Relaxed),
    );
    eprintln!(
        "writes {seq}, page moves {moved}, evictions {}, table level {start_level} -> {}; \
         reads: hits {hits}, misses {misses}, fallbacks {fallbacks}, retries {retries}, wrong {wrong}",
        a.stats().evictions,
        a.hash_level().0
    );
    assert_eq!(
        wrong, 0,
        "a reader returned a value never written for its key"
    );
    assert!(hits > 0 && misses > 0, "the run exercised both");
    assert!(a.stats().evictions > 0, "memory was tight enough to evict");
    assert!(
        a.hash_level().0 > start_level,
        "the table grew under the readers"
    );
    assert_eq!(a.check(), Ok(()));
}
