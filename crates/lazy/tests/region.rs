//! Lazy regions end to end: every byte equals the source, for each resolution mode, transport
//! source kind, prefetch policy and push, with 1 and 8 faulting threads.
mod common;
use common::{bounded, pattern, Rng};
use remora_lazy::*;
use std::sync::Arc;
use std::time::Duration;

fn local(bytes: Vec<u8>) -> Arc<dyn PageFetcher> {
    Arc::new(LocalFetcher::new(Arc::new(MemorySource::new(bytes))))
}

/// Touches every unit from `threads` threads in random order, then compares every byte.
fn check_random(r: &LazyRegion, src: &[u8], threads: usize) {
    let unit = r.unit();
    let units = src.len().div_ceil(unit);
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut rng = Rng(0x1234 + t as u64 * 77);
                let m = r.as_slice();
                let mut acc = 0u64;
                for _ in 0..units {
                    let u = (rng.next() % units as u64) as usize;
                    let off = u * unit + (rng.next() as usize % unit).min(src.len() - 1 - u * unit);
                    acc = acc.wrapping_add(m[off] as u64);
                }
                std::hint::black_box(acc);
            });
        }
    });
    assert!(r.as_slice() == src, "lazy bytes differ from the source");
}

fn modes() -> [Mode; 3] {
    [
        Mode::Thread { handlers: 1 },
        Mode::Thread { handlers: 2 },
        Mode::Sigbus,
    ]
}

#[test]
fn local_every_byte_matches_one_and_eight_threads() {
    bounded(60, || {
        for unit in [4096, 65536] {
            for mode in modes() {
                for threads in [1, 8] {
                    let src = pattern(3 << 20 | 123, unit);
                    let r = LazyRegion::open(
                        local(src.clone()),
                        Options {
                            unit,
                            mode,
                            ..Options::default()
                        },
                    )
                    .unwrap();
                    check_random(&r, &src, threads);
                    let st = r.stats();
                    assert!(
                        st.units_zero > 0,
                        "zero units installed as zero pages: {st:?}"
                    );
                    assert!(st.units_copied > 0);
                    assert_eq!(r.progress().poisoned, 0);
                }
            }
        }
    });
}

#[test]
fn two_megabyte_units() {
    bounded(30, || {
        let src = pattern(9 << 20, 2 << 20);
        for mode in [Mode::Thread { handlers: 1 }, Mode::Sigbus] {
            let r = LazyRegion::open(
                local(src.clone()),
                Options {
                    unit: 2 << 20,
                    mode,
                    ..Options::default()
                },
            )
            .unwrap();
            check_random(&r, &src, 4);
            assert_eq!(r.progress().units, 5);
        }
    });
}

#[test]
fn writes_land_on_fetched_pages() {
    bounded(30, || {
        let src = pattern(1 << 20, 4096);
        let mut r = LazyRegion::open(local(src.clone()), Options::default()).unwrap();
        r.as_mut_slice()[5000] ^= 0xff;
        assert_eq!(r.as_slice()[5000], src[5000] ^ 0xff);
        assert_eq!(r.as_slice()[5001], src[5001]);
    });
}

