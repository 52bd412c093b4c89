//! A `remora … serve` child for tests: started, its address read from its first stdout line
//! (`listening on ADDR`), killed and reaped on drop. `REMORA_TEST_EXE` starts another build of
//! `remora` instead of this one (to show that a regression test fails against an older build).
// Each test binary uses a part of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStderr, Command, Stdio};

/// A running server; dropping it kills it.
pub struct Served {
    pub child: Child,
    pub addr: SocketAddr,
    /// The server's stderr, when it was asked for ([`serve_with_stderr`]).
    pub stderr: Option<ChildStderr>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `remora ARGS` and waits for its `listening on ADDR` line; stderr is inherited.
pub fn serve(args: &[&str]) -> Served {
    start(args, Stdio::inherit(), &[])
}

/// As [`serve`], with stderr piped into [`Served::stderr`] and extra environment.
pub fn serve_with_stderr(args: &[&str], env: &[(&str, &str)]) -> Served {
    start(args, Stdio::piped(), env)
}

fn start(args: &[&str], stderr: Stdio, env: &[(&str, &str)]) -> Served {
    let exe =
        std::env::var("REMORA_TEST_EXE").unwrap_or_else(|_| env!("CARGO_BIN_EXE_remora").into());
    let mut child = Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("start remora {args:?}: {e}"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read the first line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("remora {args:?}: unexpected first line {line:?}"));
    let stderr = child.stderr.take();
    Served {
        child,
        addr,
        stderr,
    }
}

/// `remora lazy serve --transport shm` of a fresh file of `len` bytes of `fill`; the file's
/// folder goes when the server does.
pub fn serve_lazy_file(name: &str, len: usize, fill: u8) -> LazyServed {
    let dir = std::env::temp_dir().join(format!("remora-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("image.bin");
    std::fs::write(&file, vec![fill; len]).unwrap();
    let path = file.to_str().unwrap();
    let args = [
        "lazy",
        "serve",
        "--transport",
        "shm",
        "--listen",
        "127.0.0.1:0",
        "--file",
        path,
    ];
    LazyServed {
        served: serve_with_stderr(&args, &[("RUST_LOG", "error")]),
        dir,
    }
}

/// A lazy page server and the folder of the file it serves.
pub struct LazyServed {
    pub served: Served,
    dir: std::path::PathBuf,
}

impl Drop for LazyServed {
    fn drop(&mut self) {
        let _ = self.served.child.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// True when the tests run as root (effective uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Runs this test binary's test `entry` again as `nobody` (through `setpriv`), with `env`, from
/// a copy in a world-readable folder of its own, and returns what it printed. The tests run in
/// parallel: a child forked by another test thread while the copy was open for writing holds
/// that descriptor until it execs, so exec can briefly fail with ETXTBSY, which is retried.
pub fn run_as_nobody(entry: &str, env: &[(&str, &str)]) -> std::process::Output {
    use std::os::unix::fs::PermissionsExt;
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("remora-nobody-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.join("as-nobody");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut tries = 0;
    let out = loop {
        let run = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(&exe)
            .args(["--exact", entry, "--nocapture", "--test-threads=1"])
            .envs(env.iter().copied())
            .current_dir(&dir)
            .output()
            .unwrap();
        if !String::from_utf8_lossy(&run.stderr).contains("Text file busy") || tries == 50 {
            break run;
        }
        tries += 1;
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let _ = std::fs::remove_dir_all(&dir);
    out
}
