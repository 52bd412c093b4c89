//! Issue 27, finding 3: a read-only shm grant could be made writable, and a peer could seal a
//! server's memfd.
//!
//! A root-run `remora lazy serve --synthetic … --transport shm` and `remora fabric serve`, and a
//! client running as `nobody` (this test binary, copied to a world-readable directory and re-run
//! under `setpriv`) that connects with the library as any client would, then turns on the
//! descriptors it was handed: it reopens each memfd through `/proc/self/fd/N` with `O_RDWR`
//! (which worked, as the memfd's mode was 0777) and adds `F_SEAL_FUTURE_WRITE` and
//! `F_SEAL_SEAL` (which worked on the fabric's writable grant and broke every other peer's
//! writable mapping). Both must be refused, and the server's memory left as it was. Needs root
//! and `setpriv`; skips with a reason otherwise. `REMORA_TEST_EXE` runs another build's server.
mod serve_common;

use std::os::fd::{AsFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use remora_fabric::{QpOptions, RegionInfo, Transport};
use remora_mem::{Access, Buffer, Mode, Pd};
use rustix::fs::{self, Mode as FileMode, OFlags, SealFlags};
use serve_common::{is_root, run_as_nobody, serve_with_stderr};

fn skip_reason() -> Option<&'static str> {
    if !is_root() {
        return Some("needs root (the server must run as root and the peer as nobody)");
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        return Some("needs setpriv (util-linux)");
    }
    None
}

/// Re-runs this binary's test `entry` as nobody with `env`; returns its stdout.
fn as_nobody(entry: &str, env: &[(&str, String)]) -> String {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = run_as_nobody(entry, &env);
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        s.contains("peer done"),
        "the peer did not finish: {s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s
}

/// This process's descriptors that are memfds, as (fd number, link target).
fn memfds() -> Vec<(i32, String)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(n) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(t) = std::fs::read_link(e.path()) {
            let t = t.to_string_lossy().to_string();
            if t.starts_with("/memfd:") {
                v.push((n, t));
            }
        }
    }
    v
}

/// What a hostile peer tries on every memfd it holds; one line per attempt, `WIDENED` when it
/// got more than it was given.
fn turn_on_the_grants() {
    let held = memfds();
    println!("memfds held: {}", held.len());
    for (n, name) in held {
        // SAFETY: `n` is one of this process's open descriptors, borrowed for these calls only.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(n) };
        let writable = fs::fcntl_getfl(fd).unwrap() & OFlags::RWMODE != OFlags::RDONLY;
        let path = format!("/proc/self/fd/{n}");
        match fs::open(
            path.as_str(),
            OFlags::RDWR | OFlags::CLOEXEC,
            FileMode::empty(),
        ) {
            Ok(_) if !writable => println!("WIDENED reopen {name} O_RDWR"),
            Ok(_) => println!("reopen {name} O_RDWR: was writable already"),
            Err(e) => println!("reopen {name} O_RDWR refused: {e}"),
        }
        for (seal, what) in [
            (SealFlags::FUTURE_WRITE, "F_SEAL_FUTURE_WRITE"),
            (SealFlags::SEAL, "F_SEAL_SEAL"),
        ] {
            match fs::fcntl_add_seals(fd, seal) {
                Ok(()) => println!("WIDENED sealed {name} with {what}"),
                Err(e) => println!("seal {name} with {what} refused: {e}"),
            }
        }
    }
}

/// Not a test: the lazy client's entry point when re-run as nobody.
#[test]
fn lazy_peer_entry() {
    let Ok(addr) = std::env::var("REMORA_TEST_LAZY") else {
        return;
    };
    // As the page client connects, keeping the descriptors it is handed (the library's
    // client maps the snapshot and closes its descriptor; a hostile one keeps it).
    let pd = Arc::new(Pd::new());
    let opts = QpOptions {
        transport: Transport::Shm,
        ..QpOptions::default()
    };
    let (qp, _) =
        remora_fabric::connect(addr.parse().unwrap(), pd, opts, &[]).expect("connect over shm");
    let handed = qp.take_handover();
    println!("handed over: {}", handed.len());
    turn_on_the_grants();
    drop((handed, qp));
    println!("peer done");
}

#[test]
fn a_lazy_read_only_grant_cannot_be_reopened_writable() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let s = serve_with_stderr(
        &[
            "lazy",
            "serve",
            "--synthetic",
            "1048576",
            "--transport",
            "shm",
            "--listen",
            "127.0.0.1:0",
        ],
        &[("RUST_LOG", "error")],
    );
    let out = as_nobody(
        "lazy_peer_entry",
        &[("REMORA_TEST_LAZY", s.addr.to_string())],
    );
    eprintln!("{out}");
    assert!(
        out.contains("reopen /memfd:remora-lazy-snapshot"),
        "the peer was handed no snapshot memfd: {out}"
    );
    assert!(!out.contains("WIDENED"), "{out}");
}

/// Not a test: the fabric peer's entry point when re-run as nobody. WRITEs twice into the
/// server's region (the first asks for the grant, the second may go through it).
#[test]
fn fabric_peer_entry() {
    let Ok(addr) = std::env::var("REMORA_TEST_FABRIC") else {
        return;
    };
    let pd = Arc::new(Pd::new());
    let opts = QpOptions {
        transport: Transport::Shm,
        ..QpOptions::default()
    };
    let (qp, private) =
        remora_fabric::connect(addr.parse().unwrap(), pd.clone(), opts, &[]).expect("connect");
    let remote = RegionInfo::decode(&private).expect("the server's region");
    let local = pd
        .register(
            Buffer::memfd("peer", 8192).unwrap(),
            Access::ALL,
            Mode::OnDemand,
        )
        .unwrap();
    for i in 0..2 {
        qp.post_write(i, &local, 0, 4096, remote.addr, remote.rkey, None)
            .unwrap();
        let c = qp
            .wait(Duration::from_secs(10))
            .unwrap()
            .expect("a completion");
        println!("write {i}: {:?}", c.status);
    }
    turn_on_the_grants();
    drop(qp);
    println!("peer done");
}

#[test]
fn a_fabric_peer_cannot_seal_the_servers_memfd() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let s = serve_with_stderr(
        &[
            "fabric",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--region-size",
            "65536",
        ],
        &[("RUST_LOG", "error")],
    );
    let out = as_nobody(
        "fabric_peer_entry",
        &[("REMORA_TEST_FABRIC", s.addr.to_string())],
    );
    eprintln!("{out}");
    assert!(
        out.contains("with F_SEAL_FUTURE_WRITE"),
        "the peer was granted no memfd of the server's: {out}"
    );
    assert!(!out.contains("WIDENED"), "{out}");
    // The server's own region is as it was: no seal a peer could have added.
    let seals = server_region_seals(s.child.id());
    assert!(
        !seals.contains(SealFlags::FUTURE_WRITE),
        "the served region got F_SEAL_FUTURE_WRITE: {seals:?}"
    );
}

/// The seals on `remora fabric serve`'s region memfd, read through the server's fd table.
fn server_region_seals(pid: u32) -> SealFlags {
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let Ok(t) = std::fs::read_link(e.path()) else {
            continue;
        };
        if t.to_string_lossy().starts_with("/memfd:remora-serve") {
            let fd: OwnedFd = std::fs::File::open(e.path()).unwrap().into();
            return fs::fcntl_get_seals(fd.as_fd()).unwrap();
        }
    }
    panic!("the server has no remora-serve memfd")
}
