//! The worker I/O loops of `remora kv serve`: `-o io=uring` really runs on io_uring rings, and
//! where the kernel refuses `io_uring_setup` the server says so once and serves on epoll.
//!
//! The refusal is made for real: the server is started under a seccomp filter that fails
//! `io_uring_setup` with ENOSYS (what a kernel built without io_uring, or a container runtime's
//! default profile, does), so the fallback runs the same code path a user would hit.

mod kv_common;
use kv_common::*;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A `remora kv serve` child with its stderr kept for the checks; killed on drop.
struct Server(Srv);

impl Server {
    fn start(threads: &str, refuse_uring: bool) -> Server {
        let port = free_port();
        let ps = port.to_string();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_remora"));
        cmd.args(["kv", "serve", "-p", &ps, "-U", "0", "-l", "127.0.0.1"])
            .args(["-t", threads, "-o", "io=uring"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if is_root() {
            cmd.args(["-u", "root"]);
        }
        if refuse_uring {
            // SAFETY: between fork and exec the closure only makes two prctl calls, which are
            // async-signal-safe, on a filter that lives on the parent's stack until exec.
            unsafe { cmd.pre_exec(refuse_io_uring_setup) };
        }
        let child = cmd.spawn().expect("spawn remora kv serve");
        let s = Server(Srv {
            child,
            port,
            name: "remora-io",
        });
        assert!(wait_up(port), "server did not start");
        s
    }

    /// How many of the server's descriptors are io_uring instances.
    fn rings(&self) -> usize {
        let dir = format!("/proc/{}/fd", self.0.child.id());
        std::fs::read_dir(dir)
            .expect("read the server's fd table")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.to_string_lossy() == "anon_inode:[io_uring]")
            .count()
    }

    /// Stops the server and returns what it wrote to stderr.
    fn stderr(mut self) -> String {
        finish(&mut self.0.child)
    }
}

/// Installs a seccomp filter on the calling process that fails `io_uring_setup` with ENOSYS and
/// allows every other system call.
fn refuse_io_uring_setup() -> std::io::Result<()> {
    // Classic BPF opcodes (linux/bpf_common.h): the filter reads seccomp_data.nr (offset 0).
    // BPF_LD and BPF_W are 0, so a 32-bit absolute load is just BPF_ABS.
    const LD_W_ABS: u16 = 0x20;
    const JMP_JEQ_K: u16 = 0x05 | 0x10;
    const RET_K: u16 = 0x06;
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let prog = [
        op(LD_W_ABS, 0, 0, 0),
        op(JMP_JEQ_K, 0, 1, libc::SYS_io_uring_setup as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl calls; fprog points at `prog`, alive for the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &fprog) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sets, reads back and multigets keys on several connections at once, so every worker thread
/// serves some of them.
fn exercise(port: u16) {
    let mut conns: Vec<_> = (0..6).map(|_| connect(port)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        let req = format!("set io{i} 0 0 3\r\nv{i:02}\r\nget io{i}\r\n");
        c.write_all(req.as_bytes()).unwrap();
        let want = format!("STORED\r\nVALUE io{i} 0 3\r\nv{i:02}\r\nEND\r\n");
        let got = read_until(c, b"END\r\n", Duration::from_secs(5));
        assert_eq!(String::from_utf8_lossy(&got), want, "connection {i}");
    }
    let c = &mut conns[0];
    c.write_all(b"get io0 io1 io5 nope\r\n").unwrap();
    let got = read_until(c, b"END\r\n", Duration::from_secs(5));
    assert_eq!(
        String::from_utf8_lossy(&got),
        "VALUE io0 0 3\r\nv00\r\nVALUE io1 0 3\r\nv01\r\nVALUE io5 0 3\r\nv05\r\nEND\r\n"
    );
}

#[test]
fn uring_loop_runs_on_rings() {
    let srv = Server::start("2", false);
    exercise(srv.0.port);
    // One ring per worker thread; skip the count if this kernel has io_uring switched off.
    let rings = srv.rings();
    let err = srv.stderr();
    if err.contains("io_uring unavailable") {
        eprintln!(
            "SKIP ring count: this kernel refuses io_uring ({})",
            err.trim()
        );
        return;
    }
    assert_eq!(rings, 2, "io_uring instances of a -t 2 server");
}

#[test]
fn uring_refused_falls_back_to_epoll_with_one_warning() {
    let srv = Server::start("3", true);
    exercise(srv.0.port);
    assert_eq!(srv.rings(), 0, "no ring can exist under the filter");
    let err = srv.stderr();
    let warnings = err.matches("io_uring unavailable").count();
    assert_eq!(warnings, 1, "one warning for three workers; stderr:\n{err}");
    assert!(err.contains("using epoll"), "stderr:\n{err}");
}
