//! Lazy regions over the fabric transports (udp RC READ, shm): every byte equals the source.
#![cfg(feature = "fabric")]
mod common;
use common::{bounded, pattern, Rng};
use remora_fabric::{Progress, Transport};
use remora_lazy::*;
use std::sync::Arc;
use std::time::Duration;

fn check(r: &LazyRegion, src: &[u8], threads: usize) {
    let unit = r.unit();
    let units = src.len().div_ceil(unit);
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut rng = Rng(99 + t as u64);
                let m = r.as_slice();
                for _ in 0..units {
                    let u = (rng.next() % units as u64) as usize;
                    std::hint::black_box(m[u * unit]);
                }
            });
        }
    });
    assert!(r.as_slice() == src);
}

/// A fabric page server for `src` on a free loopback port.
fn serve_source(src: &dyn PageSource, transport: Transport) -> FabricServerHandle {
    FabricServer::bind("127.0.0.1:0".parse().unwrap(), src, transport)
        .unwrap()
        .spawn()
        .unwrap()
}

fn serve(src: &[u8], transport: Transport) -> FabricServerHandle {
    serve_source(&MemorySource::new(src.to_vec()), transport)
}

#[test]
fn udp_and_shm_every_byte_matches() {
    bounded(90, || {
        for transport in [Transport::Udp, Transport::Shm] {
            let src = pattern((2 << 20) + 100, 4096);
            let srv = serve(&src, transport);
            for (unit, mode, threads) in [
                (4096, Mode::Sigbus, 1),
                (4096, Mode::Thread { handlers: 2 }, 8),
                (65536, Mode::Sigbus, 8),
            ] {
                let f = FabricFetcher::connect(srv.addr(), transport).unwrap();
                let r = LazyRegion::open(
                    Arc::new(f),
                    Options {
                        unit,
                        mode,
                        ..Options::default()
                    },
                )
                .unwrap();
                check(&r, &src, threads);
                if unit == 4096 {
                    assert!(r.stats().units_zero > 0, "zero units reported zero");
                }
            }
            // Push over READs.
            let f = FabricFetcher::connect(srv.addr(), transport).unwrap();
            let r = LazyRegion::open(
                Arc::new(f),
                Options {
                    push: true,
                    ..Options::default()
                },
            )
            .unwrap();
            assert!(
                r.wait_complete(Duration::from_secs(30)),
                "{:?}",
                r.progress()
            );
            assert!(r.as_slice() == &src[..]);
        }
    });
}

/// The udp fault path with each progress mode: in `Poll` the thread that waits for a READ
/// receives its response itself (no receive thread on the client). Every byte matches from
/// SIGBUS handlers, handler threads and 64 KB units, with 1 and 8 faulting threads; pooled
/// queue pairs left idle for longer than the RC timers still serve the next fault; push (a
/// queue pair of its own, driven by the push thread) completes the region.
#[test]
fn udp_fault_path_in_each_progress_mode() {
    bounded(90, || {
        let src = pattern((1 << 20) + 100, 4096);
        let srv = serve(&src, Transport::Udp);
        assert_eq!(
            FabricFetcher::default_progress(Transport::Udp),
            Progress::Poll
        );
        assert_eq!(
            FabricFetcher::connect(srv.addr(), Transport::Udp)
                .unwrap()
                .progress(),
            Progress::Poll,
            "udp clients poll by default"
        );
        for progress in [Progress::Poll, Progress::Thread] {
            for (unit, mode, threads) in [
                (4096, Mode::Sigbus, 1),
                (4096, Mode::Sigbus, 8),
                (4096, Mode::Thread { handlers: 2 }, 8),
                (65536, Mode::Sigbus, 8),
            ] {
                let f = FabricFetcher::connect_with(srv.addr(), Transport::Udp, progress).unwrap();
                assert_eq!(f.progress(), progress);
                let r = LazyRegion::open(
                    Arc::new(f),
                    Options {
                        unit,
                        mode,
                        ..Options::default()
                    },
                )
                .unwrap();
                // Half the units, a pause with every queue pair idle in the pool (longer than
                // the 20 ms retransmission timeout, doubled 7 times: 2.5 s would be the whole
                // retry budget, so 300 ms covers several expiries), then the rest.
                let m = r.as_slice();
                let half = m.len() / 2;
                for u in (0..half).step_by(unit * 3) {
                    std::hint::black_box(m[u]);
                }
                std::thread::sleep(Duration::from_millis(300));
                check(&r, &src, threads);
                let st = r.stats();
                assert_eq!(st.units_poisoned, 0, "{progress} {unit} {mode:?}: {st:?}");
                assert!(st.fetches > 0, "{st:?}");
            }
            let f = FabricFetcher::connect_with(srv.addr(), Transport::Udp, progress).unwrap();
            let r = LazyRegion::open(
                Arc::new(f),
                Options {
                    push: true,
                    ..Options::default()
                },
            )
            .unwrap();
            assert!(
                r.wait_complete(Duration::from_secs(30)),
                "{progress}: {:?}",
                r.progress()
            );
            assert!(r.as_slice() == &src[..], "{progress}: push");
        }
        // shm clients keep their receive thread unless asked otherwise.
        let ssrv = serve(&src, Transport::Shm);
        assert_eq!(
            FabricFetcher::connect(ssrv.addr(), Transport::Shm)
                .unwrap()
                .progress(),
            Progress::Thread
        );
    });
}

