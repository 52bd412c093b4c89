//! The lock-free reader: GETs of many keys walked together, one round of fetches per step, so
//! that over the fabric a GET costs two round trips whatever the batch and the server sees a
//! few large batches of READs instead of one READ at a time.
//!
//! A key's walk, each step one round (all keys' fetches of a round go out as one
//! [`Fetch::fetch_all`], grouped by size so that equal-size READ responses leave together):
//! 1. the bucket entry (head, version, level); a strict walk reads the bucket's version first;
//! 2. per chain item: its version, the item (header, key and the first [`INLINE`] bytes of the
//!    value), its version again; a strict walk then reads the bucket's version once more.
//!
//! A first walk is not strict: it is enough for a hit (the item proves itself). Only a walk that
//! ends without the key is redone strictly, so that a miss is decided on a bucket whose
//! version did not move from before its head was read to after its chain was.

use std::sync::atomic::{fence, Ordering};

use super::super::hash_with;
use super::super::layout::*;
use super::{item_sum, Fetch, Got, RemoteItem, Why, H_HASH_VER};

/// Why an arena cannot be read remotely.
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    /// Not a remote-readable remora arena of this layout, or hashed by another build.
    #[error("not a remotely readable arena: {0}")]
    Layout(String),
    /// Fetching bytes failed.
    #[error("reading the arena: {0}")]
    Io(#[from] std::io::Error),
}

/// A lock-free reader of a remotely readable arena, over any [`Fetch`].
#[derive(Debug, Clone)]
pub struct Reader {
    seed: u64,
    epoch: i64,
    /// log2 of the most buckets (the table's reserved room).
    hash_power: u32,
    /// Where items may lie: the pages.
    items: std::ops::Range<u64>,
    /// Tries before [`Why::Contended`].
    pub tries: u32,
    /// Longest value read (larger: [`Why::Large`]).
    pub max_value: usize,
    /// Longest chain walked.
    pub max_chain: usize,
    /// Reads that met a change under way and were tried again.
    pub retries: u64,
    /// Rounds of fetches so far (over the fabric: round trips).
    pub rounds: u64,
    /// The table's state as last read: refreshed when a bucket's level disagrees with it.
    state: Option<HashState>,
}

/// Bytes of value read with an item's header in one fetch (a larger value takes a second).
const INLINE: usize = 256;

/// The hash table state a reader computes buckets from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HashState {
    level: u32,
    split: u64,
}

/// Where one key's walk stands.
#[derive(Debug, Clone, Copy)]
enum At {
    /// Read the bucket entry next.
    Bucket,
    /// Read the chain item at `off` next (`want` bytes of it); `bv` is the bucket's version
    /// read before its head (strict walks).
    Item {
        bv: Option<u32>,
        off: u64,
        want: usize,
        walked: usize,
    },
    /// A strict walk met the chain's end: the bucket's version once more decides the miss.
    End { bv: u32 },
}

/// One key's walk.
struct Walk<'k> {
    key: &'k [u8],
    hash: u64,
    /// The bucket entry this walk reads (set when its bucket is read).
    entry: u64,
    at: At,
    strict: bool,
    tries: u32,
    got: Option<Got>,
    /// Where this round's fetches land in the round's buffer: (offset, length) per fetch.
    slots: [(usize, usize); 4],
}

/// A round's fetches, in order, and where each lands.
#[derive(Default)]
struct Round {
    reads: Vec<(u64, usize)>,
    bytes: usize,
}

impl Round {
    fn add(&mut self, off: u64, len: usize) -> (usize, usize) {
        self.reads.push((off, len));
        let at = self.bytes;
        self.bytes += len;
        (at, len)
    }
}

