//! The arena's byte layout: a header with the configuration and one record per slab class, the
//! hash table (bucket heads), the page directory (each page's class), then the pages. Every
//! link is an offset from the arena's start (0: none), never a pointer.
//!
//! An item (or a free chunk) starts with a 56-byte header, then the key, then the value:
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | next item in the hash chain |
//! | 8, 16 | previous and next item in its sub-LRU (a free chunk: 16 is the next free) |
//! | 24 | CAS |
//! | 32 | expiry on the server's relative clock (0: never) |
//! | 36 | client flags |
//! | 40 | value length |
//! | 44 | key length, class, state (0 free, 1 linked, 2 unlinked but still being sent), bits |
//! | 48 | last access on the relative clock |
//! | 52 | which of its class' sub-LRUs (hot, warm, cold, temp) holds it |
//! | 53 | kind: 0 a whole item, 1 the header of a chunked item |
//!
//! A chunked item (memcached's `ITEM_CHUNKED`, larger than `slab_chunk_max`) is a header
//! item whose value area holds the offset of its first chunk (8 bytes) and the class its own
//! chunk came from (1 byte); its class byte (45) is the class whose LRU holds it (the largest,
//! as in memcached). Its value lies in a chain of chunks (state `CHUNK`): 0 is the next chunk,
//! 8 the previous one (or the header), 40 the data bytes, 45 the chunk's class, and the data
//! starts at 56. The chain moves with its pages: every link is an offset.
//!
//! The bits at 47 are memcached's item flags: fetched, active (read again since it was
//! fetched: the segmented LRU keeps it), stale (meta `I`), and the recache token handed out
//! (meta `W`).

/// "RMRKVAR1": a remora kv arena.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RMRKVAR1");
/// The layout version (2: 56-byte item headers with access time and bits; 3: per-class item
/// counters; 4: a growing hash table and page-move counters; 5: memcached's segmented LRU,
/// four sub-LRUs per class; 6: chunked items).
pub const VERSION: u32 = 6;
/// Bytes before the hash table.
pub const HEADER_BYTES: usize = 32768;
/// Bytes of an item's header.
pub const ITEM_HEADER: usize = 56;
/// Bytes of an item's header in a remotely readable arena ([`super::ArenaConfig::remote`]):
/// the 56 above, then the item's version (a seqlock, [`I_VER`]) and checksum ([`I_SUM`]).
pub const REMOTE_ITEM_HEADER: usize = 64;
/// memcached's `sizeof(item)` on 64-bit: class sizes start from it plus `-n`, so the classes
/// are memcached's; an item goes to the class memcached would pick (its size counts a CAS,
/// the key's NUL and the value's CRLF), which always holds remora's smaller header.
pub const MC_ITEM_HEADER: usize = 48;
/// Most slab classes (memcached's limit is 63 too).
pub const MAX_CLASSES: usize = 63;
/// A page given to no class: fresh, or in the global pool (memcached's class 0: still
/// allocated, taken before any other page).
pub const NO_CLASS: u8 = 0xff;
/// A page whose memory went back to the system (beyond a lowered `cache_memlimit`).
pub const RELEASED: u8 = 0xfe;