#[test]
fn fabric_dead_server_poisons() {
    bounded(60, || {
        let src = pattern(1 << 20, 4096);
        let mut srv = serve(&src, Transport::Udp);
        let f = FabricFetcher::connect(srv.addr(), Transport::Udp).unwrap();
        let r = LazyRegion::open(
            Arc::new(f),
            Options {
                deadline: Duration::from_millis(500),
                ..Options::default()
            },
        )
        .unwrap();
        let mut b = [0u8; 8];
        r.read_at(0, &mut b).unwrap();
        srv.kill();
        let e = r.read_at(600 << 10, &mut b).unwrap_err();
        assert!(
            matches!(e, Error::Unavailable { .. } | Error::Refused { .. }),
            "{e}"
        );
        assert_eq!(r.progress().poisoned, 1);
    });
}

/// Over shm the client maps the server's source and installs from the mapping; without the
/// mapping every unit is an RC READ. Both give every byte, from 8 faulting threads.
#[test]
fn shm_mapped_and_read_paths_match_the_source() {
    bounded(60, || {
        let src = pattern((1 << 20) + 100, 4096);
        let srv = serve(&src, Transport::Shm);
        for mapped in [true, false] {
            let f = FabricFetcher::connect(srv.addr(), Transport::Shm).unwrap();
            assert!(f.is_mapped(), "the server's snapshot memfd maps");
            let f = if mapped { f } else { f.without_mapping() };
            assert_eq!(f.is_mapped(), mapped);
            let r = LazyRegion::open(Arc::new(f), Options::default()).unwrap();
            check(&r, &src, 8);
            let st = r.stats();
            if mapped {
                // Only the partial last unit is READ (again when a fault raced its install).
                assert!(st.fetches <= 1 + st.refetches, "{st:?}");
            } else {
                assert!(st.fetches > 200, "{st:?}");
            }
        }
        // udp announces no mapping.
        let usrv = serve(&src, Transport::Udp);
        assert!(!FabricFetcher::connect(usrv.addr(), Transport::Udp)
            .unwrap()
            .is_mapped());
    });
}

/// A region served through the shm mapping keeps its pages after the server is gone: the
/// memfd lives on through the client's mapping (documented in `shmmap`).
#[test]
fn shm_mapped_region_outlives_its_server() {
    bounded(60, || {
        let src = pattern(1 << 20, 4096);
        let mut srv = serve(&src, Transport::Shm);
        let f = FabricFetcher::connect(srv.addr(), Transport::Shm).unwrap();
        let r = LazyRegion::open(Arc::new(f), Options::default()).unwrap();
        srv.kill();
        drop(srv);
        check(&r, &src, 2);
        assert_eq!(r.progress().poisoned, 0);
    });
}

/// A live process served over shm: the client reads the process's memory itself, so bytes
/// changed after the server started are seen; over READs the client gets the server's
/// snapshot, taken at start.
#[test]
fn shm_serves_a_live_process_directly() {
    bounded(60, || {
        let len = 256 << 10;
        let mut mem = pattern(len, 4096);
        let ranges = [(mem.as_ptr() as u64, len as u64)];
        let s = ProcessSource::new(std::process::id() as i32, &ranges, false).unwrap();
        let srv = serve_source(&s, Transport::Shm);
        let before = mem.clone();
        // Changed after the server started (and its snapshot was taken).
        for b in &mut mem[8192..12288] {
            *b = 0xa5;
        }
        let f = FabricFetcher::connect(srv.addr(), Transport::Shm).unwrap();
        assert!(f.reads_process() && !f.is_mapped());
        let r = LazyRegion::open(Arc::new(f), Options::default()).unwrap();
        check(&r, &mem, 4);
        let f = FabricFetcher::connect(srv.addr(), Transport::Shm)
            .unwrap()
            .without_mapping();
        assert!(!f.reads_process());
        let r = LazyRegion::open(Arc::new(f), Options::default()).unwrap();
        check(&r, &before, 4);
        drop(mem);
    });
}
