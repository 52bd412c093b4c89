//! How an arena is laid out ([`ArenaConfig`]: memcached's `-m`, `-f`, `-n`, `-I`,
//! `-o hashpower` and remora's `--one-sided`) and what can go wrong ([`ArenaError`]).

use super::layout::*;

/// How an arena is laid out (memcached's `-m`, `-f`, `-n`, `-I` and `-o hashpower`).
#[derive(Debug, Clone, PartialEq)]
pub struct ArenaConfig {
    /// Bytes items may take (`-m`): whole pages of it.
    pub memory: usize,
    /// Bytes per page (memcached's `slab_page_size`, 1 MiB).
    pub page_size: usize,
    /// The largest chunk (`-o slab_chunk_max`, half a page; at most the page): larger items
    /// are chunked.
    pub chunk_max: usize,
    /// Chunk size growth factor between classes (`-f`, 1.25).
    pub growth_factor: f64,
    /// Key + value bytes of the smallest chunk (`-n`, 48).
    pub min_space: usize,
    /// Largest item as memcached counts it (`-I`, up to 1 GiB).
    pub item_max: usize,
    /// log2 of the most hash buckets: the room reserved for the table to grow into.
    pub hash_power: u32,
    /// log2 of the hash buckets at a cold start (`-o hashpower`, memcached's 16); the table
    /// doubles as items pass 1.5 per bucket, up to `hash_power`.
    pub hash_power_init: u32,
    /// Items carry a CAS (`-C` not given): memcached counts 8 more bytes per item.
    pub cas: bool,
    /// Remotely readable (`--one-sided`): items carry a version and a checksum and buckets a
    /// version, so a reader holding only the mapping can find a key without a lock
    /// ([`remote`]). Item headers are 8 bytes longer, so an item within a few bytes of a class
    /// boundary goes one class up from memcached's choice.
    pub remote: bool,
}

impl ArenaConfig {
    /// memcached's defaults for `memory` bytes of items: a hash table of 2^16 buckets with room
    /// to grow to about one bucket per 128 bytes of items (the room is reserved in the mapping,
    /// and untouched buckets cost no memory).
    pub fn new(memory: usize) -> ArenaConfig {
        let buckets = (memory / 128).max(1 << 16).next_power_of_two();
        let hash_power = buckets.trailing_zeros().min(30);
        ArenaConfig {
            memory,
            page_size: 1 << 20,
            chunk_max: 1 << 19,
            growth_factor: 1.25,
            min_space: 48,
            item_max: 1 << 20,
            hash_power,
            hash_power_init: 16.min(hash_power),
            cas: true,
            remote: false,
        }
    }

    /// The chunk size of every class, smallest first.
    pub fn classes(&self) -> Result<Vec<u32>, ArenaError> {
        let bad = |m: String| Err(ArenaError::Config(m));
        if !(self.growth_factor > 1.0 && self.growth_factor.is_finite()) {
            return bad(format!(
                "growth factor {} must be above 1",
                self.growth_factor
            ));
        }
        if self.page_size < 4096 || self.page_size > 1 << 30 {
            return bad(format!(
                "page size {} must be 4 KiB to 1 GiB",
                self.page_size
            ));
        }
        if self.item_max > 1 << 30 || self.item_max < ITEM_HEADER + 2 {
            return bad(format!(
                "item size limit {} must be {} to 1 GiB",
                self.item_max,
                ITEM_HEADER + 2
            ));
        }
        // A chunk holds a chunked item's header and some data, and pages hold whole chunks.
        let chunk_max = self.chunk_limit();
        if chunk_max < 1024 || self.page_size % chunk_max != 0 {
            return bad(format!(
                "slab_chunk_max {chunk_max} must be at least 1024 and divide the page size {}",
                self.page_size
            ));
        }
        let mut v = Vec::new();
        let mut size = (MC_ITEM_HEADER + self.min_space.max(1)) as f64;
        loop {
            let s = (size as usize).next_multiple_of(8);
            if s as f64 > chunk_max as f64 / self.growth_factor || v.len() == MAX_CLASSES - 1 {
                break;
            }
            if v.last() != Some(&(s as u32)) {
                v.push(s as u32);
            }
            size = s as f64 * self.growth_factor;
        }
        v.push(chunk_max as u32);
        Ok(v)
    }

    /// The largest chunk: `chunk_max`, or the page when that is smaller.
    pub fn chunk_limit(&self) -> usize {
        self.chunk_max.min(self.page_size)
    }

    /// Pages of items `-m` allows (at least one).
    pub fn page_limit(&self) -> usize {
        (self.memory / self.page_size).max(1)
    }

    /// Pages mapped: those `-m` allows, as many again (at least 1 GiB more) that
    /// `cache_memlimit` may add at run time, and one more per class (memcached gives a class
    /// its first page even beyond `-m`). Untouched pages cost no memory.
    pub fn pages(&self) -> usize {
        let classes = self.classes().map_or(1, |c| c.len());
        let growth = self.page_limit().max((1 << 30) / self.page_size.max(1));
        self.page_limit() + growth + classes
    }

    /// Bytes of an item's header: 56, or 64 when remotely readable.
    pub fn item_header(&self) -> usize {
        if self.remote {
            REMOTE_ITEM_HEADER
        } else {
            ITEM_HEADER
        }
    }

    /// Bytes per hash bucket entry: 8, or 16 when remotely readable.
    pub fn bucket_stride(&self) -> usize {
        if self.remote {
            16
        } else {
            8
        }
    }

    /// Bytes to map: the header, the hash table, the page directory and the pages.
    pub fn mapped(&self) -> usize {
        let pages = self.pages();
        let table = HEADER_BYTES + (self.bucket_stride() << self.hash_power.min(40));
        (table + pages).next_multiple_of(4096) + pages * self.page_size
    }

    /// The bytes memcached counts for an item (`ITEM_ntotal`: header, CAS, key and NUL, value
    /// and CRLF), or remora's own if larger; this picks the class.
    pub fn item_size(&self, key: usize, value: usize) -> usize {
        let mc = MC_ITEM_HEADER + key + 1 + value + 2 + if self.cas { 8 } else { 0 };
        mc.max(self.item_header() + key + value)
    }
}

/// Arena errors.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    /// A configuration that cannot make an arena.
    #[error("arena configuration: {0}")]
    Config(String),
    /// The item is larger than the item size limit.
    #[error("item of {0} bytes is over the item size limit")]
    TooLarge(usize),
    /// A key longer than 250 bytes or empty.
    #[error("key of {0} bytes (1 to 250 allowed)")]
    BadKey(usize),
    /// The item's class has no chunk, no free page and nothing it may evict.
    #[error("out of memory for items of class {0}")]
    NoMemory(usize),
    /// A page move found every page of the class holding items that replies still send.
    #[error("every page of class {0} holds items being sent; try again")]
    Busy(usize),
    /// The warm restart's metadata file (`FILE.meta`) is empty or corrupt: the server does
    /// not start, as memcached does not.
    #[error("restart metadata: {0} (remove it to start with a clean cache)")]
    Metadata(String),
    /// The mapping failed.
    #[error("arena memory: {0}")]
    Io(#[from] std::io::Error),
}