impl Reader {
    /// Checks the arena's header (magic, layout, remote, the hash of a fixed key) and keeps
    /// what every GET needs.
    pub fn open(f: &mut dyn Fetch) -> Result<Reader, ReaderError> {
        let mut h = vec![0u8; 256];
        f.fetch(0, &mut h)?;
        let bad = |m: &str| Err(ReaderError::Layout(m.into()));
        if u64_at(&h, H_MAGIC) != MAGIC || u32_at(&h, H_VERSION) != VERSION {
            return bad("no remora arena of this layout");
        }
        if u32_at(&h, H_REMOTE) != 1 {
            return bad("the server does not serve it remotely readable (--one-sided)");
        }
        let seed = u64_at(&h, H_SEED);
        if u32_at(&h, H_HASH_CHECK) != hash_with(seed, b"remora") as u32 {
            return bad("the server hashes keys differently from this build");
        }
        let (page_size, pages) = (
            u32_at(&h, H_PAGE_SIZE) as usize,
            u32_at(&h, H_PAGES) as usize,
        );
        let hash_power = u32_at(&h, H_HASH_POWER);
        let Some(geo) = Geometry::new(usize::MAX, page_size, hash_power, 16, pages) else {
            return bad("a header whose geometry does not fit");
        };
        Ok(Reader {
            seed,
            epoch: u64_at(&h, H_EPOCH) as i64,
            hash_power,
            items: geo.first_page as u64..(geo.first_page + pages * page_size) as u64,
            tries: 64,
            max_value: 1 << 20,
            max_chain: 64,
            retries: 0,
            rounds: 0,
            state: None,
        })
    }

    /// Unix time of the arena's relative clock's zero (expiry is on that clock).
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// The arena's relative clock now, from this host's unix time: the `now` of [`get`](Self::get)
    /// (a reader on another host is as right as the two clocks agree).
    pub fn now(&self) -> u32 {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        (unix - self.epoch).clamp(0, i64::from(u32::MAX)) as u32
    }

    /// The item of `key` at `now` on the arena's relative clock.
    pub fn get(&mut self, f: &mut dyn Fetch, key: &[u8], now: u32) -> Result<Got, ReaderError> {
        let mut got = self.get_many(f, &[key], now)?;
        Ok(got.pop().expect("one answer per key"))
    }

    /// The items of `keys` at `now`, in order, walked together: a round of fetches per step
    /// for all keys at once (see the module doc).
    pub fn get_many(
        &mut self,
        f: &mut dyn Fetch,
        keys: &[&[u8]],
        now: u32,
    ) -> Result<Vec<Got>, ReaderError> {
        let mut walks: Vec<Walk> = keys
            .iter()
            .map(|&key| Walk {
                key,
                hash: hash_with(self.seed, key),
                entry: 0,
                at: At::Bucket,
                strict: false,
                tries: 0,
                got: None,
                slots: [(0, 0); 4],
            })
            .collect();
        let mut buf = Vec::new();
        while walks.iter().any(|w| w.got.is_none()) {
            let state = self.current_state(f)?;
            let round = self.plan(&mut walks, state);
            buf.resize(round.bytes, 0);
            f.fetch_all(&round.reads, &mut buf)?;
            self.rounds += 1;
            let mut stale = false;
            for w in walks.iter_mut().filter(|w| w.got.is_none()) {
                stale |= self.step(w, &buf, now);
                if w.got.is_none() && w.tries >= self.tries {
                    w.got = Some(Got::Fallback(Why::Contended));
                }
            }
            if stale {
                self.state = None;
            }
        }
        Ok(walks.into_iter().map(|w| w.got.expect("decided")).collect())
    }

    /// The table's state: the cached one, or read afresh (after a bucket disagreed with it).
    fn current_state(&mut self, f: &mut dyn Fetch) -> Result<HashState, ReaderError> {
        if let Some(s) = self.state {
            return Ok(s);
        }
        for _ in 0..self.tries.max(1) {
            if let Some(s) = self.read_state(f)? {
                self.state = Some(s);
                return Ok(s);
            }
            self.retries += 1;
        }
        // A table that never holds still: keep walking with what the header says; buckets
        // whose level disagrees are retried until the walk gives up as contended.
        let s = self
            .read_state(f)?
            .unwrap_or(HashState { level: 0, split: 0 });
        Ok(s)
    }

