//! What a page server serves: a file, a memfd, bytes of its own, or a live process's memory.
//! Every source is one linear byte space (a process's ranges are concatenated in order).
use crate::error::{Error, Result};
use crate::protocol::{Segment, ZERO_MAP_PAGE};
use rustix::fs::SeekFrom;
use rustix::process::{Pid, Signal};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

/// A linear space of bytes a page server serves.
pub trait PageSource: Send + Sync {
    /// Total length in bytes.
    fn len(&self) -> u64;
    /// True if the source has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fills `buf` with bytes `[offset, offset+buf.len())`; bytes past the end read as zero.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// The source's segments (for a process: its address ranges).
    fn segments(&self) -> Vec<Segment> {
        vec![Segment {
            va: 0,
            len: self.len(),
        }]
    }
    /// One bit per 4 KB page known to be zero without reading it (file holes); empty if unknown.
    /// Clients install these pages as zero without a fetch, so a source reports a page here only
    /// if it stays zero while served.
    fn zero_map(&self) -> Vec<u64> {
        Vec::new()
    }
    /// The open file behind the source (a regular file or a memfd), which a server may map
    /// shared instead of reading it; None for other sources.
    fn file(&self) -> Option<&File> {
        None
    }
    /// The live process whose memory this is, read through `process_vm_readv` at the
    /// addresses of [`segments`](Self::segments) (None for other sources).
    fn process(&self) -> Option<i32> {
        None
    }
    /// A short description for logs.
    fn describe(&self) -> String;
}

/// True if every byte is zero (word at a time; the compiler vectorizes it).
pub fn is_zero(b: &[u8]) -> bool {
    let (head, mid, tail) = {
        // SAFETY: u64 has no invalid bit patterns; align_to only reinterprets aligned middle bytes.
        unsafe { b.align_to::<u64>() }
    };
    head.iter().all(|&x| x == 0) && mid.iter().all(|&x| x == 0) && tail.iter().all(|&x| x == 0)
}

/// Bytes the server owns (a region of its own).
pub struct MemorySource {
    bytes: Vec<u8>,
}

impl MemorySource {
    /// Serves `bytes`.
    pub fn new(bytes: Vec<u8>) -> MemorySource {
        MemorySource { bytes }
    }
    /// The bytes served.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl PageSource for MemorySource {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.bytes.len() as u64;
        let start = offset.min(n) as usize;
        let end = offset.saturating_add(buf.len() as u64).min(n) as usize;
        let k = end - start;
        buf[..k].copy_from_slice(&self.bytes[start..end]);
        buf[k..].fill(0);
        Ok(())
    }
    fn describe(&self) -> String {
        format!("memory ({} bytes)", self.bytes.len())
    }
}

/// A regular file or a memfd, read with `pread` (the tcp server) or mapped shared (the fabric
/// server): either way clients see the file's current bytes, not a copy taken at start. The
/// length is fixed when the source is opened.
pub struct FileSource {
    file: File,
    len: u64,
    name: String,
    holes: bool,
}

impl FileSource {
    /// Opens a file by path.
    pub fn open(path: &std::path::Path) -> Result<FileSource> {
        let file =
            File::open(path).map_err(|e| Error::io(format!("open {}", path.display()), e))?;
        let mut s = FileSource::from_file(file)?;
        s.name = path.display().to_string();
        Ok(s)
    }
    /// Serves an open file or memfd (its current length).
    pub fn from_file(file: File) -> Result<FileSource> {
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat source file", e))?
            .len();
        Ok(FileSource {
            file,
            len,
            name: "file".into(),
            holes: false,
        })
    }
    /// Reports the file's holes at open time in the zero map, so clients install those pages
    /// as zero without a fetch. Only for a file whose holes are not written while served: a
    /// client would keep seeing zeros there. Off by default.
    pub fn with_hole_map(mut self, on: bool) -> FileSource {
        self.holes = on;
        self
    }
    /// Serves a memfd (or any file descriptor) handed over as an owned fd.
    pub fn from_fd(fd: OwnedFd) -> Result<FileSource> {
        let mut s = FileSource::from_file(File::from(fd))?;
        s.name = "memfd".into();
        Ok(s)
    }
}

