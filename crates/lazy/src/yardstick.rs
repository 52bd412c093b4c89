//! The kernel's own costs that `remora lazy bench` sets a lazy region's faults against: a
//! first-touch fault on anonymous memory, a `memcpy` into touched and into fresh pages, and the
//! bare userfaultfd mechanism (a SIGBUS handler doing one `UFFDIO_COPY`, and `UFFDIO_COPY`'s
//! bandwidth) with none of remora's bookkeeping. They live here, not with the benchmark in the
//! CLI, because they need this crate's system calls (`sys`). Timings only, never asserted.
use std::time::Instant;

/// Times first-touch faults on fresh anonymous memory: the kernel's own fault cost.
pub fn kernel_fault_us(pages: usize, trials: usize) -> f64 {
    let mut lat = Vec::with_capacity(pages * trials);
    for _ in 0..trials {
        // A fresh mapping without transparent huge pages, so every page faults once.
        let Ok(m) = crate::sys::Mapping::anonymous(pages * 4096, 4096) else {
            return f64::NAN;
        };
        m.no_huge_pages();
        let p = m.ptr();
        for i in 0..pages {
            let t = Instant::now();
            // SAFETY: writes one byte inside the mapping (first touch faults).
            unsafe { std::ptr::write_volatile(p.add(i * 4096), 1) };
            lat.push(t.elapsed().as_nanos() as f64 / 1000.0);
        }
    }
    mean_std(&lat).0
}

