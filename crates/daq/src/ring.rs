//! The receiver's ring of stack buffers and the address computation both ends share
//! (the thesis' Listing 3.1).
//!
//! A receiver registers one region of `stacks × bunch` frame slots: `stacks` stack buffers, each
//! holding one *stack* of `bunch` consecutive frames. The thesis' double buffer is the smallest
//! ring (`stacks = 2`); a deeper ring is the receiver's frame buffer (`[receiver] buffer`): the
//! modules keep writing into free stack buffers while the processing unit catches up after a
//! stall, and nothing is copied on the way. A slot holds one detector frame in raw order (module
//! after module, each 512 × 1024 16-bit words), so the pipeline reads frames where they landed.
//! Frame `n` of a receiver (its own count: with time-sliced fan-out, receiver `r` of `N` gets
//! detector frames `r, r + N, …` as its frames 0, 1, …) lands in slot `n mod (stacks·bunch)`; its
//! stack is `n / bunch` and the stack's buffer is `stack mod stacks`.
//!
//! The source side computes every destination address itself (no handshake on the data path):
//! [`descriptors`] turns one module frame and a region of interest into (source offset,
//! destination offset, length) triples, one per RoI line, merged when consecutive lines are
//! contiguous at both ends (a full-width RoI is one descriptor).
use crate::model::{MODULE_COLS, MODULE_PIXELS, MODULE_ROWS};
use crate::{DaqError, Result};

/// Bytes of one module frame.
pub const MODULE_BYTES: usize = MODULE_PIXELS * 2;

/// A rectangle of a module frame, in pixels (`x` along the 1024 columns, `y` along the 512 rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Roi {
    /// First column.
    pub x: usize,
    /// First row.
    pub y: usize,
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
}

impl Roi {
    /// The whole module.
    pub const FULL: Roi = Roi {
        x: 0,
        y: 0,
        width: MODULE_COLS,
        height: MODULE_ROWS,
    };

    /// Checks that the rectangle is non-empty and inside a module.
    pub fn validate(&self) -> Result<()> {
        if self.width == 0 || self.height == 0 {
            return Err(DaqError::Config(format!(
                "region of interest {}x{} is empty",
                self.width, self.height
            )));
        }
        if self.x + self.width > MODULE_COLS || self.y + self.height > MODULE_ROWS {
            return Err(DaqError::Config(format!(
                "region of interest {}x{} at ({}, {}) leaves the {MODULE_COLS}x{MODULE_ROWS} module",
                self.width, self.height, self.x, self.y
            )));
        }
        Ok(())
    }

    /// Whether pixel (`row`, `col`) of a module lies inside.
    pub fn contains(&self, row: usize, col: usize) -> bool {
        (self.y..self.y + self.height).contains(&row)
            && (self.x..self.x + self.width).contains(&col)
    }

    /// Whether the rectangle is the whole module.
    pub fn is_full(&self) -> bool {
        *self == Roi::FULL
    }
}

/// The ring a receiver publishes at connection setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLayout {
    /// Modules per frame slot.
    pub modules: usize,
    /// Frames per stack.
    pub bunch: usize,
    /// Stack buffers in the ring (2: the thesis' double buffer).
    pub stacks: usize,
}

impl RingLayout {
    /// Largest ring accepted from a peer or a configuration (a hostile size must not make anyone
    /// allocate).
    pub const MAX_BYTES: usize = 256 << 30;

    /// A checked double buffer (two stacks).
    pub fn new(modules: usize, bunch: usize) -> Result<RingLayout> {
        Self::with_stacks(modules, bunch, 2)
    }

