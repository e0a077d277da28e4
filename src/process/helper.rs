//! This binary started again as one of the server's helper processes (the
//! watcher, the forker): how the server starts one, and how it knows it is one.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::Path;

use super::launch::{self, Launch, Stdio};

/// Where a helper finds the descriptor the server gave it.
pub(super) const HELPER_FD: RawFd = 3;

/// Starts this binary again (`/proc/self/exe`) with `argv` (a name, then
/// the helper's marker) through `posix_spawn` (no fork: the server's pages
/// are never marked copy-on-write, and the server may have threads), in a
/// session of its own, with `/dev/null` as stdio and `fd` as [`HELPER_FD`].
/// Returns its pid.
pub(super) fn spawn(argv: &[CString], fd: RawFd) -> io::Result<u32> {
    let null = OwnedFd::from(std::fs::File::options().read(true).write(true).open("/dev/null")?);
    launch::launch(&Launch {
        program: Path::new("/proc/self/exe"),
        argv,
        env: &[],
        stdio: Stdio::Pipes { stdin: None, stdout: &null, stderr: &null },
        cwd: Path::new("/"),
        cwd_dir: None,
        fds: &[(fd, HELPER_FD)],
    })
}

/// Whether this process was started as the helper whose first argument is
/// `marker`. If it was, it is named `name` and every descriptor above
/// [`HELPER_FD`] is closed (anything inherited without close-on-exec, the
/// server's stdout above all).
pub(super) fn started_as(marker: &CStr, name: &CStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    if std::env::args_os().nth(1).is_none_or(|first| first.as_bytes() != marker.to_bytes()) {
        return false;
    }
    // SAFETY: plain syscalls on this process's own name and descriptors.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
        if libc::syscall(libc::SYS_close_range, HELPER_FD as u32 + 1, u32::MAX, 0u32) == -1 {
            for fd in HELPER_FD + 1..1024 {
                libc::close(fd);
            }
        }
    }
    true
}