impl PageSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            if at >= self.len {
                break;
            }
            match self.file.read_at(&mut buf[done..], at) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(format!("pread {} at {at:#x}", self.name), e)),
            }
        }
        buf[done..].fill(0);
        Ok(())
    }
    fn file(&self) -> Option<&File> {
        Some(&self.file)
    }
    fn zero_map(&self) -> Vec<u64> {
        if !self.holes {
            // The file is served live: a hole may be written later.
            return Vec::new();
        }
        // Holes found with SEEK_DATA/SEEK_HOLE read as zero: the client can install them without
        // a round trip. Only whole 4 KB pages inside holes are marked.
        let pages = self.len.div_ceil(ZERO_MAP_PAGE);
        let mut map = vec![0u64; pages.div_ceil(64) as usize];
        let mut pos = 0u64;
        let mut any = false;
        while pos < self.len {
            let hole = rustix::fs::seek(&self.file, SeekFrom::Hole(pos)).ok();
            let Some(hole) = hole else { return Vec::new() };
            if hole >= self.len {
                break;
            }
            let data = rustix::fs::seek(&self.file, SeekFrom::Data(hole)).unwrap_or(self.len);
            let first = hole.div_ceil(ZERO_MAP_PAGE);
            let last = data.min(self.len) / ZERO_MAP_PAGE;
            for p in first..last {
                map[(p / 64) as usize] |= 1 << (p % 64);
                any = true;
            }
            pos = data;
        }
        // A last partial page past the end of the file is zero as well if it started in a hole.
        if any {
            map
        } else {
            Vec::new()
        }
    }
    fn describe(&self) -> String {
        format!("{} ({} bytes)", self.name, self.len)
    }
}

/// `kill(pid, sig)` for a process this source serves (`pid` > 0).
fn send_signal(pid: i32, sig: Signal) -> std::io::Result<()> {
    let pid = Pid::from_raw(pid).ok_or_else(|| std::io::Error::other(format!("pid {pid}")))?;
    Ok(rustix::process::kill_process(pid, sig)?)
}

/// A live process's memory, read with `process_vm_readv` (no ptrace attach needed as root or
/// for a child with the same credentials). Optionally stopped (SIGSTOP) while served, and
/// continued (SIGCONT) when the source is dropped.
pub struct ProcessSource {
    pid: i32,
    segments: Vec<Segment>,
    /// Cumulative start offset of each segment.
    starts: Vec<u64>,
    len: u64,
    stopped: bool,
}

impl ProcessSource {
    /// Serves `ranges` (start, len) of process `pid`, or its writable private memory from
    /// `/proc/PID/maps` when `ranges` is empty. With `stop`, the process is sent SIGSTOP now and
    /// SIGCONT when the source is dropped.
    pub fn new(pid: i32, ranges: &[(u64, u64)], stop: bool) -> Result<ProcessSource> {
        if pid <= 0 {
            return Err(Error::Invalid(format!("pid {pid}")));
        }
        // Stop first, so that the maps read below are the ones that will be served.
        if stop {
            send_signal(pid, Signal::STOP).map_err(|e| Error::io(format!("SIGSTOP {pid}"), e))?;
            wait_stopped(pid);
        }
        let cont = |e: Error| {
            if stop {
                // Undoes our SIGSTOP on the error path.
                let _ = send_signal(pid, Signal::CONT);
            }
            e
        };
        let ranges = if ranges.is_empty() {
            let maps = crate::procmaps::read(pid)
                .map_err(|e| cont(Error::io(format!("read /proc/{pid}/maps"), e)))?;
            crate::procmaps::default_ranges(&maps)
        } else {
            ranges.to_vec()
        };
        let mut segments = Vec::new();
        let mut starts = Vec::new();
        let mut len = 0u64;
        for &(va, l) in &ranges {
            if l == 0 {
                continue;
            }
            va.checked_add(l)
                .ok_or_else(|| cont(Error::Invalid(format!("range {va:#x}+{l:#x} overflows"))))?;
            starts.push(len);
            segments.push(Segment { va, len: l });
            len = len
                .checked_add(l)
                .ok_or_else(|| cont(Error::Invalid("ranges too long".into())))?;
        }
        Ok(ProcessSource {
            pid,
            segments,
            starts,
            len,
            stopped: stop,
        })
    }
    /// The process served.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

/// kill(SIGSTOP) returns before the target has stopped: wait (up to 1 s) until its state in
/// /proc/PID/stat is `T`, so the memory no longer changes under the server.
fn wait_stopped(pid: i32) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < end {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s) => {
                let state = s
                    .rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next());
                if matches!(state, Some("T") | Some("t")) {
                    return;
                }
            }
            Err(_) => return,
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    tracing::warn!("pid {pid} did not stop within 1 s; serving it running");
}

