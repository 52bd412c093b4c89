//! The region's background threads: fault handlers reading the userfaultfd, the recorded
//! working set's replay, and the push that streams the rest of the source in (with its rate
//! limit), installing whole units that are still missing.
use super::*;

impl Core {
    pub(super) fn handler_loop(&self) {
        let fd = self.uffd.as_raw_fd();
        let mut msgs = [sys::UffdMsg::default(); 16];
        // After an event, keep reading without sleeping for a short while: a faulting thread's
        // next fault usually follows within microseconds, and waking from poll() costs more.
        let mut last_event = Instant::now();
        while !self.closing.load(Ordering::Acquire) {
            let n = match sys::read_msgs(fd, &mut msgs) {
                Ok(0) if last_event.elapsed() < SPIN => {
                    std::hint::spin_loop();
                    continue;
                }
                Ok(0) => match sys::poll_in(fd, 50) {
                    Ok(_) => continue,
                    Err(e) => {
                        self.record_error(format!("poll userfaultfd: {e}"));
                        return;
                    }
                },
                Ok(n) => n,
                Err(e) => {
                    self.record_error(format!("read userfaultfd: {e}"));
                    return;
                }
            };
            for m in &msgs[..n] {
                if m.event == sys::EVENT_PAGEFAULT {
                    self.on_fault(m.address, false);
                }
            }
            last_event = Instant::now();
        }
    }

    pub(super) fn working_set_loop(&self, ws: WorkingSet) {
        if ws.unit != self.unit {
            tracing::warn!(
                "working set recorded with unit {}, region uses {}: converting",
                ws.unit,
                self.unit
            );
        }
        for &u in &ws.units {
            if self.closing.load(Ordering::Acquire) {
                return;
            }
            let u = u * ws.unit / self.unit;
            if u < self.units && self.claim(u) {
                let _ = self.fill_run(u, 1, false);
            }
        }
    }

    pub(super) fn first_missing(&self) -> Option<usize> {
        (0..self.units).find(|&u| self.state(u) == MISSING)
    }

    pub(super) fn push_loop(&self) {
        let unit = self.unit as u64;
        let mut stream = None;
        let mut buf = Vec::new();
        let mut failures = 0u32;
        // Bytes of data pushed since `started`, for the rate limit.
        let (started, mut pushed) = (Instant::now(), 0u64);
        while !self.closing.load(Ordering::Acquire) {
            if self.present.load(Ordering::Acquire) + self.poisoned.load(Ordering::Acquire)
                >= self.units
            {
                return;
            }
            let s = match &mut stream {
                Some(s) => s,
                None => match self.fetcher.open_push(0, unit) {
                    Ok(s) => stream.insert(s),
                    Err(e) => {
                        failures += 1;
                        if failures == 1 {
                            tracing::warn!("lazy push: cannot open the push stream: {e}");
                        }
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                },
            };
            let hint = self.push_hint.swap(0, Ordering::AcqRel);
            if hint != 0 && s.restart(hint * unit).is_err() {
                stream = None;
                continue;
            }
            match s.next(&mut buf, Duration::from_millis(20)) {
                Ok(PushNext::Chunk(c)) => {
                    let n = self.install_pushed(c.offset, c.len, c.zero, &mut buf);
                    // Units already present (sent again after a restart) are not charged.
                    if let (Some(rate), false) = (self.push_rate, c.zero) {
                        pushed += (n * self.unit) as u64;
                        let due = Duration::from_secs_f64(pushed as f64 / rate as f64);
                        // Sleep in slices so a close is not held up.
                        loop {
                            let ahead = due.saturating_sub(started.elapsed());
                            if ahead.is_zero() || self.closing.load(Ordering::Acquire) {
                                break;
                            }
                            std::thread::sleep(ahead.min(Duration::from_millis(50)));
                        }
                    }
                }
                Ok(PushNext::Idle) => {}
                Ok(PushNext::End) => {
                    // Units faulted or in flight while the stream passed them: go round again.
                    match self.first_missing() {
                        Some(u) => {
                            if s.restart(u as u64 * unit).is_err() {
                                stream = None;
                            }
                        }
                        None => self.wait_change(Duration::from_millis(5)),
                    }
                }
                Err(e) => {
                    tracing::debug!("lazy push: {e}; reconnecting");
                    stream = None;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }

    /// Installs the whole units of a pushed chunk that are still missing.
    /// Returns the units installed (those already present are passed over).
    pub(super) fn install_pushed(
        &self,
        offset: u64,
        len: usize,
        zero: bool,
        buf: &mut Vec<u8>,
    ) -> usize {
        let unit = self.unit as u64;
        if offset % unit != 0 || offset >= self.len {
            return 0;
        }
        let mut installed = 0;
        let mut end = offset + len as u64;
        if end >= self.len {
            // The last unit may extend past the source: its tail is zero.
            let full = self.len.div_ceil(unit) * unit;
            if !zero {
                buf.resize(buf.len().max((full - offset) as usize), 0);
                buf[len..(full - offset) as usize].fill(0);
            }
            end = full;
        }
        let first = (offset / unit) as usize;
        let last = (end / unit) as usize; // exclusive; partial units are dropped
        let fd = self.uffd.as_raw_fd();
        let mut u = first;
        while u < last.min(self.units) {
            if !self.claim(u) {
                u += 1;
                continue;
            }
            let mut e = u + 1;
            while e < last.min(self.units) && self.claim(e) {
                e += 1;
            }
            let dst = self.addr(u);
            let l = ((e - u) * self.unit) as u64;
            let r = if zero {
                install(
                    |d, _, l| sys::zeropage(fd, d, l),
                    dst,
                    std::ptr::null(),
                    l,
                    fd,
                )
            } else {
                let src = buf[(u - first) * self.unit..].as_ptr();
                // SAFETY: `src` points at `l` bytes of `buf` (checked by the slicing above and
                // the chunk covering units first..last).
                install(
                    |d, s, l| unsafe { sys::copy(fd, d, s, l, self.wake) },
                    dst,
                    src,
                    l,
                    fd,
                )
            };
            match r {
                Ok(()) => {
                    for k in u..e {
                        self.states[k].store(PRESENT, Ordering::Release);
                    }
                    self.present.fetch_add(e - u, Ordering::AcqRel);
                    self.c
                        .units_pushed
                        .fetch_add((e - u) as u64, Ordering::Relaxed);
                    if zero {
                        self.c
                            .units_zero
                            .fetch_add((e - u) as u64, Ordering::Relaxed);
                    }
                    installed += e - u;
                    self.notify();
                }
                Err(err) => {
                    tracing::warn!("lazy push: install failed: {err}");
                    for k in u..e {
                        self.states[k].store(MISSING, Ordering::Release);
                    }
                }
            }
            u = e;
        }
        installed
    }
}