#[test]
fn tcp_file_memfd_and_process_sources() {
    bounded(60, || {
        let unit = 4096;
        // File.
        let src = pattern(2 << 20, unit);
        let path = std::env::temp_dir().join(format!("remora-lazy-file-{}", std::process::id()));
        std::fs::write(&path, &src).unwrap();
        let file: Arc<dyn PageSource> = Arc::new(FileSource::open(&path).unwrap());
        // Memfd.
        let fd = rustix::fs::memfd_create("lazy-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let mut f = std::fs::File::from(fd);
        std::io::Write::write_all(&mut f, &src).unwrap();
        let memfd: Arc<dyn PageSource> = Arc::new(FileSource::from_file(f).unwrap());
        for (name, s) in [("file", file), ("memfd", memfd)] {
            let srv = PageServer::bind("127.0.0.1:0".parse().unwrap(), s)
                .unwrap()
                .spawn()
                .unwrap();
            for mode in modes() {
                for threads in [1, 8] {
                    let f = TcpFetcher::connect(srv.addr(), Duration::from_secs(2)).unwrap();
                    let r = LazyRegion::open(
                        Arc::new(f),
                        Options {
                            unit,
                            mode,
                            ..Options::default()
                        },
                    )
                    .unwrap();
                    assert_eq!(r.transport(), "tcp");
                    check_random(&r, &src, threads);
                    assert_eq!(r.progress().poisoned, 0, "{name}");
                }
            }
        }
        std::fs::remove_file(&path).ok();
    });
}

#[test]
fn tcp_live_process_memory() {
    bounded(60, || {
        // A child process whose memory we serve, stopped while served so it cannot change.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        std::thread::sleep(Duration::from_millis(50));
        let maps = remora_lazy::procmaps::read(pid).unwrap();
        let ranges = remora_lazy::procmaps::default_ranges(&maps);
        assert!(!ranges.is_empty());
        let s: Arc<dyn PageSource> = Arc::new(ProcessSource::new(pid, &ranges, true).unwrap());
        let total = s.len() as usize;
        // The expected bytes, read independently through /proc/PID/mem.
        let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
        let mut expect = Vec::with_capacity(total);
        for &(va, len) in &ranges {
            let mut b = vec![0u8; len as usize];
            std::os::unix::fs::FileExt::read_exact_at(&mem, &mut b, va).unwrap();
            expect.extend_from_slice(&b);
        }
        let srv = PageServer::bind("127.0.0.1:0".parse().unwrap(), s)
            .unwrap()
            .spawn()
            .unwrap();
        let f = TcpFetcher::connect(srv.addr(), Duration::from_secs(2)).unwrap();
        assert_eq!(f.hello().segments.len(), ranges.len());
        let r = LazyRegion::open(Arc::new(f), Options::default()).unwrap();
        check_random(&r, &expect, 8);
        drop(r);
        drop(srv); // drops the source: SIGCONT
        child.kill().ok();
        child.wait().ok();
    });
}

#[test]
fn prefetch_policies_fill_correctly_and_prefetch() {
    bounded(60, || {
        let src = pattern(4 << 20, 4096);
        for p in [Prefetch::Next(8), Prefetch::Adaptive { max: 16 }] {
            for mode in [Mode::Thread { handlers: 1 }, Mode::Sigbus] {
                let r = LazyRegion::open(
                    local(src.clone()),
                    Options {
                        prefetch: p,
                        mode,
                        ..Options::default()
                    },
                )
                .unwrap();
                // Sequential scan.
                let m = r.as_slice();
                let sum: u64 = (0..m.len()).step_by(4096).map(|i| m[i] as u64).sum();
                std::hint::black_box(sum);
                let st = r.stats();
                assert!(st.units_prefetched > 0, "{p}: {st:?}");
                assert!(
                    st.faults < 1024 / 2,
                    "{p}: prefetch should halve the faults: {st:?}"
                );
                assert!(r.as_slice() == &src[..]);
            }
        }
    });
}

#[test]
fn push_completes_the_region_without_access() {
    bounded(60, || {
        let src = pattern(8 << 20 | 77, 4096);
        // Local and TCP.
        let srv = PageServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(MemorySource::new(src.clone())),
        )
        .unwrap()
        .spawn()
        .unwrap();
        let tcp: Arc<dyn PageFetcher> =
            Arc::new(TcpFetcher::connect(srv.addr(), Duration::from_secs(2)).unwrap());
        for f in [local(src.clone()), tcp] {
            for unit in [4096, 65536] {
                let r = LazyRegion::open(
                    f.clone(),
                    Options {
                        unit,
                        push: true,
                        ..Options::default()
                    },
                )
                .unwrap();
                // Faults interleave with the push; they restart it.
                std::hint::black_box(r.as_slice()[5 << 20]);
                assert!(
                    r.wait_complete(Duration::from_secs(20)),
                    "{:?}",
                    r.progress()
                );
                assert!(r.stats().units_pushed > 0);
                assert!(r.as_slice() == &src[..]);
            }
        }
    });
}

#[test]
fn working_set_is_recorded_and_replayed() {
    bounded(30, || {
        let src = pattern(2 << 20, 4096);
        let r = LazyRegion::open(
            local(src.clone()),
            Options {
                record: true,
                mode: Mode::Thread { handlers: 1 },
                ..Options::default()
            },
        )
        .unwrap();
        let touched = [7usize, 300, 2, 150];
        for &u in &touched {
            std::hint::black_box(r.as_slice()[u * 4096 + 1]);
        }
        let ws = r.working_set().unwrap();
        assert_eq!(ws.units, touched);
        let ws = WorkingSet::from_text(&ws.to_text()).unwrap();
        let r2 = LazyRegion::open(
            local(src.clone()),
            Options {
                working_set: Some(ws),
                ..Options::default()
            },
        )
        .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while r2.progress().present < touched.len() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(r2.progress().present, touched.len());
        assert_eq!(r2.stats().faults, 0, "nothing touched yet");
        for &u in &touched {
            assert_eq!(r2.as_slice()[u * 4096 + 1], src[u * 4096 + 1]);
        }
        assert_eq!(r2.stats().faults, 0, "the working set was prefetched");
    });
}

