//! A consistency check of every structure against the others, for tests and debug builds.

use super::layout::*;
use super::Arena;

impl Arena {
    /// Checks every structure against the others (hash chains, LRU lists, free lists, counts);
    /// the reason on the first inconsistency. For tests and `debug` checks.
    pub fn check(&self) -> Result<(), String> {
        let mut linked = std::collections::HashSet::new();
        self.crawl(|off, _| {
            linked.insert(off);
        });
        if linked.len() as u64 != self.stats().items {
            return Err(format!(
                "{} linked chunks, {} items counted",
                linked.len(),
                self.stats().items
            ));
        }
        let mut chained = 0;
        for k in 0..self.buckets_in_use() {
            let mut off = u64_at(self.b(), self.bucket_at(k));
            while off != 0 {
                if !linked.contains(&off) {
                    return Err(format!(
                        "hash chain reaches a chunk that is not linked: {off}"
                    ));
                }
                if self.bucket(self.key_of(off)) != self.bucket_at(k) {
                    return Err("an item hangs in the wrong bucket".into());
                }
                chained += 1;
                off = self.at(off, I_HNEXT);
            }
        }
        if chained != linked.len() {
            return Err(format!(
                "{chained} items in chains, {} linked",
                linked.len()
            ));
        }
        for c in 0..self.classes {
            let (mut items, mut bytes) = (0u64, 0u64);
            for l in [HOT, WARM, COLD, TEMP] {
                let (mut n, mut b, mut prev) = (0u64, 0u64, 0u64);
                let mut off = self.lf(c, l, L_HEAD);
                while off != 0 {
                    if self.at(off, I_PREV) != prev
                        || self.class_of(off) != c
                        || self.lru_of(off) != l
                        || !linked.contains(&off)
                    {
                        return Err(format!("class {c} LRU {l}: links broken at {off}"));
                    }
                    n += 1;
                    b += self.size_of(off);
                    prev = off;
                    off = self.at(off, I_NEXT);
                }
                if prev != self.lf(c, l, L_TAIL)
                    || n != self.lf(c, l, L_COUNT)
                    || b != self.lf(c, l, L_BYTES)
                {
                    return Err(format!(
                        "class {c} LRU {l}: {n} items of {b} bytes, {} and {} counted",
                        self.lf(c, l, L_COUNT),
                        self.lf(c, l, L_BYTES)
                    ));
                }
                items += n;
                bytes += b;
            }
            if items != self.field(c, C_USED) || bytes != self.field(c, C_REQUESTED) {
                return Err(format!(
                    "class {c}: LRUs hold {items} items of {bytes} bytes, {} and {} counted",
                    self.field(c, C_USED),
                    self.field(c, C_REQUESTED)
                ));
            }
            let (mut free, mut off) = (0u64, self.field(c, C_FREE));
            while off != 0 {
                if self.state_of(off) != FREE || linked.contains(&off) {
                    return Err(format!("class {c}: a free chunk is in use"));
                }
                free += 1;
                off = self.at(off, I_NEXT);
            }
            if free != self.field(c, C_FREE_COUNT) {
                return Err(format!(
                    "class {c}: {free} free chunks, {} counted",
                    self.field(c, C_FREE_COUNT)
                ));
            }
            let total = self.field(c, C_PAGES) * self.field(c, C_PER_PAGE);
            let (mut seen, mut free_state) = (0u64, 0u64);
            self.page_chunks(c, |_, state| {
                seen += 1;
                free_state += u64::from(state == FREE);
            });
            if seen != total || free_state != free {
                return Err(format!(
                    "class {c}: {seen} chunks in its pages of {total}, {free_state} free of {free} listed"
                ));
            }
        }
        self.check_chains(&linked)?;
        Ok(())
    }

    /// Every chunked item's chain: chunks in state `CHUNK` of their recorded class, linked
    /// both ways, holding the value's bytes; every chunk in use is in exactly one chain or is
    /// a linked (or held) item in the class of its page.
    fn check_chains(&self, linked: &std::collections::HashSet<u64>) -> Result<(), String> {
        let mut chained = std::collections::HashSet::new();
        for &off in linked {
            if !self.is_chunked(off) {
                continue;
            }
            let (mut prev, mut bytes) = (off, 0u64);
            for ch in self.chain(off) {
                if self.state_of(ch) != CHUNK || self.at(ch, I_PREV) != prev || !chained.insert(ch)
                {
                    return Err(format!("item {off}: chain broken at {ch}"));
                }
                bytes += u64::from(u32_at(self.b(), ch as usize + I_NBYTES));
                prev = ch;
            }
            if bytes != u64::from(u32_at(self.b(), off as usize + I_NBYTES)) {
                return Err(format!("item {off}: chain holds {bytes} bytes"));
            }
        }
        let mut err = None;
        for c in 0..self.classes {
            self.page_chunks(c, |off, state| {
                let ok = match state {
                    CHUNK => chained.contains(&off) && self.class_of(off) == c,
                    LINKED | HELD => self.mem_class_of(off) == c,
                    _ => true,
                };
                if !ok && err.is_none() {
                    err = Some(format!("class {c}: chunk {off} (state {state}) is lost"));
                }
            });
        }
        err.map_or(Ok(()), Err)
    }
}
