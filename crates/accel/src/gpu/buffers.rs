//! Pooled device buffers, uploads, and readbacks through a ring of staging buffers.
//!
//! Buffers are pooled by usage and power-of-two size class: an engine that processes frame
//! after frame allocates on the first frame only. Readback staging buffers come from the same
//! pool, so the set of them in use at once (one per submission in flight) forms the ring.
use std::collections::HashMap;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use super::counters::Counters;
use super::{Gpu, GpuError};

/// How long a wait for device work may take before it is reported as a failure (a software
/// device on a loaded CI machine is slow; a hung one must still end in an error).
pub(super) const WAIT: Duration = Duration::from_secs(120);

/// Free buffers by (usage bits, size).
type FreeLists = Arc<Mutex<HashMap<(u32, u64), Vec<wgpu::Buffer>>>>;

#[derive(Debug, Default)]
pub(super) struct BufferPool {
    free: FreeLists,
}

/// A device buffer on loan from the pool; returned when dropped.
#[derive(Debug)]
pub struct Pooled {
    buf: Option<wgpu::Buffer>,
    key: (u32, u64),
    home: FreeLists,
}

impl std::ops::Deref for Pooled {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        self.buf.as_ref().expect("pooled buffer present until drop")
    }
}

impl Pooled {
    /// Drops the buffer without returning it to the pool (one whose mapping may be pending).
    pub(super) fn discard(mut self) {
        self.buf.take();
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let (Some(b), Ok(mut free)) = (self.buf.take(), self.home.lock()) {
            free.entry(self.key).or_default().push(b);
        }
    }
}

impl Gpu {
    /// A buffer of at least `bytes` (rounded up to a power of two, at least 256) with `usage`,
    /// from the pool when one is free. Fails when it would exceed the device's buffer limit.
    pub fn buffer(
        &self,
        what: &'static str,
        bytes: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<Pooled, GpuError> {
        let class = bytes.max(256).next_power_of_two();
        // Storage buffers are bound whole: their class may not pass the binding limit either.
        let limit = if usage.contains(wgpu::BufferUsages::STORAGE) {
            self.info().max_binding.min(self.info().max_buffer)
        } else {
            self.info().max_buffer
        };
        let size = if class > limit {
            bytes.next_multiple_of(4)
        } else {
            class
        };
        if size > limit {
            return Err(GpuError::TooLarge { what, bytes, limit });
        }
        let key = (usage.bits(), size);
        let home = self.pool.free.clone();
        let reuse = home.lock().expect("pool").get_mut(&key).and_then(Vec::pop);
        let buf = reuse.unwrap_or_else(|| {
            Counters::add(&self.counters.buffers, 1);
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(what),
                size,
                usage,
                mapped_at_creation: false,
            })
        });
        Ok(Pooled {
            buf: Some(buf),
            key,
            home,
        })
    }

    /// A storage buffer that can be written from the host and read back.
    pub fn storage(&self, what: &'static str, bytes: u64) -> Result<Pooled, GpuError> {
        use wgpu::BufferUsages as U;
        self.buffer(what, bytes, U::STORAGE | U::COPY_DST | U::COPY_SRC)
    }

    /// A storage buffer holding `data` (uploaded through wgpu's staging belt; the copy is
    /// ordered before any later submission).
    pub fn upload<T: bytemuck::Pod>(
        &self,
        what: &'static str,
        data: &[T],
    ) -> Result<Pooled, GpuError> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let b = self.storage(what, bytes.len() as u64)?;
        self.write(&b, 0, bytes);
        Ok(b)
    }

    /// Writes `bytes` into `buf` at `offset` (a multiple of 4; odd tails are padded with zeros).
    pub fn write(&self, buf: &wgpu::Buffer, offset: u64, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        Counters::add(&self.counters.h2d_bytes, bytes.len() as u64);
        if bytes.len() % 4 == 0 {
            self.queue.write_buffer(buf, offset, bytes);
        } else {
            let mut v = bytes.to_vec();
            v.resize(bytes.len().next_multiple_of(4), 0);
            self.queue.write_buffer(buf, offset, &v);
        }
    }

    /// Submits `enc` with copies of the given ranges (`buffer, offset, bytes`; offsets and sizes
    /// multiples of 4) into staging buffers, and returns without waiting: the caller may prepare
    /// and submit more work before [`Readback::wait`].
    pub fn submit_read(
        &self,
        mut enc: wgpu::CommandEncoder,
        ranges: &[(&wgpu::Buffer, u64, u64)],
    ) -> Result<Readback, GpuError> {
        use wgpu::BufferUsages as U;
        let mut stage = Vec::with_capacity(ranges.len());
        for &(src, off, len) in ranges {
            let len4 = len.next_multiple_of(4);
            let s = self.buffer("readback", len4.max(4), U::MAP_READ | U::COPY_DST)?;
            if len4 > 0 {
                enc.copy_buffer_to_buffer(src, off, &s, 0, len4);
            }
            Counters::add(&self.counters.d2h_bytes, len4);
            stage.push((s, len));
        }
        let index = self.submit(enc);
        let (tx, rx) = mpsc::channel();
        for (i, (s, len)) in stage.iter().enumerate() {
            let tx = tx.clone();
            let len4 = len.next_multiple_of(4).max(4);
            s.map_async(wgpu::MapMode::Read, 0..len4, move |r| {
                let _ = tx.send((i, r.map_err(|e| e.to_string())));
            });
        }
        Ok(Readback {
            stage,
            index,
            rx: Mutex::new(rx),
        })
    }

    /// Submits `enc` and reads the ranges back, waiting for them.
    pub fn read(
        &self,
        enc: wgpu::CommandEncoder,
        ranges: &[(&wgpu::Buffer, u64, u64)],
    ) -> Result<Vec<ReadBytes>, GpuError> {
        self.submit_read(enc, ranges)?.wait(self)
    }

    /// Submits `enc` (counted in [`GpuCounters::submissions`](super::GpuCounters)).
    pub fn submit(&self, enc: wgpu::CommandEncoder) -> wgpu::SubmissionIndex {
        Counters::add(&self.counters.submissions, 1);
        self.queue.submit([enc.finish()])
    }

    /// A command encoder.
    pub fn encoder(&self) -> wgpu::CommandEncoder {
        self.device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor::default())
    }
}