// Header fields.
pub const H_MAGIC: usize = 0;
pub const H_CLEAN: usize = 12;
pub const H_PAGE_SIZE: usize = 16;
pub const H_PAGES: usize = 20;
pub const H_CLASSES: usize = 24;
pub const H_HASH_POWER: usize = 28;
pub const H_FACTOR: usize = 32;
pub const H_MIN_SPACE: usize = 40;
pub const H_ITEM_MAX: usize = 44;
pub const H_PAGES_USED: usize = 48;
pub const H_CAS: usize = 56;
pub const H_MEMORY: usize = 64;
pub const H_ITEMS: usize = 72;
pub const H_EVICTIONS: usize = 80;
pub const H_RECLAIMED: usize = 88;
pub const H_MOVES: usize = 96;
pub const H_VERSION: usize = 8;
/// Bytes of the linked items (memcached's `bytes`).
pub const H_BYTES: usize = 104;
/// Pages items may take (`-m` and `cache_memlimit`); a class without a page gets one beyond it.
pub const H_PAGE_LIMIT: usize = 112;
/// The hash of a fixed key: a build hashing differently starts cold instead of losing items.
pub const H_HASH_CHECK: usize = 116;
/// Unix time of the relative clock's zero, so a restored arena's times keep their meaning.
pub const H_EPOCH: usize = 120;
/// The hash seed.
pub const H_SEED: usize = 128;
/// 1 when items count a CAS (`-C` not given).
pub const H_CAS_ON: usize = 136;
/// log2 of the active hash buckets (H_HASH_POWER is the room reserved for the largest).
pub const H_HASH_LEVEL: usize = 140;
/// 1 while the table grows; H_HASH_SPLIT old buckets are split so far.
pub const H_HASH_EXPANDING: usize = 144;
pub const H_HASH_SPLIT: usize = 152;
// Page moves (memcached's `slab_reassign_*` counters).
/// Live items moved into free chunks of their class instead of being evicted.
pub const H_RESCUES: usize = 160;
/// Live items evicted by a page move because their class had no free chunk left.
pub const H_EVICT_NOMEM: usize = 168;
/// Items pinned by a reply that made a page move wait (the page is busy).
pub const H_BUSY_ITEMS: usize = 176;
/// Free chunks a rescue took off the free list that lay in the page being moved.
pub const H_INLINE_RECLAIM: usize = 184;
/// Chunks of chunked items a page move copied out of its page (`slab_reassign_chunk_rescues`).
pub const H_CHUNK_RESCUES: usize = 192;
/// The largest chunk (`slab_chunk_max`): larger items are chunked.
pub const H_CHUNK_MAX: usize = 200;
/// 1 when the arena is remotely readable: 64-byte item headers with a version and a checksum,
/// 16-byte bucket entries with a version (see `remote.rs`).
pub const H_REMOTE: usize = 208;
const H_CLASS_TABLE: usize = 256;
const CLASS_BYTES: usize = 320;

// Class record fields.
pub const C_SIZE: usize = 0;
pub const C_PER_PAGE: usize = 4;
pub const C_PAGES: usize = 8;
pub const C_FREE: usize = 16;
pub const C_USED: usize = 40;
pub const C_FREE_COUNT: usize = 48;
pub const C_EVICTED: usize = 56;
// memcached's per-class item counters (`stats items`), zeroed by `stats reset`.
/// Bytes of the linked items as memcached counts them (`mem_requested`).
pub const C_REQUESTED: usize = 64;
pub const C_RECLAIMED: usize = 72;
pub const C_CRAWLER_RECLAIMED: usize = 80;
pub const C_CRAWLER_CHECKED: usize = 88;
pub const C_EXPIRED_UNFETCHED: usize = 96;
pub const C_EVICTED_UNFETCHED: usize = 104;
pub const C_EVICTED_NONZERO: usize = 112;
pub const C_OUTOFMEMORY: usize = 120;
/// The sub-LRUs: `lru_field(l, L_*)` for l in [`HOT`], [`WARM`], [`COLD`], [`TEMP`].
const C_LRUS: usize = 128;
// The segmented LRU's counters (memcached's `moves_*`, `evicted_active`, ...).
pub const C_MOVES_TO_COLD: usize = 256;
pub const C_MOVES_TO_WARM: usize = 264;
pub const C_MOVES_WITHIN: usize = 272;
pub const C_EVICTED_ACTIVE: usize = 280;
/// Allocation rounds that had to evict or move items first (`direct_reclaims`).
pub const C_DIRECT_RECLAIMS: usize = 288;
/// Pinned tail items an eviction passed over (`lrutail_reflocked`).
pub const C_REFLOCKED: usize = 296;
/// The counters `stats reset` zeroes.
pub const C_COUNTERS: [usize; 14] = [
    C_EVICTED,
    C_RECLAIMED,
    C_CRAWLER_RECLAIMED,
    C_CRAWLER_CHECKED,
    C_EXPIRED_UNFETCHED,
    C_EVICTED_UNFETCHED,
    C_EVICTED_NONZERO,
    C_OUTOFMEMORY,
    C_MOVES_TO_COLD,
    C_MOVES_TO_WARM,
    C_MOVES_WITHIN,
    C_EVICTED_ACTIVE,
    C_DIRECT_RECLAIMS,
    C_REFLOCKED,
];

// Sub-LRUs, in memcached's order.
/// The hot LRU (`HOT_LRU`): new items.
pub const HOT: usize = 0;
/// The warm LRU: items read twice.
pub const WARM: usize = 1;
/// The cold LRU: evicted from; every item when flat.
pub const COLD: usize = 2;
/// The temp LRU: items with a TTL up to `temporary_ttl`, never evicted.
pub const TEMP: usize = 3;
pub const LRUS: usize = 4;
// Sub-LRU record fields: head, tail, items, bytes as memcached counts them (`sizes_bytes`).
pub const L_HEAD: usize = 0;
pub const L_TAIL: usize = 8;
pub const L_COUNT: usize = 16;
pub const L_BYTES: usize = 24;