/// Times copying `bytes` from local memory into touched memory and into fresh 4 KB pages
/// (milliseconds, mean of `trials`): the yardsticks for scans.
pub fn memcpy_yardsticks(bytes: usize, trials: usize) -> (f64, f64) {
    let src = vec![0x5au8; bytes];
    let mut hot_dst = vec![0u8; bytes];
    let (mut hot, mut fresh) = (Vec::new(), Vec::new());
    for _ in 0..trials {
        let t = Instant::now();
        hot_dst.copy_from_slice(&src);
        std::hint::black_box(&hot_dst);
        hot.push(t.elapsed().as_secs_f64() * 1000.0);
        let Ok(m) = crate::sys::Mapping::anonymous(bytes, 4096) else {
            return (mean_std(&hot).0, f64::NAN);
        };
        m.no_huge_pages();
        let t = Instant::now();
        // SAFETY: the mapping holds `bytes` writable bytes and nothing else refers to it.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), m.ptr(), bytes) };
        std::hint::black_box(m.ptr());
        fresh.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    (mean_std(&hot).0, mean_std(&fresh).0)
}

/// The bare mechanism's own cost: the same random first touches resolved by a minimal SIGBUS
/// handler that does one `UFFDIO_COPY` from a fixed source and nothing else (no region table,
/// no states, no counters). The gap between this and a `local` region is remora's overhead;
/// this figure itself is the kernel's (fault, signal delivery, copy, sigreturn).
///
/// Replaces the process's SIGBUS handler while it runs: call it only while no SIGBUS-mode
/// region is open (the benchmark calls it after its trials).
pub fn bare_sigbus_fault_us(pages: usize, trials: usize) -> f64 {
    bare::run(pages, trials).unwrap_or(f64::NAN)
}

/// The bare mechanism's bandwidth: `UFFDIO_COPY` of `bytes` from touched local memory into a
/// registered region in 2 MB calls, with no fault taken (milliseconds, mean of `trials`). A
/// scan of a lazy region cannot beat it: each byte still goes through that ioctl.
pub fn bare_install_ms(bytes: usize, trials: usize) -> f64 {
    bare::install(bytes, trials).unwrap_or(f64::NAN)
}

mod bare {
    use crate::sys;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
    use std::time::Instant;

    static FD: AtomicI32 = AtomicI32::new(-1);
    static DST: AtomicU64 = AtomicU64::new(0);
    static SRC: AtomicU64 = AtomicU64::new(0);

    /// The minimal handler: one `UFFDIO_COPY` of the faulting page from the fixed source.
    struct Bare;

    impl sys::SigbusHandler for Bare {
        fn on_sigbus(addr: u64, _code: i32) -> bool {
            let page = addr & !4095;
            let off = page - DST.load(Ordering::Relaxed);
            let src = (SRC.load(Ordering::Relaxed) + off) as *const u8;
            // SAFETY: `src` is a page of the live source mapping (same offset as the faulting
            // page in the destination, which has the same length).
            unsafe { sys::copy(FD.load(Ordering::Relaxed), page, src, 4096, false) };
            true
        }
    }

    pub(super) fn install(bytes: usize, trials: usize) -> Option<f64> {
        let len = bytes.div_ceil(4096) * 4096;
        let (uffd, _) = sys::open_uffd(0).ok()?;
        let src = vec![0x5au8; len];
        let mut total = 0f64;
        for _ in 0..trials.max(1) {
            let dst = sys::Mapping::anonymous(len, 4096).ok()?;
            dst.no_huge_pages();
            sys::register(uffd.as_raw_fd(), dst.ptr() as u64, len as u64).ok()?;
            let t = Instant::now();
            let mut off = 0;
            while off < len {
                let n = (len - off).min(2 << 20);
                // SAFETY: `src[off..off+n]` is readable for the call.
                let p = unsafe {
                    sys::copy(
                        uffd.as_raw_fd(),
                        dst.ptr() as u64 + off as u64,
                        src[off..].as_ptr(),
                        n as u64,
                        false,
                    )
                };
                if p.err.is_some() {
                    return None;
                }
                off += n;
            }
            total += t.elapsed().as_secs_f64() * 1000.0;
            let _ = sys::unregister(uffd.as_raw_fd(), dst.ptr() as u64, len as u64);
        }
        Some(total / trials.max(1) as f64)
    }

    pub(super) fn run(pages: usize, trials: usize) -> Option<f64> {
        let (uffd, _) = sys::open_uffd(sys::FEATURE_SIGBUS).ok()?;
        let src = sys::Mapping::anonymous(pages * 4096, 4096).ok()?;
        // SAFETY: the mapping holds pages * 4096 writable bytes.
        unsafe { std::ptr::write_bytes(src.ptr(), 0x5a, pages * 4096) };
        FD.store(uffd.as_raw_fd(), Ordering::Relaxed);
        SRC.store(src.ptr() as u64, Ordering::Relaxed);
        // Keeps the old handler to restore below.
        let old = sys::swap_sigbus::<Bare>().ok()?;
        let mut order: Vec<usize> = (0..pages).collect();
        let mut rng = 0x9e3779b97f4a7c15u64;
        let mut total = 0f64;
        let mut n = 0usize;
        for _ in 0..trials {
            super::shuffle(&mut order, &mut rng);
            let Ok(dst) = sys::Mapping::anonymous(pages * 4096, 4096) else {
                break;
            };
            dst.no_huge_pages();
            DST.store(dst.ptr() as u64, Ordering::Relaxed);
            if sys::register(uffd.as_raw_fd(), dst.ptr() as u64, (pages * 4096) as u64).is_err() {
                break;
            }
            for &p in &order {
                let t = Instant::now();
                // SAFETY: p < pages: one byte inside the registered mapping.
                std::hint::black_box(unsafe { std::ptr::read_volatile(dst.ptr().add(p * 4096)) });
                total += t.elapsed().as_nanos() as f64 / 1000.0;
                n += 1;
            }
            let _ = sys::unregister(uffd.as_raw_fd(), dst.ptr() as u64, (pages * 4096) as u64);
        }
        old.restore();
        (n > 0).then(|| total / n as f64)
    }
}

/// Fisher-Yates with a xorshift64 generator: a reproducible random fault order per seed (the
/// benchmark's too).
pub fn shuffle(order: &mut [usize], rng: &mut u64) {
    for i in (1..order.len()).rev() {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        order.swap(i, (*rng % (i as u64 + 1)) as usize);
    }
}

/// Mean and sample standard deviation.
pub fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, var.sqrt())
}
