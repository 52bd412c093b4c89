//! Transfers through mapped memory: a staging buffer the host fills in place for every upload,
//! and results read straight from host-visible buffers the kernels wrote.
//!
//! `queue.write_buffer` allocates a staging buffer for each call inside wgpu; an engine that
//! uploads one frame per submission keeps its own instead ([`Upload`]), mapped again as soon
//! as the copy out of it is submitted, so that it is ready when its slot comes round. Reading
//! a result through [`Gpu::read_mapped`] maps only the bytes the frame produced (the length is
//! known once the frame's counts are back), with no copy command and no second submission.
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use super::buffers::{ReadBytes, WAIT};
use super::counters::Counters;
use super::{Gpu, GpuError, Pooled};

/// Where a mapping's outcome arrives (in a mutex so that a frame in flight stays `Sync`).
type MapDone = Mutex<mpsc::Receiver<Result<(), String>>>;

/// Requests a mapping of `buf[0..len]` and returns where its outcome arrives.
fn request(buf: &wgpu::Buffer, mode: wgpu::MapMode, len: u64) -> MapDone {
    let (tx, rx) = mpsc::channel();
    buf.map_async(mode, 0..len, move |r| {
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    Mutex::new(rx)
}

/// Polls the device until a requested mapping is done (after `after` completes, when given).
fn wait_mapped(
    gpu: &Gpu,
    done: &MapDone,
    after: Option<&wgpu::SubmissionIndex>,
) -> Result<(), GpuError> {
    let transfer = |e: String| GpuError::Transfer(e);
    if let Some(i) = after {
        gpu.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(i.clone()),
                timeout: Some(WAIT),
            })
            .map_err(|e| transfer(e.to_string()))?;
    }
    let start = Instant::now();
    loop {
        let r = done.lock().unwrap_or_else(|p| p.into_inner()).try_recv();
        match r {
            Ok(r) => return r.map_err(|e| transfer(format!("mapping: {e}"))),
            Err(mpsc::TryRecvError::Disconnected) => {
                return Err(transfer("mapping request dropped".into()))
            }
            Err(mpsc::TryRecvError::Empty) => {}
        }
        if start.elapsed() > WAIT {
            return Err(transfer("buffer never mapped".into()));
        }
        gpu.device
            .poll(wgpu::PollType::Poll)
            .map_err(|e| transfer(e.to_string()))?;
        std::thread::yield_now();
    }
}

/// Pieces of a large upload copied by separate threads: a mapped staging buffer is often
/// device memory behind the PCIe BAR, where one core's write-combined stores reach ~10 GB/s
/// and a few cores together the link's rate.
const COPY_PIECE: usize = 1 << 20;

/// A destination pointer handed to the copy threads.
#[derive(Clone, Copy)]
struct Dst(*mut u8);
// SAFETY: each thread writes a disjoint piece of the destination (see `copy_parallel`).
unsafe impl Send for Dst {}
unsafe impl Sync for Dst {}

impl Dst {
    /// The address `off` bytes in (a method, so that closures capture the whole `Dst`).
    fn at(self, off: usize) -> *mut u8 {
        self.0.wrapping_add(off)
    }
}

/// Copies `src` to `dst`, in parallel pieces when it is large.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes, not overlap `src`, and not be accessed
/// otherwise during the call.
unsafe fn copy_parallel(dst: *mut u8, src: &[u8]) {
    use rayon::prelude::*;
    if src.len() < 4 * COPY_PIECE {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
        return;
    }
    let d = Dst(dst);
    src.par_chunks(COPY_PIECE)
        .enumerate()
        .for_each(move |(k, piece)| {
            // SAFETY: piece k lands at offset k · COPY_PIECE, inside the destination and apart
            // from every other piece.
            unsafe {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), d.at(k * COPY_PIECE), piece.len())
            };
        });
}

/// A host-writable staging buffer reused for every upload of one slot.
#[derive(Debug)]
pub struct Upload {
    buf: Option<Pooled>,
    len: u64,
    /// The mapping asked for and the submission it waits behind.
    pending: Option<(MapDone, Option<wgpu::SubmissionIndex>)>,
}

impl Gpu {
    /// A staging buffer for uploads of up to `bytes` (a multiple of 4), mapped for the first
    /// [`Upload::fill`].
    pub fn upload_buffer(&self, what: &'static str, bytes: u64) -> Result<Upload, GpuError> {
        use wgpu::BufferUsages as U;
        let len = bytes.next_multiple_of(4).max(4);
        let buf = self.buffer(what, len, U::MAP_WRITE | U::COPY_SRC)?;
        let done = request(&buf, wgpu::MapMode::Write, len);
        Ok(Upload {
            buf: Some(buf),
            len,
            pending: Some((done, None)),
        })
    }

