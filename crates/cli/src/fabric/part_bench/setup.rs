//! The benchmark's fixtures: responder regions of 4 KiB pages (`resident_region`), connected
//! queue pairs on loopback (`Pair`, `Setup`, `listen`, `join`), the PART settings, and the
//! touch and pin helpers with the few libc calls they need (`sys`).
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use remora_fabric::{connect, FaultMode, Listener, PageInPolicy, PartConfig, Qp, QpOptions, Stats};
use remora_mem::{Access, Buffer, Mode, Pd, Region, PAGE_SIZE};

/// Longest wait for one completion before the benchmark gives up.
const STALL: Duration = Duration::from_secs(10);

/// Calls into the C library that the crate's dependencies do not wrap for us.
mod sys {
    use std::ffi::{c_int, c_void};

    const MADV_NOHUGEPAGE: c_int = 15;

    extern "C" {
        fn mlock(addr: *const c_void, len: usize) -> c_int;
        fn munlock(addr: *const c_void, len: usize) -> c_int;
        fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }

    /// Locks `[ptr, ptr+len)` (faulting in what is missing).
    ///
    /// # Safety
    /// The range must be mapped for the call.
    pub unsafe fn lock(ptr: *const u8, len: usize) -> std::io::Result<()> {
        // SAFETY: the caller keeps the range mapped; mlock only changes page state.
        match unsafe { mlock(ptr.cast(), len) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// Unlocks `[ptr, ptr+len)`.
    ///
    /// # Safety
    /// As for [`lock`].
    pub unsafe fn unlock(ptr: *const u8, len: usize) -> std::io::Result<()> {
        // SAFETY: as in `lock`.
        match unsafe { munlock(ptr.cast(), len) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// Asks for 4 KiB pages only in `[ptr, ptr+len)` (`MADV_NOHUGEPAGE`).
    ///
    /// # Safety
    /// The range must be a page-aligned private anonymous mapping owned by the caller.
    pub unsafe fn no_huge_pages(ptr: *mut u8, len: usize) -> std::io::Result<()> {
        // SAFETY: the advice changes how future faults are served, never the contents.
        match unsafe { madvise(ptr.cast(), len, MADV_NOHUGEPAGE) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
}

/// An anonymous on-demand region of `len` bytes, 4 KiB pages only, filled and resident.
pub(super) fn resident_region(pd: &Pd, len: usize) -> Result<Arc<Region>> {
    let buf = Buffer::anonymous(len.max(PAGE_SIZE))?;
    // SAFETY: a fresh private anonymous mapping this buffer owns.
    if let Err(e) = unsafe { sys::no_huge_pages(buf.as_ptr(), buf.len()) } {
        tracing::warn!(error = %e, "MADV_NOHUGEPAGE refused: faults may bring in 2 MiB at once");
    }
    let r = pd.register(buf, Access::ALL, Mode::OnDemand)?;
    let fill: Vec<u8> = (0..r.len())
        .map(|i| (i as u8).wrapping_mul(31) | 1)
        .collect();
    r.write_at(0, &fill)?;
    r.page_in_range(0, r.len())?;
    Ok(r)
}

/// A connected requester (with its source) and the responder queue pair it talks to.
pub(super) struct Pair {
    req: Qp,
    pub(super) resp: Qp,
    src: Arc<Region>,
    next_id: AtomicU64,
}

/// A responder listening on loopback: its regions' protection domain and PART setting.
pub(super) fn listen(pd: Arc<Pd>, part: PartConfig) -> Result<Listener> {
    let opts = QpOptions {
        part,
        ..QpOptions::default()
    };
    Listener::bind("127.0.0.1:0".parse().expect("address"), pd, opts)
        .context("listening on 127.0.0.1")
}

/// Connects a requester with options `opts` and a `src_len`-byte source to `l`.
pub(super) fn join(l: &Listener, opts: QpOptions, src_len: usize) -> Result<Pair> {
    let pd = Arc::new(Pd::new());
    let src = resident_region(&pd, src_len)?;
    let addr = l.local_addr();
    std::thread::scope(|s| {
        let accepted = s.spawn(|| l.incoming().and_then(|inc| inc.establish(&[])));
        let req = connect(addr, pd, opts, &[]);
        if req.is_err() {
            // Unblock the accepting thread if our connect never reached it.
            drop(TcpStream::connect(addr));
        }
        let resp = accepted.join().expect("accept thread");
        let (req, _) = req.context("connecting the requester")?;
        let (resp, _) = resp.context("accepting the requester")?;
        Ok(Pair {
            req,
            resp,
            src,
            next_id: AtomicU64::new(1),
        })
    })
}

impl Pair {
    /// WRITE `size` bytes of the source into `dst` at `offset` and waits for the completion.
    pub(super) fn write(&self, dst: &Region, offset: usize, size: usize) -> Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.req.post_write(
            id,
            &self.src,
            0,
            size,
            dst.addr() + offset as u64,
            dst.rkey(),
            None,
        )?;
        let c = self.req.wait(STALL)?.with_context(|| {
            format!(
                "no completion in {} s; requester {:?}; responder {:?}",
                STALL.as_secs(),
                self.req.stats().engine,
                self.resp.stats().engine
            )
        })?;
        if !c.status.is_ok() {
            bail!(
                "WRITE of {size} bytes failed: {:?}; responder {:?}",
                c.status,
                self.resp.stats().engine
            );
        }
        Ok(())
    }
}

/// A responder region with its own listener and requester: one queue pair setting.
pub(super) struct Setup {
    pub(super) dst: Arc<Region>,
    pair: Pair,
    _listener: Listener,
}

impl Setup {
    pub(super) fn open(resp: PartConfig, req: QpOptions, len: usize) -> Result<Setup> {
        let pd = Arc::new(Pd::new());
        let dst = resident_region(&pd, len)?;
        let l = listen(pd, resp)?;
        let pair = join(&l, req, len)?;
        Ok(Setup {
            dst,
            pair,
            _listener: l,
        })
    }

    pub(super) fn write(&self, size: usize) -> Result<()> {
        self.pair.write(&self.dst, 0, size)
    }

    pub(super) fn evict(&self, size: usize) -> Result<()> {
        Ok(self.dst.evict(0, size)?)
    }

    /// Evicts from a thread pinned to another CPU than the calling thread's (the same CPU
    /// where the process may use only one): the kernel keeps freed pages on per-CPU lists, and
    /// a page-in on another CPU than the one that freed them costs more (`page_in_elsewhere`).
    pub(super) fn evict_elsewhere(&self, size: usize) -> Result<()> {
        use rustix::thread::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
        let here = sched_getcpu();
        let allowed = sched_getaffinity(None)?;
        let other = (0..CpuSet::MAX_CPU).find(|&c| c != here && allowed.is_set(c));
        std::thread::scope(|s| {
            s.spawn(|| {
                if let Some(c) = other {
                    let mut one = CpuSet::new();
                    one.set(c);
                    sched_setaffinity(None, &one)?;
                }
                self.evict(size)
            })
            .join()
            .expect("the evicting thread")
        })
    }

    /// The names of both ends' device threads, to tell their CPU time apart.
    pub(super) fn roles(&self) -> super::threads::Roles {
        let name = |q: &remora_fabric::Qp| {
            q.udp_device()
                .map(|a| format!("{}{}", remora_fabric::RECEIVE_THREAD, a.port()))
        };
        super::threads::Roles {
            requester: name(&self.pair.req),
            responder: name(&self.pair.resp),
        }
    }

    /// Both ends' counters: (responder, requester).
    pub(super) fn stats(&self) -> (Stats, Stats) {
        (self.pair.resp.stats().engine, self.pair.req.stats().engine)
    }
}

pub(super) fn part(mode: FaultMode, policy: PageInPolicy, timeout: Option<Duration>) -> PartConfig {
    PartConfig {
        mode,
        policy,
        fault_timeout: timeout,
        ..PartConfig::default()
    }
}

/// Writes one byte into every page of `[ptr, ptr+len)`.
pub(super) fn touch(r: &Region, len: usize) {
    let p = r.as_ptr();
    for off in (0..len).step_by(PAGE_SIZE) {
        // SAFETY: `off < len <= r.len()`; nothing else accesses the region between transfers.
        unsafe { p.add(off).write_volatile(1) };
    }
}

/// Whether `mlock` works here for `len` bytes; the reason if not.
pub(super) fn pin_check(len: usize) -> std::result::Result<(), String> {
    let pd = Pd::new();
    let r = resident_region(&pd, len).map_err(|e| e.to_string())?;
    // SAFETY: the region stays mapped for both calls.
    match unsafe { sys::lock(r.as_ptr(), len) } {
        Ok(()) => {
            // SAFETY: as above.
            unsafe { sys::unlock(r.as_ptr(), len) }.map_err(|e| format!("munlock: {e}"))
        }
        Err(e) => Err(format!(
            "mlock of {len} bytes refused ({e}): raise RLIMIT_MEMLOCK (ulimit -l) to at least \
             {} KiB or run with CAP_IPC_LOCK",
            len.div_ceil(1024)
        )),
    }
}

/// mlock + `f` + munlock of the first `len` bytes of `r`.
pub(super) fn pinned(r: &Region, len: usize, f: impl FnOnce() -> Result<()>) -> Result<()> {
    // SAFETY: the region stays mapped; lock and unlock cover the same range.
    unsafe { sys::lock(r.as_ptr(), len) }.context("mlock")?;
    let out = f();
    // SAFETY: as above.
    unsafe { sys::unlock(r.as_ptr(), len) }.context("munlock")?;
    out
}