    /// A checked ring of `stacks` stack buffers.
    pub fn with_stacks(modules: usize, bunch: usize, stacks: usize) -> Result<RingLayout> {
        let l = RingLayout {
            modules,
            bunch,
            stacks,
        };
        if !(1..=64).contains(&modules) {
            return Err(DaqError::Config(format!(
                "{modules} modules: 1..=64 per receiver"
            )));
        }
        if bunch == 0 || bunch > 4096 {
            return Err(DaqError::Config(format!(
                "bunch {bunch}: 1..=4096 frames per stack"
            )));
        }
        if !(2..=1 << 20).contains(&stacks) {
            return Err(DaqError::Config(format!(
                "a ring of {stacks} stacks: 2..=1048576"
            )));
        }
        if l.bytes() > Self::MAX_BYTES {
            return Err(DaqError::Config(format!(
                "a ring of {stacks} x {bunch} frames of {modules} modules is {} GiB (limit {} GiB)",
                l.bytes() >> 30,
                Self::MAX_BYTES >> 30
            )));
        }
        Ok(l)
    }

    /// Bytes of one frame slot.
    pub fn slot_bytes(&self) -> usize {
        self.modules * MODULE_BYTES
    }

    /// Frame slots.
    pub fn slots(&self) -> usize {
        self.stacks * self.bunch
    }

    /// Bytes of one stack buffer.
    pub fn stack_bytes(&self) -> usize {
        self.bunch * self.slot_bytes()
    }

    /// Bytes of the whole ring.
    pub fn bytes(&self) -> usize {
        self.stacks.saturating_mul(self.stack_bytes())
    }

    /// Slot of the receiver's frame `n`.
    pub fn slot(&self, n: u64) -> usize {
        (n % self.slots() as u64) as usize
    }

    /// Stack of the receiver's frame `n`.
    pub fn stack(&self, n: u64) -> u64 {
        n / self.bunch as u64
    }

    /// The stack buffer a stack lands in.
    pub fn buffer(&self, stack: u64) -> usize {
        (stack % self.stacks as u64) as usize
    }

    /// Byte offset of module `module` of frame `n` in the ring.
    pub fn module_offset(&self, n: u64, module: usize) -> usize {
        self.slot(n) * self.slot_bytes() + module * MODULE_BYTES
    }
}

/// One WRITE: `len` bytes from `src` in the source's dataset to `dst` in the receiver's ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// Byte offset in the source region.
    pub src: usize,
    /// Byte offset in the receiver's ring.
    pub dst: usize,
    /// Bytes.
    pub len: usize,
}

/// Listing 3.1: the WRITEs that place `roi` of one module frame, read at byte offset `src_frame`
/// of the source, into the receiver's frame `n`. Lines go to their final place in the slot.
pub fn descriptors(
    ring: &RingLayout,
    module: usize,
    n: u64,
    src_frame: usize,
    roi: &Roi,
) -> impl Iterator<Item = Descriptor> {
    let dst_frame = ring.module_offset(n, module);
    let line = MODULE_COLS * 2;
    let (x, y, w) = (roi.x * 2, roi.y, roi.width * 2);
    // A full-width RoI is contiguous at both ends: one WRITE for all its lines.
    let (count, len) = if roi.width == MODULE_COLS {
        (1, roi.height * line)
    } else {
        (roi.height, w)
    };
    (0..count).map(move |i| Descriptor {
        src: src_frame + (y + i) * line + x,
        dst: dst_frame + (y + i) * line + x,
        len,
    })
}

/// Packets one module's stack takes at `mtu`: a start marker, every frame's WRITEs, with the
/// end-of-stack immediate riding on the last one. What [`remora_fabric::Completion::in_sequence`]
/// must reach for a stack to have arrived whole.
pub fn packets_per_stack(ring: &RingLayout, roi: &Roi, mtu: usize) -> u64 {
    let per_frame: u64 = descriptors(ring, 0, 0, 0, roi)
        .map(|d| d.len.div_ceil(mtu).max(1) as u64)
        .sum();
    1 + per_frame * ring.bunch as u64
}

/// What a module's WRITE-with-immediate says: the start or the end of a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// Data of this stack starts landing (a zero-length WRITE before the first line).
    Start(u64),
    /// The module's part of this stack has been sent.
    End(u64),
}

impl Marker {
    const START: u32 = 1 << 31;

    /// The 32-bit immediate (stack numbers wrap at 2^31).
    pub fn imm(self) -> u32 {
        match self {
            Marker::Start(s) => Self::START | (s as u32 & !Self::START),
            Marker::End(s) => s as u32 & !Self::START,
        }
    }