impl Drop for ProcessSource {
    fn drop(&mut self) {
        if self.stopped {
            // Resumes the process this source stopped.
            let _ = send_signal(self.pid, Signal::CONT);
        }
    }
}

impl PageSource for ProcessSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            if at >= self.len {
                break;
            }
            // The segment holding `at`: the last start <= at.
            let i = self.starts.partition_point(|&s| s <= at) - 1;
            let seg = self.segments[i];
            let within = at - self.starts[i];
            let n = ((seg.len - within) as usize).min(buf.len() - done);
            let got = crate::sys::process_read(self.pid, seg.va + within, &mut buf[done..done + n])
                .map_err(|e| {
                    Error::io(
                        format!(
                            "process_vm_readv pid {} at {:#x}",
                            self.pid,
                            seg.va + within
                        ),
                        e,
                    )
                })?;
            if got == 0 {
                return Err(Error::Refused {
                    offset: at,
                    reason: format!(
                        "pid {} memory at {:#x} unreadable",
                        self.pid,
                        seg.va + within
                    ),
                });
            }
            done += got;
        }
        buf[done..].fill(0);
        Ok(())
    }
    fn segments(&self) -> Vec<Segment> {
        self.segments.clone()
    }
    fn process(&self) -> Option<i32> {
        Some(self.pid)
    }
    fn describe(&self) -> String {
        format!(
            "pid {} ({} ranges, {} bytes{})",
            self.pid,
            self.segments.len(),
            self.len,
            if self.stopped { ", stopped" } else { "" }
        )
    }
}

/// Server-side state of a background push: which chunk to send next. Starts at `from`, runs to
/// the end, wraps to 0 and stops where it started; the chunk grows from 64 KB to 4 MB while no
/// restart comes and shrinks back to 64 KB on each restart (CRIU's policy).
#[derive(Debug, Clone)]
pub struct PushCursor {
    len: u64,
    pos: u64,
    stop_at: u64,
    wrapped: bool,
    chunk: u64,
    min: u64,
    done: bool,
}

/// Smallest push chunk.
pub const PUSH_MIN_CHUNK: u64 = 64 << 10;
/// Largest push chunk.
pub const PUSH_MAX_CHUNK: u64 = 4 << 20;