    /// The table's state read between two even, equal versions, if it was.
    fn read_state(&mut self, f: &mut dyn Fetch) -> Result<Option<HashState>, ReaderError> {
        let n = H_HASH_SPLIT + 8 - H_HASH_LEVEL;
        let reads = [
            (H_HASH_VER as u64, 4),
            (H_HASH_LEVEL as u64, n),
            (H_HASH_VER as u64, 4),
        ];
        let mut b = vec![0u8; 8 + n];
        f.fetch_all(&reads, &mut b)?;
        let (v1, v2) = (u32_at(&b, 0), u32_at(&b, 4 + n));
        let s = HashState {
            level: u32_at(&b, 4),
            split: u64_at(&b, 4 + H_HASH_SPLIT - H_HASH_LEVEL),
        };
        let sane = s.level <= self.hash_power
            && s.split < 1 << s.level
            && (s.level < self.hash_power || s.split == 0);
        Ok((v1 & 1 == 0 && v1 == v2 && sane).then_some(s))
    }

    /// The offset of the entry of the bucket `state` sends `hash` to.
    fn entry_of(&self, hash: u64, state: HashState) -> u64 {
        let h = hash as usize;
        let p = state.level;
        let old = h & ((1usize << p) - 1);
        let i = if (old as u64) < state.split {
            h & ((2usize << p) - 1)
        } else {
            old
        };
        (HEADER_BYTES + i * 16) as u64
    }

    /// The round's fetches, grouped by kind (bucket versions, entries, item versions, items,
    /// item versions, bucket versions): each key's own come in the order its checks need.
    fn plan(&self, walks: &mut [Walk], state: HashState) -> Round {
        let mut r = Round::default();
        let open = |w: &&mut Walk| w.got.is_none();
        for w in walks.iter_mut().filter(open) {
            if let At::Bucket = w.at {
                w.entry = self.entry_of(w.hash, state);
                if w.strict {
                    w.slots[0] = r.add(w.entry + B_VER as u64, 4);
                }
            }
        }
        for w in walks.iter_mut().filter(open) {
            if let At::Bucket = w.at {
                w.slots[1] = r.add(w.entry, 16);
            }
        }
        for w in walks.iter_mut().filter(open) {
            if let At::Item { off, .. } = w.at {
                w.slots[0] = r.add(off + I_VER as u64, 4);
            }
        }
        for w in walks.iter_mut().filter(open) {
            if let At::Item { off, want, .. } = w.at {
                w.slots[1] = r.add(off, want);
            }
        }
        for w in walks.iter_mut().filter(open) {
            if let At::Item { off, .. } = w.at {
                w.slots[2] = r.add(off + I_VER as u64, 4);
            }
        }
        for w in walks.iter_mut().filter(open) {
            if let At::Item { bv: Some(_), .. } | At::End { .. } = w.at {
                w.slots[3] = r.add(w.entry + B_VER as u64, 4);
            }
        }
        r
    }

    /// Moves `w` on by what its fetches in `buf` say; true when its bucket's level says the
    /// cached table state is stale.
    fn step(&mut self, w: &mut Walk, buf: &[u8], now: u32) -> bool {
        let slice = |(at, len): (usize, usize)| &buf[at..at + len];
        match w.at {
            At::Bucket => {
                let e = slice(w.slots[1]);
                let (head, ver, level) = (u64_at(e, 0), u32_at(e, B_VER), u32_at(e, B_LEVEL));
                // The bucket's own level says whether the key hashes here: a cached state
                // older than a split sends the key to a bucket of a lower level.
                let i = (w.entry - HEADER_BYTES as u64) / 16;
                let here = (1..=64).contains(&level) && {
                    let bits = level - 1;
                    let mask = if bits == 64 {
                        u64::MAX
                    } else {
                        (1u64 << bits) - 1
                    };
                    w.hash & mask == i
                };
                if !here {
                    self.retry(w);
                    return true;
                }
                let bv = if w.strict {
                    let bv = u32_at(slice(w.slots[0]), 0);
                    if bv & 1 == 1 || bv != ver {
                        self.retry(w);
                        return false;
                    }
                    Some(bv)
                } else {
                    None
                };
                match (head, bv) {
                    (0, Some(bv)) => w.at = At::End { bv },
                    (0, None) => w.strict = true,
                    _ => self.follow(w, bv, head, 0),
                }
            }
            At::End { bv } => {
                if u32_at(slice(w.slots[3]), 0) == bv {
                    w.got = Some(Got::Miss);
                } else {
                    self.retry(w);
                }
            }
            At::Item { .. } => self.item(w, buf, now),
        }
        false
    }