#[test]
fn checked_reads_and_ranges() {
    bounded(30, || {
        let src = pattern(100_000, 4096);
        let r = LazyRegion::open(local(src.clone()), Options::default()).unwrap();
        let mut b = vec![0u8; 10_000];
        r.read_at(95_000 - 10_000, &mut b).unwrap();
        assert_eq!(&b[..], &src[85_000..95_000]);
        assert!(matches!(
            r.read_at(95_000, &mut b),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            LazyRegion::open(
                local(src),
                Options {
                    unit: 3000,
                    ..Options::default()
                }
            ),
            Err(Error::Invalid(_))
        ));
    });
}

/// Regression: a unit whose pages were discarded (MADV_DONTNEED) after it was installed faults
/// again although its state says present; it must be fetched again, not woken forever.
#[test]
fn discarded_pages_are_fetched_again() {
    bounded(30, || {
        let src = pattern(1 << 20, 4096);
        for mode in [Mode::Thread { handlers: 1 }, Mode::Sigbus] {
            let r = LazyRegion::open(
                local(src.clone()),
                Options {
                    mode,
                    ..Options::default()
                },
            )
            .unwrap();
            let at = 40 * 4096 + 5;
            assert_eq!(std::hint::black_box(r.as_slice()[at]), src[at]);
            // SAFETY: discards one page of the region's own mapping; it is refilled on access.
            let rc = unsafe {
                libc::madvise(
                    r.as_ptr().add(40 * 4096) as *mut libc::c_void,
                    4096,
                    libc::MADV_DONTNEED,
                )
            };
            assert_eq!(rc, 0);
            assert_eq!(std::hint::black_box(r.as_slice()[at]), src[at]);
            assert!(r.stats().refetches >= 1, "{:?}", r.stats());
            assert_eq!(r.progress().present, 1);
        }
    });
}

/// A source whose second half is declared zero and must never be read.
struct HalfZero {
    bytes: Vec<u8>,
    reads_of_zero: std::sync::atomic::AtomicU64,
}

impl PageSource for HalfZero {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let half = self.bytes.len() as u64 / 2;
        // A chunk across the boundary goes as a data run and a zero run.
        if offset + buf.len() as u64 > half {
            self.reads_of_zero
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let n = self.bytes.len();
        let s = (offset as usize).min(n);
        let e = (offset as usize + buf.len()).min(n);
        buf[..e - s].copy_from_slice(&self.bytes[s..e]);
        buf[e - s..].fill(0);
        Ok(())
    }
    fn zero_map(&self) -> Vec<u64> {
        let pages = self.bytes.len() / 4096;
        let mut m = vec![0u64; pages.div_ceil(64)];
        for p in pages / 2..pages {
            m[p / 64] |= 1 << (p % 64);
        }
        m
    }
    fn describe(&self) -> String {
        "half zero".into()
    }
}

#[test]
fn push_sends_zero_map_pages_without_reading_them() {
    bounded(60, || {
        let mut bytes = pattern(8 << 20, 4096);
        bytes[4 << 20..].fill(0);
        let src = Arc::new(HalfZero {
            bytes: bytes.clone(),
            reads_of_zero: Default::default(),
        });
        let srv = PageServer::bind("127.0.0.1:0".parse().unwrap(), src.clone())
            .unwrap()
            .spawn()
            .unwrap();
        let f = Arc::new(TcpFetcher::connect(srv.addr(), Duration::from_secs(2)).unwrap());
        let r = LazyRegion::open(
            f,
            Options {
                unit: 65536,
                push: true,
                ..Options::default()
            },
        )
        .unwrap();
        assert!(
            r.wait_complete(Duration::from_secs(20)),
            "{:?}",
            r.progress()
        );
        assert!(r.as_slice() == &bytes[..]);
        assert_eq!(
            src.reads_of_zero.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "the server read pages its zero map names"
        );
    });
}

#[test]
fn a_push_rate_holds_the_background_copy_back_but_not_faults() {
    bounded(60, || {
        // 8 MiB at 1 MiB/s takes 8 s: far from complete after the checks below.
        let src = pattern(8 << 20, 4096);
        let r = LazyRegion::open(
            local(src.clone()),
            Options {
                unit: 65536,
                push: true,
                push_rate: Some(1 << 20),
                ..Options::default()
            },
        )
        .unwrap();
        // A fault is served at once, whatever the push's budget.
        assert_eq!(r.as_slice()[7 << 20], src[7 << 20]);
        std::thread::sleep(Duration::from_millis(300));
        let p = r.progress();
        assert!(!p.complete() && p.present > 0, "{p:?}");
        assert!(
            r.stats().units_pushed < p.units as u64 / 2,
            "{:?}",
            r.stats()
        );
        // Closing does not wait for the budget.
        r.close();
    });
}