    /// Reads an immediate; `near` (the receiver's latest stack) resolves the wrap.
    pub fn from_imm(imm: u32, near: u64) -> Marker {
        let low = u64::from(imm & !Self::START);
        let span = 1u64 << 31;
        // The stack closest to `near` with these low bits.
        let base = near & !(span - 1);
        let candidates = [base.wrapping_sub(span), base, base + span];
        let s = candidates
            .into_iter()
            .filter(|c| c.checked_add(low).is_some())
            .map(|c| c + low)
            .min_by_key(|s| s.abs_diff(near))
            .unwrap_or(low);
        if imm & Self::START != 0 {
            Marker::Start(s)
        } else {
            Marker::End(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_3_1_places_each_roi_line_at_its_final_address() {
        let ring = RingLayout::new(2, 4).unwrap();
        let roi = Roi {
            x: 10,
            y: 3,
            width: 100,
            height: 5,
        };
        // Frame 9: slot 1 (9 mod 8), module 1.
        let d: Vec<_> = descriptors(&ring, 1, 9, 7 * MODULE_BYTES, &roi).collect();
        assert_eq!(d.len(), 5);
        let line = 2048;
        let slot = ring.slot_bytes();
        assert_eq!(
            d[0],
            Descriptor {
                src: 7 * MODULE_BYTES + 3 * line + 20,
                dst: slot + MODULE_BYTES + 3 * line + 20,
                len: 200
            }
        );
        assert_eq!(d[4].dst - d[0].dst, 4 * line);
    }

    #[test]
    fn a_full_width_roi_is_one_write() {
        let ring = RingLayout::new(8, 2).unwrap();
        let d: Vec<_> = descriptors(&ring, 3, 2, 0, &Roi::FULL).collect();
        assert_eq!(
            d,
            [Descriptor {
                src: 0,
                dst: 2 * ring.slot_bytes() + 3 * MODULE_BYTES,
                len: MODULE_BYTES
            }]
        );
        assert_eq!(packets_per_stack(&ring, &Roi::FULL, 4096), 1 + 2 * 256);
    }

    #[test]
    fn stacks_alternate_halves() {
        let ring = RingLayout::new(1, 3).unwrap();
        let halves: Vec<_> = (0..12).map(|n| ring.buffer(ring.stack(n))).collect();
        assert_eq!(halves, [0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1]);
        assert!((0..12).all(|n| ring.slot(n) / 3 == ring.buffer(ring.stack(n))));
    }

    #[test]
    fn a_deep_ring_cycles_through_its_stack_buffers() {
        let ring = RingLayout::with_stacks(2, 2, 5).unwrap();
        assert_eq!(ring.bytes(), 10 * ring.slot_bytes());
        let bufs: Vec<_> = (0..7).map(|s| ring.buffer(s)).collect();
        assert_eq!(bufs, [0, 1, 2, 3, 4, 0, 1]);
        // Frame 11: stack 5, buffer 0, second slot of it.
        assert_eq!(ring.slot(11), 1);
    }

    #[test]
    fn markers_round_trip_across_the_wrap() {
        for s in [0u64, 1, 5, (1 << 31) - 1, 1 << 31, (1 << 31) + 7, 3 << 31] {
            for m in [Marker::Start(s), Marker::End(s)] {
                assert_eq!(Marker::from_imm(m.imm(), s.saturating_sub(1)), m);
                assert_eq!(Marker::from_imm(m.imm(), s + 1), m);
            }
        }
    }

    #[test]
    fn hostile_layouts_are_refused() {
        // What a receiver announces goes through with_stacks (link::Announce::decode).
        assert!(RingLayout::with_stacks(64, 4096, 2).is_err(), "huge");
        assert!(RingLayout::with_stacks(1, 1, 1 << 21).is_err(), "deep");
        assert!(RingLayout::with_stacks(1, 1, 1).is_err());
        assert!(RingLayout::new(0, 1).is_err());
        assert!(Roi {
            x: 1000,
            y: 0,
            width: 100,
            height: 1
        }
        .validate()
        .is_err());
    }
}