impl PushCursor {
    /// A cursor over `len` bytes starting at `from`. `unit` (the client's fault unit, a power of
    /// two) raises the smallest chunk so that chunks cover whole units.
    pub fn new(len: u64, from: u64, unit: u64) -> PushCursor {
        let min = unit
            .clamp(PUSH_MIN_CHUNK, PUSH_MAX_CHUNK)
            .next_power_of_two();
        let mut c = PushCursor {
            len,
            pos: 0,
            stop_at: 0,
            wrapped: false,
            chunk: min,
            min,
            done: len == 0,
        };
        c.restart(from);
        c
    }
    /// Moves the stream to `from` (after a fault) and shrinks the chunk.
    pub fn restart(&mut self, from: u64) {
        let from = if from >= self.len { 0 } else { from };
        self.pos = from;
        self.stop_at = from;
        self.wrapped = false;
        self.chunk = self.min;
        self.done = self.len == 0;
    }
    /// The next (offset, len) to send, or None when the stream has covered everything.
    pub fn next_chunk(&mut self) -> Option<(u64, u64)> {
        if self.done {
            return None;
        }
        let limit = if self.wrapped { self.stop_at } else { self.len };
        if self.pos >= limit {
            if self.wrapped || self.stop_at == 0 {
                self.done = true;
                return None;
            }
            self.wrapped = true;
            self.pos = 0;
            return self.next_chunk();
        }
        let n = self.chunk.min(limit - self.pos);
        let at = self.pos;
        self.pos += n;
        self.chunk = (self.chunk * 2).min(PUSH_MAX_CHUNK);
        Some((at, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_covers_everything_once_from_the_middle() {
        let len = 10 << 20;
        let mut c = PushCursor::new(len, 3 << 20, 4096);
        let mut covered = vec![0u8; (len >> 12) as usize];
        let mut first = None;
        while let Some((at, n)) = c.next_chunk() {
            first.get_or_insert(at);
            for p in at >> 12..(at + n) >> 12 {
                covered[p as usize] += 1;
            }
        }
        assert_eq!(first, Some(3 << 20));
        assert!(covered.iter().all(|&x| x == 1));
    }

    #[test]
    fn cursor_chunk_grows_and_restart_shrinks_it() {
        let mut c = PushCursor::new(64 << 20, 0, 4096);
        let sizes: Vec<u64> = (0..8).map(|_| c.next_chunk().unwrap().1).collect();
        assert_eq!(sizes[0], PUSH_MIN_CHUNK);
        assert_eq!(*sizes.last().unwrap(), PUSH_MAX_CHUNK);
        c.restart(1 << 20);
        assert_eq!(c.next_chunk(), Some((1 << 20, PUSH_MIN_CHUNK)));
    }

    #[test]
    fn memory_source_zero_fills_past_end() {
        let s = MemorySource::new(vec![7u8; 100]);
        let mut b = [1u8; 64];
        s.read_at(80, &mut b).unwrap();
        assert!(b[..20].iter().all(|&x| x == 7));
        assert!(b[20..].iter().all(|&x| x == 0));
        assert!(is_zero(&[0u8; 4099]));
        assert!(!is_zero(&{
            let mut v = [0u8; 4099];
            v[4098] = 1;
            v
        }));
    }

    #[test]
    fn file_holes_are_in_the_zero_map() {
        let path = std::env::temp_dir().join(format!("remora-lazy-holes-{}", std::process::id()));
        let f = File::create(&path).unwrap();
        f.set_len(1 << 20).unwrap();
        f.write_at(&[1u8; 4096], 8192).unwrap();
        let s = FileSource::open(&path).unwrap();
        assert!(s.zero_map().is_empty(), "no hole map unless asked");
        let s = s.with_hole_map(true);
        let m = s.zero_map();
        std::fs::remove_file(&path).ok();
        if m.is_empty() {
            eprintln!("skip: file system reports no holes");
            return;
        }
        assert_eq!(
            m[0] & 0b111,
            0b011,
            "pages 0 and 1 are holes, page 2 has data"
        );
    }

    #[test]
    fn process_source_reads_own_memory() {
        let data: Vec<u8> = (0..20000u32).map(|i| (i * 7) as u8).collect();
        let s = ProcessSource::new(
            std::process::id() as i32,
            &[
                (data.as_ptr() as u64, 10000),
                (data.as_ptr() as u64 + 12000, 8000),
            ],
            false,
        )
        .unwrap();
        assert_eq!(s.len(), 18000);
        let mut b = vec![0u8; 4000];
        s.read_at(8000, &mut b).unwrap();
        assert_eq!(&b[..2000], &data[8000..10000]);
        assert_eq!(&b[2000..], &data[12000..14000]);
    }
}
