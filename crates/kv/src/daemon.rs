//! What memcached does to its process before it serves: daemon mode (`-d`), the core file
//! limit (`-r`) and the pid file (`-P`).
//!
//! Daemon mode differs from memcached's in one way, on purpose: memcached's parent exits as soon
//! as it has forked, so a script that runs `memcached -d` cannot tell whether the server came
//! up. Here the parent waits until the daemon says it is serving ([`Ready::serving`]) and exits 0
//! then, or, when the daemon ends before that, with the daemon's exit code (its error went to
//! the caller's stderr, which the daemon keeps until it is serving).
//!
//! `fork` only copies the calling thread: [`daemonize`] refuses to run once the process has
//! other threads (start it before any runtime, worker or signal thread).

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::process::{Pid, WaitOptions};

use crate::sys;

/// How the daemon leaves its caller's environment once it serves (memcached's
/// `daemonize(nochdir, noclose)`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Detach {
    /// Keep the working directory (memcached's `-r`, so that a core file lands there); else the
    /// daemon moves to `/` and holds no mount busy.
    pub keep_cwd: bool,
    /// Keep stdin, stdout and stderr (memcached's `-v`); else they go to `/dev/null`.
    pub keep_stdio: bool,
}

/// The daemon's half of the start-up hand-shake; dropping it without [`Ready::serving`] makes the
/// parent wait for the daemon's exit code.
#[derive(Debug)]
pub struct Ready {
    pipe: OwnedFd,
    detach: Detach,
}

/// Forks into the background as memcached's `-d` does: the child starts a new session (no
/// controlling terminal) and ignores SIGHUP; this function returns only in the child. The
/// parent waits for [`Ready::serving`] (then exits 0) or for the child's end (then exits with
/// its code).
pub fn daemonize(detach: Detach) -> io::Result<Ready> {
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(io::Error::other(format!(
            "daemonize: the process already runs {threads} threads; fork would copy one"
        )));
    }
    // Nothing buffered may be written twice, once by each process.
    io::stdout().flush()?;
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    match sys::fork()? {
        Some(child) => {
            drop(write);
            std::process::exit(wait_ready(read, child))
        }
        None => {
            drop(read);
            rustix::process::setsid()?;
            sys::ignore_sighup()?;
            Ok(Ready {
                pipe: write,
                detach,
            })
        }
    }
}

/// The parent's side: 0 once the child says it serves, else the child's exit code (128 +
/// the signal's number when a signal ended it, as a shell reports it).
fn wait_ready(read: OwnedFd, child: Pid) -> i32 {
    let mut byte = [0u8; 1];
    let mut pipe = std::fs::File::from(read);
    loop {
        match pipe.read(&mut byte) {
            Ok(1) => return 0,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // End of file: the child ended (or dropped its Ready) before serving.
            _ => break,
        }
    }
    match rustix::process::waitpid(Some(child), WaitOptions::empty()) {
        Ok(Some((_, status))) => status
            .exit_status()
            .or_else(|| status.terminating_signal().map(|s| 128 + s))
            .unwrap_or(1),
        // Not our child to wait for (it was never reaped by us): say it failed.
        _ => 1,
    }
}

impl Ready {
    /// The server is up: leave the caller's working directory and stdio as [`Detach`] says,
    /// then let the waiting parent exit 0.
    pub fn serving(self) -> io::Result<()> {
        if !self.detach.keep_cwd {
            rustix::process::chdir("/")?;
        }
        if !self.detach.keep_stdio {
            let null = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")?;
            rustix::stdio::dup2_stdin(&null)?;
            rustix::stdio::dup2_stdout(&null)?;
            rustix::stdio::dup2_stderr(&null)?;
        }
        let mut pipe = std::fs::File::from(self.pipe);
        pipe.write_all(b"1")
    }
}

/// Raises the core file size limit as memcached's `-r` does: to unlimited, else to the hard
/// limit. An error when the soft limit stays 0 (no core file would be written).
pub fn enable_coredumps() -> io::Result<()> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let unlimited = Rlimit {
        current: None,
        maximum: None,
    };
    if setrlimit(Resource::Core, unlimited).is_err() {
        let hard = getrlimit(Resource::Core).maximum;
        let _ = setrlimit(
            Resource::Core,
            Rlimit {
                current: hard,
                maximum: hard,
            },
        );
    }
    match getrlimit(Resource::Core).current {
        Some(0) => Err(io::Error::other("the core file size limit stays 0")),
        _ => Ok(()),
    }
}

/// Writes this process's id to `path` as memcached does (a temporary file renamed over it, so a
/// reader never sees it empty). Returns the running process the file named before, if any, for
/// memcached's warning.
pub fn write_pid_file(path: &Path) -> io::Result<Option<u32>> {
    let running = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .filter(|&pid| {
            Pid::from_raw(pid as i32).is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
        });
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, format!("{}\n", std::process::id()))?;
    std::fs::rename(&tmp, path)?;
    Ok(running)
}
