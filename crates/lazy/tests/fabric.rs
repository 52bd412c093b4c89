//! Lazy regions over the fabric transports (udp RC READ, shm): every byte equals the source.
#![cfg(feature = "fabric")]
mod common;
use common::{bounded, pattern, Rng};
use remora_fabric::Transport;
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

#[test]
fn udp_and_shm_every_byte_matches() {
    bounded(90, || {
        for transport in [Transport::Udp, Transport::Shm] {
            let src = pattern((2 << 20) + 100, 4096);
            let srv = FabricServer::bind(
                "127.0.0.1:0".parse().unwrap(),
                &MemorySource::new(src.clone()),
                transport,
            )
            .unwrap()
            .spawn()
            .unwrap();
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

#[test]
fn fabric_dead_server_poisons() {
    bounded(60, || {
        let src = pattern(1 << 20, 4096);
        let mut srv = FabricServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            &MemorySource::new(src.clone()),
            Transport::Udp,
        )
        .unwrap()
        .spawn()
        .unwrap();
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
