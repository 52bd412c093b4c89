//! File and memfd sources are served live over every transport: a page written after the server
//! started (including one that was a hole or all zeros then) reaches a client that faults it
//! afterwards.
mod common;
use common::{bounded, pattern};
use remora_lazy::*;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

const UNIT: usize = 4096;
/// Length of the served data; the file is longer, its tail a hole.
const DATA: usize = 1 << 20;
const LEN: usize = DATA + (64 << 10);

/// A file (or memfd) with `pattern` data (every 5th unit zero) and a hole at its end.
fn make(f: &File) -> Vec<u8> {
    let mut src = pattern(DATA, UNIT);
    f.write_all_at(&src, 0).unwrap();
    f.set_len(LEN as u64).unwrap();
    src.resize(LEN, 0);
    src
}

/// Pages changed after the server started: data, a zero unit, and a page in the hole.
const CHANGED: [usize; 3] = [5 * UNIT, 3 * UNIT, DATA + 2 * UNIT];

/// Opens a region over `f`, faults page 0, rewrites the `CHANGED` pages in the file, then checks
/// that the region shows the new bytes there and the original ones elsewhere.
fn check(name: &str, fetcher: Arc<dyn PageFetcher>, file: &File, mut src: Vec<u8>, round: u8) {
    let r = LazyRegion::open(
        fetcher,
        Options {
            unit: UNIT,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(r.as_slice()[0], src[0], "{name}: page 0");
    for (i, &at) in CHANGED.iter().enumerate() {
        let new = vec![0xa0 + round * 8 + i as u8; UNIT];
        file.write_all_at(&new, at as u64).unwrap();
        src[at..at + UNIT].copy_from_slice(&new);
    }
    for &at in &CHANGED {
        assert!(
            r.as_slice()[at..at + UNIT] == src[at..at + UNIT],
            "{name}: page at {at:#x} was written after the server started; the client saw {:#x}",
            r.as_slice()[at]
        );
    }
    assert!(r.as_slice() == &src[..], "{name}: every byte");
}

fn memfd() -> File {
    let fd = rustix::fs::memfd_create("lazy-live", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    File::from(fd)
}

fn temp_file(tag: &str) -> (std::path::PathBuf, File) {
    let path = std::env::temp_dir().join(format!("remora-lazy-live-{tag}-{}", std::process::id()));
    let f = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    (path, f)
}

#[test]
fn tcp_serves_files_and_memfds_live() {
    bounded(60, || {
        let (path, file) = temp_file("tcp");
        let src = make(&file);
        let mfd = memfd();
        let msrc = make(&mfd);
        let fsrc = FileSource::open(&path).unwrap();
        let msource = FileSource::from_file(mfd.try_clone().unwrap()).unwrap();
        let sources = [
            ("tcp file", fsrc, &file, src),
            ("tcp memfd", msource, &mfd, msrc),
        ];
        for (name, s, f, src) in sources {
            let srv = PageServer::bind("127.0.0.1:0".parse().unwrap(), Arc::new(s))
                .unwrap()
                .spawn()
                .unwrap();
            let fetcher = TcpFetcher::connect(srv.addr(), Duration::from_secs(2)).unwrap();
            check(name, Arc::new(fetcher), f, src, 0);
        }
        std::fs::remove_file(&path).ok();
    });
}

#[cfg(feature = "fabric")]
#[test]
fn fabric_serves_files_and_memfds_live() {
    use remora_fabric::Transport;
    bounded(90, || {
        for (round, transport) in [Transport::Udp, Transport::Shm].into_iter().enumerate() {
            let (path, file) = temp_file(&format!("{transport:?}"));
            let src = make(&file);
            let mfd = memfd();
            let msrc = make(&mfd);
            let fsrc = FileSource::open(&path).unwrap();
            let msource = FileSource::from_file(mfd.try_clone().unwrap()).unwrap();
            for (name, s, f, src) in [("file", fsrc, &file, src), ("memfd", msource, &mfd, msrc)] {
                let srv = FabricServer::bind("127.0.0.1:0".parse().unwrap(), &s, transport)
                    .unwrap()
                    .spawn()
                    .unwrap();
                let fetcher = FabricFetcher::connect(srv.addr(), transport).unwrap();
                let name = format!("{transport:?} {name}");
                check(&name, Arc::new(fetcher), f, src, round as u8 + 1);
            }
            std::fs::remove_file(&path).ok();
        }
    });
}

/// A served file that shrinks after the fabric server started: the server survives (its pages
/// past the new end either read as zeros or are refused, never SIGBUS the server) and keeps
/// serving the rest.
#[cfg(feature = "fabric")]
#[test]
fn fabric_file_truncated_while_served_survives() {
    use remora_fabric::Transport;
    bounded(60, || {
        for transport in [Transport::Udp, Transport::Shm] {
            let (path, file) = temp_file(&format!("trunc-{transport:?}"));
            let src = make(&file);
            let s = FileSource::open(&path).unwrap();
            let srv = FabricServer::bind("127.0.0.1:0".parse().unwrap(), &s, transport)
                .unwrap()
                .spawn()
                .unwrap();
            let name = format!("{transport:?}");
            // A first client reads everything, so the server's mapping has every page in.
            let open = || {
                let f = FabricFetcher::connect(srv.addr(), transport).unwrap();
                LazyRegion::open(Arc::new(f), Options::default()).unwrap()
            };
            let mut got = vec![0u8; LEN];
            open().read_at(0, &mut got).unwrap();
            assert!(got == src, "{name}: before truncation");
            let keep = DATA / 2;
            file.set_len(keep as u64).unwrap();
            let r = open();
            for at in (keep..LEN).step_by(UNIT) {
                match r.read_at(at, &mut got[..UNIT]) {
                    Ok(()) => assert!(got[..UNIT].iter().all(|&b| b == 0), "{name}: {at:#x}"),
                    Err(Error::Refused { .. } | Error::Unavailable { .. }) => {}
                    Err(e) => panic!("{name}: {at:#x}: {e}"),
                }
            }
            // The server is alive and serves the rest, to this client and a new one.
            for r in [r, open()] {
                r.read_at(0, &mut got[..keep]).unwrap();
                assert!(got[..keep] == src[..keep], "{name}: the kept part");
            }
            std::fs::remove_file(&path).ok();
        }
    });
}

/// A file shrinks under a client's shm mapping; the faulting thread resolves its own fault
/// (SIGBUS mode) and reads the shrunk pages inside the signal handler: that nested SIGBUS is
/// handled too, and the pages read as zeros instead of ending the process.
#[cfg(feature = "fabric")]
#[test]
fn shm_mapping_of_a_shrunk_file_reads_zeros_from_the_fault_handler() {
    use remora_fabric::Transport;
    bounded(60, || {
        let (path, file) = temp_file("trunc-mapped");
        let src = make(&file);
        let s = FileSource::open(&path).unwrap();
        let srv = FabricServer::bind("127.0.0.1:0".parse().unwrap(), &s, Transport::Shm)
            .unwrap()
            .spawn()
            .unwrap();
        let f = FabricFetcher::connect(srv.addr(), Transport::Shm).unwrap();
        assert!(f.is_mapped());
        let r = LazyRegion::open(
            Arc::new(f),
            Options {
                mode: Mode::Sigbus,
                ..Options::default()
            },
        )
        .unwrap();
        let keep = DATA / 2;
        file.set_len(keep as u64).unwrap();
        let m = r.as_slice();
        for at in (keep..LEN).step_by(UNIT) {
            assert_eq!(m[at], 0, "{at:#x}");
        }
        assert!(m[..keep] == src[..keep], "the kept part");
        std::fs::remove_file(&path).ok();
    });
}
