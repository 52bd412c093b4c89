//! Failure cases end as documented, without hanging: a dead server poisons the unit (checked
//! accessors get `Unavailable`, raw accesses SIGBUS), closing a region with faults pending wakes
//! them (`Closed` / SIGBUS), hostile peers get clear errors and do not stop the server.
mod common;
use common::{bounded, pattern};
use remora_lazy::protocol::{Hello, Segment, HELLO_FIXED_LEN};
use remora_lazy::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server that sends a valid hello and then never answers.
fn stalled_server(len: u64) -> (SocketAddr, Arc<AtomicBool>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    l.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        let hello = Hello {
            len,
            segments: vec![Segment { va: 0, len }],
            zero_map: vec![],
        }
        .to_bytes();
        while !s2.load(Ordering::Acquire) {
            match l.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).ok();
                    s.write_all(&hello).ok();
                    held.push(s);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    (addr, stop)
}

fn tcp_region(addr: SocketAddr, mode: Mode, deadline: Duration) -> LazyRegion {
    let f = TcpFetcher::connect(addr, Duration::from_secs(2)).unwrap();
    LazyRegion::open(
        Arc::new(f),
        Options {
            mode,
            deadline,
            ..Options::default()
        },
    )
    .unwrap()
}

fn served(src: Vec<u8>) -> ServerHandle {
    PageServer::bind(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(MemorySource::new(src)),
    )
    .unwrap()
    .spawn()
    .unwrap()
}

#[test]
fn dead_server_poisons_and_reports() {
    bounded(30, || {
        for mode in [Mode::Thread { handlers: 1 }, Mode::Sigbus] {
            let src = pattern(1 << 20, 4096);
            let mut srv = served(src.clone());
            let r = tcp_region(srv.addr(), mode, Duration::from_millis(400));
            let mut b = [0u8; 100];
            r.read_at(0, &mut b).unwrap();
            assert_eq!(&b[..], &src[..100]);
            srv.kill();
            let t = Instant::now();
            let e = r.read_at(512 << 10, &mut b).unwrap_err();
            assert!(matches!(e, Error::Unavailable { .. }), "{e}");
            assert!(t.elapsed() < Duration::from_secs(5));
            assert!(r.last_error().unwrap().contains("unavailable"));
            assert_eq!(r.progress().poisoned, 1);
            // A second access to the same unit fails at once.
            assert!(matches!(
                r.read_at(512 << 10, &mut b),
                Err(Error::Poisoned { .. })
            ));
            // What was fetched stays readable.
            r.read_at(0, &mut b).unwrap();
        }
    });
}

#[test]
fn close_with_a_pending_checked_read_returns_closed() {
    bounded(30, || {
        for mode in [Mode::Thread { handlers: 1 }, Mode::Sigbus] {
            let (addr, stop) = stalled_server(1 << 20);
            let r = Arc::new(tcp_region(addr, mode, Duration::from_secs(60)));
            let r2 = r.clone();
            let reader = std::thread::spawn(move || {
                let mut b = [0u8; 10];
                r2.read_at(4096 * 3, &mut b)
            });
            std::thread::sleep(Duration::from_millis(200));
            let t = Instant::now();
            r.close();
            let res = reader.join().unwrap();
            assert!(matches!(res, Err(Error::Closed)), "{res:?}");
            assert!(t.elapsed() < Duration::from_secs(5));
            stop.store(true, Ordering::Release);
        }
    });
}

#[test]
fn drop_with_pending_faults_does_not_hang() {
    bounded(30, || {
        let (addr, stop) = stalled_server(1 << 20);
        let r = tcp_region(addr, Mode::Thread { handlers: 2 }, Duration::from_secs(60));
        let t = Instant::now();
        drop(r);
        assert!(t.elapsed() < Duration::from_secs(5));
        stop.store(true, Ordering::Release);
    });
}