/// Bytes read back from the device, held in 4-byte words so that they can be viewed as `u32`
/// or `f32` without a copy and without an alignment check (every device buffer is made of
/// 4-byte elements). Derefs to the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadBytes {
    words: Vec<u32>,
    len: usize,
}

impl ReadBytes {
    pub(super) fn new(bytes: &[u8]) -> ReadBytes {
        let mut words = vec![0u32; bytes.len().div_ceil(4)];
        bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        ReadBytes {
            words,
            len: bytes.len(),
        }
    }

    /// The whole 4-byte words read (a trailing partial word is left out).
    pub fn words(&self) -> &[u32] {
        &self.words[..self.len / 4]
    }

    /// The same words as `f32`.
    pub fn floats(&self) -> &[f32] {
        bytemuck::cast_slice(self.words())
    }
}

impl std::ops::Deref for ReadBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }
}

/// A submission in flight whose results are being copied to host-visible memory.
#[derive(Debug)]
pub struct Readback {
    stage: Vec<(Pooled, u64)>,
    index: wgpu::SubmissionIndex,
    /// In a mutex only so that a readback can sit in a `Sync` structure (a frame in flight
    /// inside a pipeline that Python holds); it is only ever used through `&mut self`.
    rx: Mutex<mpsc::Receiver<(usize, Result<(), String>)>>,
}

impl Readback {
    /// The submission this readback belongs to (to wait on, or to order a mapping after).
    pub fn submission(&self) -> wgpu::SubmissionIndex {
        self.index.clone()
    }

    /// Waits for the submission and returns each range's bytes, in the order asked.
    pub fn wait(self, gpu: &Gpu) -> Result<Vec<ReadBytes>, GpuError> {
        let mut out = Vec::with_capacity(self.stage.len());
        self.wait_with(gpu, |_, bytes| out.push(ReadBytes::new(bytes)))?;
        Ok(out)
    }

    /// Waits for the submission and hands each range's mapped bytes to `f` with its index, in
    /// the order asked, instead of copying them out first: a caller that puts them in place
    /// (a converted frame into its own buffer, say) reads them once. When mapping a range
    /// fails, `f` has seen the ranges before it and the error is returned.
    pub fn wait_with(mut self, gpu: &Gpu, mut f: impl FnMut(usize, &[u8])) -> Result<(), GpuError> {
        gpu.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(self.index.clone()),
                timeout: Some(WAIT),
            })
            .map_err(|e| GpuError::Transfer(e.to_string()))?;
        for _ in 0..self.stage.len() {
            let rx = self.rx.get_mut().unwrap_or_else(|p| p.into_inner());
            match rx.recv_timeout(WAIT) {
                Ok((_, Ok(()))) => {}
                Ok((i, Err(e))) => {
                    return Err(GpuError::Transfer(format!("mapping readback {i}: {e}")))
                }
                Err(_) => return Err(GpuError::Transfer("readback never mapped".into())),
            }
        }
        let mut failed = None;
        for (i, (s, len)) in std::mem::take(&mut self.stage).into_iter().enumerate() {
            let len4 = len.next_multiple_of(4).max(4);
            if failed.is_none() {
                match s.slice(0..len4).get_mapped_range() {
                    Ok(view) => {
                        f(i, &view[..len as usize]);
                        drop(view);
                        s.unmap();
                        continue;
                    }
                    Err(e) => failed = Some(GpuError::Transfer(format!("reading back: {e}"))),
                }
            }
            s.discard();
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Readback {
    /// A readback dropped unread (an error on the way, an abandoned frame) may leave its
    /// staging buffers mapped or with a mapping pending: they must not go back to the pool,
    /// where another submission would find them mapped.
    fn drop(&mut self) {
        for (s, _) in self.stage.drain(..) {
            s.discard();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ReadBytes;

    /// Regression: read-backs were `Vec<u8>`, and an empty one (a dangling, 1-aligned pointer)
    /// could not be viewed as words; the daq engine panicked on an empty CSR.
    #[test]
    fn read_bytes_view_as_words_and_floats_whatever_their_length() {
        let empty = ReadBytes::new(&[]);
        assert!(empty.words().is_empty() && empty.floats().is_empty() && empty.is_empty());
        let b = ReadBytes::new(&[1, 0, 0, 0, 0, 0, 0x80, 0x3f, 9]);
        assert_eq!(&b[..], &[1, 0, 0, 0, 0, 0, 0x80, 0x3f, 9]);
        assert_eq!(b.words(), &[1, 0x3f80_0000]);
        assert_eq!(b.floats()[1], 1.0);
    }
}