    /// Reads `buf[0..len]` of a host-visible buffer (`MAP_READ` usage) once submission `after`,
    /// which wrote it, has completed; counted as device-to-host bytes.
    pub fn read_mapped(
        &self,
        buf: &wgpu::Buffer,
        len: u64,
        after: &wgpu::SubmissionIndex,
    ) -> Result<ReadBytes, GpuError> {
        self.read_mapped_with(buf, len, after, ReadBytes::new)
    }

    /// [`read_mapped`](Self::read_mapped) that hands the mapped bytes to `f` instead of copying
    /// them out first: a caller that converts them (into its own vectors, say) reads device
    /// memory once.
    ///
    /// ```no_run
    /// # fn demo(gpu: &remora_accel::gpu::Gpu, buf: &remora_accel::gpu::wgpu::Buffer,
    /// #         after: &remora_accel::gpu::wgpu::SubmissionIndex) -> Result<(), remora_accel::gpu::GpuError> {
    /// let mut values: Vec<f32> = Vec::new();
    /// gpu.read_mapped_with(buf, 4096, after, |bytes| {
    ///     values.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn read_mapped_with<R>(
        &self,
        buf: &wgpu::Buffer,
        len: u64,
        after: &wgpu::SubmissionIndex,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, GpuError> {
        if len == 0 {
            return Ok(f(&[]));
        }
        let len4 = len.next_multiple_of(4);
        let done = request(buf, wgpu::MapMode::Read, len4);
        wait_mapped(self, &done, Some(after))?;
        let out = match buf.slice(0..len4).get_mapped_range() {
            Ok(view) => f(&view[..len as usize]),
            Err(e) => {
                buf.unmap();
                return Err(GpuError::Transfer(format!("reading back: {e}")));
            }
        };
        buf.unmap();
        Counters::add(&self.counters.d2h_bytes, len4);
        Ok(out)
    }
}

impl Upload {
    /// Bytes it holds.
    pub fn capacity(&self) -> u64 {
        self.len
    }

    /// Copies `data` into the staging buffer (waiting until the copy out of its previous
    /// contents has finished); counted as host-to-device bytes.
    pub fn fill(&mut self, gpu: &Gpu, data: &[u8]) -> Result<(), GpuError> {
        if data.len() as u64 > self.len {
            return Err(GpuError::TooLarge {
                what: "upload",
                bytes: data.len() as u64,
                limit: self.len,
            });
        }
        let buf = self.buf.as_ref().expect("upload buffer present until drop");
        if let Some((done, after)) = self.pending.take() {
            if let Err(e) = wait_mapped(gpu, &done, after.as_ref()) {
                // The mapping may still complete later: never hand this buffer out again.
                if let Some(b) = self.buf.take() {
                    b.discard();
                }
                return Err(e);
            }
        }
        {
            let mut view = buf
                .slice(0..self.len)
                .get_mapped_range_mut()
                .map_err(|e| GpuError::Transfer(format!("filling an upload: {e}")))?;
            let mut w = view.slice(..data.len());
            // SAFETY: the mapping is ours alone until `unmap` below, and spans `data.len()`
            // bytes (checked above); `w` is not used again while the copy writes through it.
            unsafe { copy_parallel(w.as_raw_ptr().as_ptr() as *mut u8, data) };
        }
        buf.unmap();
        Counters::add(&gpu.counters.h2d_bytes, data.len() as u64);
        Ok(())
    }

    /// Records a copy of `len` bytes at `from` into `dst` at `to`.
    pub fn copy_to(
        &self,
        enc: &mut wgpu::CommandEncoder,
        from: u64,
        dst: &wgpu::Buffer,
        to: u64,
        len: u64,
    ) {
        let buf = self.buf.as_ref().expect("upload buffer present until drop");
        enc.copy_buffer_to_buffer(buf, from, dst, to, len);
    }

    /// Maps the buffer again for the next fill, behind `after` (the submission that copies out
    /// of it).
    pub fn release(&mut self, after: wgpu::SubmissionIndex) {
        if let Some(buf) = self.buf.as_ref() {
            let done = request(buf, wgpu::MapMode::Write, self.len);
            self.pending = Some((done, Some(after)));
        }
    }
}

impl Drop for Upload {
    /// A staging buffer with a mapping pending or in place must not return to the pool.
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            b.discard();
        }
    }
}