/// Runs this test binary's `child_` test `name` in a child process and returns how it ended.
fn run_child(name: &str) -> std::process::ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    let mut c = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("REMORA_LAZY_CHILD", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > end {
            c.kill().ok();
            let st = c.wait().unwrap();
            panic!("child {name} hung (killed: {:?})", st.signal());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn is_child() -> bool {
    std::env::var_os("REMORA_LAZY_CHILD").is_some()
}

fn child_touch_after_server_death(mode: Mode) {
    let mut srv = served(pattern(1 << 20, 4096));
    let r = tcp_region(srv.addr(), mode, Duration::from_millis(300));
    srv.kill();
    // Raw access to a unit that cannot be fetched: documented outcome is SIGBUS.
    let v = unsafe { std::ptr::read_volatile(r.as_ptr().add(8192)) };
    println!("read {v}: not reached");
    std::process::exit(0);
}

#[test]
fn child_dead_thread() {
    if is_child() {
        child_touch_after_server_death(Mode::Thread { handlers: 1 });
    }
}
#[test]
fn child_dead_sigbus() {
    if is_child() {
        child_touch_after_server_death(Mode::Sigbus);
    }
}

fn child_close_pending(mode: Mode) {
    let (addr, _stop) = stalled_server(1 << 20);
    let r = Arc::new(tcp_region(addr, mode, Duration::from_secs(60)));
    let p = r.as_ptr() as usize;
    let _r2 = r.clone(); // keeps the mapping alive while the toucher waits
    std::thread::spawn(move || {
        let v = unsafe { std::ptr::read_volatile((p + 4096) as *const u8) };
        println!("read {v}: not reached");
        std::process::exit(0);
    });
    std::thread::sleep(Duration::from_millis(200));
    r.close();
    std::thread::sleep(Duration::from_secs(5));
    std::process::exit(3); // the toucher neither got SIGBUS nor returned
}

#[test]
fn child_close_thread() {
    if is_child() {
        child_close_pending(Mode::Thread { handlers: 1 });
    }
}
#[test]
fn child_close_sigbus() {
    if is_child() {
        child_close_pending(Mode::Sigbus);
    }
}

#[test]
fn raw_access_after_failure_raises_sigbus() {
    use std::os::unix::process::ExitStatusExt;
    if is_child() {
        return;
    }
    for name in [
        "child_dead_thread",
        "child_dead_sigbus",
        "child_close_thread",
        "child_close_sigbus",
    ] {
        let st = run_child(name);
        assert_eq!(st.signal(), Some(libc_sigbus()), "{name} ended with {st:?}");
    }
}

fn libc_sigbus() -> i32 {
    7
}

#[test]
fn hostile_servers_give_clear_errors() {
    bounded(30, || {
        // Not a page server at all.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n0123456789")
                    .ok();
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        let e = TcpFetcher::connect(addr, Duration::from_secs(2))
            .err()
            .unwrap();
        assert!(e.to_string().contains("not a remora page server"), "{e}");

        // A server that answers reads for the wrong offset.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let hello = Hello {
                len: 1 << 20,
                segments: vec![Segment {
                    va: 0,
                    len: 1 << 20,
                }],
                zero_map: vec![],
            }
            .to_bytes();
            for s in l.incoming().take(4) {
                let mut s = s.unwrap();
                s.write_all(&hello).ok();
                let mut req = [0u8; 16];
                while s.read_exact(&mut req).is_ok() {
                    let mut rep = req;
                    rep[0] = 2; // Zero
                    rep[8] ^= 0x10; // wrong offset
                    s.write_all(&rep).ok();
                }
            }
        });
        let r = tcp_region(addr, Mode::Thread { handlers: 1 }, Duration::from_secs(5));
        let mut b = [0u8; 4];
        let e = r.read_at(0, &mut b).unwrap_err();
        assert!(matches!(e, Error::Refused { .. }), "{e}");
    });
}

#[test]
fn server_survives_hostile_clients() {
    bounded(30, || {
        let src = pattern(1 << 20, 4096);
        let srv = served(src.clone());
        for junk in [
            &b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"[..],
            b"\x01\0\0\0\xff\xff\xff\x7f\0\0\0\0\0\0\0\0",
            b"\x01\0\0\0\0\x10\0\0\0\0\0\0\0\0\0\x7f",
        ] {
            let mut s = TcpStream::connect(srv.addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s.write_all(junk).ok();
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
        // Out of range read gets an Error reply, and the server still serves others.
        let r = tcp_region(
            srv.addr(),
            Mode::Thread { handlers: 1 },
            Duration::from_secs(2),
        );
        let mut b = vec![0u8; 4096];
        r.read_at(4096 * 7, &mut b).unwrap();
        assert_eq!(&b[..], &src[4096 * 7..4096 * 8]);
    });
}

#[test]
fn hostile_huge_source_is_an_error_not_an_abort() {
    bounded(30, || {
        // A server claiming 2^62 bytes: the region refuses it cleanly.
        let len = 1u64 << 62;
        let (addr, stop) = stalled_server(len);
        let f = TcpFetcher::connect(addr, Duration::from_secs(2)).unwrap();
        let r = LazyRegion::open(Arc::new(f), Options::default());
        assert!(
            matches!(r, Err(Error::Invalid(_)) | Err(Error::Os { .. })),
            "{:?}",
            r.err()
        );
        stop.store(true, Ordering::Release);
    });
}

/// The server keeps a second handle on each connection (to shut it down on kill); finished
/// connections must give both back, or a long-running server runs out of descriptors.
#[test]
fn server_releases_finished_connections() {
    bounded(30, || {
        let srv = served(pattern(1 << 16, 4096));
        let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        // Warm up (thread and allocator state), then measure.
        drop(TcpStream::connect(srv.addr()).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        let before = fds();
        for _ in 0..50 {
            let mut s = TcpStream::connect(srv.addr()).unwrap();
            let mut h = [0u8; HELLO_FIXED_LEN];
            s.read_exact(&mut h).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while fds() > before + 5 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            fds() <= before + 5,
            "{} descriptors open, {before} before",
            fds()
        );
    });
}