    /// Starts `w` over from its bucket (a change met under way).
    fn retry(&mut self, w: &mut Walk) {
        self.retries += 1;
        w.tries += 1;
        w.at = At::Bucket;
    }

    /// Goes on to the chain item at `off` (0: the chain's end), the `walked`-th.
    fn follow(&mut self, w: &mut Walk, bv: Option<u32>, off: u64, walked: usize) {
        if off == 0 {
            match bv {
                // A walk that was not strict cannot decide a miss: walk again, strictly.
                None => {
                    w.strict = true;
                    w.at = At::Bucket;
                }
                Some(_) => w.got = Some(Got::Miss),
            }
            return;
        }
        if walked >= self.max_chain {
            w.got = Some(Got::Fallback(Why::LongChain));
            return;
        }
        // A link read while it changed may point anywhere: only an item's place is read.
        if off % 8 != 0 || !self.fits(off, REMOTE_ITEM_HEADER + w.key.len()) {
            self.retry(w);
            return;
        }
        let room = (self.items.end - off) as usize;
        let want = (REMOTE_ITEM_HEADER + w.key.len() + INLINE).min(room);
        w.at = At::Item {
            bv,
            off,
            want,
            walked: walked + 1,
        };
    }

    /// Whether `len` bytes at `off` lie in the pages.
    fn fits(&self, off: u64, len: usize) -> bool {
        off >= self.items.start
            && off
                .checked_add(len as u64)
                .is_some_and(|e| e <= self.items.end)
    }

    /// The chain item `w` read this round: a hit, the next link, a longer read of this item,
    /// or a retry.
    fn item(&mut self, w: &mut Walk, buf: &[u8], now: u32) {
        let At::Item {
            bv, off, walked, ..
        } = w.at
        else {
            return;
        };
        let slice = |(at, len): (usize, usize)| &buf[at..at + len];
        let (v1, it, v2) = (
            u32_at(slice(w.slots[0]), 0),
            slice(w.slots[1]),
            u32_at(slice(w.slots[2]), 0),
        );
        let bucket_moved = bv.is_some_and(|bv| u32_at(slice(w.slots[3]), 0) != bv);
        // Consistent: even and unchanged around the item's read, linked while it was read.
        if v1 & 1 == 1
            || v1 != v2
            || u32_at(it, I_VER) != v1
            || it[I_STATE] != LINKED
            || bucket_moved
        {
            self.retry(w);
            return;
        }
        let key = w.key;
        let next = u64_at(it, I_HNEXT);
        let n = u32_at(it, I_NBYTES) as usize;
        let kend = REMOTE_ITEM_HEADER + key.len();
        if it[I_NKEY] as usize != key.len() || &it[REMOTE_ITEM_HEADER..kend] != key {
            self.follow(w, bv, next, walked);
            return;
        }
        if it[I_KIND] == CHUNKED || n > self.max_value {
            w.got = Some(Got::Fallback(Why::Large));
            return;
        }
        if kend + n > it.len() {
            // The value goes on past what was read: read the whole item next round.
            if !self.fits(off, kend + n) {
                self.retry(w);
                return;
            }
            w.at = At::Item {
                bv,
                off,
                want: kend + n,
                walked,
            };
            return;
        }
        let value = &it[kend..kend + n];
        let (flags, exptime, cas) = (u32_at(it, I_FLAGS), u32_at(it, I_EXP), u64_at(it, I_CAS));
        if item_sum(key, value, flags, exptime, cas) != u32_at(it, I_SUM) {
            self.retry(w);
            return;
        }
        fence(Ordering::Acquire);
        w.got = Some(if exptime != 0 && exptime <= now {
            Got::Miss
        } else {
            Got::Hit(RemoteItem {
                value: value.to_vec(),
                flags,
                cas,
                exptime,
            })
        });
    }
}
