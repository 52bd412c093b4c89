//! The frozen arena as a `remora-lazy` page source: the source's page server reads it, and
//! its zero map spares the target every page the arena does not use.

use std::sync::Arc;

use remora_lazy::PageSource;

use crate::arena::Mapping;

/// A handed-over arena (nothing writes it while it is served).
pub(super) struct ArenaSource {
    pub map: Arc<Mapping>,
    pub zero_map: Vec<u64>,
}

impl PageSource for ArenaSource {
    fn len(&self) -> u64 {
        self.map.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> remora_lazy::Result<()> {
        let bytes = self.map.view();
        let start = (offset as usize).min(bytes.len());
        let end = offset
            .saturating_add(buf.len() as u64)
            .min(bytes.len() as u64) as usize;
        let n = end - start;
        buf[..n].copy_from_slice(&bytes[start..end]);
        buf[n..].fill(0);
        Ok(())
    }

    fn zero_map(&self) -> Vec<u64> {
        self.zero_map.clone()
    }

    fn describe(&self) -> String {
        format!("remora kv arena ({} bytes)", self.map.len())
    }
}