/// The class record field of sub-LRU `l`'s field `f`.
pub const fn lru_field(l: usize, f: usize) -> usize {
    C_LRUS + l * 32 + f
}

// Item fields.
pub const I_HNEXT: usize = 0;
pub const I_PREV: usize = 8;
pub const I_NEXT: usize = 16;
pub const I_CAS: usize = 24;
pub const I_EXP: usize = 32;
pub const I_FLAGS: usize = 36;
pub const I_NBYTES: usize = 40;
pub const I_NKEY: usize = 44;
pub const I_CLASS: usize = 45;
pub const I_STATE: usize = 46;
pub const I_BITS: usize = 47;
pub const I_TIME: usize = 48;
pub const I_LRU: usize = 52;
pub const I_KIND: usize = 53;
/// A remotely readable arena's item version: odd while the item is written, unlinked or free.
pub const I_VER: usize = 56;
/// A remotely readable arena's item checksum (CRC-32C of what a GET returns, `remote.rs`).
pub const I_SUM: usize = 60;
/// A remotely readable arena's bucket entry: the chain's head at 0, its version here.
pub const B_VER: usize = 8;
/// A remotely readable arena's bucket entry: one more than the number of low hash bits its
/// keys share (0: a bucket not in use), so a reader holding an older table state can tell its
/// bucket from the entry itself.
pub const B_LEVEL: usize = 12;
// For a chunked item's header: where its value area's fields are, from the value's start.
/// The first chunk's offset.
pub const V_FIRST: usize = 0;
/// The class of the header's own chunk.
pub const V_HCLASS: usize = 8;
/// Bytes of a chunked item's value area.
pub const V_BYTES: usize = 9;
/// The kind of a chunked item's header.
pub const CHUNKED: u8 = 1;
/// memcached's `sizeof(item_chunk)`: it picks the classes of a header and the last chunk.
pub const MC_CHUNK_HEADER: usize = 48;

// Item states.
pub const FREE: u8 = 0;
pub const LINKED: u8 = 1;
/// Unlinked while a reply still sends its value: freed once the last reference goes.
pub const HELD: u8 = 2;
/// A piece of a chunked item's value.
pub const CHUNK: u8 = 3;

// Item bits.
/// Read since it was stored.
pub const FETCHED: u8 = 1;
/// Invalidated by meta `I`.
pub const STALE: u8 = 2;
/// A recache token (`W`) was handed out.
pub const WIN_SENT: u8 = 4;
/// Read again after its first read (memcached's `ITEM_ACTIVE`): the segmented LRU moves it
/// to (or keeps it in) the warm LRU instead of letting it fall to the cold tail.
pub const ACTIVE: u8 = 8;

// The class table fits the header.
const _: () = assert!(H_CLASS_TABLE + MAX_CLASSES * CLASS_BYTES <= HEADER_BYTES);
const _: () = assert!(C_REFLOCKED + 8 <= CLASS_BYTES && lru_field(LRUS, 0) <= C_MOVES_TO_COLD);

/// Offset of class `c`'s record field `f`.
pub fn class_field(c: usize, f: usize) -> usize {
    H_CLASS_TABLE + c * CLASS_BYTES + f
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Where the parts of an arena lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Hash buckets (a power of two).
    pub buckets: usize,
    /// Bytes per bucket entry: 8 (the chain's head), 16 when remotely readable (and a version).
    pub stride: usize,
    /// Offset of the page directory.
    pub directory: usize,
    /// Offset of the first page.
    pub first_page: usize,
    /// Pages.
    pub pages: usize,
    /// Bytes per page.
    pub page_size: usize,
}

impl Geometry {
    /// The layout of `pages` pages of `page_size` with `2^hash_power` buckets in `memory`
    /// bytes (None: they do not fit).
    pub fn new(
        memory: usize,
        page_size: usize,
        hash_power: u32,
        stride: usize,
        pages: usize,
    ) -> Option<Geometry> {
        let buckets = 1usize.checked_shl(hash_power)?;
        let directory = HEADER_BYTES.checked_add(buckets.checked_mul(stride)?)?;
        // Pages start 4 KiB-aligned after one directory byte each.
        let first_page = directory.checked_add(pages)?.next_multiple_of(4096);
        let end = first_page.checked_add(pages.checked_mul(page_size)?)?;
        (pages > 0 && end <= memory).then_some(Geometry {
            buckets,
            stride,
            directory,
            first_page,
            pages,
            page_size,
        })
    }
}
