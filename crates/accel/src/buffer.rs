//! Cache-line-aligned buffers of plain numbers.
//!
//! Frame buffers start on a 64-byte boundary so vector loads and stores never split a cache
//! line at the start of a frame and so a later DMA or pinning layer gets line-aligned memory.
//! Built from whole 64-byte lines with `bytemuck`, so no unsafe code is needed.
use bytemuck::{Pod, Zeroable};

/// One cache line.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A zero-initialised, 64-byte-aligned buffer of `len` values of `T`; derefs to `[T]`.
#[derive(Clone)]
pub struct AlignedBuf<T: Pod> {
    lines: Vec<Line>,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Pod> AlignedBuf<T> {
    /// `len` zeroed values.
    pub fn zeroed(len: usize) -> Self {
        let bytes = len * std::mem::size_of::<T>();
        Self {
            lines: vec![Line([0; 64]); bytes.div_ceil(64)],
            len,
            _t: std::marker::PhantomData,
        }
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T: Pod> From<&[T]> for AlignedBuf<T> {
    /// An aligned copy of `v`.
    fn from(v: &[T]) -> Self {
        let mut b = Self::zeroed(v.len());
        b.copy_from_slice(v);
        b
    }
}

impl<T: Pod> std::ops::Deref for AlignedBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

impl<T: Pod> std::ops::DerefMut for AlignedBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for AlignedBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_writable() {
        for len in [0usize, 1, 15, 16, 17, 1000] {
            let mut b = AlignedBuf::<f32>::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % 64, 0);
            assert!(b.iter().all(|&v| v == 0.0));
            for (i, v) in b.iter_mut().enumerate() {
                *v = i as f32;
            }
            assert_eq!(b.last().copied(), len.checked_sub(1).map(|l| l as f32));
        }
        let b = AlignedBuf::<u16>::zeroed(33);
        assert_eq!(b.len(), 33);
        assert!(AlignedBuf::<u8>::zeroed(0).is_empty());
    }
}
