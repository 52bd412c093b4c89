//! The arena's byte layout: a header with the configuration and one record per slab class, the
//! hash table (bucket heads), the page directory (each page's class), then the pages. Every
//! link is an offset from the arena's start (0: none), never a pointer.
//!
//! An item (or a free chunk) starts with a 48-byte header, then the key, then the value:
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | next item in the hash chain |
//! | 8, 16 | previous and next item in its class' LRU (a free chunk: 16 is the next free) |
//! | 24 | CAS |
//! | 32 | expiry, absolute Unix seconds (0: never) |
//! | 36 | client flags |
//! | 40 | value length |
//! | 44 | key length, class, state (0 free, 1 linked), spare |

/// "RMRKVAR1": a remora kv arena, layout version 1.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RMRKVAR1");
/// Bytes before the hash table.
pub const HEADER_BYTES: usize = 8192;
/// Bytes of an item's header.
pub const ITEM_HEADER: usize = 48;
/// Most slab classes (memcached's limit is 63 too).
pub const MAX_CLASSES: usize = 63;
/// A page not given to any class yet.
pub const NO_CLASS: u8 = 0xff;

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
pub const H_SEED: usize = 52;
pub const H_CAS: usize = 56;
pub const H_MEMORY: usize = 64;
pub const H_ITEMS: usize = 72;
pub const H_EVICTIONS: usize = 80;
pub const H_RECLAIMED: usize = 88;
pub const H_MOVES: usize = 96;
pub const H_VERSION: usize = 8;
const H_CLASS_TABLE: usize = 128;
const CLASS_BYTES: usize = 64;

// Class record fields.
pub const C_SIZE: usize = 0;
pub const C_PER_PAGE: usize = 4;
pub const C_PAGES: usize = 8;
pub const C_FREE: usize = 16;
pub const C_HEAD: usize = 24;
pub const C_TAIL: usize = 32;
pub const C_USED: usize = 40;
pub const C_FREE_COUNT: usize = 48;
pub const C_EVICTED: usize = 56;

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

/// Where the parts of an arena of `memory` bytes lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Hash buckets (a power of two).
    pub buckets: usize,
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
    /// The layout of `memory` bytes in pages of `page_size` with `2^hash_power` buckets.
    pub fn new(memory: usize, page_size: usize, hash_power: u32) -> Option<Geometry> {
        let buckets = 1usize.checked_shl(hash_power)?;
        let directory = HEADER_BYTES.checked_add(buckets.checked_mul(8)?)?;
        let rest = memory.checked_sub(directory)?;
        // Each page costs its bytes and a directory byte; pages start 4 KiB-aligned.
        let mut pages = rest / (page_size + 1);
        while pages > 0 && (directory + pages).next_multiple_of(4096) + pages * page_size > memory {
            pages -= 1;
        }
        (pages > 0).then(|| Geometry {
            buckets,
            directory,
            first_page: (directory + pages).next_multiple_of(4096),
            pages,
            page_size,
        })
    }
}
