//! Filling units: one fetch for a run of claimed units, installed with `UFFDIO_COPY` or
//! `UFFDIO_ZEROPAGE` (straight from the source where it lives in this process), and what a
//! failure past the deadline leaves (poisoned units that raise SIGBUS, never a hang).
use super::*;
use rustix::io::Errno;

impl Core {
    pub(super) fn take_buf(&self, len: usize) -> Vec<u8> {
        let mut b = self
            .pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        if b.len() < len {
            b.resize(len, 0);
        }
        b
    }
    pub(super) fn give_buf(&self, b: Vec<u8>) {
        let mut p = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if p.len() < 16 {
            p.push(b);
        }
    }

    /// Fetches units `[first, first+n)` (all claimed by the caller) in one request and installs
    /// them; on failure past the deadline poisons them. `again`: the units were present before.
    pub(super) fn fill_run(&self, first: usize, n: usize, again: bool) -> Result<()> {
        let off = (first * self.unit) as u64;
        let bytes = n * self.unit;
        let fd = self.uffd.as_raw_fd();
        let dst = self.addr(first);
        if let Some(src) = self.fetcher.direct(off, bytes) {
            // Source mapped here: install straight from it.
            let r = if crate::source::is_zero(src) {
                self.c.units_zero.fetch_add(n as u64, Ordering::Relaxed);
                install(
                    |d, _, l| sys::zeropage(fd, d, l),
                    dst,
                    src.as_ptr(),
                    bytes as u64,
                    fd,
                )
            } else {
                self.c.units_copied.fetch_add(n as u64, Ordering::Relaxed);
                // SAFETY: `src` is `bytes` readable bytes borrowed from the fetcher.
                install(
                    |d, s, l| unsafe { sys::copy(fd, d, s, l, self.wake) },
                    dst,
                    src.as_ptr(),
                    bytes as u64,
                    fd,
                )
            };
            match r {
                // A mapping can fail where a fetch does not (a file that shrank under a peer's
                // mapping): fetch what is still missing (installed pages are skipped as EEXIST).
                Err(e) if !matches!(e, Error::Closed) => {
                    tracing::debug!("lazy region: install from the mapping failed, fetching: {e}")
                }
                r => return self.finish(first, n, again, r),
            }
        }
        let start = Instant::now();
        let deadline = start + self.deadline;
        let mut backoff = Duration::from_millis(1);
        let mut buf = self.take_buf(bytes);
        let outcome = loop {
            if self.closing.load(Ordering::Acquire) {
                break Err(Error::Closed);
            }
            if self.fetcher.known_zero(off, bytes as u64) {
                break Ok(Fetched::Zero);
            }
            self.c.fetches.fetch_add(1, Ordering::Relaxed);
            match self.fetcher.fetch(off, &mut buf[..bytes], deadline) {
                Ok(f) => break Ok(f),
                Err(FetchError::Fatal(m)) => {
                    break Err(Error::Refused {
                        offset: off,
                        reason: m,
                    })
                }
                Err(FetchError::Transient(m)) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break Err(Error::Unavailable {
                            offset: off,
                            waited: now - start,
                            last: m,
                        });
                    }
                    tracing::debug!("lazy region: fetch {off:#x} failed, retrying: {m}");
                    std::thread::sleep(backoff.min(deadline - now));
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
            }
        };
        let installed = match outcome {
            Ok(Fetched::Data) => {
                // SAFETY: `buf` holds `bytes` readable bytes for the duration of the call.
                let r = install(
                    |d, s, l| unsafe { sys::copy(fd, d, s, l, self.wake) },
                    dst,
                    buf.as_ptr(),
                    bytes as u64,
                    fd,
                );
                self.c.units_copied.fetch_add(n as u64, Ordering::Relaxed);
                r
            }
            Ok(Fetched::Zero) => {
                let r = install(
                    |d, _, l| sys::zeropage(fd, d, l),
                    dst,
                    buf.as_ptr(),
                    bytes as u64,
                    fd,
                );
                self.c.units_zero.fetch_add(n as u64, Ordering::Relaxed);
                r
            }
            Err(e) => Err(e),
        };
        self.give_buf(buf);
        self.finish(first, n, again, installed)
    }

    /// Marks an install's units present, or poisons them if it failed.
    pub(super) fn finish(
        &self,
        first: usize,
        n: usize,
        again: bool,
        installed: Result<()>,
    ) -> Result<()> {
        match installed {
            Ok(()) => {
                for u in first..first + n {
                    self.states[u].store(PRESENT, Ordering::Release);
                }
                if !again {
                    self.present.fetch_add(n, Ordering::AcqRel);
                }
                self.notify();
                Ok(())
            }
            Err(e) => {
                if !matches!(e, Error::Closed) {
                    self.record_error(e.to_string());
                }
                self.poison(first, n, again);
                Err(e)
            }
        }
    }

    /// Poisons claimed units so that accesses raise SIGBUS instead of waiting forever.
    pub(super) fn poison(&self, first: usize, n: usize, was_present: bool) {
        let fd = self.uffd.as_raw_fd();
        let r = install(
            |d, _, l| sys::poison(fd, d, l),
            self.addr(first),
            std::ptr::null(),
            (n * self.unit) as u64,
            fd,
        );
        if let Err(e) = r {
            // Without UFFDIO_POISON (Linux < 6.6) waiters are still woken; they fault again and
            // find nobody to answer only after close, when the uffd is unregistered.
            tracing::warn!("lazy region: UFFDIO_POISON failed: {e}");
            let _ = sys::wake(fd, self.addr(first), (n * self.unit) as u64);
        }
        for u in first..first + n {
            self.states[u].store(POISONED, Ordering::Release);
        }
        if was_present {
            self.present.fetch_sub(n, Ordering::AcqRel);
        }
        self.poisoned.fetch_add(n, Ordering::AcqRel);
        self.c.units_poisoned.fetch_add(n as u64, Ordering::Relaxed);
        self.notify();
    }

    pub(super) fn poison_missing(&self) {
        let mut u = 0;
        while u < self.units {
            if self.claim(u) {
                let mut e = u + 1;
                while e < self.units && self.claim(e) {
                    e += 1;
                }
                self.poison(u, e - u, false);
                u = e;
            } else {
                u += 1;
            }
        }
    }
}

/// Runs an install ioctl over `[dst, dst+len)` to completion: retries `EAGAIN`, skips pages that
/// already exist (`EEXIST`) and wakes their waiters, since a skipped page's waiter may not have
/// been woken by anyone.
pub(super) fn install(
    op: impl Fn(u64, *const u8, u64) -> sys::Partial,
    dst: u64,
    src: *const u8,
    len: u64,
    fd: i32,
) -> Result<()> {
    let mut done = 0u64;
    let mut skipped = false;
    let mut again = 0u32;
    while done < len {
        let s = if src.is_null() {
            src
        } else {
            src.wrapping_add(done as usize)
        };
        let p = op(dst + done, s, len - done);
        done += p.done;
        match p.err {
            None => {}
            Some(e) => match Errno::from_io_error(&e) {
                Some(Errno::AGAIN) => {
                    again += 1;
                    if again > 10_000 {
                        return Err(Error::os("userfaultfd install (EAGAIN forever)", e));
                    }
                    std::thread::yield_now();
                }
                Some(Errno::EXIST) => {
                    done = (done + PAGE).min(len);
                    skipped = true;
                }
                _ => return Err(Error::os("userfaultfd install", e)),
            },
        }
    }
    if skipped {
        let _ = sys::wake(fd, dst, len);
    }
    Ok(())
}
