//! What the arena reports: per class (`stats slabs`, `stats items`), for the whole arena, and
//! for one page move.

/// One slab class' figures (memcached's `stats slabs` names in the comments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassStats {
    /// `chunk_size`.
    pub chunk_size: u32,
    /// `chunks_per_page`.
    pub chunks_per_page: u32,
    /// `total_pages`.
    pub pages: u32,
    /// `used_chunks` (linked items).
    pub used: u64,
    /// `free_chunks`.
    pub free: u64,
    /// Items evicted from this class (`stats items` `evicted`).
    pub evicted: u64,
    /// `mem_requested`: bytes of its linked items as memcached counts them.
    pub requested: u64,
    /// `reclaimed`: dead items whose chunk was taken back (not by the crawler).
    pub reclaimed: u64,
    /// `crawler_reclaimed`: dead items the LRU crawler took back.
    pub crawler_reclaimed: u64,
    /// `crawler_items_checked`: items the LRU crawler looked at.
    pub crawler_checked: u64,
    /// `expired_unfetched`: dead items taken back that were never read.
    pub expired_unfetched: u64,
    /// `evicted_unfetched`: evicted items that were never read.
    pub evicted_unfetched: u64,
    /// `evicted_nonzero`: evicted items that had an expiry.
    pub evicted_nonzero: u64,
    /// `outofmemory`: allocations that found nothing to evict.
    pub outofmemory: u64,
    /// `number_hot`, `number_warm`, `number_cold`, `number_temp`.
    pub lru_items: [u64; 4],
    /// `moves_to_cold`: hot or warm tail items the LRU moved down to cold.
    pub moves_to_cold: u64,
    /// `moves_to_warm`: active hot or cold items moved to warm.
    pub moves_to_warm: u64,
    /// `moves_within_lru`: active warm tail items moved back to warm's head.
    pub moves_within_lru: u64,
    /// `evicted_active`: evicted items that were active.
    pub evicted_active: u64,
    /// `direct_reclaims`: allocation rounds that evicted or moved items first.
    pub direct_reclaims: u64,
    /// `lrutail_reflocked`: pinned tail items eviction passed over.
    pub reflocked: u64,
}

/// What one page move did with the live items of its page.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Live items copied into free chunks of their class elsewhere.
    pub rescued: u64,
    /// Live items evicted: their class had no free chunk left.
    pub evicted: u64,
    /// Dead (expired or flushed) items dropped.
    pub dropped: u64,
}

/// Whole-arena figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaStats {
    /// Linked items.
    pub items: u64,
    /// Bytes of the linked items as memcached counts them.
    pub bytes: u64,
    /// Pages handed to classes.
    pub pages_used: u32,
    /// Pages items may take (`-m`).
    pub page_limit: u32,
    /// Pages mapped.
    pub pages: u32,
    /// Items evicted to make room.
    pub evictions: u64,
    /// Dead items reclaimed.
    pub reclaimed: u64,
    /// Pages moved between classes.
    pub moves: u64,
    /// Chunks of chunked items a page move copied out of its page.
    pub chunk_rescues: u64,
    /// Chunks unlinked but still being sent.
    pub held: u64,
}
