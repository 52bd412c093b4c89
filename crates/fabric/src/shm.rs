//! Same-host data movement for the `shm` transport: one copy straight between the two address
//! spaces with `process_vm_readv` / `process_vm_writev` (no socket, no intermediate buffer).
//! Hand-written over `libc` because neither std nor rustix wraps these calls.
use std::io;

/// Lets any process of ours read and write our memory (Yama `ptrace_scope` 1 would otherwise
/// refuse `process_vm_*` from a peer that is not our ancestor).
pub(crate) fn allow_peer_access() {
    // SAFETY: prctl with integer arguments; failure only means the default policy stays.
    unsafe {
        libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
    }
}

/// Copies `len` bytes from `remote` in process `pid` to `local`.
///
/// # Safety
/// `local..local+len` must be writable memory of this process that nothing else uses meanwhile.
pub(crate) unsafe fn read_from(
    pid: i32,
    remote: u64,
    local: *mut u8,
    len: usize,
) -> io::Result<()> {
    copy(pid, remote, local, len, false)
}

/// Copies `len` bytes from `local` to `remote` in process `pid`.
///
/// # Safety
/// `local..local+len` must be readable memory of this process.
pub(crate) unsafe fn write_to(
    pid: i32,
    remote: u64,
    local: *const u8,
    len: usize,
) -> io::Result<()> {
    copy(pid, remote, local as *mut u8, len, true)
}

unsafe fn copy(pid: i32, remote: u64, local: *mut u8, len: usize, write: bool) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let liov = libc::iovec {
            iov_base: local.add(done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let riov = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY (caller): the local range is valid; the remote range is checked by the kernel.
        let r = if write {
            libc::process_vm_writev(pid, &liov, 1, &riov, 1, 0)
        } else {
            libc::process_vm_readv(pid, &liov, 1, &riov, 1, 0)
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "process_vm copy made no progress",
            ));
        }
        done += r as usize;
    }
    Ok(())
}
